"""The report's charts (inline SVG, `report/svg.py`) from its plain data (`report/run_report.py`).

The validation chart: the incumbent's validation score per step (a staircase), the incumbent's
train score on each step's batch (dashed), epoch boundaries (where the consolidations sit), and one
mark per gated candidate; its legend is made from the marks drawn, so it always matches them.
The usage charts end with the run's totals (the test split included), the numbers of the table.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from skillopt.report.svg import PALETTE, LegendItem, Marker, Series, heatmap, legend_for, line_chart

if TYPE_CHECKING:
    from skillopt.report.run_report import RunReport

ACCEPT, REJECT = "#16a34a", "#dc2626"
TRAIN = PALETTE[1]


def charts(rep: RunReport) -> dict[str, str]:
    """The SVG charts of the report, by name."""
    out = {"validation": validation_chart(rep)}
    out["tokens"], out["cost"] = usage_charts(rep)
    links = {(d.split, d.task, d.version): d.id for d in rep.details}
    for h in rep.heatmaps:
        cells = {(t, v): s for t, v, s in h.cells}
        mine = {(t, v): links[(h.split, t, v)] for (t, v) in cells if (h.split, t, v) in links}
        out[f"heatmap_{h.split}"] = heatmap(f"heatmap-{h.split}", f"{h.split} outcomes: tasks x versions",
                                            h.tasks, h.versions, cells, links=mine)
    return out


def mark_label(m: Marker) -> str:
    what = "consolidation " if m.shape == "diamond" else ""
    return f"{what}{'accepted' if m.fill == ACCEPT else 'rejected'}{' (stopped early)' if m.hollow else ''}"


def epoch_lines(rep: RunReport) -> list[tuple[float, str]]:
    """A dashed line after each epoch's last step (where its consolidation is drawn)."""
    lines = []
    for i, s in enumerate(rep.steps):
        nxt = rep.steps[i + 1] if i + 1 < len(rep.steps) else None
        if nxt is None or nxt.epoch != s.epoch:
            lines.append((s.step + 0.5, f"end of epoch {s.epoch}"))
    return lines if len({s.epoch for s in rep.steps}) > 1 or any(c.kind == "consolidate" for c in rep.candidates) else []


def validation_chart(rep: RunReport) -> str:
    line: list[tuple[float, float]] = []
    if rep.baseline_val is not None:
        line.append((0.0, rep.baseline_val))
    for s in rep.steps:
        if s.incumbent_val is not None:
            line.append((float(s.step), s.incumbent_val))
    for c in rep.candidates:
        if c.kind == "consolidate" and c.accepted:
            line.append((c.x, c.score))
    train = [(float(s.step), s.train) for s in rep.steps if s.train is not None]
    markers = [Marker(x=c.x, y=c.score, css=f"candidate {'accepted' if c.accepted else 'rejected'}",
                      title=f"{c.label} ({c.kind} at step {c.x:g}): {'accepted' if c.accepted else 'rejected'}, "
                            f"{rep.metric} {c.score:.3f}{' on the tasks evaluated before the early stop' if c.early_stopped else ''}"
                            f" - {c.reason}",
                      shape="diamond" if c.kind == "consolidate" else "circle",
                      fill=ACCEPT if c.accepted else REJECT, hollow=c.early_stopped) for c in rep.candidates]
    legend = [LegendItem("incumbent val", PALETTE[0])]
    if train:
        legend.append(LegendItem("incumbent train (step batch)", TRAIN, dash="5 4"))
    legend += legend_for(markers, mark_label)
    series = [Series("incumbent val", line, PALETTE[0], step=True)]
    if train:
        series.append(Series("incumbent train (step batch)", train, TRAIN, dash="5 4"))
    return line_chart("validation-chart", f"{rep.metric} score per step", series, markers, x_label="step",
                      y_label=rep.metric, y_range=(0.0, 1.0), legend=legend, width=1000, height=320,
                      vlines=epoch_lines(rep))


def usage_charts(rep: RunReport) -> tuple[str, str]:
    """Cumulative tokens (and cost, when every price is known) of the target and of the other roles
    per step; the last point, "end", is the run's total as in the usage table."""
    if not rep.steps and not rep.roles:
        return "", ""
    end = float(rep.steps[-1].step + 1) if rep.steps else 1.0
    target_end = next((r for r in rep.roles if r.role == "target"), None)
    others = [r for r in rep.roles if r.role != "target"]
    other_name = " + ".join(r.role for r in others) or "optimizer"
    start = [(0.0, 0.0)]
    target = start + [(float(s.step), float(s.target_tokens)) for s in rep.steps]
    other = start + [(float(s.step), float(max(0, s.tokens - s.target_tokens))) for s in rep.steps]
    target.append((end, float(target_end.input_tokens + target_end.output_tokens) if target_end else target[-1][1]))
    other.append((end, float(sum(r.input_tokens + r.output_tokens for r in others))))
    ticks = {end: "end"}
    legend = [LegendItem("target", PALETTE[0]), LegendItem(other_name, PALETTE[1])]
    tokens = line_chart("tokens-chart", "tokens by role (cumulative)",
                        [Series("target", target, PALETTE[0]), Series(other_name, other, PALETTE[1])],
                        y_label="tokens", legend=legend, width=480, height=250, x_tick_labels=ticks)
    if not rep.cost_known:
        return tokens, ""
    tc = start + [(float(s.step), s.target_cost_usd) for s in rep.steps]
    oc = start + [(float(s.step), max(0.0, s.cost_usd - s.target_cost_usd)) for s in rep.steps]
    tc.append((end, (target_end.cost_usd or 0.0) if target_end else tc[-1][1]))
    oc.append((end, sum(r.cost_usd or 0.0 for r in others)))
    cost = line_chart("cost-chart", "cost by role in USD (cumulative)",
                      [Series("target", tc, PALETTE[0]), Series(other_name, oc, PALETTE[1])],
                      y_label="USD", legend=legend, width=480, height=250, x_tick_labels=ticks)
    return tokens, cost
