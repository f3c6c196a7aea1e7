"""The training loop (DESIGN.md section 6). A step reads top to bottom: rollouts of the incumbent on
a train batch, proposals (a population of candidates), preparation (apply, leakage check, token
cap), the screen on each candidate's own train tasks, and the sequential gate on validation for the
best screened ones. Consolidation at the end of each epoch; test once at the end (engine/training.py).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace

from skillopt.benchmarks.base import Benchmark, Split, Task
from skillopt.config import RunConfig
from skillopt.engine.candidates import Preparer, build_proposers, propose_all
from skillopt.engine.events import Emitter, Note, PhaseStarted, StepDone, VersionSaved
from skillopt.engine.gating import (GateSettings, Screened, Side, gate_test, noninferiority_gate, screen,
                                    sequential_gate)
from skillopt.engine.protected import check_regions
from skillopt.engine.rollouts import RolloutRunner
from skillopt.errors import BudgetExceeded, RunFailed
from skillopt.harness.base import discovers_skill
from skillopt.models.router import Models
from skillopt.models.spec import ModelSpec
from skillopt.optimizer.consolidate import consolidate
from skillopt.optimizer.facts import closed_labels
from skillopt.optimizer.schedule import make_schedule
from skillopt.optimizer.propose import SearchState
from skillopt.optimizer.reflect import quotes_tasks
from skillopt.optimizer.revise import REVISABLE, REVISION_DRAWS, revise
from skillopt.optimizer.types import ScoredRollout
from skillopt.record import Candidate, GateDecision, Reflection
from skillopt.skill import Skill
from skillopt.store.schema import (
    ConsolidationMetrics, RolloutRecord, RunState, SplitScore, StepBatch, StepMetrics, per_task,
)
from skillopt.store.run_store import RunStore
from skillopt.traces.trajectory import Trajectory, shows, trajectory


@dataclass
class Context:
    cfg: RunConfig
    store: RunStore
    models: Models
    benchmark: Benchmark
    runner: RolloutRunner
    optimizer: ModelSpec
    emit: Emitter
    deterministic: bool = False  # rollouts at temperature 0 with a seed (see run.deterministic_mode)


def split_score(records: list[RolloutRecord]) -> SplitScore:
    """Mean scores over the scored rollouts; errored ones (infrastructure) are counted apart."""
    return SplitScore.of(records)


class Trainer:
    def __init__(self, ctx: Context, state: RunState):
        self.ctx, self.state = ctx, state
        cfg = ctx.cfg
        self.tasks = {"train": list(ctx.benchmark.tasks("train")), "val": list(ctx.benchmark.tasks("val"))}
        self.val_order = list(self.tasks["val"])
        # the train split's expected answers: a closed label set is counted over them (`facts.label_facts`),
        # and its labels are the data's vocabulary, which the leakage check lets an edit name
        self.answers = [t.reference for t in self.tasks["train"]]
        self.labels = [label for label, _ in closed_labels(self.answers)]
        random.Random(cfg.splits.seed * 7919 + 17).shuffle(self.val_order)  # the gate's fixed order
        lr = cfg.train.learning_rate
        self.schedule = make_schedule(lr.schedule, lr.initial, lr.final)
        batches = -(-len(self.tasks["train"]) // max(1, cfg.train.batch_size))
        self.total_steps = max(1, batches * cfg.train.epochs)
        g = cfg.gate
        self.settings = GateSettings(
            test=gate_test(g, len(self.val_order) * g.trials),
            metric=g.metric, trials=g.trials, deterministic=ctx.deterministic, concurrency=cfg.train.concurrency,
            early_stop=g.early_stop, trigger_weight=g.trigger_weight)
        self.proposers = build_proposers(ctx)
        self.preparer = Preparer(ctx)

    # the loop ------------------------------------------------------------------------------------
    async def train(self) -> None:
        cfg, st = self.ctx.cfg, self.state
        if st.baseline_val is None:
            st.baseline_val = st.incumbent_val = await self.evaluate(0, "val", "baseline val")
            if st.baseline_val.n == 0:
                raise RunFailed(f"every rollout of the baseline errored ({st.baseline_val.errors} on val): "
                                f"{self.last_error()}")
            self.ctx.store.update_version(0, val_score=getattr(st.baseline_val, cfg.gate.metric))
            self.checkpoint()
        while st.epoch < cfg.train.epochs:
            batches = self.batches(st.epoch)
            while st.batch_index < len(batches):
                await self.step(batches[st.batch_index])
                st.batch_index += 1
                st.step += 1
                self.checkpoint()
            if cfg.train.consolidate and st.epoch not in st.consolidated_epochs:
                await self.consolidate_epoch()
                st.consolidated_epochs.append(st.epoch)
            st.epoch += 1
            st.batch_index = 0
            self.checkpoint()

    async def step(self, batch: list[Task]) -> None:
        cfg, store, n = self.ctx.cfg, self.ctx.store, self.state.step + 1
        inc, skill = self.state.incumbent, self.ctx.store.skill(self.state.incumbent)
        self.ctx.emit(PhaseStarted(f"step {n} rollouts", len(batch) * cfg.train.trials))
        records = await self.ctx.runner.run_many(skill, inc, batch, "train", cfg.train.trials,
                                                 retries=cfg.train.retry_errored)
        by_id = {t.id: t for t in batch}
        scored = [self.scored(r, by_id[r.task_id]) for r in records if not r.errored]
        store.write_batch(n, StepBatch(version=inc, tasks=[t.id for t in batch], train=split_score(records)))
        if cfg.train.check_protected and self.state.protected is None:
            await self.check_protected(n, skill, batch, records)
        lr = self.schedule(n - 1, self.total_steps)
        search = SearchState(step=n, version=inc, skill=skill, scored=scored, tasks=by_id,
                             rejected=list(self.state.ledger.rejected), max_edits=lr, pool=self.state.pool,
                             ledger=self.state.ledger, answers=self.answers)
        self.ctx.runner.meter.check()
        proposal = await propose_all(self.proposers, search, self.ctx.emit)
        candidates = proposal.candidates
        store.write_reflections(n, proposal.reflections)
        rejected = [e.text for e in search.rejected]
        for c in candidates:
            self.preparer.prepare(c, skill, list(by_id.values()), self.labels, rejected)
        incumbent_train = {r.task_id: r for r in records}
        screened: dict[str, Screened] = {}
        for c in candidates:
            if c.status == "proposed":
                if (done := await self.screen(c, incumbent_train, by_id)) is not None:
                    screened[c.id] = done
        revised, revisions = await self.revise(search, candidates, screened, incumbent_train)
        candidates += revised
        if revisions:
            store.write_reflections(n, [*proposal.reflections, *revisions])
        decision = await self.gate_candidates(n, skill, candidates)
        store.write_candidates(n, candidates)
        self.finish_step(n, lr, records, candidates, decision)

    async def check_protected(self, n: int, skill: Skill, batch: list[Task], records: list[RolloutRecord]) -> None:
        """Each protected region left out once, on the first batch with a failure (engine/protected.py)."""
        st, store = self.state, self.ctx.store
        incumbent = {r.task_id: r for r in records if not r.errored}
        spans = skill.protected_spans()
        if spans and not any(r.hard < 1.0 for r in incumbent.values()):
            return  # nothing failed: nothing a region could be the cause of, yet
        self.ctx.emit(PhaseStarted("protected check", len(batch) * len(spans)))

        def add(variant: Skill) -> int:
            return store.add_version(variant, parent=st.incumbent, origin=f"step {n} protected check",
                                     status="diagnostic", step=n).version

        st.protected = await check_regions(self.ctx.runner, skill, add, batch, incumbent, self.ctx.cfg.gate.metric, n)
        for check in st.protected:
            self.ctx.emit(Note(check.verdict()))

    async def screen(self, c: Candidate, incumbent: dict[str, RolloutRecord],
                     tasks: dict[str, Task]) -> Screened | None:
        """The candidate's screen, with the rollouts it compared (None: screens are off)."""
        if not self.ctx.cfg.train.screen:
            return None
        source = [tasks[t] for t in dict.fromkeys(c.sources) if t in tasks]
        self.ctx.emit(PhaseStarted(f"screen {c.id}", len(source)))

        def aimed(r: RolloutRecord) -> bool:  # the rollout shows the failure the candidate's edits aim at
            return shows(c.aim, stored_trajectory(self.ctx.store, r, tasks[r.task_id]))

        screened = await screen(self.ctx.runner, Side(c.stored_version, self.ctx.store.skill(c.stored_version)),
                                source, incumbent, self.ctx.cfg.gate.metric,
                                trigger_weight=self.ctx.cfg.gate.trigger_weight, aimed=aimed if c.aim else None)
        c.screen = screened.result
        if not c.screen.passed:
            c.status = "screened-out"
            c.note = f"screen: {sum(c.screen.candidate):g} vs {sum(c.screen.incumbent):g} on {len(c.screen.tasks)} train tasks"
            if c.aim:
                c.note += f"; {c.aim} in {c.screen.aimed_incumbent} -> {c.screen.aimed_candidate}"
            v = self.ctx.store.update_version(c.stored_version, status="screened-out")
            self.state.ledger.record(c.edits, accepted=False)
            self.ctx.emit(VersionSaved(v, None))
        return screened

    async def revise(self, search: SearchState, candidates: list[Candidate], screened: dict[str, Screened],
                     incumbent: dict[str, RolloutRecord]) -> tuple[list[Candidate], list[Reflection]]:
        """A second draw of up to `train.revisions_per_step` edits their screen turned down, the optimizer
        shown what the target wrote under each (optimizer/revise.py); those that came closest first. Each
        is a candidate of its own (origin `revision`) on the same tasks, prepared and screened as usual."""
        tried = [c for c in candidates
                 if c.status == "screened-out" and c.origin in REVISABLE and c.id in screened and screened[c.id].pairs]
        tried.sort(key=lambda c: (-c.screen.gain, -c.screen.changed) if c.screen else (0.0, 0))  # closest first
        tried = tried[: self.ctx.cfg.train.revisions_per_step]
        if not tried:
            return [], []
        self.ctx.runner.meter.check()
        self.ctx.emit(PhaseStarted("revisions", len(tried)))
        out: list[Candidate] = []
        reflections: list[Reflection] = []
        for c in tried:
            drawn, calls = await self.revise_one(search, c, screened[c.id], incumbent)
            out += drawn
            reflections += calls
        return out, reflections

    async def revise_one(self, search: SearchState, c: Candidate, screened: Screened,
                         incumbent: dict[str, RolloutRecord]) -> tuple[list[Candidate], list[Reflection]]:
        """The revision of `c`, drawn again (warmer, another seed) when a draw is not fit to try: the 1.5B's
        first draws on Jeopardy (development split seed 2) wrote the tried edit again, and the tried rule
        with a task's words added. Every draw is recorded."""
        cfg = self.ctx.cfg
        rejected = [e.text for e in self.state.ledger.rejected if not quotes_tasks(e.text)]
        shown = [(self.scored(b, search.tasks[b.task_id]), self.scored(a, search.tasks[a.task_id]))
                 for a, b in screened.pairs]
        drawn: list[Candidate] = []
        calls: list[Reflection] = []
        for draw in range(REVISION_DRAWS):
            temperature = cfg.models.optimizer_temperature
            if draw:
                temperature = max(temperature or 0.0, 0.8)
            r = await revise(self.ctx.models, self.ctx.optimizer, search.skill, c.edits, shown, screened.same, rejected,
                             search.max_edits, cfg.models.optimizer_max_tokens, temperature,
                             labels=self.labels if cfg.train.label_facts else (), seed=100 * draw or None)
            calls.append(r)
            if r.transient:
                break
            if not r.edits:
                continue
            new = Candidate(id=f"{c.id}-r{draw + 1}", step=search.step, origin="revision", parent=search.version,
                            edits=r.edits, rationale=f"revises {c.id}: {r.analysis}", sources=list(c.screen.tasks))
            # the edit it revises was tried and rejected: the same said again is nothing new
            self.preparer.prepare(new, search.skill, list(search.tasks.values()), self.labels,
                                  [*rejected, *(e.text for e in c.edits)])
            drawn.append(new)
            if new.status == "proposed":
                await self.screen(new, incumbent, search.tasks)
                break
        return drawn, calls

    async def gate_candidates(self, n: int, skill: Skill, candidates: list[Candidate]) -> GateDecision | None:
        ready = [c for c in candidates if c.status == "proposed"]
        # those that scored more on their screen first (most first), then ties that removed most of the failure
        # they aim at, then ties that changed the replies
        ready.sort(key=lambda c: (-(c.screen.gain if c.screen else 0.0), -(c.screen.removed if c.screen else 0),
                                  -(c.screen.changed if c.screen else 0), len(c.edits), c.id))
        # the best `gate.per_step` are gated in turn until one is accepted; they share the step's alpha
        share = min(self.ctx.cfg.gate.per_step, len(ready))
        decision = None
        for i, c in enumerate(ready):
            if i >= share or (decision is not None and decision.accepted):
                c.status, c.note = "not-gated", c.note or "passed the screen"
                continue
            decision = await self.gate(c, skill, share)
            self.ctx.store.write_gate(n, decision)
        return decision

    async def gate(self, c: Candidate, inc_skill: Skill, share: int = 1) -> GateDecision:
        """The sequential gate of `c` against the incumbent, at alpha / `share` (the step gates `share`)."""
        st, store = self.state, self.ctx.store
        version = c.stored_version
        cand_skill = store.skill(version)
        st.decisions += 1
        settings = self.settings if share == 1 else replace(
            self.settings, test=gate_test(self.ctx.cfg.gate, self.settings.test.planned, share))
        self.ctx.emit(PhaseStarted(f"gate v{version:03d}", 2 * settings.test.planned))  # two per pair
        decision = await sequential_gate(self.ctx.runner, Side(st.incumbent, inc_skill), Side(version, cand_skill),
                                         self.val_order, settings, st.decisions)
        c.gate, c.status = decision, "accepted" if decision.accepted else "rejected"
        self.ctx.runner.meter.check()
        v = store.update_version(version, status=c.status, val_score=decision.candidate_score)
        st.pool.add(version, st.incumbent, c.edits, decision)
        st.ledger.record(c.edits, decision.accepted)
        if decision.accepted:
            st.incumbent = st.best = version
            st.incumbent_val = SplitScore(hard=decision.candidate_score, soft=decision.candidate_score,
                                          n=decision.evaluated)
        self.ctx.emit(VersionSaved(v, decision))
        return decision

    async def consolidate_epoch(self) -> None:
        cfg, store, st = self.ctx.cfg, self.ctx.store, self.state
        skill = store.skill(st.incumbent)
        if st.incumbent in st.consolidated:  # the same skill rewritten again: an optimizer call for a retry
            note = f"the skill (v{st.incumbent:03d}) has not changed since it was last consolidated"
            self.ctx.emit(Note(f"consolidate epoch {st.epoch + 1}: {note}"))
            store.append_metric(ConsolidationMetrics(consolidate_epoch=st.epoch + 1, decision="none", reason=note))
            return
        st.consolidated.append(st.incumbent)
        self.ctx.runner.meter.check()
        cand, note = await consolidate(self.ctx.models, self.ctx.optimizer, skill, cfg.train.skill_token_cap,
                                       cfg.models.optimizer_max_tokens)
        self.ctx.emit(Note(f"consolidate epoch {st.epoch + 1}: {note}"))
        if cand is None:  # kept, so that a run's files say why an epoch's consolidation made no version
            store.append_metric(ConsolidationMetrics(consolidate_epoch=st.epoch + 1, decision="none", reason=note))
            return
        v = store.add_version(cand, parent=st.incumbent, origin=f"consolidate epoch {st.epoch + 1}")
        st.decisions += 1
        self.ctx.emit(PhaseStarted(f"consolidation v{v.version:03d}", 2 * self.settings.test.planned))
        decision = await noninferiority_gate(self.ctx.runner, Side(st.incumbent, skill), Side(v.version, cand),
                                             self.val_order, self.settings, st.decisions,
                                             cfg.gate.noninferiority_margin)
        store.write_consolidation(st.epoch + 1, decision)
        status = "accepted" if decision.accepted else "rejected"
        saved = store.update_version(v.version, status=status, val_score=decision.candidate_score)
        if decision.accepted:
            st.incumbent = st.best = v.version
            st.consolidated.append(v.version)  # a consolidation's own text is not rewritten again
        self.ctx.emit(VersionSaved(saved, decision))
        store.append_metric(ConsolidationMetrics(
            consolidate_epoch=st.epoch + 1, version=v.version, decision="accept" if decision.accepted else "reject",
            reason=decision.reason, val_rollouts=decision.rollouts))

    # helpers ---------------------------------------------------------------------------------------
    def batches(self, epoch: int) -> list[list[Task]]:
        cfg = self.ctx.cfg
        order = list(self.tasks["train"])
        random.Random(cfg.splits.seed * 1000 + epoch).shuffle(order)
        size = max(1, cfg.train.batch_size)
        return [order[i : i + size] for i in range(0, len(order), size)]

    def scored(self, r: RolloutRecord, task: Task) -> ScoredRollout:
        agent = discovers_skill(self.ctx.runner.harness)
        return scored_rollout(r, task, stored_trajectory(self.ctx.store, r, task) if agent else None)

    async def evaluate(self, version: int, split: Split, label: str) -> SplitScore:
        return split_score(await self.evaluate_records(version, split, label))

    async def evaluate_records(self, version: int, split: Split, label: str) -> list[RolloutRecord]:
        cfg = self.ctx.cfg
        tasks = self.val_order if split == "val" else list(self.ctx.benchmark.tasks(split))
        self.ctx.emit(PhaseStarted(label, len(tasks) * cfg.gate.trials))
        return await self.ctx.runner.run_many(self.ctx.store.skill(version), version, tasks, split, cfg.gate.trials,
                                              retries=cfg.train.retry_errored)

    def last_error(self) -> str:
        return (self.ctx.runner.last_error or "no error message")[:300]

    def finish_step(self, n: int, lr: int, records: list[RolloutRecord], candidates: list[Candidate],
                    decision: GateDecision | None) -> None:
        snap = self.ctx.runner.meter.snapshot()
        gated = [c for c in candidates if c.gate is not None]
        train = split_score(records)
        metrics = StepMetrics(
            step=n, epoch=self.state.epoch, version=self.state.incumbent, learning_rate=lr,
            train_hard=train.hard, train_errors=train.errors,
            candidates=len(candidates), proposed=sum(len(c.edits) for c in candidates),
            selected=len(gated), applied=sum(c.version is not None for c in candidates),
            leaked=sum(c.status == "leaked" for c in candidates),
            screened_out=sum(c.status == "screened-out" for c in candidates),
            screen_rollouts=sum(c.screen.rollouts for c in candidates if c.screen),
            val_rollouts=sum(c.gate.rollouts for c in gated),
            decision=None if decision is None else ("accept" if decision.accepted else "reject"),
            val=getattr(self.state.incumbent_val, self.ctx.cfg.gate.metric, None),
            tokens=snap.tokens, cost_usd=round(snap.known_cost_usd, 6), cost_unknown=snap.cost_unknown,
            rollouts=snap.rollouts)
        self.ctx.emit(StepDone(n, self.state.epoch, metrics))

    def checkpoint(self) -> None:
        self.state.meter = self.ctx.runner.meter.snapshot()
        self.ctx.store.write_state(self.state)


__all__ = ["BudgetExceeded", "Context", "Trainer", "per_task", "split_score"]


def scored_rollout(r: RolloutRecord, task: Task, traj: Trajectory | None = None) -> ScoredRollout:
    """A stored rollout as the proposers read it (the prompt's head, the output's tail)."""
    return ScoredRollout(task_id=r.task_id, prompt=task.prompt[:1500], reference=task.reference,
                         output=r.output[-1500:], hard=r.hard, soft=r.soft, feedback=r.feedback,
                         summary=r.summary, error=r.error, skill_used=r.skill_used, trajectory=traj)


def stored_trajectory(store: RunStore, r: RolloutRecord, task: Task) -> Trajectory | None:
    """What an agent rollout did, from its stored trace (for the agent-aware proposers)."""
    return trajectory(store.read_trace(r.trace_file), r.error, r.patch, coding=task.kind != "qa")
