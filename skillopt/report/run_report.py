"""`skillopt report RUN`: what happened during training, as one self-contained HTML file or Markdown.

`build_report` reads the run record into a `RunReport` (plain data); `render_html` and
`render_markdown` turn it into text through the Jinja2 templates in `report/templates/`. Charts
are inline SVG (`report/svg.py`): the page needs no network and no JavaScript.
"""

from __future__ import annotations

import time
from functools import lru_cache
from pathlib import Path

import jinja2
from pydantic import BaseModel, Field

from skillopt import __version__
from skillopt.report.data import RunView
from skillopt.report.lineage import Lineage, build_lineage, skill_diff
from skillopt.stats import Interval, PairedLift, score_interval
from skillopt.store.scores import SplitScore, per_task, scored
from skillopt.report.optimization import Optimization, build_optimization
from skillopt.report.rollout_details import CellDetail, cell_details
from skillopt.report.tables import fenced, fmt_cost, fmt_interval

TEMPLATES = Path(__file__).resolve().parent / "templates"
MAX_HEATMAP_TASKS = 80


class CandidatePoint(BaseModel):
    version: int
    label: str
    x: float
    score: float
    accepted: bool
    early_stopped: bool
    kind: str  # "step" | "consolidate"
    reason: str


class StepRow(BaseModel):
    step: int
    epoch: int
    decision: str | None
    candidate: str | None = None
    candidate_score: float | None = None
    incumbent_val: float | None = None
    train: float | None = None  # the incumbent's score on the step's batch
    proposed: int = 0
    selected: int = 0
    applied: int = 0
    tokens: int = 0  # cumulative, every role
    cost_usd: float = 0.0  # cumulative, known prices
    target_tokens: int = 0  # cumulative
    target_cost_usd: float = 0.0


class HeatmapData(BaseModel):
    split: str
    tasks: list[str]
    versions: list[str]
    cells: list[tuple[str, str, float]]  # task, version label, mean hard score
    truncated: int = 0  # tasks left out


class FinalRow(BaseModel):
    """A version's score on val and test (`store.scores.SplitScore`) with the Wilson interval of its
    hard score; the interval is None when no rollout was scored (errored ones are counted apart)."""

    role: str
    version: str
    val: Interval | None = None
    test: Interval | None = None
    val_errors: int = 0
    test_errors: int = 0


class Setting(BaseModel):
    """One line of the report's opening: a setting that matters, and its value."""

    name: str
    value: str


class RoleUsage(BaseModel):
    role: str
    calls: int
    cached_calls: int
    input_tokens: int
    output_tokens: int
    cost_usd: float | None


class RunReport(BaseModel):
    lineage: Lineage
    optimization: Optimization = Field(default_factory=Optimization)
    details: list[CellDetail] = Field(default_factory=list)  # the rollouts behind each heatmap cell

    @property
    def has_trigger(self) -> bool:
        """Whether any version has a trigger rate (agent harnesses)."""
        return any(n.trigger for n in self.lineage.nodes)

    metric: str
    baseline_val: float | None
    settings: list[Setting] = Field(default_factory=list)  # what the report opens with
    test_lift: PairedLift | None = None  # best - seed on the sealed test split (the run summary's)
    findings: list[str] = Field(default_factory=list)  # what the run found besides scores (RunSummary.findings)
    steps: list[StepRow] = Field(default_factory=list)
    candidates: list[CandidatePoint] = Field(default_factory=list)
    heatmaps: list[HeatmapData] = Field(default_factory=list)
    final: list[FinalRow] = Field(default_factory=list)
    roles: list[RoleUsage] = Field(default_factory=list)
    cost_known: bool = False  # every role's cost is known (and some is not zero): the cost chart is drawn
    cost_unknown_roles: list[str] = Field(default_factory=list)
    best_label: str = ""
    best_text: str = ""
    diff_from_seed: str = ""
    notes: list[str] = Field(default_factory=list)
    generated_at: str = ""
    generator: str = f"skillopt {__version__}"


