"""Plain tables (title, header, rows of text) built from report models, and their Markdown form.

The CLI draws the same tables with rich; Markdown goes into PRs; JSON is the models themselves.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from skillopt.report.compare import Comparison, PairedRow
from skillopt.stats import Interval, TestResult


@dataclass
class TextTable:
    title: str
    header: list[str]
    rows: list[list[str]] = field(default_factory=list)
    caption: str = ""


def fmt_score(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def fmt_interval(i: Interval) -> str:
    if i.n == 0:
        return "-"
    if i.method == "none":
        return f"{i.mean:.3f}"
    return f"{i.mean:.3f} [{i.lo:.3f}, {i.hi:.3f}]"


def fmt_p(p: float | None) -> str:
    if p is None:
        return "-"
    return "<0.001" if p < 0.001 else f"{p:.3g}"


def fmt_delta(x: float) -> str:
    return f"{x:+.3f}"


def fmt_cost(cost: float | None, tokens: int | None = None) -> str:
    if cost is None:
        return "unknown"
    if tokens == 0 and cost == 0:
        return "$0"
    return f"${cost:.4f}"


TEST_NAMES = {"mcnemar-exact": "McNemar", "paired-bootstrap": "bootstrap", "sign-flip-exact": "sign-flip",
              "none": "-"}


def _p_text(t: TestResult | None) -> str:
    if t is None or t.test == "none":
        return "-"
    return f"{fmt_p(t.p_value)} ({TEST_NAMES[t.test]})"


def _wlt(r: PairedRow | None) -> str:
    return "-" if r is None else f"{r.outcomes.wins}/{r.outcomes.losses}/{r.outcomes.ties}"


def _delta(r: PairedRow | None) -> str:
    if r is None:
        return "-"
    text = fmt_delta(r.outcomes.delta)
    t = r.test
    if t.test == "paired-bootstrap" and t.delta_lo is not None and t.delta_hi is not None:
        text += f" [{t.delta_lo:+.3f}, {t.delta_hi:+.3f}]"
    return text


def setup_line(cmp: Comparison) -> str | None:
    """'benchmark / harness / target' when every skill shares them, else None."""
    setups = {(e.benchmark, e.harness, e.target_model) for e in cmp.entries}
    if len(setups) != 1:
        return None
    b, h, t = setups.pop()
    return f"benchmark {b}, harness {h}, target {t}"


def compare_tables(cmp: Comparison) -> list[TextTable]:
    shared = setup_line(cmp)
    header = ["skill", "source", "status"] + ([] if shared else ["benchmark / harness / target"])
    skills = TextTable("skills", header, caption=shared or "")
    for e in cmp.entries:
        if e.kind == "run":
            source = f"run {e.run_id}, v{e.version:03d} ({e.origin})"
            status = e.run_status or "-"
        else:
            source = "skill file"
            status = f"scored now: {e.scored_new} new, {e.scored_cached} reused rollouts"
        row = [e.label, source, status]
        skills.rows.append(row + ([] if shared else [f"{e.benchmark} / {e.harness} / {e.target_model}"]))
    triggered = any(r.trigger is not None for r in cmp.scores)
    scores = TextTable("scores: mean [95% CI]", ["split", "skill", "rollouts", "tasks", "hard", "soft"]
                       + (["skill loaded"] if triggered else []),
                       caption="hard: Wilson interval; soft: Student t interval (over rollouts)"
                               + ("; skill loaded: rollouts whose agent loaded the skill" if triggered else ""))
    for r in cmp.scores:
        row = [r.split, r.label, str(r.rollouts), str(r.tasks), fmt_interval(r.hard), fmt_interval(r.soft)]
        scores.rows.append(row + ([r.trigger.text() if r.trigger else "-"] if triggered else []))
    first = cmp.entries[0].label
    paired = TextTable(f"paired against {first}", ["split", "skill", "tasks", "hard W/L/T", "hard delta", "hard p",
                                                   "soft W/L/T", "soft delta [95% CI]", "soft p"],
                       caption=f"per task (mean over trials): W/L/T = tasks where the skill beats / trails / ties "
                               f"{first}; delta = mean per-task difference; p: exact McNemar on 0/1 outcomes, "
                               f"paired bootstrap otherwise, exact sign-flip when every difference is equal (two-sided)")
    by_key: dict[tuple[str, str], dict[str, PairedRow]] = {}
    for r in cmp.paired:
        by_key.setdefault((r.split, r.label), {})[r.metric] = r
    for (split, label), rows in by_key.items():
        h, s = rows.get("hard"), rows.get("soft")
        n = (h or s).outcomes.n  # type: ignore[union-attr]
        paired.rows.append([split, label, str(n), _wlt(h), _delta(h), _p_text(h.test if h else None),
                            _wlt(s), _delta(s), _p_text(s.test if s else None)])
    usage = TextTable("tokens and cost", ["skill", "rollouts", "tokens in", "tokens out", "cost",
                                          "run tokens", "run cost"],
                      caption="rollouts, tokens and cost of the target on the compared splits; "
                              "run tokens / cost: every role over the skill's whole run")
    for u in cmp.usage:
        usage.rows.append([u.label, str(u.rollouts), str(u.input_tokens), str(u.output_tokens),
                           fmt_cost(u.cost_usd, u.input_tokens + u.output_tokens),
                           "-" if u.run_tokens is None else str(u.run_tokens),
                           "-" if u.run_tokens is None else fmt_cost(u.run_cost_usd, u.run_tokens)])
    return [t for t in (skills, scores, paired, usage) if t.rows]


def markdown_table(t: TextTable, heading: str = "###") -> str:
    def cell(x: str) -> str:
        return x.replace("|", "\\|").replace("\n", " ")

    lines = [f"{heading} {t.title}", "", "| " + " | ".join(cell(h) for h in t.header) + " |",
             "|" + "|".join("---" for _ in t.header) + "|"]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in t.rows]
    if t.caption:
        lines += ["", f"_{t.caption}_"]
    return "\n".join(lines) + "\n"


def compare_markdown(cmp: Comparison) -> str:
    parts = [f"## Skill comparison ({', '.join(e.label for e in cmp.entries)})", ""]
    if cmp.warnings:
        parts += [f"> **Warning:** {w}" for w in cmp.warnings] + [""]
    parts += [markdown_table(t) for t in compare_tables(cmp)]
    if cmp.notes:
        parts += ["### notes", ""] + [f"- {n}" for n in cmp.notes] + [""]
    for label, diff in cmp.diffs.items():
        parts += [f"### diff {cmp.entries[0].label} -> {label}", ""]
        parts += [fenced(diff.rstrip("\n") or "(no change)", "diff"), ""]
    return "\n".join(parts)


def fenced(text: str, lang: str = "") -> str:
    """A Markdown code block whose fence is longer than any backtick run inside `text`."""
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{lang}\n{text}\n{fence}"
