"""`skillopt compare A B [C ...]`: is the new skill really better, and where."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape
from rich.table import Table

from skillopt.cli.app import Globals, app, load_env, out
from skillopt.errors import BadInput

FORMATS = ("table", "json", "markdown")


@app.command(help="""Compare skills: scores with 95% confidence intervals per split (errored rollouts counted
apart, never scored), per-task wins / losses / ties against the first skill, the paired lift with its 95%
interval and verdict (the same test as the run's summary and the report), tokens and cost, and with --diff
the skill texts' diffs.

Each argument is RUN (its best version), RUN:vN, RUN:best, RUN:final, RUN:seed or a SKILL.md file. A
file is scored on the benchmark of the first run given (or --benchmark / --target_model / --harness),
reusing every rollout any run under --runs-dir already has.

Example: skillopt compare RUN:seed RUN:best --diff   |   skillopt compare RUN:best my/SKILL.md --format markdown""")
def compare(
    refs: list[str] = typer.Argument(..., help="Two or more skills: RUN, RUN:vN, RUN:best or a SKILL.md path."),
    split: list[str] = typer.Option(None, "--split", show_default="val and test",
                                    help="Split to compare (repeatable): train | val | test | all."),
    fmt: str = typer.Option("table", "--format", "-f", help="table | json | markdown"),
    as_json: bool = typer.Option(False, "--json", help="Same as --format json."),
    diff: bool = typer.Option(False, "--diff", help="Add a unified diff of each skill against the first."),
    benchmark: str = typer.Option(None, "--benchmark", "-b", show_default="the first run's",
                                  help="Benchmark for scoring skill files."),
    harness: str = typer.Option(None, "--harness", show_default="the first run's", help="Harness for scoring skill files."),
    target_model: str = typer.Option(None, "--target-model", "--target_model", show_default="the first run's",
                                     help="Target for scoring skill files."),
    trials: int = typer.Option(None, "--trials", show_default="1", help="Trials per task when scoring skill files."),
    concurrency: int = typer.Option(None, "--concurrency", show_default="4", help="Rollouts in flight."),
    config: Path = typer.Option(None, "--config", show_default="none", help="YAML config for scoring skill files."),
    overrides: list[str] = typer.Option(None, "--set", show_default="none", help="Dotted override for scoring skill files."),
    no_sandbox: bool = typer.Option(False, "--no-sandbox", help="Score skill files with agents unsandboxed."),
) -> None:
    from skillopt.api import compare as compare_api
    from skillopt.progress.bars import ProgressView

    fmt = "json" if as_json else fmt
    if fmt not in FORMATS:
        raise BadInput(f"unknown format {fmt!r}: use {', '.join(FORMATS)}")
    view = ProgressView()
    try:
        cmp = compare_api(*refs, splits=split or ["val", "test"], diff=diff, benchmark=benchmark,
                          config=config or Globals.config, set=list(overrides or []), runs_dir=Globals.runs_dir,
                          env=load_env(), listeners=[view], trials=trials,
                          harness=harness, target_model=target_model, concurrency=concurrency,
                          sandbox=False if no_sandbox else None)
    finally:
        view.stop()
    if fmt == "json":
        typer.echo(cmp.model_dump_json(indent=2))
    elif fmt == "markdown":
        from skillopt.report.tables import compare_markdown

        typer.echo(compare_markdown(cmp))
    else:
        _print_tables(cmp)


def _print_tables(cmp) -> None:
    from skillopt.report.tables import compare_tables

    for w in cmp.warnings:
        out.print(f"[bold yellow]warning:[/] {escape(w)}", highlight=False)
    for t in compare_tables(cmp):
        table = Table(title=t.title, caption=t.caption or None, title_justify="left")
        for h in t.header:
            table.add_column(h)
        for row in t.rows:
            table.add_row(*row)
        out.print(table)
    for n in cmp.notes:
        out.print(f"note: {n}", markup=False, highlight=False)
    for label, text in cmp.diffs.items():
        out.print(f"\ndiff {cmp.entries[0].label} -> {label}:", markup=False, highlight=False)
        if not text:
            out.print("  (no change)")
        for line in text.splitlines():
            style = "green" if line.startswith("+") else "red" if line.startswith("-") else "cyan" if line.startswith("@@") else None
            out.print(line, style=style, markup=False, highlight=False)
