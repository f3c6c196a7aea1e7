"""The version tree of a run: each skill version with its parent, origin, gate decision and evidence."""

from __future__ import annotations

import difflib

from pydantic import BaseModel, Field

from skillopt.record import Candidate, GateDecision
from skillopt.report.data import RunView
from skillopt.store.schema import SplitScore
from skillopt.traces.trigger import TriggerRate, trigger_rate


class AppliedEdit(BaseModel):
    op: str
    part: str = "body"  # "description": the edit replaced the front-matter description
    anchor: str | None = None
    text: str = ""
    rationale: str = ""
    evidence: list[str] = Field(default_factory=list)
    status: str = ""
    detail: str = ""


class VersionNode(BaseModel):
    version: int
    label: str
    parent: int | None
    origin: str
    status: str
    step: int | None
    sha: str
    val_score: float | None
    marks: list[str] = Field(default_factory=list)  # "seed", "best" (older runs: also "final")
    children: list[int] = Field(default_factory=list)
    gate: GateDecision | None = None
    note: str = ""  # a candidate's screen or why it was not tried (runs with candidates.json)
    edits: list[AppliedEdit] = Field(default_factory=list)  # what the step applied (step versions)
    scores: dict[str, SplitScore] = Field(default_factory=dict)  # split -> score from rollouts
    trigger: dict[str, TriggerRate] = Field(default_factory=dict)  # split -> share of rollouts that loaded the skill


class Lineage(BaseModel):
    run_id: str
    benchmark: str
    harness: str
    target_model: str
    optimizer_model: str
    status: str
    stop_reason: str | None = None
    steps: int = 0
    data_hash: str = ""
    nodes: list[VersionNode]

    def node(self, version: int) -> VersionNode:
        return next(n for n in self.nodes if n.version == version)

    @property
    def roots(self) -> list[VersionNode]:
        known = {n.version for n in self.nodes}
        return [n for n in self.nodes if n.parent is None or n.parent not in known]


def build_lineage(view: RunView) -> Lineage:
    """Every version of the run, linked to its parent, with its gate decision and scores."""
    gates = view.gates()
    marks: dict[int, list[str]] = {}
    for role in ("seed", "best", "final"):
        v = view.role_version(role)
        if v is not None and not (role == "final" and v == view.role_version("best")):
            marks.setdefault(v, []).append(role)
    cands = {c.version: c for c in view.candidates() if c.version is not None}
    nodes = []
    for v in view.versions():
        scores = {s: sc for s in ("val", "test") if (sc := view.split_score(v.version, s)) is not None}
        trigger = {s: tr for s in ("train", "val", "test")
                   if (tr := trigger_rate(view.records_for(v.sha, s))) is not None}
        edits, note = [], ""
        if (c := cands.get(v.version)) is not None:
            edits = [AppliedEdit(op=e.op, part=e.part, anchor=e.anchor, text=e.text, rationale=e.rationale,
                                 evidence=e.evidence, status="applied") for e in c.edits]
            if c.screen is not None and c.gate is None:
                note = (f"{c.origin}; screen on train: {sum(c.screen.candidate):g} vs {sum(c.screen.incumbent):g} "
                        f"on {len(c.screen.tasks)} tasks")
            elif c.gate is None:
                note = f"{c.origin}; {c.note or c.status}"
        nodes.append(VersionNode(
            version=v.version, label=v.label, parent=v.parent, origin=v.origin, status=version_status(v, c), step=v.step,
            sha=v.sha, val_score=v.val_score, marks=marks.get(v.version, []), gate=gates.get(v.version),
            edits=edits, scores=scores, trigger=trigger, note=note))
    by_version = {n.version: n for n in nodes}
    for n in nodes:
        if n.parent is not None and n.parent in by_version:
            by_version[n.parent].children.append(n.version)
    st, summary = view.state, view.summary
    return Lineage(run_id=view.run_id, benchmark=view.benchmark, harness=view.harness,
                   target_model=view.target_model, optimizer_model=view.optimizer_model, status=view.status,
                   stop_reason=(st.stop_reason if st else None) or (summary.stop_reason if summary else None),
                   steps=st.step if st else (summary.steps if summary else 0), data_hash=view.data_hash, nodes=nodes)


def version_status(v, c: Candidate | None) -> str:
    """The one name every view gives a version's status: the version's own, except that a stored
    candidate its step never gated is "not-gated" (as its candidate says), not "candidate"."""
    if v.status == "candidate" and c is not None and c.status == "not-gated":
        return "not-gated"
    return v.status


def gate_evidence(g: GateDecision) -> str:
    """One line: the decision, its reason, and the paired counts behind it. Its scores are means over
    the pairs the gate evaluated, said as such: a version's val score (all its val rollouts) may differ."""
    verdict = "accepted" if g.accepted else "rejected"
    early = ", stopped early" if g.early_stopped else ""
    return (f"{verdict}: {g.reason} [{g.metric}, mean over the {g.evaluated} gate pair(s): v{g.incumbent:03d} "
            f"{g.incumbent_score:.3f} vs v{g.candidate:03d} {g.candidate_score:.3f}; {g.wins} wins, {g.losses} losses, "
            f"{g.ties} ties; evaluated {g.evaluated}/{g.total}{early}]")


def skill_diff(old: str, new: str, old_label: str, new_label: str, context: int = 3) -> str:
    """A unified diff of two rendered skills ('' when they are the same)."""
    lines = difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                 fromfile=old_label, tofile=new_label, n=context)
    return "".join(x if x.endswith("\n") else x + "\n" for x in lines)
