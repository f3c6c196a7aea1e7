"""The training loop (DESIGN.md section 6). Reads top to bottom: rollouts, score, reflect,
aggregate, select, apply, gate; consolidate at the end of each epoch; test once at the end."""

from __future__ import annotations

import asyncio
import math
import random
from dataclasses import dataclass

from skillopt.benchmarks.base import Benchmark, Task
from skillopt.config import RunConfig
from skillopt.edits import Edit, apply_edits
from skillopt.engine.events import Emitter, Note, PhaseStarted, StepDone, VersionSaved
from skillopt.engine.rollouts import RolloutRunner
from skillopt.errors import BudgetExceeded
from skillopt.models.router import Models
from skillopt.models.spec import ModelSpec
from skillopt.optimizer import PairedGate, aggregate, consolidate, make_minibatches, make_schedule, reflect, select
from skillopt.optimizer.types import GateDecision, ScoredRollout
from skillopt.skill import Skill
from skillopt.store.records import RolloutRecord, RunState, SplitScore
from skillopt.store.run import RunStore


@dataclass
class Context:
    cfg: RunConfig
    store: RunStore
    models: Models
    benchmark: Benchmark
    runner: RolloutRunner
    optimizer: ModelSpec
    emit: Emitter


def split_score(records: list[RolloutRecord]) -> SplitScore:
    n = max(1, len(records))
    return SplitScore(hard=round(sum(r.hard for r in records) / n, 6),
                      soft=round(sum(r.soft for r in records) / n, 6), n=len(records))


def per_task(records: list[RolloutRecord], metric: str) -> dict[str, float]:
    """Mean score per task over trials."""
    sums: dict[str, list[float]] = {}
    for r in records:
        sums.setdefault(r.task_id, []).append(getattr(r, metric))
    return {t: sum(v) / len(v) for t, v in sums.items()}


