"""`skillopt benchmarks list | show B`."""

from __future__ import annotations

import typer
from rich.table import Table

from skillopt.cli.app import app, new_app, out

bench_app = new_app("List the built-in benchmarks and show one.")
app.add_typer(bench_app, name="benchmarks")


@bench_app.command("list", help="List benchmarks.\n\nExample: skillopt benchmarks list")
def list_() -> None:
    from skillopt.benchmarks import list_benchmarks

    table = Table()
    table.add_column("name")
    table.add_column("tasks")
    table.add_column("description")
    for info in list_benchmarks():
        table.add_row(info.name, str(getattr(info, "size", None) or "-"), info.description)
    out.print(table)


@bench_app.command("show", help="Show a benchmark's splits and a sample task.\n\nExample: skillopt benchmarks show gsm8k")
def show(name: str = typer.Argument(..., help="Benchmark name or .jsonl path."),
         split: str = typer.Option("train", "--split")) -> None:
    from skillopt.benchmarks import get_benchmark
    from skillopt.benchmarks.base import SplitSizes

    b = get_benchmark(name, SplitSizes())
    sizes = {s: len(b.tasks(s)) for s in ("train", "val", "test", "all")}  # type: ignore[arg-type]
    out.print(f"{name}: " + ", ".join(f"{k}={v}" for k, v in sizes.items()))
    tasks = b.tasks(split)  # type: ignore[arg-type]
    if tasks:
        t = tasks[0]
        out.print(f"sample {split} task {t.id}:\n{t.prompt}", markup=False)
