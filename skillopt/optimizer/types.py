"""Plain values the optimizer functions take and return."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from skillopt.edits import Edit


class ScoredRollout(BaseModel):
    """A rollout as the optimizer sees it: never anything from the test split."""

    task_id: str
    prompt: str
    reference: str
    output: str
    hard: float
    soft: float
    feedback: str
    summary: str
    error: str | None = None

    @property
    def failed(self) -> bool:
        return self.hard < 1.0


class ProposedEdit(BaseModel):
    """The optimizer's wire format for one edit (kept flat so small models can fill it)."""

    op: Literal["add", "replace", "delete"]
    anchor: str = Field("", description="heading or exact text of the skill to anchor on; empty = end")
    text: str = Field("", description="new text for add / replace")
    rationale: str = ""
    evidence: list[str] = Field(default_factory=list, description="task ids that motivate the edit")

    def to_edit(self) -> Edit:
        return Edit(op=self.op, anchor=self.anchor.strip() or None, text=self.text,
                    rationale=self.rationale, evidence=list(self.evidence))


class ReflectionReply(BaseModel):
    analysis: str = ""
    edits: list[ProposedEdit] = Field(default_factory=list)


class Reflection(BaseModel):
    minibatch: list[str]  # task ids
    edits: list[Edit] = Field(default_factory=list)
    analysis: str = ""
    error: str | None = None  # recorded structured-output failure, never raised


class ConsolidateReply(BaseModel):
    body: str


class TaskComparison(BaseModel):
    task_id: str
    incumbent: float
    candidate: float | None  # None: not evaluated (early stop)


class GateDecision(BaseModel):
    candidate: int
    incumbent: int
    accepted: bool
    reason: str
    metric: str
    incumbent_score: float  # mean over the evaluated tasks
    candidate_score: float
    wins: int = 0
    losses: int = 0
    ties: int = 0
    evaluated: int = 0
    total: int = 0
    early_stopped: bool = False
    per_task: list[TaskComparison] = Field(default_factory=list)
