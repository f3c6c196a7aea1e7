"""Per-edit credit: a rejected bundle does not condemn edits that were never tried alone.

The ledger (`record.EditLedger`, kept in the run's state.json) remembers, per edit (by `Edit.key`),
whether it was turned down alone (by the screen or the gate) or only as part of a bundle. Edits
turned down alone go to the rejected list the optimizer is shown; edits from rejected bundles wait
untested, and the ablation proposer tries them one at a time in later steps (a single-edit
candidate costs a screen, so it is cheap).
"""

from __future__ import annotations

from skillopt.optimizer.propose import Proposal, SearchState
from skillopt.record import Candidate


class AblationProposer:
    """Up to `per_step` single-edit candidates from edits of rejected bundles."""

    name = "ablation"

    def __init__(self, per_step: int = 1):
        self.per_step = per_step

    async def propose(self, state: SearchState) -> Proposal:
        ledger = state.ledger
        if ledger is None:
            return Proposal()
        out = []
        for e in ledger.take_untested(self.per_step):
            sources = [t for t in e.evidence if t in state.tasks] or [r.task_id for r in state.scored if r.failed][:4]
            out.append(Candidate(id="", step=state.step, origin="ablation", parent=state.version, edits=[e],
                                 rationale="tried alone: it was rejected only as part of a bundle",
                                 sources=sources or [r.task_id for r in state.scored][:4]))
        return Proposal(out)
