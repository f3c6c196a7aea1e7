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
from skillopt.engine.loop import Context, Trainer, split_score
from skillopt.engine.rollouts import RolloutRunner
from skillopt.errors import BadInput, BudgetExceeded
from skillopt.harness.registry import HarnessContext, check_compatible, make_harness
from skillopt.models import Budget, Meter, Models, ProviderEnv, ResponseCache, RetryPolicy, check_credentials
from skillopt.models.spec import ModelSpec, parse_model_spec
from skillopt.skill import Skill
from skillopt.store.records import RunState, RunSummary, SplitScore, now
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
                  retry=RetryPolicy(attempts=cfg.models.retries, base_delay_s=cfg.models.retry_base_delay_s),
                  timeout_s=cfg.models.timeout_s, prices=cfg.models.prices)


def rollout_salt(cfg: RunConfig) -> str:
    import json

    return json.dumps({"limits": cfg.limits.model_dump(), "harness_options": cfg.harness_options},
                      sort_keys=True, default=str)


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
    with token_capture(specs.target, store, env, cfg, emit) as capture:
        runner = RolloutRunner(store, _harness(cfg, models), benchmark, specs.target, _limits(cfg, benchmark),
                               meter, emit, cfg.train.concurrency, rollout_salt(cfg), cfg.train.summary_tokens,
                               capture=capture)
        ctx = Context(cfg, store, models, benchmark, runner, specs.optimizer, emit)  # type: ignore[arg-type]
        trainer = Trainer(ctx, state)
        try:
            asyncio.run(_train_and_test(trainer))
            state.status = "finished"
        except BudgetExceeded as e:
            state.status, state.stop_reason = "stopped", e.reason
            emit(Note(f"stopped: {e.reason}; state saved, continue with --resume {store.run_id}"))
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
    for version in dict.fromkeys([0, st.best, st.incumbent]):
        await trainer.evaluate(version, "test", f"test v{version:03d}")


def _harness(cfg: RunConfig, models: Models):
    return make_harness(cfg.harness, HarnessContext(models=models, options=dict(cfg.harness_options)))


def _limits(cfg: RunConfig, benchmark: Benchmark):
    """Benchmarks may ask for short answers (max tokens, stop sequences) unless the config says otherwise."""
    limits = cfg.limits
    updates = {}
    if "max_tokens" not in cfg.limits.model_fields_set and getattr(benchmark, "max_answer_tokens", None):
        updates["max_tokens"] = benchmark.max_answer_tokens  # type: ignore[attr-defined]
    if not limits.stop and getattr(benchmark, "stop", None):
        updates["stop"] = tuple(benchmark.stop)  # type: ignore[attr-defined]
    return limits.model_copy(update=updates)


def _scores_for(trainer: Trainer, version: int) -> dict[str, SplitScore | None]:
    records = trainer.ctx.runner.cache.values()
    out: dict[str, SplitScore | None] = {}
    for split in ("val", "test"):
        mine = [r for r in records if r.version == version and r.split == split]
        if not mine:  # same content may be stored under another version number
            sha = trainer.ctx.store.version(version).sha
            mine = [r for r in records if r.skill_sha == sha and r.split == split]
        out[split] = split_score(mine) if mine else None
    return out


def build_summary(trainer: Trainer, benchmark: Benchmark, started: float) -> RunSummary:
    st, store, cfg = trainer.state, trainer.ctx.store, trainer.ctx.cfg
    versions = store.versions()
    tasks = [t for s in ("train", "val", "test") for t in benchmark.tasks(s)]  # type: ignore[arg-type]
    roles = {"seed": 0, "best": st.best, "final": st.incumbent}
    return RunSummary(
        run_id=store.run_id, status=st.status, benchmark=cfg.benchmark, harness=cfg.harness,
        target_model=cfg.target_model, optimizer_model=cfg.optimizer_model, data_hash=data_hash(tasks),
        versions=roles, scores={role: _scores_for(trainer, v) for role, v in roles.items()},
        candidates_accepted=sum(v.status == "accepted" for v in versions),
        candidates_rejected=sum(v.status == "rejected" for v in versions),
        edits_accepted=_count_edits(store, st.step, True), edits_rejected=_count_edits(store, st.step, False),
        steps=st.step, stop_reason=st.stop_reason, meter=trainer.ctx.runner.meter.snapshot(), started_at=started,
    )


def _count_edits(store: RunStore, steps: int, accepted: bool) -> int:
    total = 0
    for n in range(1, steps + 2):
        gate = store.read_step(n, "gate.json")
        applied = store.read_step(n, "applied.json") or []
        if gate is not None and gate.get("accepted") == accepted:
            total += sum(1 for r in applied if r.get("status") == "applied")
    return total
