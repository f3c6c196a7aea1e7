"""What the optimizer tried, step by step, as the report shows it: every candidate of every step with
its edits (text and rationale), the leakage check, the screen on its train tasks, the gate's evidence
(test, p-value, wins / losses / ties, every pair) and, in one line, why it was kept or not; and the
end-of-epoch consolidations. Reads `steps/*/candidates.json`, `batch.json`, `metrics.jsonl` and
`consolidation/epoch-*.json` through `RunView`."""

from __future__ import annotations

from pydantic import BaseModel, Field

from skillopt.record import Candidate, GateDecision
from skillopt.report.data import RunView


class EditView(BaseModel):
    op: str
    where: str  # "the description", a quoted anchor, or "the end"
    text: str
    rationale: str = ""


class ScreenView(BaseModel):
    rows: list[tuple[str, float, float]] = Field(default_factory=list)  # task, incumbent, candidate
    incumbent: float = 0.0
    candidate: float = 0.0
    rollouts: int = 0
    errored: int = 0
    passed: bool = False


class GateView(BaseModel):
    accepted: bool
    test: str
    stop: str
    reason: str
    p_value: float | None
    alpha: float | None
    wins: int
    losses: int
    ties: int
    evaluated: int
    total: int
    skipped: int
    rollouts: int
    incumbent: str
    candidate: str
    incumbent_score: float
    candidate_score: float
    pairs: list[tuple[str, int, float, float]] = Field(default_factory=list)  # task, trial, incumbent, candidate


class CandidateView(BaseModel):
    id: str
    origin: str
    version: str
    status: str
    kept: bool
    verdict: str  # why it was kept or not, in one line
    rationale: str
    edits: list[EditView]
    leakage: list[str]
    screen: ScreenView | None = None
    gate: GateView | None = None


class StepView(BaseModel):
    step: int
    epoch: int
    incumbent: str
    train: str  # the incumbent's score on the step's batch
    decision: str
    candidates: list[CandidateView] = Field(default_factory=list)


class ConsolidationView(BaseModel):
    epoch: int
    gate: GateView


class Optimization(BaseModel):
    steps: list[StepView] = Field(default_factory=list)
    consolidations: dict[int, ConsolidationView] = Field(default_factory=dict)  # after the epoch's last step


def gate_view(g: GateDecision) -> GateView:
    return GateView(accepted=g.accepted, test=g.test or "sign test", stop=g.stop, reason=g.reason, p_value=g.p_value,
                    alpha=g.alpha, wins=g.wins, losses=g.losses, ties=g.ties, evaluated=g.evaluated, total=g.total,
                    skipped=g.skipped, rollouts=g.rollouts, incumbent=f"v{g.incumbent:03d}",
                    candidate=f"v{g.candidate:03d}", incumbent_score=g.incumbent_score,
                    candidate_score=g.candidate_score,
                    pairs=[(p.task_id, p.trial, p.incumbent, p.candidate) for p in g.pairs])


def verdict(c: Candidate) -> tuple[bool, str]:
    """(kept, why) for a candidate, in the words of its decision."""
    if c.status == "accepted" and c.gate is not None:
        return True, f"kept: the gate accepted it ({c.gate.reason})"
    if c.status == "rejected" and c.gate is not None:
        return False, f"not kept: the gate rejected it ({c.gate.reason})"
    if c.status == "screened-out" and c.screen is not None:
        return False, (f"not kept: no better than the incumbent on the train tasks it came from "
                       f"({sum(c.screen.candidate):g} vs {sum(c.screen.incumbent):g}), so never gated")
    reasons = {"leaked": "not tried: every edit copied task text (leakage check)",
               "no-instruction": "not tried: a reflection that gave code or a command, no instruction",
               "not-applied": "not tried: no edit applied to the skill",
               "over-cap": "not tried: over the skill's token cap",
               "duplicate": "not tried: nothing new (the same skill was tried, or the edit says what the skill says)",
               "not-gated": "not gated: another candidate of this step was gated first"}
    why = reasons.get(c.status, c.status)
    note = c.note.replace("; another candidate was gated first", "")  # runs before it was said once
    return False, f"{why}{f' ({note})' if note and note not in why else ''}"


def _where(e) -> str:
    if e.part == "description":
        return "the description"
    return f"“{e.anchor}”" if e.anchor else "the end"


def candidate_view(c: Candidate) -> CandidateView:
    kept, why = verdict(c)
    screen = None
    if c.screen is not None:
        s = c.screen
        screen = ScreenView(rows=list(zip(s.tasks, s.incumbent, s.candidate)), incumbent=sum(s.incumbent),
                            candidate=sum(s.candidate), rollouts=s.rollouts, errored=s.errored, passed=s.passed)
    return CandidateView(
        id=c.id, origin=c.origin, version="-" if c.version is None else f"v{c.version:03d}", status=c.status,
        kept=kept, verdict=why, rationale=c.rationale,
        edits=[EditView(op=e.op, where=_where(e), text=e.text, rationale=e.rationale) for e in c.edits],
        leakage=list(c.leakage), screen=screen, gate=gate_view(c.gate) if c.gate is not None else None)


def build_optimization(view: RunView, metric: str = "hard") -> Optimization:
    by_step: dict[int, list[Candidate]] = {}
    for c in view.candidates():
        by_step.setdefault(c.step, []).append(c)
    metrics = {m.step: m for m in view.step_metrics()}
    out = Optimization()
    for n in sorted(set(by_step) | set(metrics)):
        batch, m = view.store.read_batch(n), metrics.get(n)
        score = "-"
        if batch is not None and batch.train is not None:
            t = batch.train  # store.scores: errored rollouts apart, no score when none was scored
            value = getattr(t, metric, t.hard)
            score = (f"{value:.3f} on {t.n} tasks" if t.has_score and value is not None else "-") \
                + (f", {t.errors} errored" if t.errors else "")
        out.steps.append(StepView(step=n, epoch=m.epoch + 1 if m else 1,
                                  incumbent=f"v{batch.version if batch else 0:03d}", train=score,
                                  decision=(m.decision if m else None) or "none",
                                  candidates=[candidate_view(c) for c in by_step.get(n, [])]))
    for epoch, g in view.consolidations().items():
        out.consolidations[epoch] = ConsolidationView(epoch=epoch, gate=gate_view(g))
    return out
