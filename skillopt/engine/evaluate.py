"""Score one skill on one split as an evaluation run: how the scoring service (`engine.scoring`) pays
for the rollouts it misses, reusing the stored ones it is given (or those of the run the skill comes
from), found by the runner's own cache key."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from skillopt.benchmarks.base import Benchmark, Split, split_data_hash
from skillopt.config import RunConfig, StoredConfig
from skillopt.engine.events import Emitter, Listener, Note, PhaseStarted, RolloutsKept, RunFinished, RunStarted
from skillopt.engine.loop import split_score
from skillopt.engine.rollouts import RolloutRunner
from skillopt.engine.executor import Executor
from skillopt.engine.setup import (
    Parts, Specs, build_parts, check_splits, isolation, open_benchmark, open_executor, preflight_models, resolve_specs,
    record_prompts, size_local_models, token_capture,
)
from skillopt.harness.workspace import check_skill_name
from skillopt.errors import RunFailed
from skillopt.models import ProviderEnv
from skillopt.io.redact import redact
from skillopt.store.schema import RolloutRecord, RunState, RunSummary, SplitScore, now
from skillopt.store.refs import SkillRef
from skillopt.store.reuse import find_rollouts
from skillopt.traces.trigger import TriggerRate, trigger_rate
from skillopt.store.run_store import RunStore, check_run_id, new_run_id


@dataclass(frozen=True)
class EvalResult:
    """An evaluation run: its id and folder, the skill's score on the split, how many rollouts were
    reused, and (agent harnesses) the share of rollouts whose agent loaded the skill."""

    run_id: str
    score: SplitScore
    cached: int
    run_dir: Path | None = None
    label: str = ""  # the skill evaluated (RUN:vN, a path, a name)
    benchmark: str = ""
    trigger: TriggerRate | None = None
    records: tuple[RolloutRecord, ...] = ()  # one per task and trial: scored, else its errored one
    data_hash: str = ""  # of the benchmark's split tasks (`benchmarks.base.split_data_hash`)


Reusable = Mapping[str, tuple[Path, RolloutRecord]]  # cache key -> (its run's folder, stored scored rollout)


def evaluate_skill(cfg: RunConfig, ref: SkillRef, split: Split, runs_dir: Path, env: ProviderEnv,
                   listeners: list[Listener], benchmark: Benchmark | None = None,
                   reusable: Reusable | None = None) -> EvalResult:
    """Score `ref` on `split` as an evaluation run. `benchmark`: one built in Python instead of
    `cfg.benchmark` by name. `reusable`: the stored rollouts already found by their cache key
    (`store.reuse.find_rollouts`, `compare`: in any run); None (`eval`): those of the run `ref`
    comes from, looked up here by the same key."""
    specs = resolve_specs(cfg, env, need_optimizer=False)
    run_id = check_run_id(cfg.run_id or "eval-" + new_run_id(cfg.benchmark))
    check_skill_name(ref.skill)
    with open_benchmark(cfg, benchmark) as benchmark:
        check_splits(cfg, benchmark, (split,), sizes_by_flag=False)
        parts = build_parts(cfg, benchmark, env, None)
        with open_executor(cfg, parts, benchmark, run_id, runs_dir, env, specs.target) as executor:
            RunStore.check_new(runs_dir, run_id)
            preflight_models(cfg, specs, benchmark, env)
            store = RunStore.create(runs_dir, run_id, lock=True)
            try:
                return _evaluate(cfg, ref, split, store, env, listeners, specs, benchmark, parts, executor, reusable)
            finally:
                store.unlock()


def _evaluate(cfg: RunConfig, ref: SkillRef, split: Split, store: RunStore, env: ProviderEnv,
              listeners: list[Listener], specs: Specs, benchmark: Benchmark, parts: Parts,
              executor: Executor, reusable: Reusable | None) -> EvalResult:
    tasks = list(benchmark.tasks(split))
    size_local_models(specs, cfg.train.concurrency)
    config = StoredConfig.of(cfg, mode="eval", skill=ref.label, split=split)
    store.write_config(config)
    v = store.add_version(ref.skill, parent=None, origin=f"manual ({ref.label})", status="manual")
    record_prompts(store, benchmark, (split,))
    meter = parts.meter
    emit = Emitter(listeners)
    emit(RunStarted(store.run_id, config, resumed=False))
    if executor.note:
        emit(Note(executor.note))
    with isolation(parts, benchmark, store), \
            token_capture(specs.target, store, env, cfg, emit, executor.callback_host) as capture:
        runner = RolloutRunner(store, parts.harness, benchmark, specs.target, parts.limits, meter, emit,
                               cfg.train.concurrency, parts.settings, cfg.train.summary_tokens, capture=capture,
                               executor=executor)
        if reusable is None:  # one key: the runner's own (`Settings.rollout_key`)
            keys = {parts.settings.rollout_key(ref.skill.sha, t, k) for t in tasks for k in range(cfg.gate.trials)}
            source = ref.run
            reusable = {} if source is None else find_rollouts(source.root.parent, keys, runs=[source.run_id])
        runner.cache.update({key: rec for key, (_, rec) in reusable.items()})
        emit(PhaseStarted(f"eval {ref.label} on {split}", len(tasks) * cfg.gate.trials))
        try:
            records = asyncio.run(runner.run_many(ref.skill, v.version, tasks, split, cfg.gate.trials,
                                                  retries=cfg.train.retry_errored))
        except (RunFailed, KeyboardInterrupt) as e:  # a raising scorer, Ctrl-C, SIGTERM: marked, never `new`
            failed = isinstance(e, RunFailed)
            store.write_state(RunState(run_id=store.run_id, status="failed" if failed else "stopped",
                                       stop_reason=redact(str(e)) if failed else "interrupted",
                                       fingerprint=parts.settings.fingerprint(cfg.splits), meter=meter.snapshot()))
            raise
    records = _keep_reused(store, reusable, records, v.version, emit)
    score = split_score(records)
    store.write_state(RunState(run_id=store.run_id, status="finished",
                               fingerprint=parts.settings.fingerprint(cfg.splits), meter=meter.snapshot()))
    data_hash = split_data_hash(benchmark)
    summary = RunSummary(run_id=store.run_id, status="finished", benchmark=cfg.benchmark, harness=cfg.harness,
                         target_model=cfg.target_model, optimizer_model="", data_hash=data_hash,
                         versions={"seed": 0},
                         scores={"seed": {split: score}}, meter=meter.snapshot(), started_at=now())
    store.write_summary(summary)
    emit(RunFinished(summary))  # the index (engine.listeners.IndexWriter) now answers for the run
    return EvalResult(store.run_id, score, runner.cache_hits, store.root, ref.label, cfg.benchmark,
                      trigger_rate(records), tuple(records), data_hash)


def _keep_reused(store: RunStore, reusable: Reusable, records: list[RolloutRecord], version: int,
                 emit: Emitter) -> list[RolloutRecord]:
    """Rollouts reused from other runs are written into this run too (with their traces), so the
    evaluation run holds every rollout it scored and reads the same as one that paid for them all."""
    own = {r.key for r in store.rollouts()}
    sources: dict[Path, RunStore] = {}  # a run's folder -> its store, opened once
    out, new = [], []
    for rec in records:
        if rec.key not in own:
            rec = rec.model_copy(update={"version": version})
            if rec.trace_file and rec.key in reusable:
                folder = reusable[rec.key][0]
                if folder not in sources:
                    sources[folder] = RunStore(folder)
                store.copy_trace(sources[folder], rec.trace_file)
            new.append(rec)
        out.append(rec)
    store.append_rollouts(new)  # grouped: one write and one fsync per group, not per record
    emit(RolloutsKept(tuple(new)))
    return out
