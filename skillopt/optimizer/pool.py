"""The Pareto pool of gated candidates, and the merge proposal that combines two of them.

As GEPA keeps, the pool holds every candidate that is best on some validation task: for each task,
the highest score any member reached there; a member stays while it reaches that best on at least
one task it solved (score > 0) and no other member is at least as good on every task it has and
better on one. A candidate the gate rejected overall can stay: it may hold the rule for a kind of
task that another candidate lacks. Scores come from the gate's pairs, so a member that was stopped
early is compared on the tasks it was seen on.

Merge: two members that each win tasks the other does not (against the incumbent, on the tasks
both were seen on) are combined by applying both members' edits to the incumbent.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

from skillopt.edits import Edit
from skillopt.optimizer.types import Candidate, GateDecision
from skillopt.stats import EPS

if TYPE_CHECKING:
    from skillopt.optimizer.propose import SearchState


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

    def complementary(self, exclude: set[int] = frozenset()) -> tuple[PoolMember, PoolMember] | None:  # type: ignore[assignment]
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


class MergeProposer:
    """One merge per step when two pool members complement each other: both members' edits on the
    incumbent (the ones the incumbent does not already hold)."""

    name = "merge"

    async def propose(self, state: SearchState) -> list[Candidate]:
        pool = state.pool
        if not isinstance(pool, ParetoPool):
            return []
        pair = pool.complementary(exclude={state.version})
        if pair is None:
            return []
        a, b = pair
        pool.merged.append((a.version, b.version))
        body = state.skill.body
        edits = [e for e in a.edits + b.edits if not (e.op == "add" and e.text.strip() and e.text.strip() in body)]
        if not edits:
            return []
        sources = [r.task_id for r in state.scored if r.failed][:4] or [r.task_id for r in state.scored][:4]
        return [Candidate(id="", step=state.step, origin="merge", parent=state.version, edits=edits,
                          members=[a.version, b.version], sources=sources,
                          rationale=f"merge of v{a.version:03d} and v{b.version:03d}, which win different validation tasks")]
