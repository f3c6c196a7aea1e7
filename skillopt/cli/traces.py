"""`skillopt traces show RUN TASK`: one rollout's trace, readably. (`traces export` lives in
`skillopt.cli.traces_export` and is registered here.)"""

from __future__ import annotations

import json
from pathlib import Path

import typer

from skillopt.cli.app import Globals, app, new_app, out
from skillopt.cli.traces_export import HELP as EXPORT_HELP
from skillopt.cli.traces_export import export_command
from skillopt.errors import BadInput
from skillopt.store.schema import RolloutRecord
from skillopt.store.refs import pick_version
from skillopt.store.run_store import RunStore, raw_log_file
from skillopt.traces.events import (
    ErrorEvent, MessageEvent, SkillUsedEvent, ToolCallEvent, ToolResultEvent, TraceEvent, UsageEvent, parse_event,
)

traces_app = new_app("Show a rollout's trace; export token-level training data.")
app.add_typer(traces_app, name="traces")
traces_app.command("export", help=EXPORT_HELP)(export_command)


@traces_app.command("show", help="""Show a task's rollout: its score, the summary the optimizer saw, and every trace event.

By default the latest rollout of the task; --version / --trial / --split pick another, --all shows
every one, --raw adds the agent's native log (stream-json, codex exec --json), --full cuts nothing.

Example: skillopt traces show RUN arith-apples   |   skillopt traces show RUN arith-apples --version 2 --raw""")
def show(
    run: str = typer.Argument(..., help="The run id (a folder under --runs-dir), or RUN:vN / RUN:best / RUN:seed "
                                        "for one version's rollouts."),
    task: str = typer.Argument(..., help="The task id."),
    version: int = typer.Option(None, "--version", help="Only rollouts of this skill version."),
    trial: int = typer.Option(None, "--trial", help="Only this trial."),
    split: str = typer.Option(None, "--split", help="Only this split (train | val | test)."),
    every: bool = typer.Option(False, "--all", help="Every matching rollout, not just the latest."),
    raw: bool = typer.Option(False, "--raw", help="Also print the agent's native log."),
    full: bool = typer.Option(False, "--full", help="Print long texts whole."),
) -> None:
    run_id, _, which = run.partition(":")
    store = RunStore.open(Globals.runs_dir, run_id)
    sha = None
    if which:  # RUN:vN, RUN:best, RUN:seed: that version's rollouts (by content: a later number may share them)
        n = pick_version(store, which, run)
        if version is not None and version != n:
            raise BadInput(f"{run} is v{n:03d} but --version says {version}: give one of the two")
        version, sha = n, store.version(n).sha
    records = [r for r in store.rollouts() if r.task_id == task
               and (version is None or r.version == version or r.skill_sha == sha)
               and (trial is None or r.trial == trial) and (split is None or r.split == split)]
    if not records:
        known = sorted({r.task_id for r in store.rollouts()})
        if task in known:
            what = f"v{version:03d}" if version is not None else "these options"
            raise BadInput(f"no rollout of task {task!r} in run {store.run_id} matches {what}{_matching(trial, split)}: "
                           f"`skillopt traces show {store.run_id} {task} --all` lists its rollouts")
        hint = f" (tasks with rollouts: {', '.join(known[:10])}{', ...' if len(known) > 10 else ''})" if known else ""
        raise BadInput(f"no rollout of task {task!r} in run {store.run_id} matches{hint}")
    for rec in records if every else records[-1:]:
        _print_rollout(store, rec, raw, None if full else 600)


def _matching(trial: int | None, split: str | None) -> str:
    return "".join(f" ({k} {v})" for k, v in (("trial", trial), ("split", split)) if v is not None)


def _print_rollout(store: RunStore, rec: RolloutRecord, raw: bool, limit: int | None) -> None:
    out.print(f"== {rec.task_id}  v{rec.version:03d}  {rec.split}  trial {rec.trial}  {rec.harness} / {rec.model}",
              markup=False)
    cost = "-" if rec.cost_usd is None else f"${rec.cost_usd:.4f}"
    score = "errored (infrastructure, not a score)" if rec.errored else f"score hard={rec.hard:g} soft={rec.soft:.3f}"
    out.print(f"{score}  tokens in/out={rec.input_tokens}/{rec.output_tokens}  "
              f"cost={cost}  {rec.duration_s:.1f}s" + (f"  ERROR: {rec.error}" if rec.error else ""), markup=False)
    if rec.feedback:
        out.print(f"feedback: {_cut(rec.feedback, limit)}", markup=False)
    out.print("-- summary (what the optimizer saw)", markup=False)
    out.print(rec.summary or "(none)", markup=False)
    if rec.patch:
        out.print(f"-- patch ({len(rec.patch)} chars)", markup=False)
        out.print(_cut(rec.patch, None if limit is None else 4 * limit), markup=False)
    path = store.root / rec.trace_file if rec.trace_file else None
    out.print("-- events", markup=False)
    text = path.read_text(encoding="utf-8", errors="replace") if path is not None and path.exists() else None
    if text is None:
        out.print("(no trace file)", markup=False)
    elif not text.strip():  # trace files are not fsynced one by one (store.writer): a power loss
        out.print("(the trace file is empty: lost before it reached the disk)", markup=False)
    for line in (text or "").splitlines():
        if line.strip():
            try:
                out.print(format_event(parse_event(line), limit), markup=False)
            except ValueError:
                out.print("(the rest of the trace was lost before it reached the disk)", markup=False)
                break
    if raw:
        raw_path = store.root / raw_log_file(rec.trace_file) if rec.trace_file else None
        out.print("-- native log", markup=False)
        out.print(_raw(raw_path, limit), markup=False)
    out.print("", markup=False)


def format_event(e: TraceEvent, limit: int | None = 600) -> str:
    """One event as a line (long texts indented below it)."""
    head = f"[{e.t:7.2f}s] "
    if isinstance(e, MessageEvent):
        return head + f"{e.role}: " + _block(e.text, limit)
    if isinstance(e, ToolCallEvent):
        args = e.input if isinstance(e.input, str) else json.dumps(e.input, ensure_ascii=False, default=str)
        return head + f"call {e.name} {_cut(args, limit)}" + (f"  ({e.id})" if e.id else "")
    if isinstance(e, ToolResultEvent):
        return head + ("result FAILED: " if e.is_error else "result: ") + _block(e.output, limit)
    if isinstance(e, SkillUsedEvent):
        return head + f"skill used: {e.name} ({e.how})"
    if isinstance(e, ErrorEvent):
        return head + f"ERROR: {_block(e.message, limit)}"
    if isinstance(e, UsageEvent):
        cost = "" if e.cost_usd is None else f", cost ${e.cost_usd:.4f}"
        turns = "" if e.turns is None else f", turns {e.turns}"
        return head + f"usage: tokens in/out {e.input_tokens}/{e.output_tokens}{turns}{cost}"
    return head + str(e)


def _cut(text: str, limit: int | None) -> str:
    if limit is None or len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]} [...{len(text) - 2 * half} chars...] {text[-half:]}"


def _block(text: str, limit: int | None) -> str:
    text = _cut(text.strip(), limit)
    return text if "\n" not in text else "\n" + "\n".join("      " + ln for ln in text.splitlines())


def _raw(path: Path | None, limit: int | None) -> str:
    if path is None or not path.exists():
        return "(no native log: this harness keeps none, or the rollout ended before the agent started)"
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    return "\n".join(_cut(ln, None if limit is None else 4 * limit) for ln in lines)
