"""Normalized trace events: a discriminated union on `type`, the same for every harness."""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter


class _Event(BaseModel):
    model_config = ConfigDict(frozen=True)
    t: float = 0.0  # seconds since the rollout started


class MessageEvent(_Event):
    type: Literal["message"] = "message"
    role: Literal["system", "user", "assistant"]
    text: str


class ToolCallEvent(_Event):
    type: Literal["tool_call"] = "tool_call"
    id: str = ""
    name: str
    input: Any = None


class ToolResultEvent(_Event):
    type: Literal["tool_result"] = "tool_result"
    id: str = ""
    output: str = ""
    is_error: bool = False


class SkillUsedEvent(_Event):
    type: Literal["skill_used"] = "skill_used"
    name: str
    how: str = ""  # "Skill tool", "read SKILL.md", "system prompt"


class ErrorEvent(_Event):
    type: Literal["error"] = "error"
    message: str


class UsageEvent(_Event):
    type: Literal["usage"] = "usage"
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = None
    turns: int | None = None


TraceEvent = Annotated[
    Union[MessageEvent, ToolCallEvent, ToolResultEvent, SkillUsedEvent, ErrorEvent, UsageEvent],
    Field(discriminator="type"),
]
TRACE_ADAPTER: TypeAdapter[TraceEvent] = TypeAdapter(TraceEvent)


def parse_event(line: str) -> TraceEvent:
    return TRACE_ADAPTER.validate_json(line)
