"""`skillopt harvest --from claude-code|codex -o OUT` and `skillopt adopt RUN`."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import typer

from skillopt.cli.app import Globals, app, load_env, out
from skillopt.errors import BadInput

SOURCES = ("claude-code", "codex")


def default_path(source: str, env: dict[str, str], home: Path) -> Path:
    """Where the agent keeps its transcripts: $CLAUDE_CONFIG_DIR or ~/.claude; $CODEX_HOME or ~/.codex."""
    if source == "claude-code":
        return Path(env.get("CLAUDE_CONFIG_DIR") or home / ".claude")
    return Path(env.get("CODEX_HOME") or home / ".codex")


def _day(value: str | None, flag: str) -> date | None:
    if not value:
        return None
    try:
        return date.fromisoformat(value)
    except ValueError:
        raise BadInput(f"{flag} {value!r} is not a date: write YYYY-MM-DD") from None


@app.command(help="""Turn your Claude Code or Codex sessions into tasks to train a skill on.

Reads the transcripts (Claude Code: ~/.claude/projects/<project>/<session>.jsonl, or under
$CLAUDE_CONFIG_DIR; Codex: ~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl, or under $CODEX_HOME) and mines
one task per session: the request, the commit it started from, a check (a test command the session ran,
a file state, or a rubric for the judge) with how sure it is, and the signs of failure. Everything is
redacted before it is written (keys, tokens, e-mail addresses, your home folder as ~). Writes
OUT/tasks.jsonl and OUT/harvest.json (read, kept, dropped and why); nothing leaves this machine.

Train on them with: skillopt run --benchmark harvest:OUT ...

Example: skillopt harvest --from claude-code --project myrepo --since 2026-01-01 -o harvested""")
def harvest(
    source: str = typer.Option(..., "--from", help=" | ".join(SOURCES)),
    path: Path = typer.Option(None, "--path", help="Transcripts folder or file (default: the agent's own)."),
    output: Path = typer.Option(None, "-o", "--output", "--out", help="Folder for tasks.jsonl and harvest.json."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Show what would be kept; write nothing."),
    project: str = typer.Option(None, "--project", help="Only sessions whose folder contains this text."),
    since: str = typer.Option(None, "--since", help="Only sessions started on or after this day (YYYY-MM-DD)."),
    until: str = typer.Option(None, "--until", help="Only sessions started on or before this day (YYYY-MM-DD)."),
    used_skill: str = typer.Option(None, "--used-skill", help="Only sessions that used this skill."),
    unused_skill: str = typer.Option(None, "--unused-skill", help="Only sessions that did not use this skill."),
    verify: bool = typer.Option(False, "--verify", help="Run each test-command check on its start state (your "
                                "own tests, on this machine): one that passes unchanged drops to low confidence."),
) -> None:
    from skillopt.benchmarks.harvested import verify_check
    from skillopt.harvest import HarvestOptions, harvest as run_harvest

    if source not in SOURCES:
        raise BadInput(f"unknown --from {source!r}: choose one of {', '.join(SOURCES)}")
    if output is None and not dry_run:
        raise BadInput("give -o OUT (a folder for tasks.jsonl and harvest.json), or --dry-run")
    env = load_env()  # also registers every key-like value it holds for redaction
    home = Path(env.get("HOME") or Path.home())
    opts = HarvestOptions(source, path or default_path(source, env, home), output, dry_run, project,
                          _day(since, "--since"), _day(until, "--until"), used_skill, unused_skill, str(home),
                          verify, verifier=verify_check)
    result = run_harvest(opts)
    r = result.report
    if dry_run:
        for t in result.tasks:
            mark = "scored" if t.scored else "kept  "
            out.print(f"{mark} {t.id}  check={t.check.kind}({t.check.confidence})  outcome={t.outcome}  "
                      f"signals={len(t.signals)}  {t.request[:70]!r}", markup=False, highlight=False)
        for d in r.dropped:
            out.print(f"drop   {d.file}: {d.why}", markup=False, highlight=False)
    out.print(f"{r.files_read} sessions read: {r.kept} kept ({r.scored} scored, {r.unscored} for reading only), "
              f"{len(r.dropped)} dropped; {r.with_test_run_scored}/{r.with_test_run} sessions with a test run "
              f"gave a scored task" + ("" if dry_run else f"; wrote {output}/tasks.jsonl and harvest.json")
              + (" (dry run: nothing written)" if dry_run else ""), markup=False, highlight=False)


@app.command(help="""Install a run's accepted skill where the agent finds it, with a backup of the old one.

Claude Code: <project>/.claude/skills/<name>/; Codex: <project>/.agents/skills/<name>/ (--user: under your
home folder). A skill already there moves to <project>/.skillopt/backups/<name>-<time>/.

Example: skillopt adopt RUN --project ~/src/myrepo""")
def adopt(
    ref: str = typer.Argument(..., help="RUN (its best version), RUN:vN or a SKILL.md path."),
    project: Path = typer.Option(Path("."), "--project", help="The project folder (default: here)."),
    harness: str = typer.Option(None, "--harness", help="claude-code | codex (default: the run's harness)."),
    user: bool = typer.Option(False, "--user", help="Install for every project: under your home folder."),
) -> None:
    from skillopt.report.adopt import adopt as run_adopt
    from skillopt.store.refs import resolve_skill_ref

    r = resolve_skill_ref(ref, Globals.runs_dir)
    explicit = ":" in ref or r.run is None
    where = Path(load_env().get("HOME") or Path.home()) if user else project
    done = run_adopt(r, where, harness, allow_seed=explicit)
    for w in done.warnings:
        out.print(f"warning: {w}", markup=False)
    out.print(f"adopted {done.label} at {done.path}" + (f" (the old one is in {done.backup})" if done.backup else ""),
              markup=False, highlight=False)
