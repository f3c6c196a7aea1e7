"""Executors: where a rollout runs (DESIGN.md section 4). `local` runs it in this process; `ray`
(`engine.ray_executor`) runs it on a node of a Ray cluster, where a `LocalExecutor` of its own
does exactly what this one does here.

An executor turns a `RolloutJob` (the skill, the task, the target as this rollout reaches it) into
a `RolloutResult` (the harness's rollout and its score). It prepares the workspace, runs the
harness and grades where the workspace is. It never writes the run store: the `RolloutRunner`
(driver) caches, budgets, and writes every record and trace, whichever executor ran it.

Contract: `execute` never raises for a rollout's failure. An agent that failed is a scored
rollout with `error` set; an infrastructure failure (a model that could not be reached, a lost
worker node) is a rollout with `error_kind="infra"`: recorded, never a score, retried later.
"""

from __future__ import annotations

import asyncio
import heapq
import shutil
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

from pydantic import BaseModel

from skillopt.benchmarks.base import Benchmark, Score, Task
from skillopt.harness.process import pid_alive
from skillopt.harness.base import Harness, Limits, PlacesSkill, PromptOnly, Rollout
from skillopt.harness.workspace import workspace
from skillopt.errors import ScorerFailed, SkilloptError
from skillopt.models.spec import ModelSpec
from skillopt.skill import Skill


@dataclass(frozen=True)
class RolloutJob:
    """One rollout to run: the cache key names it; `target` is the model as this rollout reaches it
    (on the token-capture path, its own recording-proxy URL)."""

    key: str
    task: Task
    skill: Skill
    target: ModelSpec


class RolloutResult(BaseModel):
    """What an executor hands back to the driver: the rollout (output, trace, usage, error) and its
    score. `node`: where it ran (a Ray node: address/id); None in this process, whose meter then
    counted its model calls already."""

    rollout: Rollout
    score: Score
    node: str | None = None

    def pack(self) -> bytes:
        """Compressed JSON: a typed value that crosses processes and stays small (see ray_executor)."""
        return zlib.compress(self.model_dump_json().encode(), 3)

    @classmethod
    def unpack(cls, data: bytes) -> RolloutResult:
        return cls.model_validate_json(zlib.decompress(data))


def errored(task_id: str, why: str) -> RolloutResult:
    """An infrastructure failure as a result: recorded, never graded, never a score."""
    return RolloutResult(rollout=Rollout(task_id=task_id, error=why, error_kind="infra"),
                         score=Score(hard=0.0, soft=0.0, feedback=f"not scored: {why}"))


@runtime_checkable
class Executor(Protocol):
    """Where rollouts run. `slots()`: how many can run at once now (the runner keeps no more in
    flight). `execute` never raises for a rollout's failure (see the module docstring).
    `callback_host`: where the rollouts reach this process (the token-capture proxy binds it).
    `note`: one line for the user about where rollouts run, or None."""

    name: str
    callback_host: str
    note: str | None

    def slots(self) -> int: ...

    async def execute(self, job: RolloutJob) -> RolloutResult: ...

    def close(self) -> None: ...


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


class LocalExecutor:
    """Runs rollouts in this process: a workspace lane under `work` (prepared and cleaned up in a
    thread: git, copies), the harness with its timeout enforced, and the benchmark's grading in that
    workspace. A harness that never reads its folder gets none (the benchmark scores with an unmade
    path)."""

    name = "local"
    callback_host = "127.0.0.1"
    note = None
    grace_s = 30.0  # past the rollout timeout, before a harness that did not return is given up

    def __init__(self, harness: Harness, benchmark: Benchmark, limits: Limits, work: Path, pid: int,
                 concurrency: int = 1):
        self.harness, self.benchmark, self.limits = harness, benchmark, limits
        self.concurrency = max(1, concurrency)
        self.lanes = Lanes(work, pid)
        self.folderless = isinstance(harness, PromptOnly) and harness.prompt_only
        if not self.folderless:
            self.lanes.clear_dead()

    def slots(self) -> int:
        return self.concurrency

    def close(self) -> None:
        pass

    async def execute(self, job: RolloutJob) -> RolloutResult:
        if self.folderless:
            ws = self.lanes.work / "none"
            rollout, _ = await self._guarded_run(job.task, job.skill, ws, job.target)
            return RolloutResult(rollout=rollout, score=await self._score(job.task, rollout, ws))
        skill_dir = self.harness.skill_dir if isinstance(self.harness, PlacesSkill) else None
        lane, reusable = self.lanes.take(), False
        try:
            folder = workspace(job.task, job.skill, self.benchmark, skill_dir, root=self.lanes.work,
                               name=self.lanes.name(lane))
            ws = await asyncio.to_thread(folder.__enter__)
            try:
                rollout, reusable = await self._guarded_run(job.task, job.skill, ws, job.target)
                score = await self._score(job.task, rollout, ws)
            finally:
                await asyncio.to_thread(folder.__exit__, None, None, None)
        finally:
            if reusable:
                self.lanes.give(lane)
        return RolloutResult(rollout=rollout, score=score)

    async def _score(self, task: Task, rollout: Rollout, ws: Path) -> Score:
        if rollout.error_kind == "infra":  # no answer to grade: not a score, never graded
            return Score(hard=0.0, soft=0.0, feedback=f"not scored: {rollout.error}")
        try:
            return await self.benchmark.score(task, rollout.output, ws)
        except SkilloptError:  # a judge's failed call, a budget, a named scorer failure: as they are
            raise
        except Exception as e:  # noqa: BLE001 - `score` never raises for a bad answer: this is the scorer's bug
            raise ScorerFailed(f"of {self.benchmark.name}", task.id, e) from e

    async def _guarded_run(self, task: Task, skill: Skill, ws: Path, target: ModelSpec) -> tuple[Rollout, bool]:
        """The harness contract says it never raises for agent failure; enforce the timeout too.
        Also says whether the harness returned (else its agent may still be at work in `ws`)."""
        try:
            return await asyncio.wait_for(
                self.harness.run(task, skill, ws, target, self.limits), self.limits.timeout_s + self.grace_s), True
        except asyncio.TimeoutError:
            return Rollout(task_id=task.id, error=f"rollout timed out after {self.limits.timeout_s:.0f}s",
                           error_kind="agent"), False
