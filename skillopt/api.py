"""The Python API: train, evaluate and compare skills from a script or a notebook.

    import skillopt

    tasks = [{"id": "q1", "question": "What is 2+3?", "answer": "5"}, ...]
    run = skillopt.train(tasks=tasks, scorer=my_scorer, target_model="openai:gpt-5-mini",
                         optimizer_model="openai:gpt-5", epochs=1, val_size=20)
    print(run.status, run.summary.scores["best"]["test"])
    cmp = skillopt.compare(run.seed_ref, run.best_ref)

These take the same settings as the command line, through the same code: keywords named like the
flags (`epochs=2`, `batch_size=8`, `max_rollouts=100`, ...), `config=` (a YAML file, a dict or a
`RunConfig`), `preset=`, and `set=` for every other setting (`{"gate.alpha": 0.1}` or
`["gate.alpha=0.1"]`). The CLI's `run`, `eval` and `compare` are thin layers over them.

This module is an edge, like the CLI: with `env=None` it reads the process environment (and a
`.env` file) once for provider keys. Pass `env={...}` (or a `ProviderEnv`) to decide yourself.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from skillopt.benchmarks.base import RUN_SPLITS, Benchmark, Split, Task, parse_split
from skillopt.config import (
    ConfigLayer, RunConfig, build_config, redacted, settings_from_flags, with_default_models,
)
from skillopt.engine.evaluate import EvalResult
from skillopt.engine.events import Emitter, Listener, Note
from skillopt.errors import BadInput
from skillopt.models.types import ProviderEnv
from skillopt.skill import Skill
from skillopt.store.schema import RunSummary

if TYPE_CHECKING:
    from skillopt.engine.scoring import ScoringSetup, Setup
    from skillopt.store.refs import SkillRef
    from skillopt.store.run_store import RunStore

PathLike = str | Path


@dataclass(frozen=True)
class TrainResult:
    """A training run: where it is, how it ended, its summary and its best skill."""

    run_id: str
    run_dir: Path
    status: str  # finished | stopped (a budget; resume it) | failed
    summary: RunSummary
    skill: Skill  # the best skill (the last incumbent)
    notes: tuple[str, ...] = ()  # what was decided for you (default models), one line each

    @property
    def best_ref(self) -> str:
        return f"{self.run_id}:best"

    @property
    def seed_ref(self) -> str:
        return f"{self.run_id}:seed"

    def score(self, role: str = "best", split: str = "test"):
        """The `SplitScore` of `seed` or `best` on `val` or `test` (None when not scored)."""
        return (self.summary.scores.get(role) or {}).get(split)

    @property
    def test_lift(self):
        """best - seed on the sealed test split, paired (`stats.PairedLift`: the summary's and compare's
        test, with `.text()` and `.verdict`); None when they share no scored test task."""
        return self.summary.test_lift

    def __repr__(self) -> str:
        """One line: the run, how it ended, seed and best on test, and the paired test lift."""
        from skillopt.store.scores import score_text

        lift = self.test_lift
        best = self.summary.versions.get("best", 0)
        return (f"TrainResult(run_id={self.run_id!r}, status={self.status!r}, best=v{best:03d}, "
                f"test seed {score_text(self.score('seed'))} -> best {score_text(self.score('best'))}"
                f"{', lift ' + lift.ci_text() + ': ' + lift.verdict if lift else ''}, run_dir={str(self.run_dir)!r})")


@dataclass
class _Inputs:
    cfg: RunConfig
    env: ProviderEnv
    environ: dict[str, str]
    benchmark: Benchmark | None
    seed: Skill | None
    notes: list[str] = field(default_factory=list)


def _provider_env(env: Mapping[str, str] | ProviderEnv | None) -> tuple[ProviderEnv, dict[str, str]]:
    if isinstance(env, ProviderEnv):
        return env, {}
    if env is None:
        from skillopt.environ import read_environment

        environ = read_environment()
    else:
        from skillopt.io.redact import register_secrets, secrets_in_environ

        environ = dict(env)
        register_secrets(*secrets_in_environ(environ))
    return ProviderEnv.from_environ(environ), environ


def _overrides(set_: Sequence[str] | Mapping[str, Any] | None) -> list[str | dict[str, Any]]:
    if set_ is None:
        return []
    if isinstance(set_, Mapping):
        from skillopt.config import flags_layer

        return [flags_layer(**{k: v for k, v in set_.items()})]
    return [set_] if isinstance(set_, str) else list(set_)


def _config_file(config: PathLike | Mapping[str, Any] | RunConfig | None) -> list[PathLike | dict[str, Any]]:
    if config is None:
        return []
    if isinstance(config, RunConfig):
        return [config.model_dump(mode="json", exclude_unset=True)]
    return [dict(config)] if isinstance(config, Mapping) else [config]


def _skill(skill: Skill | PathLike | None) -> tuple[Skill | None, str | None]:
    """(a Skill object, None) or (None, a path for `seed_skill`)."""
    if skill is None or isinstance(skill, Skill):
        return skill, None
    text = str(skill)
    if not text.strip():
        raise BadInput("bad setting seed_skill: the skill is empty; give a SKILL.md path (or leave it out for the "
                       "benchmark's own)")
    if text.lstrip().startswith("---"):
        return Skill.parse(text, "the skill text"), None
    return None, text


def python_benchmark(benchmark: str | Benchmark | None, tasks: Sequence[Task | Mapping] | None,
                     scorer: Callable | str | None, cfg: RunConfig) -> Benchmark | None:
    """A benchmark built in Python: `tasks` (+ `scorer`), a benchmark object, or a named benchmark
    scored by a Python `scorer`; None when the benchmark is named and scored as usual."""
    from skillopt.benchmarks.custom import PythonBenchmark

    if tasks is not None:
        return PythonBenchmark(cfg.benchmark, list(tasks), scorer, cfg.splits)
    if benchmark is not None and not isinstance(benchmark, str):
        if scorer is not None:
            raise BadInput("give the scorer to your benchmark object itself, or pass tasks= and scorer=")
        return benchmark
    if scorer is not None:
        from skillopt.benchmarks import get_benchmark

        named = get_benchmark(cfg.benchmark, cfg.splits, **cfg.benchmark_options)
        return PythonBenchmark(cfg.benchmark, named.tasks("all"), scorer, cfg.splits)
    return None


def _inputs(benchmark, tasks, scorer, skill, config, preset, set_, env, settings: dict[str, Any],
            base: Sequence[ConfigLayer] = (), need_optimizer: bool = True) -> _Inputs:
    penv, environ = _provider_env(env)
    seed, seed_path = _skill(skill)
    flags = dict(settings)
    if isinstance(benchmark, str):
        flags["benchmark"] = benchmark
    elif benchmark is not None:
        flags["benchmark"] = benchmark.name
    elif tasks is not None:  # tasks without a name: the run's own (evaluate, compare), else a generic one
        flags["benchmark"] = next((b.values["benchmark"] for b in base if b.values.get("benchmark")), "python-tasks")
    if seed_path:
        flags["skill"] = seed_path
    cfg = build_config(base=base, preset=preset, files=_config_file(config), overrides=_overrides(set_),
                       flags=settings_from_flags(flags, "setting"))
    bench = python_benchmark(benchmark, tasks, scorer, cfg)
    cfg, note = with_default_models(cfg, penv, need_optimizer)
    return _Inputs(cfg, penv, environ, bench, seed, [note] if note else [])


Progress = bool | str  # True / "auto": Rich bars on a terminal, else plain log lines; "plain" | "rich" | "none"


def _listeners(listeners: Sequence[Listener], progress: Progress, runs: Path,
               trackers: Sequence[Listener] = ()) -> list[Listener]:
    """Every listener of a run, training or evaluation alike: the progress view first when `progress`
    asks for one (it stops itself when the run finishes; `_stop_progress` stops it when the work ends
    otherwise), `listeners`, the run's record (metrics.jsonl, the SQLite index), the trackers."""
    from skillopt.engine.listeners import recorders

    view: list[Listener] = []
    if progress:
        from skillopt.progress.plain import progress_view

        view = [progress_view(progress)]
    return [*view, *listeners, *recorders(runs), *trackers]


