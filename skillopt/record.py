"""The optimizer's decisions the run record keeps: candidates, screens, gate decisions, reflections,
the edit ledger and the Pareto pool.

They are part of the run schema (`store/schema.py` writes them into `steps/NNNN/*.json` and
`state.json`): changing one is a schema change. They live on a low floor, beside the plain values
they are made of (`edits`, `stats`), so that the run record (`store/`) and the optimizer that makes
them (`optimizer/`) both import them and neither imports the other.

Per-edit credit (`EditLedger`): a rejected bundle does not condemn edits that were never tried
alone. The ledger remembers, per edit (by `Edit.key`), whether it was turned down alone (by the
screen or the gate) or only as part of a bundle; the ablation proposer (`optimizer/credit.py`)
tries the untested ones one at a time.

The Pareto pool (`ParetoPool`): as GEPA keeps, every candidate that is best on some validation
task: for each task, the highest score any member reached there; a member stays while it reaches
that best on at least one task it solved (score > 0) and no other member is at least as good on
every task it has and better on one. Scores come from the gate's pairs, so a member that was
stopped early is compared on the tasks it was seen on. The merge proposer (`optimizer/pool.py`)
combines two members that complement each other.
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from typing import Literal

from pydantic import BaseModel, Field

from skillopt.edits import Edit
from skillopt.stats import EPS


class Reflection(BaseModel):
    minibatch: list[str]  # task ids
    edits: list[Edit] = Field(default_factory=list)
    analysis: str = ""
    error: str | None = None  # recorded structured-output failure, never raised
    transient: bool = False  # the optimizer call failed (after retries), not its reply


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

    It passes when the candidate scores more there. A tie passes too when the candidate lost none and
    either changed what the agent replies on most of those tasks, or, for an edit aimed at a failure
    read from the trajectories (`Candidate.aim`), left that failure on at most half the rollouts that
    showed it under the incumbent: with few tasks and a low score (a small model that solves one task
    in ten), a real improvement often ties on a minibatch, while an edit that changes nothing leaves
    the replies, and the failure it names, as they were. Ties are gated after the candidates that
    scored more, and the gate's error control is the same for all.
    """

    tasks: list[str]
    incumbent: list[float]
    candidate: list[float]
    changed: int = 0  # tasks whose reply differs from the incumbent's
    errored: int = 0  # pairs left out: a rollout errored on either side
    rollouts: int = 0  # train rollouts this screen paid for
    aimed_incumbent: int | None = None  # of the compared pairs, rollouts showing the candidate's aim: incumbent's
    aimed_candidate: int | None = None  # ... and the candidate's (None: the candidate has no aim)

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
    def removed(self) -> int:
        """Rollouts that showed the aimed failure under the incumbent and no longer do (net)."""
        if self.aimed_incumbent is None or self.aimed_candidate is None:
            return 0
        return self.aimed_incumbent - self.aimed_candidate

    @property
    def passed(self) -> bool:
        cured = self.removed > 0 and self.removed * 2 >= (self.aimed_incumbent or 0)
        return self.improved or (bool(self.candidate) and abs(self.gain) <= EPS and self.losses == 0
                                 and (self.changed * 2 > len(self.tasks) or cured))


# "trajectory-reflection", "procedure", "trajectory-demonstration": the agent-aware proposers (optimizer/agent.py);
# "form-rule": a rule of answer form chosen by the expected answers, in fixed wording (optimizer/form.py);
# "shape": the reply's shape the optimizer wrote from the failed traces, verified by the teacher (reply_shape.py);
# "lesson": what a failed reply missed, written from it beside a reply that solved the task (lessons.py)
# "shell-rule": where an agent's commands run, in fixed wording, when it sent Python to the shell (optimizer/agent.py)
# "label-rule": the closed label set of the expected answers named in a fixed sentence (optimizer/form.py)
# "revision": an edit its screen turned down, written again from the target's replies under it (revise.py)
Origin = Literal["reflection", "rules", "demonstration", "merge", "ablation", "consolidation", "description",
                 "trajectory-reflection", "procedure", "trajectory-demonstration", "teacher-example", "form-rule",
                 "shape", "lesson", "answer-examples", "label-rule", "shell-rule", "revision"]
CandidateStatus = Literal["proposed", "leaked", "no-instruction", "not-applied", "over-cap", "duplicate",
                          "screened-out", "not-gated", "accepted", "rejected"]


