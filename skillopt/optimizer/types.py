"""Plain values the optimizer functions take and return."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from skillopt.edits import Edit
from skillopt.stats import EPS
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


class Reflection(BaseModel):
    minibatch: list[str]  # task ids
    edits: list[Edit] = Field(default_factory=list)
    analysis: str = ""
    error: str | None = None  # recorded structured-output failure, never raised
    transient: bool = False  # the optimizer call failed (after retries), not its reply


class ConsolidateReply(BaseModel):
    body: str


class TaskComparison(BaseModel):
    task_id: str
    incumbent: float
    candidate: float | None  # None: not evaluated (early stop)


class GatePair(BaseModel):
    """One paired observation of the gate, in the order it was seen."""

    task_id: str
    trial: int = 0
    incumbent: float
    candidate: float


GateStop = Literal["accept-early", "accept-final", "exhausted", "curtailed", "futile", "screened", "legacy"]


class GateDecision(BaseModel):
    candidate: int
    incumbent: int
    accepted: bool
    reason: str
    metric: str
    incumbent_score: float  # mean over the evaluated pairs
    candidate_score: float
    wins: int = 0
    losses: int = 0
    ties: int = 0
    evaluated: int = 0  # pairs observed
    total: int = 0  # pairs planned
    early_stopped: bool = False
    stop: GateStop = "legacy"  # why the test stopped
    test: str = ""  # the statistical test, by name
    alpha: float | None = None
    min_effect: float | None = None
    p_value: float | None = None  # one-sided exact sign-test p-value of the pairs observed
    skipped: int = 0  # pairs never observed: a rollout errored on either side
    rollouts: int = 0  # validation rollouts this decision paid for (cache hits excluded)
    pairs: list[GatePair] = Field(default_factory=list)
    per_task: list[TaskComparison] = Field(default_factory=list)


class ScreenResult(BaseModel):
    """The cheap check before validation: the candidate on the train tasks it was proposed from,
    against the incumbent's results there (GEPA's minibatch acceptance test).

    It passes when the candidate scores more there. A tie passes too when the candidate changed
    what the agent replies on most of those tasks and lost none: with few tasks and a low score
    (a small model that solves one task in ten), a real improvement often ties on a minibatch,
    while an edit that changes nothing leaves the replies as they were. Ties are gated after the
    candidates that scored more, and the gate's error control is the same for both.
    """

    tasks: list[str]
    incumbent: list[float]
    candidate: list[float]
    changed: int = 0  # tasks whose reply differs from the incumbent's
    errored: int = 0  # pairs left out: a rollout errored on either side
    rollouts: int = 0  # train rollouts this screen paid for

    @property
    def gain(self) -> float:
        return sum(self.candidate) - sum(self.incumbent)

    @property
    def losses(self) -> int:
        return sum(b < a - EPS for a, b in zip(self.incumbent, self.candidate))

    @property
    def improved(self) -> bool:
        return bool(self.candidate) and self.gain > EPS

    @property
    def passed(self) -> bool:
        return self.improved or (bool(self.candidate) and abs(self.gain) <= EPS and self.losses == 0
                                 and self.changed * 2 > len(self.tasks))


# "trajectory-reflection", "procedure", "trajectory-demonstration": the agent-aware proposers (optimizer/agent.py)
Origin = Literal["reflection", "rules", "demonstration", "merge", "ablation", "consolidation", "description",
                 "trajectory-reflection", "procedure", "trajectory-demonstration"]
CandidateStatus = Literal["proposed", "leaked", "not-applied", "over-cap", "duplicate", "screened-out",
                          "not-gated", "accepted", "rejected"]


class Candidate(BaseModel):
    """One proposal of a step: edits on the incumbent, and everything that was decided about it."""

    id: str  # "s003-c2"
    step: int
    origin: Origin
    parent: int  # the version it edits
    edits: list[Edit] = Field(default_factory=list)
    rationale: str = ""
    sources: list[str] = Field(default_factory=list)  # train task ids it came from (the screen's tasks)
    members: list[int] = Field(default_factory=list)  # merge: the pool versions it combines
    version: int | None = None
    applied: list[str] = Field(default_factory=list)  # per edit: "applied" or why not
    leakage: list[str] = Field(default_factory=list)  # edits dropped for copying task text, and why
    screen: ScreenResult | None = None
    gate: GateDecision | None = None
    status: CandidateStatus = "proposed"
    note: str = ""
