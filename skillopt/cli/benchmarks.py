"""`skillopt benchmarks list | show B | make-swe`."""

from __future__ import annotations

from pathlib import Path

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


@bench_app.command("make-swe", help="""Make swe-local tasks from a pure-Python package with its own tests: mutate its
code, keep the mutations that make tests fail, write SWE-bench rows and a git bundle.

Example: skillopt benchmarks make-swe --package toolz --version 1.2.0 --count 12""")
def make_swe(
    package: str = typer.Option(..., "--package", help="PyPI name of the package."),
    version: str = typer.Option(None, "--version", help="Version (default: the latest)."),
    count: int = typer.Option(12, "--count", help="How many tasks to make at most."),
    seed: int = typer.Option(0, "--seed", help="Seed of the mutation order."),
    out_dir: Path = typer.Option(None, "--out", help="Folder of tasks.jsonl and the bundles "
                                                     "(default: the shipped benchmarks/swe_local)."),
    sdist: Path = typer.Option(None, "--sdist", help="Use this sdist instead of downloading one."),
    tests: list[str] = typer.Option(None, "--tests", help="Test paths to run (default: found in the sdist)."),
    max_failing: int = typer.Option(30, "--max-failing", help="Most tests a kept mutation may break."),
    jobs: int = typer.Option(2, "--jobs", help="Test runs in parallel while screening mutations."),
    license: str = typer.Option(None, "--license", help="The package's licence, when its metadata lacks it."),
    rewrite_model: str = typer.Option(None, "--rewrite-model", help="Model that rewrites each problem "
                                                                   "statement as an issue report."),
) -> None:
    from skillopt.benchmarks.make_swe import make_swe as make
    from skillopt.benchmarks.make_swe import model_rewriter
    from skillopt.cli.app import load_env
    from skillopt.models.types import ProviderEnv

    rewrite = model_rewriter(rewrite_model, ProviderEnv.from_environ(load_env())) if rewrite_model else None
    rows = make(package, version, out_dir, count, seed, sdist, tests or None, max_failing, jobs, license,
                rewrite, progress=lambda line: out.print(line, markup=False))
    out.print(f"{len(rows)} tasks: {', '.join(r.instance_id for r in rows)}")
