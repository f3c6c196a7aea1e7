"""Rollout scheduling: async with bounded concurrency, cached by key, budgeted, persisted at once.

The hot path keeps the event loop free: workspace preparation (git, copies) runs in worker threads,
harnesses that never touch a folder get none, and every finished rollout is handed to the run's
grouped writer (`store.writer`: many rollouts per write and per fsync, in its own thread)."""

from __future__ import annotations

import asyncio
import os
from collections import deque
from collections.abc import Sequence

from skillopt.benchmarks.base import Benchmark, Task
from skillopt.errors import ScorerFailed
from skillopt.engine.events import Emitter, Note, RolloutDone
from skillopt.engine.executor import Executor, LocalExecutor, RolloutJob
from skillopt.engine.rollout_cache import RolloutCache
from skillopt.engine.settings import Settings
from skillopt.harness.base import Harness, Limits, Rollout
from skillopt.models.meter import Meter
from skillopt.models.spec import ModelSpec
from skillopt.models.types import CallRecord
from skillopt.skill import Skill
from skillopt.store.schema import RolloutRecord
from skillopt.io.redact import redact
from skillopt.store.run_store import RunStore
from skillopt.traces.summary import summarize
from skillopt.traces.trigger import skill_loaded


class Slots:
    """How many rollouts are in flight at once: at most `ceiling` (`--concurrency`), and at most what
    the executor can run at once (on a Ray cluster, its rollout slots: nodes join and leave, so it
    is resized). An async context manager, like a semaphore whose size can change; waiters are
    served in order."""

    def __init__(self, ceiling: int, available: int):
        self.ceiling = max(1, ceiling)
        self.size = self._bound(available)
        self.used = 0
        self._waiters: deque[asyncio.Future] = deque()

    def _bound(self, available: int) -> int:
        return max(1, min(self.ceiling, available))

    def resize(self, available: int) -> None:
        self.size = self._bound(available)
        self._wake()

    def _wake(self) -> None:
        while self._waiters and self.used < self.size:
            fut = self._waiters.popleft()
            if not fut.done():
                self.used += 1
                fut.set_result(None)

    async def __aenter__(self) -> None:
        if self.used < self.size and not self._waiters:
            self.used += 1
            return
        fut = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():  # handed a slot, then cancelled: give it back
                self.used -= 1
                self._wake()
            raise

    async def __aexit__(self, *exc: object) -> None:
        self.used -= 1
        self._wake()


class RolloutRunner:
    """Runs (skill, task, trial) rollouts; each finished rollout is appended to rollouts.jsonl
    (through the run's grouped writer) before it counts as done, so an interrupted run never pays
    for it again.

    Where a rollout runs is the executor's business (`engine.executor`: this process by default, or
    a Ray cluster); caching, the budget and every write to the run store happen here, in the driver."""

    def __init__(self, store: RunStore, harness: Harness, benchmark: Benchmark, target: ModelSpec,
                 limits: Limits, meter: Meter, emit: Emitter, concurrency: int, settings: Settings,
                 summary_tokens: int = 400, capture=None, executor: Executor | None = None,
                 kept: RolloutCache | None = None):
        self.store, self.harness, self.benchmark = store, harness, benchmark
        self.kept = kept  # rollouts kept across runs (engine.rollout_cache)
        self.capture = capture  # traces.tokens.TokenCapture for vLLM targets, else None
        self.target, self.limits, self.meter, self.emit = target, limits, meter, emit
        self.settings = settings  # the settings that matter: they make the cache key
        self.summary_tokens = summary_tokens
        self.concurrency = max(1, concurrency)
        self.executor = executor or LocalExecutor(harness, benchmark, limits, store.paths.work, os.getpid(),
                                                  concurrency)
        self._sem = Slots(self.concurrency, self.executor.slots())
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
                try:
                    results[i] = await self.run_one(skill, version, task, split, trial, sha)
                except ScorerFailed:
                    for _ in todo:  # the scorer is broken: start no other rollout
                        pass
                    raise

        # In-flight rollouts finish and are saved even when the budget runs out meanwhile.
        outcomes = await asyncio.gather(*[worker() for _ in range(min(self.concurrency, len(jobs)))],
                                        return_exceptions=True)
        for r in outcomes:
            if isinstance(r, BaseException):
                raise r
        done = [r for r in results if r is not None]
        assert len(done) == len(jobs)  # every worker finished its jobs, or raised above
        return done

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
        # a rollout an earlier run made is reused (not with token capture: its data needs the calls themselves)
        kept = self.kept if self.kept is not None and self.kept.wants(version, split) \
            and self.capture is None else None
        try:
            rec = await self._reuse(kept, key, task, split, version) if kept is not None else None
            if rec is None:
                async with self._sem:
                    self.meter.check()  # a safe point: nothing is in flight for this rollout yet
                    self.meter.count_rollout()
                    self.executed += 1
                    rec, rollout = await self._execute(skill, version, task, split, trial, key)
                # saved (grouped with other rollouts, off the event loop) before it counts as done
                await self.store.save_rollout(rec, rollout.trace, rollout.raw_log)
                if kept is not None and not rec.errored:
                    await asyncio.to_thread(kept.put, key, split, rec, rollout.trace, rollout.raw_log)
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

    async def _reuse(self, kept: RolloutCache, key: str, task: Task, split: str,
                     version: int) -> RolloutRecord | None:
        """The rollout as an earlier run made it (`engine.rollout_cache`), saved into this run with its
        trace; this run paid nothing for it (no tokens, no cost). None: not kept."""
        entry = await asyncio.to_thread(kept.get, key, split)
        if entry is None:
            return None
        old = entry.record
        rec = old.model_copy(update={
            "split": split, "version": version, "trace_file": self.store.trace_path(task.id, key),
            "input_tokens": 0, "output_tokens": 0, "cost_usd": 0.0 if old.cost_usd is not None else None,
            "node": None})
        await self.store.save_rollout(rec, entry.trace, entry.raw_log)
        return rec

    async def _execute(self, skill: Skill, version: int, task: Task, split: str, trial: int,
                       key: str) -> tuple[RolloutRecord, Rollout]:
        target = self.target
        if self.capture is not None:  # route this rollout through its own recording-proxy URL
            target = await asyncio.to_thread(self.capture.target_for, self.target, key)
        result = await self.executor.execute(RolloutJob(key=key, task=task, skill=skill, target=target))
        self._sem.resize(self.executor.slots())  # a cluster's nodes come and go
        rollout, score = result.rollout, result.score
        if result.node is not None:  # it ran on another node: its model calls were not metered here
            u = rollout.usage
            self.meter.record(CallRecord(role="target", model=str(self.target), input_tokens=u.input_tokens,
                                         output_tokens=u.output_tokens, cost_usd=u.cost_usd, ok=rollout.error is None))
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
            patch=rollout.output.patch, summary=summarize(rollout.trace, rollout.error, self.summary_tokens,
                                                                     rollout.output.patch),
            input_tokens=rollout.usage.input_tokens, output_tokens=rollout.usage.output_tokens,
            cost_usd=rollout.usage.cost_usd, duration_s=round(rollout.duration_s, 3), error=rollout.error,
            error_kind=rollout.error_kind, trace_file=self.store.trace_path(task.id, key), node=result.node,
            skill_used=None if rollout.error_kind == "infra" else skill_loaded(rollout.trace),
        )
        # a key echoed back reaches neither the optimizer nor a file
        return RolloutRecord.model_validate(redact(rec)), rollout
