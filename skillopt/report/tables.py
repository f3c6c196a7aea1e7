"""Plain tables (title, header, rows of text) built from report models, and their Markdown form.

The CLI draws the same tables with rich; Markdown goes into PRs; JSON is the models themselves.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from skillopt.report.compare import Comparison, PairedRow
from skillopt.stats import Interval


@dataclass
class TextTable:
    title: str
    header: list[str]
    rows: list[list[str]] = field(default_factory=list)
    caption: str = ""


def fmt_interval(i: Interval | None) -> str:
    if i is None or i.n == 0:
        return "-"
    if i.method == "none":
        return f"{i.mean:.3f}"
    return f"{i.mean:.3f} [{i.lo:.3f}, {i.hi:.3f}]"


def fmt_delta(x: float) -> str:
    return f"{x:+.3f}"


def fmt_cost(cost: float | None, tokens: int | None = None) -> str:
    if cost is None:
        return "unknown"
    if tokens == 0 and cost == 0:
        return "$0"
    return f"${cost:.4f}"


def _wlt(r: PairedRow | None) -> str:
    return "-" if r is None else f"{r.lift.wins}/{r.lift.losses}/{r.lift.ties}"


def _lift(r: PairedRow | None) -> str:
    if r is None:
        return "-"
    i = r.lift.interval
    return f"{i.mean:+.3f} [{i.lo:+.3f}, {i.hi:+.3f}]"


def _verdict(r: PairedRow | None) -> str:
    return "-" if r is None else r.lift.verdict


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
    scores = TextTable("scores: mean [95% CI]", ["split", "skill", "scored", "errored", "tasks", "hard", "soft"]
                       + (["skill loaded"] if triggered else []),
                       caption="over the scored rollouts (errored ones are infrastructure failures, counted apart, "
                               "never scored; '-': no score); hard: Wilson interval; soft: Student t interval"
                               + ("; skill loaded: rollouts whose agent loaded the skill" if triggered else ""))
    for r in cmp.scores:
        row = [r.split, r.label, str(r.rollouts), str(r.errors), str(r.tasks), fmt_interval(r.hard),
               fmt_interval(r.soft)]
        scores.rows.append(row + ([r.trigger.text() if r.trigger else "-"] if triggered else []))
    first = cmp.entries[0].label
    paired = TextTable(f"paired against {first}", ["split", "skill", "tasks", "hard W/L/T", "hard lift [95% CI]",
                                                   "hard verdict", "soft W/L/T", "soft lift [95% CI]", "soft verdict"],
                       caption=f"per task (mean over scored trials): W/L/T = tasks where the skill beats / trails / "
                               f"ties {first}; lift = mean per-task difference with its paired 95% interval "
                               f"(Agresti-Min on 0/1 outcomes, Student t otherwise), the test of the run's summary "
                               f"and report; better / worse when the interval lies above / below 0")
    by_key: dict[tuple[str, str], dict[str, PairedRow]] = {}
    for r in cmp.paired:
        by_key.setdefault((r.split, r.label), {})[r.metric] = r
    for (split, label), rows in by_key.items():
        h, s = rows.get("hard"), rows.get("soft")
        n = next(r.lift.n for r in (h, s) if r is not None)  # a key has a row of one metric at least
        paired.rows.append([split, label, str(n), _wlt(h), _lift(h), _verdict(h), _wlt(s), _lift(s), _verdict(s)])
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
