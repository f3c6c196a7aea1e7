"""Start, resume and finish a run: build the parts from the resolved config, train, test once."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from skillopt.benchmarks import get_benchmark
from skillopt.benchmarks.base import Benchmark, data_hash
from skillopt.config import RunConfig, redacted
from skillopt.engine.events import Emitter, Listener, Note, RunFinished, RunStarted
from skillopt.engine.loop import Context, Trainer, per_task, split_score
from skillopt.engine.rollouts import RolloutRunner
from skillopt.errors import BadInput, BudgetExceeded, RunFailed
from skillopt.harness.base import SetsTemperature
from skillopt.harness.registry import HarnessContext, check_compatible, make_harness
from skillopt.models import Budget, Meter, Models, ProviderEnv, ResponseCache, RetryPolicy, check_credentials
from skillopt.models.spec import ModelSpec, parse_model_spec
from skillopt.skill import Skill
from skillopt.stats import paired_difference_interval
from skillopt.store.records import RolloutRecord, RunState, RunSummary, SplitScore, now
from skillopt.store.run import RunStore, new_run_id

SKILLS_DIR = Path(__file__).resolve().parents[2] / "skills"


@dataclass(frozen=True)
class Specs:
    target: ModelSpec
    optimizer: ModelSpec | None


def resolve_specs(cfg: RunConfig, env: ProviderEnv, need_optimizer: bool = True) -> Specs:
    """Parse and check both specs and the harness/target combination, before any rollout."""
    if not cfg.target_model:
        raise BadInput("no target model: pass --target_model (e.g. openai:gpt-5-mini or local:qwen2.5-coder-0.5b)")
    target = parse_model_spec(cfg.target_model)
    check_compatible(cfg.harness, target)
    check_credentials(target, env)
    if target.captures_tokens:
        from skillopt.traces.tokens import check_capture

        check_capture(target)
    optimizer = None
    if need_optimizer:
        if not cfg.optimizer_model:
            raise BadInput("no optimizer model: pass --optimizer_model (e.g. openai:gpt-5)")
        optimizer = parse_model_spec(cfg.optimizer_model)
        check_credentials(optimizer, env)
    return Specs(target, optimizer)


def size_local_models(specs: Specs, concurrency: int) -> None:
    """A local model serves the run's rollouts in flight in parallel slots (llama.cpp decodes them in
    one batch per step), plus one for the optimizer when it is the same model; sized before any call."""
    from skillopt.models.local import reserve_slots  # lazy: only for local specs

    wanted: dict[str, int] = {}
    if specs.target.provider == "local":
        wanted[specs.target.model] = concurrency
    if specs.optimizer is not None and specs.optimizer.provider == "local":
        wanted[specs.optimizer.model] = wanted.get(specs.optimizer.model, 0) + 1
    for name, slots in wanted.items():
        reserve_slots(name, slots)


@contextmanager
def open_benchmark(cfg: RunConfig) -> Iterator[Benchmark]:
    """The benchmark, checked before any rollout (e.g. a Docker engine for swebench) and released
    after the last (containers, clients); benchmarks without `preflight` / `close` need neither."""
    benchmark = get_benchmark(cfg.benchmark, cfg.splits, **cfg.benchmark_options)
    preflight = getattr(benchmark, "preflight", None)
    if callable(preflight):
        preflight()
    try:
        yield benchmark
    finally:
        close = getattr(benchmark, "close", None)
        if callable(close):
            close()


def seed_skill(cfg: RunConfig) -> Skill:
    if cfg.seed_skill:
        return Skill.load(cfg.seed_skill)
    name = Path(cfg.benchmark).stem if cfg.benchmark.endswith(".jsonl") else cfg.benchmark
    for candidate in (SKILLS_DIR / name / "SKILL.md", SKILLS_DIR / "default" / "SKILL.md"):
        if candidate.exists():
            return Skill.load(candidate)
    raise BadInput(f"no seed skill for {cfg.benchmark!r}: pass --skill PATH")


def make_models(cfg: RunConfig, env: ProviderEnv, meter: Meter, cache_path: Path | None) -> Models:
    return Models(env=env, meter=meter, cache=ResponseCache(cache_path) if cache_path else None,
                  retry=RetryPolicy(attempts=cfg.models.retries + 1, base_delay_s=cfg.models.retry_base_delay_s),
                  timeout_s=cfg.models.timeout_s, prices=cfg.models.prices)


def rollout_salt(cfg: RunConfig) -> str:
    import json

    return json.dumps({"limits": cfg.limits.model_dump(), "harness_options": cfg.harness_options,
                       "deterministic": [cfg.gate.deterministic, cfg.gate.seed]}, sort_keys=True, default=str)


def _open_or_create(cfg: RunConfig, runs_dir: Path, resume: str | None) -> tuple[RunStore, RunState | None]:
    if resume:
        store = RunStore.open(runs_dir, resume)
        state = store.read_state()
        if state is not None and state.fingerprint != cfg.fingerprint():
            raise BadInput(
                f"cannot resume {resume}: its benchmark, harness, target model, splits or limits differ from "
                f"this command's; resume with the run's own settings (see {store.root / 'config.yaml'})")
        return store, state
    run_id = cfg.run_id or new_run_id(cfg.benchmark)
    return RunStore.create(runs_dir, run_id), None


def train(cfg: RunConfig, runs_dir: Path, env: ProviderEnv, listeners: list[Listener],
          resume: str | None = None) -> RunSummary:
    """Run (or resume) a training run. Returns the summary; budget stops are clean, not errors."""
    specs = resolve_specs(cfg, env)
    with open_benchmark(cfg) as benchmark:
        return _train(cfg, runs_dir, env, listeners, resume, specs, benchmark)


def _train(cfg: RunConfig, runs_dir: Path, env: ProviderEnv, listeners: list[Listener], resume: str | None,
           specs: Specs, benchmark: Benchmark) -> RunSummary:
    seed = seed_skill(cfg)
    store, state = _open_or_create(cfg, runs_dir, resume)
    if "local" in (specs.target.provider, specs.optimizer.provider if specs.optimizer else ""):
        size_local_models(specs, cfg.train.concurrency)
    if state is None:
        store.write_config(redacted(cfg))
        store.add_version(seed, parent=None, origin="seed", status="seed")
        state = RunState(run_id=store.run_id, fingerprint=cfg.fingerprint())
    state.status, state.stop_reason = "running", None
    emit = Emitter(listeners)
    meter = Meter(Budget(**cfg.budget.model_dump()), start=state.meter)
    models = make_models(cfg, env, meter, store.root / "cache" / "responses.jsonl")
    emit(RunStarted(store.run_id, redacted(cfg), resumed=bool(resume)))
    started = store.read_summary().started_at if store.read_summary() else now()
    harness = _harness(cfg, models)
    deterministic = deterministic_mode(cfg, harness, specs.target)
    if warning := gate_size_warning(cfg, benchmark):
        emit(Note(warning))
    with token_capture(specs.target, store, env, cfg, emit) as capture:
        runner = RolloutRunner(store, harness, benchmark, specs.target, _limits(cfg, benchmark, deterministic),
                               meter, emit, cfg.train.concurrency, rollout_salt(cfg), cfg.train.summary_tokens,
                               capture=capture)
        ctx = Context(cfg, store, models, benchmark, runner, specs.optimizer, emit, deterministic)  # type: ignore[arg-type]
        trainer = Trainer(ctx, state)
        try:
            asyncio.run(_train_and_test(trainer))
            state.status = "finished"
        except BudgetExceeded as e:
            state.status, state.stop_reason = "stopped", e.reason
            emit(Note(f"stopped: {e.reason}; state saved, continue with --resume {store.run_id}"))
        except RunFailed as e:
            state.status, state.stop_reason = "failed", str(e)
        except KeyboardInterrupt:
            state.status, state.stop_reason = "stopped", "interrupted"
            trainer.checkpoint()
            raise
    trainer.checkpoint()
    summary = build_summary(trainer, benchmark, started)
    store.write_summary(summary)
    store.write_best_skill(store.skill(state.best))
    emit(RunFinished(summary))
    return summary


@contextmanager
def token_capture(target: ModelSpec, store: RunStore, env: ProviderEnv, cfg: RunConfig, emit: Emitter):
    """For vLLM targets: the recording proxy for the whole run (token ids + logprobs per call)."""
    if not target.captures_tokens:
        yield None
        return
    from skillopt.traces.tokens import TokenCapture

    emit(Note("starting token capture (recording proxy for the vLLM target)"))
    with TokenCapture(target, store.root / "tokens", env=env, repo=cfg.benchmark) as capture:
        yield capture


async def _train_and_test(trainer: Trainer) -> None:
    await trainer.train()
    st = trainer.state
    for version in dict.fromkeys([0, st.best]):
        await trainer.evaluate(version, "test", f"test v{version:03d}")


def deterministic_mode(cfg: RunConfig, harness, target: ModelSpec) -> bool:
    """Whether rollouts run at temperature 0 with a seed: `gate.deterministic`, where "auto" means
    whenever the harness passes a temperature to the model (chat) and the model accepts one."""
    if cfg.gate.deterministic != "auto":
        return cfg.gate.deterministic == "on"
    return isinstance(harness, SetsTemperature) and target.accepts_temperature and cfg.limits.temperature in (None, 0)


def gate_size_warning(cfg: RunConfig, benchmark: Benchmark) -> str | None:
    """A gate that can never accept (too few validation pairs for its alpha) is worth a warning
    before any rollout: the run can still measure, but it cannot learn."""
    from skillopt.optimizer.gate import final_bound

    pairs = len(benchmark.tasks("val")) * cfg.gate.trials  # type: ignore[arg-type]
    g = cfg.gate
    if any(final_bound(k, g.alpha, g.interim_alpha) <= k for k in range(1, pairs + 1)):
        return None
    need = next(k for k in range(1, 200) if final_bound(k, g.alpha, g.interim_alpha) <= k)
    return (f"warning: the validation split has {pairs} paired observation(s): the gate (alpha {g.alpha}) cannot "
            f"accept any candidate with fewer than {need}; use --val-size {need} or more (20+ recommended)")


def _harness(cfg: RunConfig, models: Models):
    return make_harness(cfg.harness, HarnessContext(models=models, options=dict(cfg.harness_options)))


def _limits(cfg: RunConfig, benchmark: Benchmark, deterministic: bool = False):
    """Benchmarks may ask for short answers (max tokens, stop sequences) unless the config says
    otherwise; deterministic rollouts run at temperature 0 with the gate's seed."""
    limits = cfg.limits
    updates: dict = {"temperature": 0.0, "seed": cfg.gate.seed} if deterministic else {}
    if "max_tokens" not in cfg.limits.model_fields_set and getattr(benchmark, "max_answer_tokens", None):
        updates["max_tokens"] = benchmark.max_answer_tokens  # type: ignore[attr-defined]
    if not limits.stop and getattr(benchmark, "stop", None):
        updates["stop"] = tuple(benchmark.stop)  # type: ignore[attr-defined]
    return limits.model_copy(update=updates)


