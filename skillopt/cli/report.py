"""`skillopt report RUN -o report.html`: what happened during training."""

from __future__ import annotations

from pathlib import Path

import typer

from skillopt.cli.app import Globals, app, console, out
from skillopt.errors import BadInput

FORMATS = ("html", "markdown")


@app.command(help="""Write a report of a run: the settings that matter and the wall time, the sealed-test
paired lift (best - seed), the final table, validation score per step with accepted / rejected candidates,
a tasks x versions heatmap, tokens and cost by role, and the best skill with its diff from the seed. HTML is one self-contained file (inline SVG, no scripts, no network); Markdown is for PRs.

Example: skillopt report RUN -o report.html   |   skillopt report RUN --format markdown > report.md""")
def report(
    run: str = typer.Argument(..., help="The run id."),
    output: Path = typer.Option(None, "-o", "--output", "--out", help="File to write (default: html to RUN/report.html "
                                                             "in the run folder, markdown to stdout; '-' prints to stdout)."),
    fmt: str = typer.Option(None, "--format", "-f", help="html | markdown (default: from the file name, else html)."),
) -> None:
    from skillopt.report.data import RunView
    from skillopt.io.files import writable_output
    from skillopt.report.run_report import (
        build_report,
        render_html,
        render_markdown,
        write_report,
    )

    if fmt is None:
        fmt = "markdown" if output is not None and output.suffix.lower() in (".md", ".markdown") else "html"
    if fmt not in FORMATS:
        raise BadInput(f"unknown report format {fmt!r}: use html or markdown")
    view = RunView.open(Globals.runs_dir, run.partition(":")[0])
    if str(output) == "-" or (output is None and fmt == "markdown"):  # markdown is text: to stdout, like compare
        rep = build_report(view)
        typer.echo(render_html(rep) if fmt == "html" else render_markdown(rep), nl=False)
        return
    path = output or view.store.root / "report.html"
    if path.is_dir():
        raise BadInput(f"{path} is a folder: give a file name, e.g. -o {path / ('report.html' if fmt == 'html' else 'report.md')}")
    writable_output(path, "the report")
    if view.in_progress:
        console.print(f"note: run {view.run_id} is {view.status}; the report shows what it has so far")
    write_report(view, path, fmt)
    out.print(f"wrote {path}", markup=False, highlight=False)
