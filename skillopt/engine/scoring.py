"""The scoring service: `skillopt compare`, `skillopt eval` and the Python API (`evaluate`, `compare`)
score skills here, and nowhere else.

`score_skills` resolves the skill references (`store.refs`), reuses the stored rollouts whose cache
key matches (`store.reuse.find_rollouts`, one scan; the key is the one a run's `RolloutRunner` uses,
`engine.settings.Settings.rollout_key`: skill content, task content, trial and the settings that
matter), scores only what is missing as an evaluation run (`engine.evaluate.evaluate_skill`), and
returns one typed result: per reference and split a `store.scores.Score` (n, errors, the 95%
intervals, and the rollouts the paired test pairs).

`compare` reuses a rollout from any run under the runs folder and makes an evaluation run only
where one is missing; `eval` always makes its evaluation run and reuses the rollouts of the run its
reference comes from (a skill file's: none), so it measures the file afresh.

A run reference that `compare` reads is not scored again: its scores are what its run recorded
(report/ reads them); the service checks whether that run's benchmark data changed since.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from skillopt.benchmarks import get_benchmark
from skillopt.benchmarks.base import Benchmark, Split, split_data_hash
from skillopt.config import RunConfig
from skillopt.engine.evaluate import EvalResult, evaluate_skill
from skillopt.engine.events import Listener
from skillopt.engine.settings import current_data_hash, settings_that_matter
from skillopt.harness.registry import HarnessContext, make_harness
from skillopt.models import Models
from skillopt.models.types import ProviderEnv
from skillopt.skill import Skill
from skillopt.store.refs import SkillRef, resolve_skill_ref
from skillopt.store.reuse import find_rollouts
from skillopt.store.run_store import RunStore
from skillopt.store.schema import RolloutRecord
from skillopt.store.scores import Score


@dataclass(frozen=True)
class ScoringSetup:
    """What a skill is scored with, resolved at the edge (the Python API): the configuration, the
    provider keys, a benchmark built in Python instead of `cfg.benchmark` by name, the listeners."""

    cfg: RunConfig
    env: ProviderEnv
    benchmark: Benchmark | None = None
    listeners: list[Listener] = field(default_factory=list)


Setup = Callable[[SkillRef, RunStore | None], ScoringSetup]
"""Asked once, when the first reference is to be scored: that reference, and the first run among the
references (whose scoring settings are the base of the configuration)."""


@dataclass(frozen=True)
class Scored:
    """One reference as the service gives it back."""

    ref: SkillRef
    scores: dict[str, Score[RolloutRecord]] = field(default_factory=dict)  # split -> score; {} when recorded
    cached: int = 0  # rollouts reused from earlier runs
    new: int = 0  # rollouts this call ran
    data_hash: str = ""  # scored: of the benchmark's data as it is now
    current_data_hash: str = ""  # recorded: of its run's benchmark data now ("" when not checked)
    evaluations: tuple[EvalResult, ...] = ()  # the evaluation runs that scored it, one per split
    cfg: RunConfig | None = None  # the settings it was scored with; None: a run's version, as its run recorded it


@dataclass(frozen=True)
class Scoring:
    entries: tuple[Scored, ...]  # one per reference, in order
    notes: tuple[str, ...] = ()  # a recorded run's benchmark that could not be loaded to check its data


def skill_ref(skill: SkillRef | Skill | str | Path, runs_dir: Path) -> SkillRef:
    """A reference: `PATH`, `RUN`, `RUN:vN`, `RUN:best`, ... (`store.refs`), or a Skill object."""
    if isinstance(skill, SkillRef):
        return skill
    if isinstance(skill, Skill):
        return SkillRef(skill, skill.name)
    return resolve_skill_ref(str(skill), runs_dir)


def score_skills(skills: Sequence[SkillRef | Skill | str | Path], splits: Sequence[Split], setup: Setup,
                 runs_dir: Path, *, evaluation_run: bool = False) -> Scoring:
    """Each skill's score on each split. With `evaluation_run` (`eval`), each is scored as an
    evaluation run of its own, run references too; without (`compare`), a run reference is read as
    its run recorded it and the others are scored only where a rollout is missing."""
    refs = [skill_ref(s, runs_dir) for s in skills]
    first_run = next((r.run for r in refs if r.run is not None), None)
    made: ScoringSetup | None = None
    checked: dict[tuple[str, str, str], tuple[str, str | None]] = {}  # a run's data -> (its hash now, why none)
    entries, notes = [], []
    for ref in refs:
        if ref.run is not None and not evaluation_run:
            now, why = _data_now(ref.run, checked)
            entries.append(Scored(ref, current_data_hash=now))
            if why and why not in notes:
                notes.append(why)
            continue
        made = made or setup(ref, first_run)
        score = _evaluated if evaluation_run else _scored
        entries.append(score(ref, splits, made, runs_dir))
    return Scoring(tuple(entries), tuple(notes))


def _data_now(run: RunStore, checked: dict[tuple[str, str, str], tuple[str, str | None]]) -> tuple[str, str | None]:
    """(the hash of `run`'s benchmark data as it is now, None) or ("", why it could not be checked);
    each benchmark (its name, splits and options) loaded once."""
    cfg = run.read_config()
    data = (cfg.benchmark, cfg.splits.model_dump_json(), json.dumps(cfg.benchmark_options, sort_keys=True, default=str))
    if data not in checked:
        checked[data] = current_data_hash(cfg.layer())
    return checked[data]


def _evaluated(ref: SkillRef, splits: Sequence[Split], made: ScoringSetup, runs_dir: Path) -> Scored:
    """`eval`: an evaluation run per split (it finds what it can reuse by the same key)."""
    results = tuple(evaluate_skill(made.cfg, ref, split, runs_dir, made.env, made.listeners, benchmark=made.benchmark)
                    for split in splits)
    return Scored(ref, {s: Score.of(s, r.records) for s, r in zip(splits, results)},
                  cached=sum(r.cached for r in results), new=sum(len(r.records) - r.cached for r in results),
                  data_hash=results[0].data_hash if results else "", evaluations=results, cfg=made.cfg)


def _scored(ref: SkillRef, splits: Sequence[Split], made: ScoringSetup, runs_dir: Path) -> Scored:
    """`compare`: reused where any run has the rollout, run (an evaluation run per split) otherwise."""
    cfg, skill = made.cfg.model_copy(update={"run_id": None}), ref.skill
    bench = made.benchmark if made.benchmark is not None else \
        get_benchmark(cfg.benchmark, cfg.splits, **cfg.benchmark_options)
    harness = make_harness(cfg.harness, HarnessContext(models=Models(env=made.env), options=dict(cfg.harness_options)))
    settings, trials = settings_that_matter(cfg, bench, harness), cfg.gate.trials
    wanted = {split: list(dict.fromkeys(settings.rollout_key(skill.sha, t, k) for t in bench.tasks(split)
                                        for k in range(trials))) for split in splits}
    found = find_rollouts(runs_dir, {k for w in wanted.values() for k in w})
    cached = len(found)
    failed: dict[str, RolloutRecord] = {}
    evaluations = []
    missing: list[Split] = [s for s in splits if any(k not in found for k in wanted[s])]
    for split in missing:
        result = evaluate_skill(cfg, ref, split, runs_dir, made.env, made.listeners, benchmark=made.benchmark,
                                reusable=found)  # what it records: no second scan of every run
        evaluations.append(result)
        for rec in result.records:
            if rec.key in found:
                continue
            if rec.errored:
                failed[rec.key] = rec
            else:
                found[rec.key] = (result.run_dir or runs_dir / result.run_id, rec)
                failed.pop(rec.key, None)
    # a scored rollout per key; where none, its errored one (counted apart, never a score)
    scores = {s: Score.of(s, [(found[k][1] if k in found else failed[k]).model_copy(update={"split": s})
                              for k in w if k in found or k in failed]) for s, w in wanted.items()}
    return Scored(ref, scores, cached=cached, new=len(found) - cached, data_hash=split_data_hash(bench),
                  evaluations=tuple(evaluations), cfg=cfg)