def _records_for(trainer: Trainer, version: int, split: str, rollouts: list[RolloutRecord]) -> list[RolloutRecord]:
    """A version's rollouts of a split, the latest per (task, trial), a scored one over an errored
    one (by content: the same skill may hold two numbers). Sampled targets: every draw counts."""
    sha = trainer.ctx.store.version(version).sha
    latest: dict[tuple[str, int], RolloutRecord] = {}
    for r in rollouts:
        if r.skill_sha == sha and r.split == split:
            latest[(r.task_id, r.trial)] = r if not r.errored else latest.get((r.task_id, r.trial), r)
    return list(latest.values())


def _test_delta(seed: list[RolloutRecord], best: list[RolloutRecord], metric: str):
    a, b = per_task(seed, metric), per_task(best, metric)
    common = sorted(t for t in a if t in b)
    if not common:
        return None, 0, 0
    xs, ys = [a[t] for t in common], [b[t] for t in common]
    wins = sum(y > x + 1e-9 for x, y in zip(xs, ys))
    losses = sum(y < x - 1e-9 for x, y in zip(xs, ys))
    return paired_difference_interval(xs, ys), wins, losses


def build_summary(trainer: Trainer, benchmark: Benchmark, started: float) -> RunSummary:
    st, store, cfg = trainer.state, trainer.ctx.store, trainer.ctx.cfg
    versions = store.versions()
    tasks = [t for s in ("train", "val", "test") for t in benchmark.tasks(s)]  # type: ignore[arg-type]
    roles = {"seed": 0, "best": st.best}
    every = trainer.ctx.store.rollouts()  # parsed once (it was once per role and split: 4 x 100,000 records)
    records = {(role, split): _records_for(trainer, v, split, every) for role, v in roles.items()
               for split in ("val", "test")}
    del every
    scores = {role: {split: split_score(records[(role, split)]) if records[(role, split)] else None
                     for split in ("val", "test")} for role in roles}
    delta, wins, losses = _test_delta(records[("seed", "test")], records[("best", "test")], cfg.gate.metric)
    candidates: dict[str, int] = {}
    decisions = val_rollouts = accepted_edits = rejected_edits = 0
    for n in range(1, st.step + 2):
        for c in store.read_step(n, "candidates.json") or []:
            candidates[c["status"]] = candidates.get(c["status"], 0) + 1
            if c.get("gate"):
                decisions += 1
                val_rollouts += c["gate"].get("rollouts", 0)
                if c["status"] == "accepted":
                    accepted_edits += len(c["edits"])
                else:
                    rejected_edits += len(c["edits"])
    return RunSummary(
        run_id=store.run_id, status=st.status, benchmark=cfg.benchmark, harness=cfg.harness,
        target_model=cfg.target_model, optimizer_model=cfg.optimizer_model, data_hash=data_hash(tasks),
        versions=roles, scores=scores, test_delta=delta, test_wins=wins, test_losses=losses,
        gate_decisions=decisions, val_rollouts=val_rollouts, candidates=candidates,
        candidates_accepted=sum(v.status == "accepted" for v in versions),
        candidates_rejected=sum(v.status in ("rejected", "screened-out") for v in versions),
        edits_accepted=accepted_edits, edits_rejected=rejected_edits,
        steps=st.step, stop_reason=st.stop_reason, meter=trainer.ctx.runner.meter.snapshot(), started_at=started,
    )
