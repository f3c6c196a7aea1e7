"""The validation gate: a paired per-task comparison of a candidate with the incumbent.

A candidate is accepted only when its total score on the validation tasks beats the
incumbent's by more than `min_delta` per task; ties are rejected. Evaluation can stop early
once the candidate can no longer win even if it scored perfectly on every remaining task.
"""

from __future__ import annotations

from collections.abc import Mapping

from skillopt.optimizer.types import GateDecision, TaskComparison

EPS = 1e-9


class PairedGate:
    def __init__(self, incumbent: Mapping[str, float], metric: str = "hard", min_delta: float = 0.0,
                 max_score: float = 1.0):
        self.incumbent = dict(incumbent)
        self.metric = metric
        self.min_delta = min_delta
        self.max_score = max_score
        self.candidate: dict[str, float] = {}

    @property
    def remaining(self) -> list[str]:
        return [t for t in self.incumbent if t not in self.candidate]

    def add(self, task_id: str, score: float) -> None:
        if task_id not in self.incumbent:
            raise KeyError(f"task {task_id} is not in the gate's validation set")
        self.candidate[task_id] = score

    def _margin_needed(self) -> float:
        return self.min_delta * len(self.incumbent)

    def can_still_win(self) -> bool:
        best = sum(self.candidate.values()) + self.max_score * len(self.remaining)
        return best - sum(self.incumbent.values()) > self._margin_needed() + EPS

    def decide(self, candidate: int, incumbent: int) -> GateDecision:
        done = [t for t in self.incumbent if t in self.candidate]
        wins = sum(self.candidate[t] > self.incumbent[t] + EPS for t in done)
        losses = sum(self.candidate[t] < self.incumbent[t] - EPS for t in done)
        inc_total = sum(self.incumbent.values())
        cand_total = sum(self.candidate.values())
        early = bool(self.remaining)
        n = max(1, len(self.incumbent))
        accepted = not early and cand_total - inc_total > self._margin_needed() + EPS
        if early:
            reason = f"stopped after {len(done)}/{n} tasks: the candidate can no longer beat the incumbent"
        elif accepted:
            reason = f"improved {self.metric} {inc_total / n:.3f} -> {cand_total / n:.3f} ({wins} wins, {losses} losses)"
        elif abs(cand_total - inc_total) <= EPS:
            reason = f"tie at {inc_total / n:.3f} ({wins} wins, {losses} losses): ties are rejected"
        else:
            reason = f"no improvement: {self.metric} {inc_total / n:.3f} -> {cand_total / n:.3f}"
        ev_inc = sum(self.incumbent[t] for t in done) / max(1, len(done))
        return GateDecision(
            candidate=candidate, incumbent=incumbent, accepted=accepted, reason=reason, metric=self.metric,
            incumbent_score=round(inc_total / n if not early else ev_inc, 6),
            candidate_score=round(cand_total / max(1, len(done)), 6),
            wins=wins, losses=losses, ties=len(done) - wins - losses, evaluated=len(done), total=n,
            early_stopped=early,
            per_task=[TaskComparison(task_id=t, incumbent=s, candidate=self.candidate.get(t))
                      for t, s in self.incumbent.items()],
        )