def _stop_progress(every: Sequence[Listener]) -> None:
    from skillopt.progress.plain import PlainProgress

    for listener in every:
        if isinstance(listener, PlainProgress):
            listener.stop()


def train(benchmark: str | Benchmark | None = None, *, tasks: Sequence[Task | Mapping] | None = None,
          scorer: Callable | str | None = None, skill: Skill | PathLike | None = None,
          config: PathLike | Mapping[str, Any] | RunConfig | None = None, preset: str | None = None,
          set: Sequence[str] | Mapping[str, Any] | None = None, resume: str | None = None,
          runs_dir: PathLike = "runs", env: Mapping[str, str] | ProviderEnv | None = None,
          listeners: Sequence[Listener] = (), progress: Progress = False, track: Sequence[str] = (),
          tracking_uri: str | None = None, **settings: Any) -> TrainResult:
    """Train a skill; returns a `TrainResult` (a budget stop is `status="stopped"`, not an error).

    `benchmark`: a name (`"gsm8k"`), a `.jsonl` path, or a Benchmark object; or give `tasks` (Task
    objects or dicts in the JSONL QA format) and a `scorer` (a callable `(task, output)`, sync or
    async, returning a Score, a bool, a number or `(value, feedback)`; or a scorer name such as
    `skillopt.judge(...)`'s). `skill`: the seed (a path, SKILL.md text or a Skill). `settings`:
    the CLI's flags by name (`target_model`, `optimizer_model`, `harness`, `epochs`, `batch_size`,
    `val_size`, `max_rollouts`, ...). Bad input raises `skillopt.errors.BadInput`.
    """
    from skillopt.engine.training import train as train_run
    from skillopt.store.run_store import RunStore

    runs = Path(runs_dir)
    if runs.exists() and not runs.is_dir():
        raise BadInput(f"runs_dir {runs} is a file, not a folder")
    base = [ConfigLayer(f"run {resume}'s config.yaml", RunStore.open(runs, resume).read_config().layer())] \
        if resume is not None else []
    got = _inputs(benchmark, tasks, scorer, skill, config, preset, set, env, settings, base)
    trackers = []
    if track:
        from skillopt.report.tracking import make_tracker

        uri = tracking_uri or got.environ.get("MLFLOW_TRACKING_URI")
        trackers = [make_tracker(name, runs, uri) for name in track]
    every = _listeners(listeners, progress, runs, trackers)
    for n in got.notes:
        Emitter(every)(Note(n))
    try:
        summary = train_run(got.cfg, runs, got.env, every, resume=resume, benchmark=got.benchmark, seed=got.seed)
    finally:
        _stop_progress(every)
    store = RunStore(runs / summary.run_id)
    best = summary.versions.get("best", 0)
    return TrainResult(summary.run_id, store.root, summary.status, summary, store.skill(best), tuple(got.notes))


