"""Start, resume and finish a run: build the parts from the resolved config, train, test once.

Everything that can be wrong with the input is checked before the run folder is made (see
`engine.setup`). The run is then held by this process alone (`RunStore.lock`), its meter starts
from what it recorded (`engine.usage`), and a resume must match its settings (`engine.settings`).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from skillopt.benchmarks.base import Benchmark, split_data_hash
from skillopt.config import RunConfig, StoredConfig, redacted
from skillopt.engine.events import Emitter, Listener, Note, RunFinished, RunStarted
from skillopt.engine.eta import Plan, RunEta
from skillopt.engine.local_threads import FollowFreeCores
from skillopt.engine.loop import Context, Trainer, per_task, split_score
from skillopt.engine.rollouts import RolloutRunner
from skillopt.engine import rollout_cache
from skillopt.engine.rollout_cache import RolloutCache
from skillopt.engine.settings import SCORING_SECTIONS, Settings
from skillopt.engine.executor import Executor
from skillopt.engine.setup import (
    Parts, Specs, build_parts, check_splits, isolation, open_benchmark, open_executor, preflight_models, resolve_specs,
    record_prompts, seed_skill, size_local_models, token_capture,
)
from skillopt.engine.usage import record_calls, recorded_usage
from skillopt.errors import BadInput, BudgetExceeded, RunFailed, ScorerFailed
from skillopt.models import ProviderEnv, replay
from skillopt.models.spec import parse_model_spec
from skillopt.optimizer.sequential_test import pairs_to_decide
from skillopt.record import Candidate
from skillopt.skill import Skill
from skillopt.stats import PairedLift, paired_lift
from skillopt.store.layout import RunPaths
from skillopt.store.schema import RolloutRecord, RunState, RunSummary, Undecided, now
from skillopt.store.scores import latest_per_trial
from skillopt.io.redact import masked_paths, redact
from skillopt.store.run_store import RunStore, check_run_id, new_run_id


def train(cfg: RunConfig, runs_dir: Path, env: ProviderEnv, listeners: list[Listener],
          resume: str | None = None, benchmark: Benchmark | None = None, seed: Skill | None = None) -> RunSummary:
    """Run (or resume) a training run. Returns the summary; budget stops are clean, not errors.
    `benchmark`: one built in Python (tasks and a scorer) instead of `cfg.benchmark` by name;
    `seed`: the seed skill itself instead of `cfg.seed_skill` (a path)."""
    specs = resolve_specs(cfg, env)
    given = resume if resume is not None else cfg.run_id
    run_id = check_run_id(given if given is not None else new_run_id(cfg.benchmark))
    with open_benchmark(cfg, benchmark) as benchmark:
        seed = seed_skill(cfg, seed)
        check_splits(cfg, benchmark, ("train", "val"))
        parts = build_parts(cfg, benchmark, env, RunPaths.of(runs_dir, run_id).responses)
        size_local_models(specs, cfg.train.concurrency)
        with open_executor(cfg, parts, benchmark, run_id, runs_dir, env, specs.target) as executor:
            if not resume:  # every check of a new run before its endpoints are asked, then its folder
                RunStore.check_new(runs_dir, run_id)
                preflight_models(cfg, specs, benchmark, env)
            store, state = _open_or_create(cfg, runs_dir, run_id, resume, parts.settings)
            if resume and (state is None or state.status != "finished"):  # a finished run calls no model
                try:
                    preflight_models(cfg, specs, benchmark, env)
                except BaseException:
                    store.unlock()
                    raise
            try:
                return _train(cfg, store, state, seed, env, listeners, specs, benchmark, parts, executor)
            except KeyboardInterrupt as e:  # Ctrl-C, or SIGTERM at the CLI edge: state saved, resumable
                _mark_interrupted(store, cfg, parts.settings, seed)
                e.add_note(f"state saved; continue with: skillopt run --resume {store.run_id}")
                raise
            finally:
                store.unlock()


def _mark_interrupted(store: RunStore, cfg: RunConfig, settings: Settings, seed: Skill) -> None:
    """An interruption at any moment, even before the first step: the run's checkpoint says
    `stopped` (interrupted), never `running` or `new` forever; a resume continues it."""
    state = store.read_state()
    if state is None:
        if not store.paths.config.exists():
            store.write_config(StoredConfig.of(cfg))
        if not store.versions():
            store.add_version(seed, parent=None, origin="seed", status="seed")
        state = RunState(run_id=store.run_id, fingerprint=settings.fingerprint(cfg.splits))
    if state.status in ("running", "stopped"):
        state.status, state.stop_reason = "stopped", "interrupted"
        store.write_state(state)


def _open_or_create(cfg: RunConfig, runs_dir: Path, run_id: str, resume: str | None,
                    settings: Settings) -> tuple[RunStore, RunState | None]:
    """The run, held by this process; a resume must match the settings it started with."""
    if not resume:
        return RunStore.create(runs_dir, run_id, lock=True), None
    store = RunStore.open(runs_dir, run_id, lock=True)
    state = store.read_state()
    fingerprint = settings.fingerprint(cfg.splits)
    if state is not None and state.fingerprint != fingerprint:
        saved = store.read_config().layer()
        if _scorer_fixed(state, saved, cfg):
            state.fingerprint = fingerprint  # its old scores have other cache keys: never reused
            return store, state
        store.unlock()
        raise BadInput(f"cannot resume {resume}: {_why_different(saved, cfg, store)}")
    return store, state


def _scorer_fixed(state: RunState, saved: dict, cfg: RunConfig) -> bool:
    """A run that failed because its scorer raised resumes with the fixed scorer (which changes
    the fingerprint), as long as nothing else changed."""
    return (state.status == "failed" and (state.stop_reason or "").startswith(ScorerFailed.PREFIX)
            and not masked_paths({k: cfg.model_dump(mode="json").get(k) for k in SCORING_SECTIONS})
            and not _changed_sections(saved, cfg))


def _changed_sections(saved: dict, cfg: RunConfig) -> list[str]:
    now_cfg = redacted(cfg)
    return [k for k in dict.fromkeys((*SCORING_SECTIONS, "gate")) if k != "train" and saved.get(k) != now_cfg.get(k)]


def _why_different(saved: dict, cfg: RunConfig, store: RunStore) -> str:
    """Why a resume's settings differ from the run's, in words the user can act on."""
    given = cfg.model_dump(mode="json")
    hidden = masked_paths({k: given.get(k) for k in SCORING_SECTIONS})  # still the saved placeholder
    if hidden:
        return (f"its settings hold secrets that were not saved ({', '.join(hidden)}): give them again, as when "
                f"the run started (--set {hidden[0]}=..., or the same flag)")
    changed = _changed_sections(saved, cfg)
    if changed:
        return (f"its {', '.join(changed)} differ from this command's; resume with the run's own settings "
                f"(see its config.yaml)")
    made = store.rollouts()  # config.yaml edited by hand: the rollouts still say what the run used
    for field, now_value in (("target_model", str(parse_model_spec(cfg.target_model))), ("harness", cfg.harness)):
        used = {r.model if field == "target_model" else r.harness for r in made}
        if used and now_value not in used:
            return (f"its {field} is {now_value} but its rollouts were made with {', '.join(sorted(used))}: was "
                    f"config.yaml edited? put {field} back (or start a new run)")
    return "the benchmark data or its scorer changed since the run started; start a new run"


def _kept_rollouts(cfg: RunConfig, specs: Specs, parts: Parts, emit: Emitter) -> RolloutCache | None:
    """The rollouts an earlier run made that this one reuses: every one when the target's replies are
    kept (`train.replay`, an embedded target: `models.replay`), else the seed's val / test ones
    (`train.seed_cache`), else none."""
    every = cfg.train.replay and replay.identity(specs.target) is not None
    if not (every or cfg.train.seed_cache):
        return None
    return RolloutCache(rollout_cache.default_root(), parts.settings.data_hash, lambda w: emit(Note(w)), every=every)


def _reused(kept: RolloutCache | None, replies: replay.ReplayCache | None) -> str:
    """The note that says what this run took from earlier runs, or "" when nothing."""
    rollouts = kept.hits if kept is not None else 0
    calls = replies.hits if replies is not None else 0
    if not (rollouts or calls):
        return ""
    what = " and ".join(x for x in (f"{rollouts} rollout{'' if rollouts == 1 else 's'}" if rollouts else "",
                                    f"{calls} model repl{'y' if calls == 1 else 'ies'}" if calls else "") if x)
    off = "train.replay=false" if (kept is not None and kept.every) or calls else "train.seed_cache=false"
    where = kept.root.parent if kept is not None else replies.entries.root.parent
    return f"{what} reused from an earlier run (kept in {where}; --set {off} runs them again)"


def _train(cfg: RunConfig, store: RunStore, state: RunState | None, seed: Skill, env: ProviderEnv,
           listeners: list[Listener], specs: Specs, benchmark: Benchmark, parts: Parts,
           executor: Executor) -> RunSummary:
    resumed = state is not None
    if state is None:
        store.write_config(StoredConfig.of(cfg))
        store.add_version(seed, parent=None, origin="seed", status="seed")
        state = RunState(run_id=store.run_id, fingerprint=parts.settings.fingerprint(cfg.splits))
        record_prompts(store, benchmark, ("train", "val", "test"))
    state.status, state.stop_reason = "running", None
    emit = Emitter(listeners)
    if any(m is not None and m.provider == "local" and not m.base_url for m in (specs.target, specs.optimizer)):
        emit.listeners.append(FollowFreeCores(emit))  # threads re-chosen at each phase
    meter = parts.meter
    meter.restore(recorded_usage(store))  # what the run recorded, not its last checkpoint
    record_calls(meter, store)
    if bad := store.unreadable_rollout_lines:
        emit(Note(f"warning: {len(bad)} line(s) of rollouts.jsonl cannot be read and are skipped (line "
                  f"{', '.join(map(str, bad[:5]))}{', ...' if len(bad) > 5 else ''}): those rollouts run again"))
    summary = store.read_summary()
    started = summary.started_at if summary else now()
    if warning := gate_size_warning(cfg, benchmark):
        emit(Note(warning))
    if executor.note:
        emit(Note(executor.note))
    with isolation(parts, benchmark, store), \
            token_capture(specs.target, store, env, cfg, emit, executor.callback_host) as capture:
        kept = _kept_rollouts(cfg, specs, parts, emit)
        if cfg.train.replay:
            parts.models.replay = replay.ReplayCache(replay.default_root(), lambda w: emit(Note(w)))
        runner = RolloutRunner(store, parts.harness, benchmark, specs.target, parts.limits, meter, emit,
                               cfg.train.concurrency, parts.settings, cfg.train.summary_tokens, capture=capture,
                               executor=executor, kept=kept)
        ctx = Context(cfg, store, parts.models, benchmark, runner, specs.training_optimizer(), emit,
                      parts.deterministic)
        trainer = Trainer(ctx, state)
        emit.listeners.append(RunEta(emit, Plan.of(cfg, len(benchmark.tasks("val")), len(benchmark.tasks("test")),
                                                    trainer.total_steps), state.step))
        emit(RunStarted(store.run_id, StoredConfig.of(cfg), resumed=resumed, total_steps=trainer.total_steps,
                        step=state.step))
        try:
            asyncio.run(_train_and_test(trainer))
            state.status = "finished"
            if note := _reused(kept, parts.models.replay):
                emit(Note(note))
        except BudgetExceeded as e:
            state.status, state.stop_reason = "stopped", e.reason
            emit(Note(f"stopped: {e.reason}; state saved, continue with --resume {store.run_id}"))
        except RunFailed as e:
            state.status, state.stop_reason = "failed", redact(str(e))
        except KeyboardInterrupt:
            state.status, state.stop_reason = "stopped", "interrupted"
            trainer.checkpoint()
            store.write_summary(build_summary(trainer, benchmark, started))  # views show the scores it has
            raise
    trainer.checkpoint()
    summary = build_summary(trainer, benchmark, started)
    store.write_summary(summary)
    store.write_best_skill(store.skill(state.best))
    emit(RunFinished(summary))
    return summary


async def _train_and_test(trainer: Trainer) -> None:
    await trainer.train()
    st = trainer.state
    for version in dict.fromkeys([0, st.best]):
        await trainer.evaluate(version, "test", f"test v{version:03d}")


def gate_size_warning(cfg: RunConfig, benchmark: Benchmark) -> str | None:
    """A gate that can never accept (too few validation pairs for its alpha) is worth a warning
    before any rollout: the run can still measure, but it cannot learn."""
    from skillopt.engine.gating import gate_test

    pairs = len(benchmark.tasks("val")) * cfg.gate.trials
    g = cfg.gate

    def can_accept(n: int) -> bool:
        return any(b <= k for k, b in enumerate(gate_test(g, n).final_bounds(n)) if k)

    if can_accept(pairs):
        return None
    need = next((n for n in range(pairs + 1, 200) if can_accept(n)), None)
    if need is None:
        return f"warning: the gate (alpha {g.alpha}) cannot accept any candidate with under 200 validation pairs"
    return (f"warning: the validation split has {pairs} paired observation(s): the gate (alpha {g.alpha}) cannot "
            f"accept any candidate with fewer than {need}; use --val-size {-(-need // g.trials)} or more "
            "(20+ recommended)")


def _records_for(trainer: Trainer, version: int, split: str, rollouts: list[RolloutRecord]) -> list[RolloutRecord]:
    """A version's rollouts of a split by content (the same skill may hold two numbers), one per
    (task, trial): the latest scored one over an errored one (`store.scores.latest_per_trial`)."""
    sha = trainer.ctx.store.version(version).sha
    return latest_per_trial(r for r in rollouts if r.skill_sha == sha and r.split == split)


def _test_lift(seed: list[RolloutRecord], best: list[RolloutRecord], metric: str) -> PairedLift | None:
    return paired_lift(per_task(seed, metric), per_task(best, metric))


def closest_undecided(gated: list[Candidate]) -> Undecided | None:
    """Of the candidates that ended ahead after every validation pair without passing ("exhausted"),
    the one that needs the fewest pairs to pass at its rates: the edit a larger split could decide.
    On development split seed 2 a second MRPC rule was such a one (perf/suite.py ACCUMULATE_VAL)."""
    closest = None
    for c in gated:
        g = c.gate
        if g is None or g.stop != "exhausted" or c.version is None:
            continue
        need = pairs_to_decide(g.wins, g.losses, g.evaluated, g.alpha or 0.05)
        if need and (closest is None or need < closest.pairs_needed):
            closest = Undecided(version=c.version, origin=c.origin, wins=g.wins, losses=g.losses, pairs=g.evaluated,
                                pairs_needed=need)
    return closest


def build_summary(trainer: Trainer, benchmark: Benchmark, started: float) -> RunSummary:
    st, store, cfg = trainer.state, trainer.ctx.store, trainer.ctx.cfg
    versions = store.versions()
    roles = {"seed": 0, "best": st.best}
    every = trainer.ctx.store.rollouts()  # parsed once (it was once per role and split: 4 x 100,000 records)
    records = {(role, split): _records_for(trainer, v, split, every) for role, v in roles.items()
               for split in ("val", "test")}
    del every
    scores = {role: {split: split_score(records[(role, split)]) if records[(role, split)] else None
                     for split in ("val", "test")} for role in roles}
    lift = _test_lift(records[("seed", "test")], records[("best", "test")], cfg.gate.metric)
    candidates: dict[str, int] = {}
    decisions = val_rollouts = accepted_edits = rejected_edits = 0
    gated: list[Candidate] = []
    for n in range(1, st.step + 2):
        for c in store.read_candidates(n):
            candidates[c.status] = candidates.get(c.status, 0) + 1
            if c.gate is not None:
                gated.append(c)
                decisions += 1
                val_rollouts += c.gate.rollouts
                if c.status == "accepted":
                    accepted_edits += len(c.edits)
                else:
                    rejected_edits += len(c.edits)
    return RunSummary(
        run_id=store.run_id, status=st.status, benchmark=cfg.benchmark, harness=cfg.harness,
        target_model=cfg.target_model, optimizer_model=cfg.optimizer_model, data_hash=split_data_hash(benchmark),
        versions=roles, scores=scores, test_delta=lift.interval if lift else None, test_wins=lift.wins if lift else 0,
        test_losses=lift.losses if lift else 0,
        gate_decisions=decisions, val_rollouts=val_rollouts, candidates=candidates,
        candidates_accepted=sum(v.status == "accepted" for v in versions),
        candidates_rejected=sum(v.status in ("rejected", "screened-out") for v in versions),
        edits_accepted=accepted_edits, edits_rejected=rejected_edits,
        steps=st.step, stop_reason=st.stop_reason, closest_undecided=closest_undecided(gated),
        protected=st.protected or [],
        meter=trainer.ctx.runner.meter.snapshot(), started_at=started,
    )
