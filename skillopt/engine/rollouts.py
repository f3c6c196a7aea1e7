"""Rollout scheduling: async with bounded concurrency, cached by key, budgeted, persisted at once.

The hot path keeps the event loop free: workspace preparation (git, copies) runs in worker threads,
harnesses that never touch a folder get none, and every finished rollout is handed to the run's
grouped writer (`store.writer`: many rollouts per write and per fsync, in its own thread)."""

from __future__ import annotations

import asyncio
import heapq
import os
import shutil
from collections.abc import Sequence
from pathlib import Path

from skillopt.benchmarks.base import Benchmark, Score, Task
from skillopt.engine.events import Emitter, Note, RolloutDone
from skillopt.engine.settings import Settings
from skillopt.harness.process import pid_alive
from skillopt.harness.base import Harness, Limits, PlacesSkill, PromptOnly, Rollout
from skillopt.harness.workspace import workspace
from skillopt.models.meter import Meter
from skillopt.models.spec import ModelSpec
from skillopt.skill import Skill
from skillopt.store.schema import RolloutRecord
from skillopt.store.redact import redact
from skillopt.store.run import RunStore
from skillopt.traces.summary import summarize
from skillopt.traces.trigger import skill_loaded


class Lanes:
    """Workspace names, one per rollout running at once, handed out lowest first and taken again.

    An agent writes its working directory into its system prompt (Claude Code does); on a fixed path
    the next rollout sends the same prompt prefix, and the model server's prefix cache (llama.cpp,
    vLLM, the providers' prompt caching) carries over instead of ending at the path. A lane whose
    agent may still be running (the outer timeout fired) is retired, never reused.
    """

    def __init__(self, work: Path, pid: int):
        self.work, self.pid = work, pid  # the pid in the names: two processes on one run never share one
        self._free: list[int] = []
        self._next = 0

    def take(self) -> int:
        if self._free:
            return heapq.heappop(self._free)
        self._next += 1
        return self._next - 1

    def give(self, lane: int) -> None:
        heapq.heappush(self._free, lane)

    def name(self, lane: int) -> str:
        return f"lane-{self.pid}-{lane}"

    def clear_dead(self) -> None:
        """Remove the lanes a process that no longer runs left behind (a crash, a kill -9)."""
        for folder in self.work.glob("lane-*-*"):
            pid = folder.name.split("-")[1]
            if pid.isdigit() and not pid_alive(int(pid)):
                shutil.rmtree(folder, ignore_errors=True)


