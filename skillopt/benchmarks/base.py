"""The Benchmark seam: tasks with deterministic splits, workspace preparation, scoring."""

from __future__ import annotations

import hashlib
import random
from functools import cached_property
from pathlib import Path
from typing import Any, Literal, Protocol, Sequence, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

Split = Literal["train", "val", "test", "all"]
SPLITS: tuple[Split, ...] = ("train", "val", "test", "all")
RUN_SPLITS: tuple[Split, ...] = ("train", "val", "test")  # the splits a run draws its tasks into


def parse_split(name: str) -> Split:
    """`name` as a split; else `BadInput`."""
    from skillopt.errors import BadInput

    for split in SPLITS:
        if split == name:
            return split
    raise BadInput(f"unknown split {name!r}: use train, val, test or all")


class Task(BaseModel):
    """One benchmark item. `reference` and `hidden` never reach the agent."""

    model_config = ConfigDict(frozen=True)

    id: str
    prompt: str
    kind: Literal["qa", "code", "swe"] = "qa"
    choices: tuple[str, ...] = ()
    answers: tuple[str, ...] = ()  # accepted answers (reference)
    context: str | None = None
    files: dict[str, str] = Field(default_factory=dict)  # relative path -> content, visible to the agent
    metadata: dict[str, Any] = Field(default_factory=dict)  # visible facts (subject, repo, ...)
    hidden: dict[str, Any] = Field(default_factory=dict)  # tests, gold patches: never in the workspace

    @property
    def reference(self) -> str:
        return " | ".join(self.answers)


class Score(BaseModel):
    model_config = ConfigDict(frozen=True)

    hard: float  # 0 or 1
    soft: float  # 0..1
    feedback: str = ""


class RolloutOutput(BaseModel):
    model_config = ConfigDict(frozen=True)

    text: str = ""  # final answer text
    patch: str | None = None  # for coding tasks: the workspace diff


class SplitSizes(BaseModel):
    """How many tasks go to each split; `None` for test means 'the rest'."""

    model_config = ConfigDict(frozen=True)

    seed: int = 0
    train: int = Field(20, ge=0)
    val: int = Field(20, ge=0)
    test: int | None = Field(50, ge=0)


def assign_splits(ids: Sequence[str], sizes: SplitSizes) -> dict[str, list[str]]:
    """The one function that assigns task ids to splits: deterministic from the seed.

    The order of `ids` does not matter (they are sorted first), so adding a task file
    line does not reshuffle unrelated tasks more than needed.
    """
    ordered = sorted(ids)
    random.Random(sizes.seed).shuffle(ordered)
    n_train = min(sizes.train, len(ordered))
    n_val = min(sizes.val, len(ordered) - n_train)
    rest = ordered[n_train + n_val :]
    test = rest if sizes.test is None else rest[: sizes.test]
    return {
        "train": ordered[:n_train],
        "val": ordered[n_train : n_train + n_val],
        "test": test,
        "all": list(ordered),
    }


def data_hash(tasks: Sequence[Task]) -> str:
    """A short hash of task content, so runs can detect that benchmark data changed."""
    h = hashlib.sha256()
    for t in sorted(tasks, key=lambda t: t.id):
        h.update(t.model_dump_json().encode())
    return h.hexdigest()[:16]


def split_data_hash(benchmark: Benchmark) -> str:
    """The data hash a run records (its summary; an evaluation's, compare's): the tasks of the train,
    val and test splits. (`engine.settings.Settings.data_hash`, part of a run's fingerprint, hashes
    `tasks("all")`; both stay what earlier runs recorded.)"""
    return data_hash([t for s in RUN_SPLITS for t in benchmark.tasks(s)])


class SplitTasks:
    """Split assignment, task lookup and the data hash for a benchmark that holds its tasks in
    memory: the class gives `sizes` and `_by_id` (every task by id, in the data's order)."""

    sizes: SplitSizes
    _by_id: dict[str, Task]

    @cached_property
    def _splits(self) -> dict[str, list[str]]:
        return assign_splits(list(self._by_id), self.sizes)

    def tasks(self, split: Split = "all") -> list[Task]:
        if split not in self._splits:
            from skillopt.errors import BadInput

            raise BadInput(f"unknown split {split!r}: choose one of {', '.join(self._splits)}")
        return [self._by_id[i] for i in self._splits[split]]

    @property
    def data_hash(self) -> str:
        return data_hash(list(self._by_id.values()))


@runtime_checkable
class Benchmark(Protocol):
    """A named set of tasks with a scorer.

    `tasks` returns the tasks of a split (deterministic). `prepare` writes what the agent may
    see into the workspace and never the hidden data. `score` never raises for a bad answer:
    it returns a zero `Score` with feedback; it raises only for a broken benchmark.
    """

    name: str

    def tasks(self, split: Split) -> Sequence[Task]: ...

    def prepare(self, task: Task, ws: Path) -> None: ...

    async def score(self, task: Task, out: RolloutOutput, ws: Path) -> Score: ...


@runtime_checkable
class NeedsPreflight(Protocol):
    """Optional capability: a benchmark that checks what it needs (a Docker engine, images) before
    any rollout; `preflight` raises `BadInput` with one line when something is missing."""

    def preflight(self) -> None: ...


@runtime_checkable
class Closable(Protocol):
    """Optional capability: a benchmark holding resources (containers, clients) until `close`."""

    def close(self) -> None: ...


@runtime_checkable
class ShortAnswers(Protocol):
    """Optional capability: a benchmark that asks for answers of at most `max_answer_tokens`
    (the run's limit, unless its configuration sets `limits.max_tokens`)."""

    max_answer_tokens: int


@runtime_checkable
class StopSequences(Protocol):
    """Optional capability: a benchmark whose answers end at one of `stop` (unless the run's
    configuration sets `limits.stop`)."""

    stop: tuple[str, ...]


@runtime_checkable
class DrivesContainerFromHost(Protocol):
    """A benchmark whose agent may work on the host and run its commands in the task's container
    through the Docker socket (swebench with `agent_in_container=false`). The socket gives whoever
    holds it the host, so skillopt's sandbox cannot be kept around such an agent."""

    @property
    def host_agent_uses_docker(self) -> bool: ...


@runtime_checkable
class LabelsByRun(Protocol):
    """Optional capability: a benchmark that labels what it starts (Docker containers) with the run
    it serves, so a run's leftovers can be found and removed; told the run id before any rollout."""

    def bind_run(self, run_id: str) -> None: ...


@runtime_checkable
class RunsContainers(Protocol):
    """A benchmark whose rollouts start Docker containers (the agent's, the grading's): on a Ray
    cluster each of its rollouts asks a node for one unit of the custom `docker` resource."""

    uses_docker: bool