def evaluate(skill: Skill | PathLike | TrainResult, benchmark: str | Benchmark | None = None, *,
             tasks: Sequence[Task | Mapping] | None = None, scorer: Callable | str | None = None,
             split: str = "test", trials: int | None = None,
             config: PathLike | Mapping[str, Any] | RunConfig | None = None,
             set: Sequence[str] | Mapping[str, Any] | None = None, runs_dir: PathLike = "runs",
             env: Mapping[str, str] | ProviderEnv | None = None, listeners: Sequence[Listener] = (),
             progress: Progress = False, **settings: Any) -> EvalResult:
    """Score one skill on one split as an evaluation run (a run's version reuses every rollout its run has;
    a skill file or a Skill is scored afresh; `compare` reuses what this made).

    `skill`: a SKILL.md path, `RUN`, `RUN:vN`, `RUN:best`, a Skill, or a TrainResult (its best);
    a run's own benchmark and settings are used unless given. Returns an `EvalResult` (score,
    run id and folder, reused rollouts, trigger rate for agent harnesses, the rollouts themselves)."""
    from skillopt.engine.scoring import score_skills

    splits: list[Split] = [parse_split(split)]
    runs = Path(runs_dir)
    made: list[ScoringSetup] = []
    setup = _scoring_setup(benchmark, tasks, scorer, config, set, trials, env, settings, listeners, progress, runs,
                           made, compare=False)
    try:
        scoring = score_skills([skill_ref(skill, runs)], splits, setup, runs, evaluation_run=True)
    finally:
        for m in made:
            _stop_progress(m.listeners)
    return scoring.entries[0].evaluations[0]