class Trainer:
    def __init__(self, ctx: Context, state: RunState):
        self.ctx, self.state = ctx, state
        cfg = ctx.cfg
        self.tasks = {s: list(ctx.benchmark.tasks(s)) for s in ("train", "val")}
        lr = cfg.train.learning_rate
        self.schedule = make_schedule(lr.schedule, lr.initial, lr.final)
        batches = math.ceil(len(self.tasks["train"]) / max(1, cfg.train.batch_size))
        self.total_steps = max(1, batches * cfg.train.epochs)

    # the loop ------------------------------------------------------------------------------------
    async def train(self) -> None:
        cfg, st = self.ctx.cfg, self.state
        if st.baseline_val is None:
            st.baseline_val = st.incumbent_val = await self.evaluate(0, "val", "baseline val")
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
        inc = self.state.incumbent
        skill = store.skill(inc)
        self.ctx.emit(PhaseStarted(f"step {n} rollouts", len(batch) * cfg.train.trials))
        records = await self.ctx.runner.run_many(skill, inc, batch, "train", cfg.train.trials)
        scored = [self.scored(r, t) for r, t in zip(records, [t for t in batch for _ in range(cfg.train.trials)])]
        store.write_step(n, "batch.json", {"version": inc, "tasks": [t.id for t in batch],
                                           "train": split_score(records).model_dump()})
        edits, proposed, reflections = await self.propose(skill, scored)
        lr = self.schedule(n - 1, self.total_steps)
        selected = select(edits, lr)
        store.write_step(n, "reflections.json", reflections)
        store.write_step(n, "proposed.json", proposed)
        store.write_step(n, "selected.json", selected)
        metrics = {"step": n, "epoch": self.state.epoch, "version": inc, "learning_rate": lr,
                   "train_hard": split_score(records).hard, "proposed": len(proposed), "selected": len(selected)}
        decision = await self.try_edits(n, skill, selected, metrics) if selected else None
        metrics["decision"] = None if decision is None else ("accept" if decision.accepted else "reject")
        metrics["val"] = getattr(self.state.incumbent_val, cfg.gate.metric, None)
        self.finish_step(n, metrics)

    async def try_edits(self, n: int, skill: Skill, selected: list[Edit], metrics: dict) -> GateDecision | None:
        cfg, store = self.ctx.cfg, self.ctx.store
        result = apply_edits(skill, selected, token_cap=cfg.train.skill_token_cap)
        store.write_step(n, "applied.json", result.reports)
        metrics["applied"] = len(result.applied)
        if not result.applied:
            self.ctx.emit(Note(f"step {n}: no edit applied ({', '.join(r.status for r in result.reports)})"))
            return None
        if result.over_cap:
            self.ctx.emit(Note(f"step {n}: candidate has {result.tokens} tokens, over the cap of "
                               f"{cfg.train.skill_token_cap}; rejected without evaluation"))
            self.reject(result.applied)
            return None
        cand = store.add_version(result.skill, parent=self.state.incumbent, origin=f"step {n}", step=n)
        store.write_step(n, "candidate.md", result.skill.render())
        decision = await self.gate(cand.version, result.skill)
        store.write_step(n, "gate.json", decision)
        if not decision.accepted:
            self.reject(result.applied)
        return decision

    async def propose(self, skill: Skill, scored: list[ScoredRollout]):
        cfg = self.ctx.cfg
        batches = make_minibatches(scored, cfg.train.minibatch_size, cfg.train.include_successes,
                                   cfg.train.max_reflections_per_step)
        rejected = [Edit.model_validate(e) for e in self.state.rejected_buffer]
        lr_max = max(cfg.train.learning_rate.initial, cfg.train.learning_rate.final)
        self.ctx.runner.meter.check()
        reflections = await asyncio.gather(*[
            reflect(self.ctx.models, self.ctx.optimizer, skill, fails, wins, rejected, lr_max,
                    cfg.models.optimizer_max_tokens, cfg.models.optimizer_temperature)
            for fails, wins in batches
        ])
        for r in reflections:
            if r.error:
                self.ctx.emit(Note(f"reflection failed (recorded): {r.error}"))
        proposed = [e for r in reflections for e in r.edits]
        return aggregate(proposed, rejected), proposed, list(reflections)

    async def gate(self, version: int, skill: Skill) -> GateDecision:
        """Paired comparison on val, evaluated in chunks so it can stop once the candidate cannot win."""
        cfg, runner, metric = self.ctx.cfg, self.ctx.runner, self.ctx.cfg.gate.metric
        inc_records = await runner.run_many(self.ctx.store.skill(self.state.incumbent), self.state.incumbent,
                                            self.tasks["val"], "val", cfg.train.trials)
        gate = PairedGate(per_task(inc_records, metric), metric, cfg.gate.min_delta)
        self.ctx.emit(PhaseStarted(f"gate v{version:03d}", len(self.tasks["val"]) * cfg.train.trials))
        cand_records: list[RolloutRecord] = []
        chunk = max(1, cfg.train.concurrency)
        for i in range(0, len(self.tasks["val"]), chunk):
            part = await runner.run_many(skill, version, self.tasks["val"][i : i + chunk], "val", cfg.train.trials)
            cand_records += part
            for task_id, s in per_task(part, metric).items():
                gate.add(task_id, s)
            if cfg.gate.early_stop and not gate.can_still_win():
                break
        decision = gate.decide(version, self.state.incumbent)
        score = split_score(cand_records)
        status = "accepted" if decision.accepted else "rejected"
        v = self.ctx.store.update_version(version, status=status, val_score=decision.candidate_score)
        if decision.accepted:
            self.state.incumbent = self.state.best = version
            self.state.incumbent_val = score
        self.ctx.emit(VersionSaved(v, decision))
        return decision

    async def consolidate_epoch(self) -> None:
        cfg, store = self.ctx.cfg, self.ctx.store
        skill = store.skill(self.state.incumbent)
        self.ctx.runner.meter.check()
        cand, note = await consolidate(self.ctx.models, self.ctx.optimizer, skill, cfg.train.skill_token_cap,
                                       cfg.models.optimizer_max_tokens)
        self.ctx.emit(Note(f"consolidate epoch {self.state.epoch + 1}: {note}"))
        if cand is None:
            return
        v = store.add_version(cand, parent=self.state.incumbent, origin=f"consolidate epoch {self.state.epoch + 1}")
        decision = await self.gate(v.version, cand)
        store.append_metric({"consolidate_epoch": self.state.epoch + 1, "version": v.version,
                             "decision": "accept" if decision.accepted else "reject", "reason": decision.reason})

    # helpers ---------------------------------------------------------------------------------------
    def batches(self, epoch: int) -> list[list[Task]]:
        cfg = self.ctx.cfg
        order = list(self.tasks["train"])
        random.Random(cfg.splits.seed * 1000 + epoch).shuffle(order)
        size = max(1, cfg.train.batch_size)
        return [order[i : i + size] for i in range(0, len(order), size)]

    def scored(self, r: RolloutRecord, task: Task) -> ScoredRollout:
        return ScoredRollout(task_id=r.task_id, prompt=task.prompt[:1500], reference=task.reference,
                             output=r.output[-1500:], hard=r.hard, soft=r.soft, feedback=r.feedback,
                             summary=r.summary, error=r.error)

    def reject(self, edits: list[Edit]) -> None:
        self.state.rejected_buffer = (self.state.rejected_buffer + [e.model_dump() for e in edits])[-30:]

    async def evaluate(self, version: int, split: str, label: str) -> SplitScore:
        tasks = list(self.ctx.benchmark.tasks(split))  # type: ignore[arg-type]
        self.ctx.emit(PhaseStarted(label, len(tasks) * self.ctx.cfg.train.trials))
        records = await self.ctx.runner.run_many(self.ctx.store.skill(version), version, tasks, split,
                                                 self.ctx.cfg.train.trials)
        return split_score(records)

    def finish_step(self, n: int, metrics: dict) -> None:
        snap = self.ctx.runner.meter.snapshot()
        metrics.update({"tokens": snap.tokens, "cost_usd": round(snap.known_cost_usd, 6),
                        "cost_unknown": snap.cost_unknown, "rollouts": snap.rollouts})
        self.ctx.emit(StepDone(n, self.state.epoch, metrics))

    def checkpoint(self) -> None:
        self.state.meter = self.ctx.runner.meter.snapshot()
        self.ctx.store.write_state(self.state)


__all__ = ["BudgetExceeded", "Context", "Trainer", "per_task", "split_score"]
