"""`skillopt traces export RUN [RUN ...]`: merge the token datasets of runs into one data set.

`export_command` is registered by `skillopt.cli.traces` (`traces_app.command("export")(...)`).
"""

from __future__ import annotations

from pathlib import Path

import typer

from skillopt.cli.app import Globals, out
from skillopt.errors import BadInput
from skillopt.store.run_store import RunStore
from skillopt.traces.export import FORMATS, ExportFilter, export_runs

HELP = """Merge the token-level training data of one run or several (vllm: targets) into one data set.

Each run keeps tokens/dataset-<instance_id>/ (one row per LLM call: prompt_ids, gold_completion_ids,
logprobs, reward, messages, ...); this merges them, with a run_id column, and writes a Hugging Face
dataset folder (hf, the default), data.jsonl or data.parquet. Filters: --resolved-only (rollouts that
solved their task), --version N (one skill version), --min-reward R.

Example: skillopt traces export RUN --resolved-only --format parquet --out data/sft"""


def export_command(
    runs: list[str] = typer.Argument(..., help="Run ids (folders under --runs-dir); RUN:vN also picks a version."),
    fmt: str = typer.Option("hf", "--format", help=f"Output format: {' | '.join(FORMATS)}."),
    out_dir: Path = typer.Option(None, "-o", "--output", "--out", help="Output folder (default: <first run>/tokens/export-<format>)."),
    resolved_only: bool = typer.Option(False, "--resolved-only", help="Only rollouts that solved their task."),
    version: int = typer.Option(None, "--version", help="Only rows of this skill version."),
    min_reward: float = typer.Option(None, "--min-reward", help="Only rows whose reward is at least this."),
) -> None:
    if fmt not in FORMATS:
        raise BadInput(f"unknown --format {fmt!r}: use one of {', '.join(FORMATS)}")
    stores, versions = [], set()
    for ref in runs:
        run_id, _, suffix = ref.partition(":")
        if suffix:
            versions.add(_version(ref, suffix))
        stores.append(RunStore.open(Globals.runs_dir, run_id))
    if version is None and len(versions) == 1:
        version = versions.pop()
    elif versions and (len(versions) > 1 or version not in versions):
        raise BadInput("give one skill version: RUN:vN on every run, or --version N")
    target = out_dir or stores[0].paths.tokens / f"export-{fmt}"
    result = export_runs([s.root for s in stores], target, fmt, ExportFilter(resolved_only, version, min_reward))
    out.print(f"wrote {result.rows} rows ({result.instances} instances, {result.runs} runs) to {result.path}",
              markup=False)
    if result.skipped_runs:
        out.print(f"no token datasets in: {', '.join(result.skipped_runs)}", markup=False)


def _version(ref: str, suffix: str) -> int:
    text = suffix.lower().removeprefix("v")
    if not text.isdigit():
        raise BadInput(f"bad run reference {ref!r}: write RUN or RUN:vN (e.g. RUN:v3)")
    return int(text)


export_command.__doc__ = HELP