# building -------------------------------------------------------------------------------------------
def build_report(view: RunView, check_data: bool = True) -> RunReport:
    tree = build_lineage(view)
    metric = view.config.gate.metric
    st = view.state
    baseline = getattr(st.baseline_val, metric, None) if st and st.baseline_val else None
    rep = RunReport(lineage=tree, metric=metric, baseline_val=baseline,
                    generated_at=time.strftime("%Y-%m-%d %H:%M:%S"))
    rep.candidates = _candidates(view, tree)
    rep.optimization = build_optimization(view, metric)
    rep.steps = _steps(view, rep.candidates)
    rep.heatmaps = [h for s in ("val", "test") if (h := _heatmap(view, s)) is not None]
    rep.details = cell_details(view, [(h.split, t, v, sc) for h in rep.heatmaps for t, v, sc in h.cells])
    rep.final = _final(view)
    rep.settings = _settings(view)
    rep.test_lift = view.summary.test_lift if view.summary else None
    rep.findings = view.summary.findings() if view.summary else []
    meter = view.summary.meter if view.summary else (st.meter if st else None)
    if meter is not None:
        rep.roles = [RoleUsage(role=r, calls=t.calls, cached_calls=t.cached_calls, input_tokens=t.input_tokens,
                               output_tokens=t.output_tokens, cost_usd=t.cost_usd)
                     for r, t in sorted(meter.roles.items())]
    rep.cost_unknown_roles = [r.role for r in rep.roles if r.cost_usd is None]
    rep.cost_known = not rep.cost_unknown_roles and any((r.cost_usd or 0) > 0 for r in rep.roles)
    best = view.role_version("best") or 0
    rep.best_label = f"v{best:03d}"
    rep.best_text = view.store.skill(best).render()
    rep.diff_from_seed = skill_diff(view.store.skill(0).render(), rep.best_text, "v000 (seed)", f"{rep.best_label} (best)")
    if view.in_progress:
        rep.notes.append(f"the run is {view.status}: this report shows what it has so far")
    if check_data:
        from skillopt.engine.settings import data_change

        if note := data_change(view.config.layer(), view.data_hash):
            rep.notes.append(note)
    if view.mode == "eval":
        rep.notes.append("this is an evaluation run: it has no training steps")
    return rep


def _candidates(view: RunView, tree: Lineage) -> list[CandidatePoint]:
    out = []
    for n in tree.nodes:
        g = n.gate
        if g is None or n.version == 0:
            continue
        x = view.step_of(view.store.version(n.version))
        if x is None:
            continue
        out.append(CandidatePoint(version=n.version, label=n.label, x=x, score=g.candidate_score, accepted=g.accepted,
                                  early_stopped=g.early_stopped,
                                  kind="consolidate" if n.origin.startswith("consolidate") else "step", reason=g.reason))
    return sorted(out, key=lambda c: (c.x, c.version))


def _steps(view: RunView, cands: list[CandidatePoint]) -> list[StepRow]:
    by_step = {int(c.x): c for c in cands if c.kind == "step"}
    rows = []
    for m in view.step_metrics():
        tokens, cost = view.usage_of_first(m.rollouts)
        c = by_step.get(m.step)
        rows.append(StepRow(
            step=m.step, epoch=m.epoch + 1, decision=m.decision, candidate=c.label if c else None,
            candidate_score=c.score if c else None, incumbent_val=m.val, proposed=m.proposed,
            train=m.train_hard, selected=m.selected, applied=m.applied,
            tokens=m.tokens, cost_usd=m.cost_usd, target_tokens=tokens, target_cost_usd=cost))
    return rows


def _heatmap(view: RunView, split: str) -> HeatmapData | None:
    cols: list[str] = []
    cells: list[tuple[str, str, float]] = []
    seen_sha: dict[str, str] = {}
    for v in view.versions():
        if v.sha in seen_sha:
            continue  # the same text under another number: one column is enough
        recs = view.records_for(v.sha, split)
        if not recs:
            continue
        seen_sha[v.sha] = v.label
        cols.append(v.label)
        cells += [(t, v.label, s) for t, s in per_task(recs, "hard").items()]
    if not cols:
        return None
    tasks = sorted({t for t, _, _ in cells})
    keep = set(tasks[:MAX_HEATMAP_TASKS])
    return HeatmapData(split=split, tasks=sorted(keep), versions=cols, cells=[c for c in cells if c[0] in keep],
                       truncated=len(tasks) - len(keep))


