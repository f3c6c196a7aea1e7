"""`skillopt compare A B [C ...]`: is the new skill really better, and where."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from rich.markup import escape
from rich.table import Table

from skillopt.cli.app import Globals, app, load_env, out
from skillopt.errors import BadInput

FORMATS = ("table", "json", "markdown")


@app.command(help="""Compare skills: scores with 95% confidence intervals per split, per-task wins / losses /
ties against the first skill, a paired significance test (exact McNemar on 0/1 outcomes, paired bootstrap
on soft scores), tokens and cost, and with --diff the skill texts' diffs.

Each argument is RUN (its best version), RUN:vN, RUN:best, RUN:final, RUN:seed or a SKILL.md file. A
file is scored on the benchmark of the first run given (or --benchmark / --target_model / --harness),
reusing every rollout any run under --runs-dir already has.

Example: skillopt compare RUN:seed RUN:best --diff   |   skillopt compare RUN:best my/SKILL.md --format markdown""")
def compare(
    refs: list[str] = typer.Argument(..., help="Two or more skills: RUN, RUN:vN, RUN:best or a SKILL.md path."),
    split: list[str] = typer.Option(None, "--split", help="Split to compare (repeatable): train | val | test | all. "
                                                          "Default: val and test."),
    fmt: str = typer.Option("table", "--format", "-f", help="table | json | markdown"),
    diff: bool = typer.Option(False, "--diff", help="Add a unified diff of each skill against the first."),
    benchmark: str = typer.Option(None, "--benchmark", "-b", help="Benchmark for scoring skill files."),
    harness: str = typer.Option(None, "--harness", help="Harness for scoring skill files."),
    target_model: str = typer.Option(None, "--target_model", "--target-model", help="Target for scoring skill files."),
    trials: int = typer.Option(None, "--trials", help="Trials per task when scoring skill files."),
    concurrency: int = typer.Option(None, "--concurrency"),
    config: Path = typer.Option(None, "--config", help="YAML config for scoring skill files."),
    overrides: list[str] = typer.Option(None, "--set", help="Dotted override for scoring skill files."),
    bootstrap: int = typer.Option(10000, "--bootstrap", help="Resamples of the paired bootstrap."),
    seed: int = typer.Option(0, "--seed", help="Seed of the paired bootstrap."),
    no_sandbox: bool = typer.Option(False, "--no-sandbox", help="Score skill files with agents unsandboxed."),
) -> None:
    from skillopt.report.compare import compare_skills, run_entry, unique_labels
    from skillopt.report.scoring import current_data_hash
    from skillopt.store.refs import resolve_skill_ref

    if fmt not in FORMATS:
        raise BadInput(f"unknown format {fmt!r}: use {', '.join(FORMATS)}")
    if len(refs) < 2:
        raise BadInput("compare needs at least two skills (e.g. skillopt compare RUN:seed RUN:best)")
    splits = list(dict.fromkeys(split or ["val", "test"]))
    for s in splits:
        if s not in ("train", "val", "test", "all"):
            raise BadInput(f"unknown split {s!r}: use train, val, test or all")
    if bootstrap < 100:
        raise BadInput("--bootstrap must be at least 100")
    resolved = [resolve_skill_ref(r, Globals.runs_dir) for r in refs]
    labels = unique_labels([r.label for r in resolved])
    first_run = next((r.run for r in resolved if r.run is not None), None)
    data = []
    hashes: dict[str, tuple[str, str | None]] = {}
    notes: list[str] = []
    for ref, label in zip(resolved, labels):
        if ref.run is not None:
            d = run_entry(ref, splits, label)
            cfg = ref.run.read_config()
            key = repr(sorted((k, repr(cfg.get(k))) for k in ("benchmark", "splits", "benchmark_options")))
            if key not in hashes:
                hashes[key] = current_data_hash(cfg)
            d.entry.current_data_hash, why = hashes[key]
            if why and why not in notes:
                notes.append(why)
        else:
            d = _score_file(ref, label, splits, first_run, benchmark, harness, target_model, trials, concurrency,
                            config, overrides, no_sandbox)
        data.append(d)
    cmp = compare_skills(data, splits, with_diff=diff, n_boot=bootstrap, seed=seed)
    cmp.notes += notes
    if fmt == "json":
        typer.echo(cmp.model_dump_json(indent=2))
    elif fmt == "markdown":
        from skillopt.report.tables import compare_markdown

        typer.echo(compare_markdown(cmp))
    else:
        _print_tables(cmp)


def _score_file(ref, label, splits, first_run, benchmark, harness, target_model, trials, concurrency, config,
                overrides, no_sandbox):
    from skillopt.cli.progress import ProgressView
    from skillopt.cli.run import scoring_config
    from skillopt.engine.settings import scoring_layer
    from skillopt.models.types import ProviderEnv
    from skillopt.report.scoring import score_file

    env = ProviderEnv.from_environ(load_env())
    layers: list[dict[str, Any]] = []
    if first_run is not None:
        layers.append(scoring_layer(first_run.read_config()))
    elif not benchmark:
        raise BadInput(f"to score the skill file {ref.label}, pass --benchmark (and --target_model), "
                       "or compare it with a run whose settings it should use")
    cfg = scoring_config(layers, config, overrides, env, benchmark=benchmark, harness=harness,
                         target_model=target_model, gate__trials=trials, train__concurrency=concurrency,
                         sandbox=False if no_sandbox else None)
    view = ProgressView()
    try:
        return score_file(ref, cfg, splits, Globals.runs_dir, env, [view], label)
    finally:
        view.stop()


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
