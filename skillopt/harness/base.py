"""The Harness seam: run one task with one skill on one target model, return a Rollout."""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from skillopt.benchmarks.base import RolloutOutput, Task
from skillopt.models.spec import ModelSpec
from skillopt.skill import Skill
from skillopt.traces.events import TraceEvent


class Limits(BaseModel):
    model_config = ConfigDict(frozen=True)

    max_tokens: int = Field(1024, ge=1, le=1_000_000)  # per model reply
    timeout_s: float = Field(300.0, gt=0, le=7 * 86400)  # whole rollout
    max_turns: int = Field(20, ge=1, le=100_000)
    stop: tuple[str, ...] = ()
    temperature: float | None = Field(None, ge=0, le=2)  # the providers' range
    seed: int | None = None  # sampling seed, where the provider takes one (deterministic rollouts)


class Usage(BaseModel):
    model_config = ConfigDict(frozen=True)

    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = None  # None: price unknown (never shown as $0)
    calls: int = 0

    def __add__(self, other: "Usage") -> "Usage":
        cost = None if self.cost_usd is None and other.cost_usd is None else (
            (self.cost_usd or 0.0) + (other.cost_usd or 0.0)
        )
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cost_usd=cost,
            calls=self.calls + other.calls,
        )


ErrorKind = Literal["infra", "agent"]


class Rollout(BaseModel):
    """What a harness returns. `error` is set when the agent or model failed; never raised.

    `error_kind` says whose failure it was: "infra" (the model could not be reached or answered
    garbage after every retry, the agent's process could not run): no score, never cached,
    retried later; "agent" (it answered badly, gave up, ran out of time): scored as it is.
    """

    task_id: str
    output: RolloutOutput = Field(default_factory=RolloutOutput)
    trace: list[TraceEvent] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    duration_s: float = 0.0
    error: str | None = None
    error_kind: ErrorKind | None = None
    raw_log: str | None = None  # the harness's native log (stream-json, exec --json), if any


@runtime_checkable
class Harness(Protocol):
    """Runs a target agent on a task.

    `run` never raises because the agent or the model failed: it returns a `Rollout` with
    `error` set. It raises only for programming errors. `apis` names the wire APIs the
    harness needs from the target's server (checked before any rollout).
    """

    name: str
    apis: frozenset[str]

    async def run(self, task: Task, skill: Skill, ws: Path, target: ModelSpec, limits: Limits) -> Rollout: ...


@runtime_checkable
class SetsTemperature(Protocol):
    """A harness that passes `Limits.temperature` and `Limits.seed` to the model (the chat
    harness); agent harnesses cannot, so their rollouts are sampled."""

    sets_temperature: bool


@runtime_checkable
class PromptOnly(Protocol):
    """Optional capability: a harness whose agent never reads or writes its workspace (the skill
    and the task go into the prompt), when `prompt_only` is true. Its rollouts get no folder: none is
    made, filled or emptied per rollout, and the benchmark scores the reply alone."""

    prompt_only: bool


@runtime_checkable
class PlacesSkill(Protocol):
    """Optional capability: a harness whose agent discovers its skill on disk, in `skill_dir` of its
    workspace (`.claude/skills`, `.agents/skills`); None (the chat harness): in the prompt."""

    skill_dir: str | None


def discovers_skill(harness: object) -> bool:
    """An agent harness (claude-code, codex, mini-swe-agent): its agent finds the skill on disk and
    works with tools; the chat harness (skill in the prompt) is not one."""
    return isinstance(harness, PlacesSkill) and harness.skill_dir is not None