def _scoring_setup(benchmark, tasks, scorer, config, set_, trials: int | None, env, settings: dict[str, Any],
                   listeners: Sequence[Listener], progress: Progress, runs: Path, made: list[ScoringSetup], *,
                   compare: bool) -> Setup:
    """How `evaluate` and `compare` score a skill (`engine.scoring.Setup`): the first run's scoring
    settings (or none), then what is given; `trials` rollouts per task (the gate's trials setting).
    `compare`: a skill file needs a run or a benchmark to be scored on, and the notes on what was
    decided go to `listeners` alone. The setups made are appended to `made` (the caller stops their
    progress views)."""
    from skillopt.engine.scoring import ScoringSetup
    from skillopt.engine.settings import scoring_layer

    def setup(ref: SkillRef, run: RunStore | None) -> ScoringSetup:
        if compare and run is None and benchmark is None and tasks is None and not settings.get("benchmark"):
            raise BadInput(f"to score the skill file {ref.label}, pass --benchmark (benchmark= in Python) and "
                           "the target model, or compare it with a run whose settings it should use")
        base = [ConfigLayer(f"run {run.run_id}'s config.yaml", scoring_layer(run.read_config().layer()))] \
            if run is not None else []
        overrides = _overrides(set_) + ([] if trials is None else [{"gate": {"trials": trials}}])
        got = _inputs(benchmark, tasks, scorer, None, config, None, overrides, env, settings, base,
                      need_optimizer=False)
        every = _listeners(listeners, progress, runs)
        made.append(ScoringSetup(got.cfg, got.env, got.benchmark, every))
        for n in got.notes:
            Emitter(list(listeners) if compare else every)(Note(n))
        return made[-1]

    return setup


def skill_ref(skill: Any, runs_dir: Path):
    """A `SkillRef` for a TrainResult (its best), else the reference as given (the scoring service resolves it)."""
    from skillopt.store.refs import resolve_skill_ref

    if isinstance(skill, TrainResult):
        return resolve_skill_ref(skill.best_ref, Path(skill.run_dir).parent)
    return skill


def compare(*skills: Skill | PathLike | TrainResult, splits: Sequence[str] = ("val", "test"), diff: bool = False,
            benchmark: str | Benchmark | None = None, tasks: Sequence[Task | Mapping] | None = None,
            scorer: Callable | str | None = None, config: PathLike | Mapping[str, Any] | RunConfig | None = None,
            set: Sequence[str] | Mapping[str, Any] | None = None, runs_dir: PathLike = "runs",
            env: Mapping[str, str] | ProviderEnv | None = None, listeners: Sequence[Listener] = (),
            progress: Progress = False, trials: int | None = None,
            **settings: Any):
    """Compare two or more skills: scores with 95% intervals per split (errored rollouts apart), per-task
    wins / losses / ties and the paired lift against the first (the run summary's test, `stats.PairedLift`), trigger rates, tokens and cost (and diffs with `diff`).
    Run references reuse their rollouts; skill files and Skill objects are scored on the first run's
    benchmark and settings (or the ones given), reusing any rollout a run already has.
    Returns a `skillopt.report.compare.Comparison` (pydantic: `.model_dump()`, `.scores`, ...)."""
    from skillopt.engine.scoring import score_skills
    from skillopt.report.compare import EntryData, SkillEntry, compare_skills, run_entry, unique_labels

    if len(skills) < 2:
        raise BadInput("compare needs at least two skills (e.g. RUN:seed RUN:best)")
    wanted: list[Split] = [parse_split(s) for s in dict.fromkeys(splits)]
    runs = Path(runs_dir)
    made: list[ScoringSetup] = []
    setup = _scoring_setup(benchmark, tasks, scorer, config, set, trials, env, settings, listeners, progress, runs,
                           made, compare=True)
    try:
        scoring = score_skills([skill_ref(s, runs) for s in skills], wanted, setup, runs)
    finally:
        for m in made:
            _stop_progress(m.listeners)
    data = []
    for s, label in zip(scoring.entries, unique_labels([s.ref.label for s in scoring.entries])):
        cfg = s.cfg
        if cfg is None:  # recorded: a run's version, as its run recorded it
            data.append(run_entry(s.ref, wanted, label, current_data_hash=s.current_data_hash))
            continue
        data.append(EntryData(SkillEntry(label=label, kind="file", sha=s.ref.skill.sha, text=s.ref.skill.render(),
                                         benchmark=cfg.benchmark, harness=cfg.harness,
                                         target_model=cfg.target_model, data_hash=s.data_hash,
                                         scored_cached=s.cached, scored_new=s.new),
                              {split: list(sc.records) for split, sc in s.scores.items()}))
    return compare_skills(data, wanted, with_diff=diff, notes=scoring.notes)