class Candidate(BaseModel):
    """One proposal of a step: edits on the incumbent, and everything that was decided about it."""

    id: str  # "s003-c2"
    step: int
    origin: Origin
    parent: int  # the version it edits
    edits: list[Edit] = Field(default_factory=list)
    rationale: str = ""
    sources: list[str] = Field(default_factory=list)  # train task ids it came from (the screen's tasks)
    aim: str = ""  # the failure its edits are meant to remove (`traces.trajectory.shows`), counted on its screen
    members: list[int] = Field(default_factory=list)  # merge: the pool versions it combines
    version: int | None = None
    applied: list[str] = Field(default_factory=list)  # per edit: "applied" or why not
    leakage: list[str] = Field(default_factory=list)  # edits dropped for copying task text, and why
    screen: ScreenResult | None = None
    gate: GateDecision | None = None
    status: CandidateStatus = "proposed"
    note: str = ""

    @property
    def stored_version(self) -> int:
        """The version it was stored as: a candidate is screened and gated once stored."""
        if self.version is None:
            raise ValueError(f"candidate {self.id} has no stored version")
        return self.version


MAX_REJECTED = 30
MAX_UNTESTED = 20


class EditLedger(BaseModel):
    rejected: list[Edit] = Field(default_factory=list)  # turned down alone (newest last)
    untested: list[Edit] = Field(default_factory=list)  # only ever in a rejected bundle
    accepted: list[str] = Field(default_factory=list)  # keys of edits in accepted candidates

    def record(self, edits: list[Edit], accepted: bool) -> None:
        keys = {e.key for e in edits}
        self.untested = [e for e in self.untested if e.key not in keys]
        if accepted:
            self.accepted += [k for k in keys if k not in self.accepted]
        elif len(edits) == 1:
            self.rejected = [e for e in self.rejected if e.key not in keys] + edits
            self.rejected = self.rejected[-MAX_REJECTED:]
        else:
            tried = {e.key for e in self.rejected} | set(self.accepted)
            self.untested += [e for e in edits if e.key not in tried]
            self.untested = self.untested[-MAX_UNTESTED:]

    def take_untested(self, n: int) -> list[Edit]:
        """The `n` most recent untested edits, removed from the ledger (they get their own test)."""
        if n <= 0 or not self.untested:
            return []
        taken, self.untested = self.untested[-n:], self.untested[:-n]
        return taken


class PoolMember(BaseModel):
    version: int
    parent: int
    edits: list[Edit] = Field(default_factory=list)  # relative to `parent`
    scores: dict[str, float] = Field(default_factory=dict)  # val task -> mean score (gate pairs)
    incumbent_scores: dict[str, float] = Field(default_factory=dict)  # the parent's, same pairs
    accepted: bool = False


class ParetoPool(BaseModel):
    members: list[PoolMember] = Field(default_factory=list)
    merged: list[tuple[int, int]] = Field(default_factory=list)  # pairs already merged

    def add(self, version: int, parent: int, edits: list[Edit], decision: GateDecision) -> None:
        cand: dict[str, list[float]] = {}
        inc: dict[str, list[float]] = {}
        for p in decision.pairs:
            cand.setdefault(p.task_id, []).append(p.candidate)
            inc.setdefault(p.task_id, []).append(p.incumbent)
        mean = {t: sum(v) / len(v) for t, v in cand.items()}
        self.members = [m for m in self.members if m.version != version]
        self.members.append(PoolMember(version=version, parent=parent, edits=list(edits), scores=mean,
                                       incumbent_scores={t: sum(v) / len(v) for t, v in inc.items()},
                                       accepted=decision.accepted))
        self.prune()

    def best(self) -> dict[str, float]:
        top: dict[str, float] = {}
        for m in self.members:
            for t, s in m.scores.items():
                top[t] = max(top.get(t, 0.0), s)
        return top

    def prune(self) -> None:
        """Keep the members best on some task they solved, and not dominated by another member."""
        top = self.best()
        keep = [m for m in self.members if any(s > EPS and s >= top[t] - EPS for t, s in m.scores.items())]
        self.members = [m for m in keep if not any(_dominates(o, m) for o in keep if o is not m)]

    def front(self) -> list[int]:
        return [m.version for m in self.members]

    def complementary(self, exclude: AbstractSet[int] = frozenset()) -> tuple[PoolMember, PoolMember] | None:
        """Two members (neither in `exclude`, not merged before) that each beat their incumbent on a
        task where the other does not; the pair with the most such tasks between them."""
        best, best_n = None, 0
        ms = [m for m in self.members if m.version not in exclude and m.edits]
        for i, a in enumerate(ms):
            for b in ms[i + 1 :]:
                if (a.version, b.version) in self.merged:
                    continue
                wa, wb = _wins(a), _wins(b)
                only_a, only_b = wa - wb, wb - wa
                if only_a and only_b and len(only_a | only_b) > best_n:
                    best, best_n = (a, b), len(only_a | only_b)
        return best


def _wins(m: PoolMember) -> set[str]:
    return {t for t, s in m.scores.items() if s > m.incumbent_scores.get(t, 0.0) + EPS}


def _dominates(a: PoolMember, b: PoolMember) -> bool:
    common = [t for t in b.scores if t in a.scores]
    if not common or len(common) < len(b.scores):
        return False
    return all(a.scores[t] >= b.scores[t] - EPS for t in common) and any(a.scores[t] > b.scores[t] + EPS for t in common)
