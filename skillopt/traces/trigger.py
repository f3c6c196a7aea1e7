"""Skill triggering: did the agent load the skill at all?

For Claude Code and Codex the skill's `description` decides whether the agent loads it (the Skill
tool, or reading its SKILL.md); the harnesses record a `skill_used` trace event when it does. Each
rollout record keeps the outcome (`RolloutRecord.skill_used`: True / False; None where the skill is
always in the prompt, the chat harness, for an errored rollout, or one recorded before this was kept), and the
trigger rate of a skill version is the share of its scored rollouts that loaded it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from pydantic import BaseModel

from skillopt.traces.events import SkillUsedEvent

ALWAYS = "system prompt"  # how the chat harness "uses" a skill: it is always there, nothing to trigger


class TriggerRate(BaseModel):
    loaded: int  # rollouts whose agent loaded the skill
    n: int  # scored rollouts where loading was up to the agent

    @property
    def rate(self) -> float:
        return self.loaded / self.n if self.n else 0.0

    def text(self) -> str:
        return f"{self.rate:.0%} ({self.loaded}/{self.n})"


def skill_loaded(trace: Sequence[Any]) -> bool | None:
    """Whether the agent of a rollout loaded the skill; None when the skill is always in its prompt."""
    used = [e for e in trace if isinstance(e, SkillUsedEvent)]
    if any(e.how == ALWAYS for e in used):
        return None
    return bool(used)


def trigger_rate(records: Iterable[Any]) -> TriggerRate | None:
    """Over the rollouts that recorded it (never an errored one: its agent did not run); None when
    none did (chat harness, old runs). `records`: `RolloutRecord`s or the index's `RolloutRow`s."""
    known = [bool(r.skill_used) for r in records if r.skill_used is not None]
    return TriggerRate(loaded=sum(known), n=len(known)) if known else None
