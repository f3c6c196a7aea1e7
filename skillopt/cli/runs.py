"""`skillopt runs list | show RUN | show RUN:vN`: runs, their version trees and gate decisions."""

from __future__ import annotations

import json
import time

import typer
from rich.table import Table

from skillopt.cli.app import Globals, app, new_app, out
from skillopt.report.runs_list import run_rows
from skillopt.stats import outcome as task_outcome

runs_app = new_app("List runs and show one run's skill versions and decisions.")
app.add_typer(runs_app, name="runs")


@runs_app.command("list", help="""List runs under --runs-dir, oldest first, with their whole ids (every other
command takes one).

Example: skillopt runs list   |   skillopt runs list --json""")
def list_(as_json: bool = typer.Option(False, "--json", help="Print the runs as a JSON list.")) -> None:
    rows = run_rows(Globals.runs_dir)
    if as_json:
        typer.echo(json.dumps([r.model_dump() for r in rows], indent=2))
        return
    if not rows:
        out.print(f"no runs in {Globals.runs_dir}", markup=False)
        return
    for header, cells in _layouts(rows):  # piped: every column; a terminal: the first layout that fits
        widths = [max(len(c[i]) for c in [header, *cells]) for i in range(len(header))]
        if not out.is_terminal or sum(widths) + 2 * (len(widths) - 1) <= out.width:
            break
    for line in [header, *cells]:  # plain columns, one line per run: nothing wraps, ids stay whole
        typer.echo("  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip())
    for r in rows:
        if r.problem:
            typer.echo(f"warning: run {r.run_id} is damaged: {r.problem}", err=True)


LIST_COLUMNS = ("run", "status", "benchmark", "harness", "target", "versions", "val (seed -> best)", "test best",
                "updated")
# narrower and narrower: (columns left out, target width, benchmark width)
LAYOUTS = (((), 36, 24), (("updated",), 36, 24), (("updated", "versions"), 28, 18),
           (("updated", "versions", "harness"), 24, 16), (("updated", "versions", "harness", "benchmark"), 18, 12))


def _layouts(rows):
    for drop, spec_w, bench_w in LAYOUTS:
        keep = [i for i, c in enumerate(LIST_COLUMNS) if c not in drop]
        cells = [_list_cells(r, spec_w, bench_w) for r in rows]
        yield [LIST_COLUMNS[i] for i in keep], [[c[i] for i in keep] for c in cells]


def short_spec(spec: str | None, width: int = 36) -> str:
    """A model spec or benchmark path short enough for a column: a base URL as host:port, then (still
    too long) without it, then without the provider, then with the middle cut out; a .jsonl file by
    its name."""
    text = str(spec or "-")
    if text.lower().endswith(".jsonl"):
        text = text.replace("\\", "/").rsplit("/", 1)[-1]
    name, at, url = text.partition("@")
    tries = [text]
    if at:
        tries = [f"{name}@{url.split('://', 1)[-1].split('/', 1)[0]}", name]
    if ":" in name:
        tries.append(name.split(":", 1)[1])
    text = next((t for t in tries if len(t) <= width), tries[-1])
    if len(text) > width:
        keep = width - 3
        text = text[:(keep + 1) // 2] + "..." + text[len(text) - keep // 2:]
    return text


def _list_cells(r, spec_w: int = 36, bench_w: int = 24) -> list[str]:
    val = f"{_score(r.seed_val)} -> {_score(r.best_val)}" if r.seed_val is not None or r.best_val is not None else "-"
    return [r.run_id, f"{r.mode}:{r.status}", short_spec(r.benchmark, bench_w), str(r.harness),
            short_spec(r.target_model, spec_w),
            str(r.versions), val, _score(r.best_test), time.strftime("%Y-%m-%d %H:%M", time.localtime(r.updated))]


def _score(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


@runs_app.command("show", help="""Show a run's version tree (parent, origin, gate decision and its evidence,
scores), or one version (its gate evidence per task, the edits that made it, its text).

Example: skillopt runs show RUN   |   skillopt runs show RUN:v2 --diff   |   skillopt runs show RUN:best""")
def show(
    ref: str = typer.Argument(..., help="RUN, or RUN:vN / RUN:best / RUN:final / RUN:seed for one version."),
    diff: bool = typer.Option(False, "--diff", help="With RUN:vN: print the diff from the parent, not the text."),
    as_json: bool = typer.Option(False, "--json", help="Print the lineage (or the version) as JSON."),
) -> None:
    from skillopt.report.data import RunView
    from skillopt.report.lineage import build_lineage

    run_id, _, which = ref.partition(":")
    view = RunView.open(Globals.runs_dir, run_id)
    tree = build_lineage(view)
    if which:
        from skillopt.store.refs import resolve_skill_ref

        r = resolve_skill_ref(ref, Globals.runs_dir)
        node = tree.node(r.version or 0)
        if as_json:
            typer.echo(node.model_dump_json(indent=2))
            return
        _print_version(view, node, diff)
        return
    if as_json:
        typer.echo(tree.model_dump_json(indent=2))
        return
    _print_tree(tree)


def _score_text(node) -> str:
    parts = [f"{s} {sc.text()}" for s, sc in node.scores.items()]
    text = ", ".join(parts) if parts else (node.note or "no scores")
    loaded = [f"{s} {tr.text()}" for s, tr in node.trigger.items()]
    return text + (f"; skill loaded: {', '.join(loaded)}" if loaded else "")


def _print_tree(tree) -> None:
    from skillopt.report.lineage import gate_evidence

    out.print(f"run {tree.run_id}: {tree.benchmark} / {tree.harness} / target {tree.target_model}"
              f"{' / optimizer ' + tree.optimizer_model if tree.optimizer_model else ''}", markup=False)
    stop = f", stopped: {tree.stop_reason}" if tree.stop_reason else ""
    out.print(f"status {tree.status}, {tree.steps} steps{stop}"
              f"{', data ' + tree.data_hash if tree.data_hash else ''}", markup=False)
    if tree.status != "finished":
        out.print(f"note: the run is {tree.status}; this is what it has so far", markup=False)
    out.print("versions (hard score on val / test: mean over every scored rollout of the version, errored ones apart; "
              "for agent harnesses the share of rollouts whose agent loaded the skill; gate evidence under each "
              "candidate, its scores over the gate's pairs only):", markup=False)
    by_version = {n.version: n for n in tree.nodes}

    def walk(n, prefix: str, last: bool, top: bool) -> None:
        branch = "" if top else ("└── " if last else "├── ")
        marks = f"  <{', '.join(n.marks)}>" if n.marks else ""
        out.print(f"{prefix}{branch}{n.label} [{n.status}] {n.origin}: {_score_text(n)}{marks}",
                  markup=False, highlight=False)
        inner = prefix + ("" if top else ("    " if last else "│   "))
        kids = [by_version[c] for c in n.children]
        detail = inner + ("│   " if kids else "    ")
        if n.gate is not None:
            out.print(f"{detail}gate {gate_evidence(n.gate)}", markup=False, highlight=False)
        for e in n.edits:
            where = " of the description" if e.part == "description" else f" at {e.anchor!r}" if e.anchor else ""
            out.print(f"{detail}edit {e.op}{where} ({e.status}): {e.rationale or e.text[:80]}",
                      markup=False, highlight=False)
        for i, k in enumerate(kids):
            walk(k, inner, i == len(kids) - 1, False)

    for r in tree.roots:
        walk(r, "", True, True)


def _print_version(view, node, diff: bool) -> None:
    from skillopt.report.lineage import gate_evidence, skill_diff

    parent = "none" if node.parent is None else f"v{node.parent:03d}"
    marks = f"  <{', '.join(node.marks)}>" if node.marks else ""
    out.print(f"{view.run_id}:{node.label} [{node.status}] {node.origin}, parent {parent}, sha {node.sha[:12]}{marks}",
              markup=False)
    out.print(f"scores (hard, mean over every scored rollout of the version): {_score_text(node)}", markup=False)
    for e in node.edits:
        where = " of the description" if e.part == "description" else f" at {e.anchor!r}" if e.anchor else ""
        out.print(f"edit {e.op}{where} ({e.status}{': ' + e.detail if e.detail else ''}); rationale: {e.rationale or '-'}; "
                  f"evidence: {', '.join(e.evidence) or '-'}", markup=False)
    g = node.gate
    if g is not None:
        out.print(f"gate {gate_evidence(g)}", markup=False)
        table = Table(title=f"gate evidence ({g.metric}, per task, mean over trials)", title_justify="left")
        for col in ("task", f"v{g.incumbent:03d} (incumbent)", f"v{g.candidate:03d} (candidate)", "outcome"):
            table.add_column(col)
        for t in g.per_task:
            if t.candidate is None:
                outcome, cand = "not evaluated", "-"
            else:
                cand = f"{t.candidate:.3f}"
                outcome = task_outcome(t.incumbent, t.candidate)
            table.add_row(t.task_id, f"{t.incumbent:.3f}", cand, outcome)
        out.print(table)
    elif node.status == "not-gated":
        out.print("gate: not gated (it passed its screen; another candidate of its step was gated first)", markup=False)
    elif node.status in ("accepted", "rejected", "candidate"):
        out.print("gate: no decision recorded", markup=False)
    text = view.store.skill(node.version).render()
    if diff:
        if node.parent is None:
            out.print("(no parent: this is a root version)", markup=False)
        else:
            old = view.store.skill(node.parent).render()
            d = skill_diff(old, text, f"v{node.parent:03d}", node.label)
            for line in (d or "(no change)\n").splitlines():
                style = "green" if line.startswith("+") else "red" if line.startswith("-") else None
                out.print(line, style=style, markup=False, highlight=False)
        return
    out.print("")
    out.print(text, markup=False, highlight=False)
