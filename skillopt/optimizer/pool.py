"""The merge proposal that combines two members of the Pareto pool of gated candidates.

The pool (`record.ParetoPool`, kept in the run's state.json), as GEPA keeps it, holds every
candidate that is best on some validation task. A candidate the gate rejected overall can stay: it
may hold the rule for a kind of task that another candidate lacks.

Merge: two members that each win tasks the other does not (against the incumbent, on the tasks
both were seen on) are combined by applying both members' edits to the incumbent.
"""

from __future__ import annotations

from skillopt.optimizer.propose import Proposal, SearchState
from skillopt.record import Candidate


class MergeProposer:
    """One merge per step when two pool members complement each other: both members' edits on the
    incumbent (the ones the incumbent does not already hold)."""

    name = "merge"

    async def propose(self, state: SearchState) -> Proposal:
        pool = state.pool
        if pool is None:
            return Proposal()
        pair = pool.complementary(exclude={state.version})
        if pair is None:
            return Proposal()
        a, b = pair
        pool.merged.append((a.version, b.version))
        body = state.skill.body
        edits = [e for e in a.edits + b.edits if not (e.op == "add" and e.text.strip() and e.text.strip() in body)]
        if not edits:
            return Proposal()
        sources = [r.task_id for r in state.scored if r.failed][:4] or [r.task_id for r in state.scored][:4]
        return Proposal([Candidate(id="", step=state.step, origin="merge", parent=state.version, edits=edits,
                                   members=[a.version, b.version], sources=sources,
                                   rationale=f"merge of v{a.version:03d} and v{b.version:03d}, which win different validation tasks")])