class RolloutRunner:
    """Runs (skill, task, trial) rollouts; each finished rollout is appended to rollouts.jsonl
    (through the run's grouped writer) before it counts as done, so an interrupted run never pays
    for it again."""

    grace_s = 30.0  # past the rollout timeout, before a harness that did not return is given up

    def __init__(self, store: RunStore, harness: Harness, benchmark: Benchmark, target: ModelSpec,
                 limits: Limits, meter: Meter, emit: Emitter, concurrency: int, settings: Settings,
                 summary_tokens: int = 400, capture=None):
        self.store, self.harness, self.benchmark = store, harness, benchmark
        self.capture = capture  # traces.tokens.TokenCapture for vLLM targets, else None
        self.target, self.limits, self.meter, self.emit = target, limits, meter, emit
        self.settings = settings  # the settings that matter: they make the cache key
        self.summary_tokens = summary_tokens
        self.concurrency = max(1, concurrency)
        self._sem = asyncio.Semaphore(self.concurrency)
        self._lanes = Lanes(store.root / "work", os.getpid())
        # a harness that never reads its folder gets none (the benchmark scores with this unmade path)
        self._folderless = isinstance(harness, PromptOnly) and harness.prompt_only
        if not self._folderless:
            self._lanes.clear_dead()
        # errored rollouts (infrastructure failures) are on disk as spent calls, never as results
        self.cache: dict[str, RolloutRecord] = {r.key: r for r in store.rollouts() if not r.errored}
        self.cache_hits = 0
        self.executed = 0  # rollouts run by this process (cache hits excluded)
        self.last_error: str | None = None  # of the last errored rollout
        self._inflight: dict[str, asyncio.Future] = {}  # key -> its record, while a rollout runs

    async def run_many(self, skill: Skill, version: int, tasks: Sequence[Task], split: str,
                       trials: int = 1, retries: int = 0, first_trial: int = 0) -> list[RolloutRecord]:
        """Every (task, trial) rollout, in order. Errored ones (infrastructure) are run again, up to
        `retries` more times, after the others; what still errored comes back errored."""
        records = await self._gather([(t, first_trial + k) for t in tasks for k in range(trials)], skill, version, split)
        for _ in range(retries):
            again = [i for i, r in enumerate(records) if r.errored]
            if not again:
                break
            redo = await self._gather([(tasks[i // trials], first_trial + i % trials) for i in again], skill, version, split)
            for i, r in zip(again, redo):
                records[i] = r
        return records

    async def _gather(self, jobs: list[tuple[Task, int]], skill: Skill, version: int, split: str) -> list[RolloutRecord]:
        """The jobs' records in order. At most `concurrency` rollouts run at once, from a fixed pool of
        workers (not one coroutine per rollout: a 100,000-task split stays small)."""
        sha = skill.sha  # once per call, not once per rollout
        results: list[RolloutRecord | None] = [None] * len(jobs)
        todo = iter(range(len(jobs)))

        async def worker() -> None:
            for i in todo:
                task, trial = jobs[i]
                results[i] = await self.run_one(skill, version, task, split, trial, sha)

        # In-flight rollouts finish and are saved even when the budget runs out meanwhile.
        outcomes = await asyncio.gather(*[worker() for _ in range(min(self.concurrency, len(jobs)))],
                                        return_exceptions=True)
        for r in outcomes:
            if isinstance(r, BaseException):
                raise r
        return results  # type: ignore[return-value]

    async def run_one(self, skill: Skill, version: int, task: Task, split: str, trial: int,
                      skill_sha: str | None = None) -> RolloutRecord:
        key = self.settings.rollout_key(skill_sha or skill.sha, task, trial)
        if key in self.cache:
            self.cache_hits += 1
            rec = self.cache[key]
            self.emit(RolloutDone(rec, cached=True))
            return rec
        if key in self._inflight:  # a twin job (same key) is running: share its result
            return await asyncio.shield(self._inflight[key])
        done = self._inflight[key] = asyncio.get_running_loop().create_future()
        try:
            async with self._sem:
                self.meter.check()  # a safe point: nothing is in flight for this rollout yet
                self.meter.count_rollout()
                self.executed += 1
                rec, rollout = await self._execute(skill, version, task, split, trial, key)
            # saved (grouped with other rollouts, off the event loop) before it counts as done
            await self.store.save_rollout(rec, rollout.trace, rollout.raw_log)
        except BaseException as e:
            if isinstance(e, asyncio.CancelledError):
                done.cancel()
            else:
                done.set_exception(e)
                done.exception()  # retrieved: a twin may never await it
            raise
        finally:
            del self._inflight[key]
        if not rec.errored:  # an infrastructure failure is retried when asked for again
            self.cache[key] = rec
        else:
            self.last_error = rec.error
        done.set_result(rec)
        self.emit(RolloutDone(rec, cached=False))
        return rec

    async def _execute(self, skill: Skill, version: int, task: Task, split: str, trial: int,
                       key: str) -> tuple[RolloutRecord, Rollout]:
        target = self.target
        if self.capture is not None:  # route this rollout through its own recording-proxy URL
            target = await asyncio.to_thread(self.capture.target_for, self.target, key)
        if self._folderless:
            ws = self._lanes.work / "none"
            rollout, _ = await self._guarded_run(task, skill, ws, target)
            score = await self._score(task, rollout, ws)
        else:
            rollout, score = await self._in_lane(task, skill, target)
        if self.capture is not None:
            res = await self.capture.collect(key, task.id, reward=score.soft, version=version,
                                             resolved=score.hard >= 1, trial=trial, split=split,
                                             repo=str(task.metadata.get("repo") or self.benchmark.name))
            if res.note:
                self.emit(Note(res.note))
        rec = RolloutRecord(
            key=key, task_id=task.id, split=split, version=version, skill_sha=skill.sha,
            harness=self.harness.name, model=str(self.target), trial=trial,
            hard=score.hard, soft=score.soft, feedback=score.feedback, output=rollout.output.text,
            patch=rollout.output.patch, summary=summarize(rollout.trace, rollout.error, self.summary_tokens),
            input_tokens=rollout.usage.input_tokens, output_tokens=rollout.usage.output_tokens,
            cost_usd=rollout.usage.cost_usd, duration_s=round(rollout.duration_s, 3), error=rollout.error,
            error_kind=rollout.error_kind, trace_file=self.store.trace_path(task.id, key),
            skill_used=None if rollout.error_kind == "infra" else skill_loaded(rollout.trace),
        )
        # a key echoed back reaches neither the optimizer nor a file
        return RolloutRecord.model_validate(redact(rec)), rollout

    async def _score(self, task: Task, rollout: Rollout, ws: Path) -> Score:
        if rollout.error_kind == "infra":  # no answer to grade: not a score, never graded
            return Score(hard=0.0, soft=0.0, feedback=f"not scored: {rollout.error}")
        return await self.benchmark.score(task, rollout.output, ws)

    async def _in_lane(self, task: Task, skill: Skill, target: ModelSpec) -> tuple[Rollout, Score]:
        """Run and score in a workspace lane; its preparation and cleanup (git, copies) in a thread."""
        skill_dir = self.harness.skill_dir if isinstance(self.harness, PlacesSkill) else None
        lane, reusable = self._lanes.take(), False
        try:
            folder = workspace(task, skill, self.benchmark, skill_dir, root=self._lanes.work,
                               name=self._lanes.name(lane))
            ws = await asyncio.to_thread(folder.__enter__)
            try:
                rollout, reusable = await self._guarded_run(task, skill, ws, target)
                score = await self._score(task, rollout, ws)
            finally:
                await asyncio.to_thread(folder.__exit__, None, None, None)
        finally:
            if reusable:
                self._lanes.give(lane)
        return rollout, score

    async def _guarded_run(self, task: Task, skill: Skill, ws: Path, target: ModelSpec) -> tuple[Rollout, bool]:
        """The harness contract says it never raises for agent failure; enforce the timeout too.
        Also says whether the harness returned (else its agent may still be at work in `ws`)."""
        try:
            return await asyncio.wait_for(
                self.harness.run(task, skill, ws, target, self.limits), self.limits.timeout_s + self.grace_s), True
        except asyncio.TimeoutError:
            return Rollout(task_id=task.id, error=f"rollout timed out after {self.limits.timeout_s:.0f}s",
                           error_kind="agent"), False
