"""Plain values the optimizer functions take and return (those the run record keeps are in `record.py`)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from skillopt.edits import Edit
from skillopt.traces.trajectory import Trajectory


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
    skill_used: bool | None = None  # the agent loaded the skill (None: always in its prompt)
    trajectory: Trajectory | None = None  # an agent rollout: its tool calls, exit codes, tests, diff, stop

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
    file: str = Field("", description="a supporting file of the skill folder to add, replace or delete whole; "
                                      "empty = the SKILL.md body")

    def to_edit(self) -> Edit:
        if self.file.strip():
            return Edit(op=self.op, part="file", path=self.file.strip(), text=self.text, rationale=self.rationale,
                        evidence=list(self.evidence))
        return Edit(op=self.op, anchor=self.anchor.strip() or None, text=self.text,
                    rationale=self.rationale, evidence=list(self.evidence))


class ReflectionReply(BaseModel):
    analysis: str = ""
    edits: list[ProposedEdit] = Field(default_factory=list)


class ConsolidateReply(BaseModel):
    body: str


def bounded_schema(model: type[BaseModel], **lengths: tuple[int, int]) -> dict:
    """`model`'s JSON schema with each named string field required and its length bounded (min, max):
    a server that constrains decoding then cannot return a reply cut by the token cap, or an empty one."""
    schema = model.model_json_schema()
    for name, (low, high) in lengths.items():
        schema["properties"][name].update(maxLength=high, **({"minLength": low} if low else {}))
    schema["required"] = list(lengths)
    return schema