def _final(view: RunView) -> list[FinalRow]:
    rows = []
    for role in ("seed", "best", "final"):
        v = view.role_version(role)
        if v is None or (role == "final" and v == view.role_version("best")):
            continue
        sha = view.store.version(v).sha
        row = FinalRow(role="baseline (seed)" if role == "seed" else role, version=f"v{v:03d}")
        for split in ("val", "test"):
            recs = view.records_for(sha, split)
            if recs:
                ok = scored(recs)
                setattr(row, split, score_interval([r.hard for r in ok]) if ok else None)
                setattr(row, f"{split}_errors", SplitScore.of(recs).errors)
        rows.append(row)
    return rows


def _settings(view: RunView) -> list[Setting]:
    """The settings that matter, first on the page: benchmark, models, split sizes, gate, wall time."""
    cfg = view.config
    tasks: dict[str, set[str]] = {}
    for r in view.rollouts:
        tasks.setdefault(r.split, set()).add(r.task_id)
    sizes = cfg.splits
    asked = {"train": sizes.train, "val": sizes.val, "test": "the rest" if sizes.test is None else sizes.test}
    split_text = ", ".join(f"{s} {len(tasks[s]) if s in tasks else asked[s]}" for s in ("train", "val", "test")
                           if s in tasks or cfg.mode == "train")
    out = [Setting(name="benchmark", value=f"{cfg.benchmark} (data {view.data_hash})" if view.data_hash
                   else cfg.benchmark),
           Setting(name="harness", value=cfg.harness),
           Setting(name="target model", value=cfg.target_model)]
    if cfg.mode == "train":
        g = cfg.gate
        out += [Setting(name="optimizer model", value=cfg.optimizer_model or "-"),
                Setting(name="tasks per split", value=f"{split_text} (split seed {sizes.seed})"),
                Setting(name="training", value=f"{cfg.train.epochs} epoch(s), batch {cfg.train.batch_size}"),
                Setting(name="gate", value=f"{g.metric} score, alpha {g.alpha}, min effect {g.min_effect}, "
                                           f"{g.trials} trial(s) per task, early stop {'on' if g.early_stop else 'off'}")]
    else:
        out.append(Setting(name="tasks", value=split_text or "-"))
    out.append(Setting(name="wall time", value=_wall_time(view)))
    return out


def _wall_time(view: RunView) -> str:
    s = view.summary
    if s is not None and s.started_at and s.finished_at >= s.started_at:
        secs = s.finished_at - s.started_at
    elif view.rollouts:
        secs = max(r.created_at for r in view.rollouts) - min(r.created_at - r.duration_s for r in view.rollouts)
        return f"at least {_duration(secs)} (from its rollouts; the run has no summary)"
    else:
        return "-"
    return _duration(secs)


def _duration(secs: float) -> str:
    secs = max(0, int(round(secs)))
    h, rest = divmod(secs, 3600)
    m, sec = divmod(rest, 60)
    return f"{h} h {m} min" if h else f"{m} min {sec} s" if m else f"{sec} s"


# rendering ----------------------------------------------------------------------------------------------
@lru_cache(maxsize=2)
def _env(html: bool) -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), undefined=jinja2.StrictUndefined,
                             autoescape=html, trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
    env.filters.update(interval=lambda i: "-" if i is None else fmt_interval(i), cost=fmt_cost,
                       score=lambda x: "-" if x is None else f"{x:.3f}", fenced=fenced,
                       num=lambda x: f"{x:g}" if x == int(x) else f"{x:.3f}",
                       pval=lambda p: "-" if p is None else ("<0.001" if p < 0.001 else f"{p:.4f}"))
    return env


def diff_lines(diff: str) -> list[tuple[str, str]]:
    """(css class, line) for each line of a unified diff."""
    out = []
    for line in diff.splitlines():
        css = ("meta" if line.startswith(("---", "+++")) else "add" if line.startswith("+")
               else "del" if line.startswith("-") else "hunk" if line.startswith("@@") else "ctx")
        out.append((css, line))
    return out


def render_html(rep: RunReport) -> str:
    from skillopt.report.charts import charts

    return _env(True).get_template("report.html.j2").render(r=rep, charts=charts(rep), diff=diff_lines(rep.diff_from_seed))


def render_markdown(rep: RunReport) -> str:
    return _env(False).get_template("report.md.j2").render(r=rep)


def write_report(view: RunView, path: Path, fmt: str = "html") -> Path:
    from skillopt.io.files import atomic_write_text

    rep = build_report(view)
    atomic_write_text(path, render_html(rep) if fmt == "html" else render_markdown(rep))
    return path