def judge(rubric: str, model: str, threshold: float = 0.5):
    """A model-graded scorer: `model` grades each answer against `rubric` (0..1; it passes at
    `threshold`). Its calls are metered as the `judge` role. Use it as `scorer=`."""
    from skillopt.benchmarks.judge import JudgeScorer

    return JudgeScorer(rubric=rubric, model=model, threshold=threshold)


def resolved_config(benchmark: str | None = None, *, config: PathLike | Mapping[str, Any] | RunConfig | None = None,
                    preset: str | None = None, set: Sequence[str] | Mapping[str, Any] | None = None,
                    env: Mapping[str, str] | ProviderEnv | None = None, notes: list[str] | None = None,
                    **settings: Any) -> dict[str, Any]:
    """The configuration a `train` with these arguments would run with, exactly as it writes it to
    its config.yaml (secrets masked); `skillopt config show` prints it. `notes` receives what was
    decided for you (default models)."""
    got = _inputs(benchmark, None, None, None, config, preset, set, env, settings)
    if notes is not None:
        notes += got.notes
    return redacted(got.cfg)


def dry_run(benchmark: str | None = None, *, config: PathLike | Mapping[str, Any] | RunConfig | None = None,
            preset: str | None = None, set: Sequence[str] | Mapping[str, Any] | None = None,
            skill: Skill | PathLike | None = None, env: Mapping[str, str] | ProviderEnv | None = None,
            notes: list[str] | None = None, **settings: Any) -> list[str]:
    """What a `train` with these arguments would spend, before it starts (`skillopt run --dry-run`):
    the cost (a local model: the time) of one rollout and the rollouts it plans, as lines to print.
    Starts nothing, writes nothing, needs no key (`engine.estimate`)."""
    from skillopt.benchmarks import get_benchmark
    from skillopt.engine.estimate import describe, estimate_rollout, plan_rollouts
    from skillopt.engine.setup import seed_skill
    from skillopt.harness.registry import check_compatible, harness_info
    from skillopt.models.spec import parse_model_spec

    got = _inputs(benchmark, None, None, skill, config, preset, set, env, settings)
    cfg = got.cfg
    if notes is not None:
        notes += got.notes
    if not cfg.target_model:
        raise BadInput("no target model: pass --target-model (e.g. openai:gpt-5-mini)")
    target = parse_model_spec(cfg.target_model)
    check_compatible(cfg.harness, target)
    bench = got.benchmark or get_benchmark(cfg.benchmark, cfg.splits, **cfg.benchmark_options)
    sizes: dict[str, int] = {s: len(bench.tasks(s)) for s in RUN_SPLITS}
    est = estimate_rollout(cfg, target, seed_skill(cfg, got.seed), bench.tasks("train") or bench.tasks("val"))
    code = any(t.kind == "code" for t in bench.tasks("train"))
    return describe(est, plan_rollouts(cfg, sizes, harness_info(cfg.harness).agent, code), cfg.train.concurrency)


__all__ = ["EvalResult", "TrainResult", "compare", "dry_run", "evaluate", "judge", "resolved_config", "train"]
