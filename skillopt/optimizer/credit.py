"""Per-edit credit: a rejected bundle does not condemn edits that were never tried alone.

The ledger remembers, per edit (by `Edit.key`), whether it was turned down alone (by the screen or
the gate) or only as part of a bundle. Edits turned down alone go to the rejected list the
optimizer is shown; edits from rejected bundles wait untested, and the ablation proposer tries
them one at a time in later steps (a single-edit candidate costs a screen, so it is cheap).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

from skillopt.edits import Edit
from skillopt.optimizer.types import Candidate

if TYPE_CHECKING:
    from skillopt.optimizer.propose import SearchState

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


class AblationProposer:
    """Up to `per_step` single-edit candidates from edits of rejected bundles."""

    name = "ablation"

    def __init__(self, per_step: int = 1):
        self.per_step = per_step

    async def propose(self, state: SearchState) -> list[Candidate]:
        ledger = state.ledger
        if not isinstance(ledger, EditLedger):
            return []
        out = []
        for e in ledger.take_untested(self.per_step):
            sources = [t for t in e.evidence if t in state.tasks] or [r.task_id for r in state.scored if r.failed][:4]
            out.append(Candidate(id="", step=state.step, origin="ablation", parent=state.version, edits=[e],
                                 rationale="tried alone: it was rejected only as part of a bundle",
                                 sources=sources or [r.task_id for r in state.scored][:4]))
        return out
