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

    from skillopt.benchmarks.custom import list_scorers
    from skillopt.harness.registry import list_harnesses

    table = Table()
    for col in ("name", "tasks", "from", "description"):
        table.add_column(col)
    for info in list_benchmarks():
        table.add_row(info.name, str(info.size or "-"), info.origin, info.description)
    out.print(table)
    out.print(f"scorers (benchmark_options.scorer): {', '.join(list_scorers())}", markup=False)
    out.print(f"harnesses: {', '.join(h.name for h in list_harnesses())}", markup=False)


@bench_app.command("show", help="Show a benchmark's splits and a sample task.\n\nExample: skillopt benchmarks show gsm8k")
def show(name: str = typer.Argument(..., help="Benchmark name or .jsonl path."),
         split: str = typer.Option("train", "--split")) -> None:
    from skillopt.benchmarks import get_benchmark
    from skillopt.benchmarks.base import SPLITS, SplitSizes, parse_split

    b = get_benchmark(name, SplitSizes())
    sizes = {s: len(b.tasks(s)) for s in SPLITS}
    out.print(f"{name}: " + ", ".join(f"{k}={v}" for k, v in sizes.items()))
    tasks = b.tasks(parse_split(split))
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
    out_dir: Path = typer.Option(None, "-o", "--output", "--out", help="Folder of tasks.jsonl and the bundles "
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


@bench_app.command("build-images", help="""Build SWE-bench images of swe-local tasks on this machine (no registry):
a Debian base image (debootstrap, cached) and one image per task in the official layout (/testbed at the
base commit, named <prefix>/sweb.eval.x86_64.<id>:latest). Cached by content: nothing is rebuilt twice.
Then run them with --benchmark swebench --set benchmark_options.dataset=swe-local (or the rows --out wrote).

Example: skillopt benchmarks build-images --benchmark swe-local --ids toolz-1.2.0-001,toolz-1.2.0-002""")
def build_images(
    benchmark: str = typer.Option("swe-local", "--benchmark", help="Only swe-local (its rows carry their repositories)."),
    ids: str = typer.Option(None, "--ids", help="Comma-separated instance ids (default: all)."),
    tasks: Path = typer.Option(None, "--tasks", help="A swe-local tasks.jsonl (default: the shipped one)."),
    prefix: str = typer.Option("local", "--prefix", help="Image name prefix."),
    base: str = typer.Option(None, "--base", help="Build on this image instead of a debootstrapped Debian "
                                                 "(it needs python3, pytest, git and patch)."),
    mirror: str = typer.Option(None, "--mirror", help="Debian mirror for debootstrap (default: apt's own)."),
    rebuild: bool = typer.Option(False, "--rebuild", help="Build instance images again even when up to date."),
    rows_out: Path = typer.Option(None, "-o", "--output", "--out", help="Also write the SWE-bench rows (image, eval_script, ...) here."),
) -> None:
    from skillopt.benchmarks.swe_grading import load_instances
    from skillopt.benchmarks.swe_images import build_images as build
    from skillopt.benchmarks.swe_images import swebench_row
    from skillopt.benchmarks.swe_local import default_tasks_file
    from skillopt.errors import BadInput

    if benchmark != "swe-local":
        raise BadInput(f"build-images builds swe-local tasks only, not {benchmark!r}: SWE-bench's own images "
                       "come from its registry (or `python -m swebench.harness.prepare_images`)")
    path = tasks or default_tasks_file()
    instances = load_instances(path)
    if ids:
        wanted = [s.strip() for s in ids.split(",") if s.strip()]
        unknown = sorted(set(wanted) - {i.instance_id for i in instances})
        if unknown:
            raise BadInput(f"{path} has no instance {', '.join(unknown)}")
        instances = [i for i in instances if i.instance_id in set(wanted)]
    built = build(instances, path.parent, prefix, base, mirror, rebuild, progress=lambda s: out.print(s, markup=False))
    if rows_out:
        rows_out.write_text("".join(swebench_row(i, prefix).model_dump_json(exclude_none=True) + "\n"
                                    for i in instances), encoding="utf-8")
        out.print(f"rows: {rows_out}", markup=False)
    out.print(f"{len(built)} images ({sum(b.built for b in built)} built, "
              f"{sum(not b.built for b in built)} up to date)")
