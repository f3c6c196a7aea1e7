"""`harvest`: read a folder of transcripts, filter, mine one task per session, redact, write.

Nothing is written before it is redacted (`io.redact.scrub_data`: known secrets, token shapes,
key-like values, e-mail addresses, the home folder as `~`); `dry_run` writes nothing at all.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date
from pathlib import Path

from skillopt.errors import BadInput
from skillopt.harvest.mine import mine, ran_tests
from skillopt.harvest.schema import Dropped, HarvestedTask, HarvestReport
from skillopt.harvest.sessions import READERS, Session, Source, session_files
from skillopt.io.files import atomic_write_text
from skillopt.io.redact import scrub_data

TASKS_FILE, REPORT_FILE = "tasks.jsonl", "harvest.json"


@dataclass(frozen=True)
class HarvestOptions:
    harness: Source
    path: Path  # a transcripts folder (or one file)
    out: Path | None = None  # None with dry_run
    dry_run: bool = False
    project: str | None = None  # substring of the session's folder
    since: date | None = None
    until: date | None = None
    used_skill: str | None = None  # keep sessions that used this skill
    unused_skill: str | None = None  # keep sessions that did not use this skill
    home: str | None = None  # the user's home folder, written as `~`
    verify: bool = False  # run each test-command check on its start state, with `verifier`
    verify_timeout_s: float = 300.0
    # (task, timeout_s) -> the task with its check verified: `benchmarks.harvested.verify_check`, which
    # rebuilds the start state as the `harvest` benchmark does (harvest sits below benchmarks/)
    verifier: Callable[[HarvestedTask, float], HarvestedTask] | None = None

    def filters(self) -> dict[str, str]:
        names = ("project", "since", "until", "used_skill", "unused_skill")
        return {k: str(getattr(self, k)) for k in names if getattr(self, k) is not None}


@dataclass(frozen=True)
class HarvestResult:
    report: HarvestReport
    tasks: list[HarvestedTask]  # as written (redacted)


def harvest(opts: HarvestOptions) -> HarvestResult:
    if opts.harness not in READERS:
        raise BadInput(f"unknown transcript source {opts.harness!r}: choose one of {', '.join(READERS)}")
    if not Path(opts.path).exists():
        raise BadInput(f"no transcripts at {opts.path}: pass --path DIR (a {opts.harness} transcripts folder)")
    if opts.verify and opts.verifier is None:
        raise ValueError("HarvestOptions(verify=True) needs a verifier: benchmarks.harvested.verify_check")
    if opts.since and opts.until and opts.since > opts.until:
        raise BadInput(f"--since {opts.since} is after --until {opts.until}: swap them")
    files = session_files(opts.harness, Path(opts.path))
    report = HarvestReport(harness=opts.harness, path=_shown(opts.path, opts.home), dry_run=opts.dry_run,
                           filters=opts.filters(), files_read=len(files))
    tasks: list[HarvestedTask] = []
    seen: set[str] = set()
    for f in files:
        why, task, session = _one(f, opts)
        if why is not None or task is None or session is None:
            report.dropped.append(Dropped(file=_shown(f, opts.home), why=why or "no user request"))
            continue
        if task.id in seen:
            report.dropped.append(Dropped(file=_shown(f, opts.home), why=f"a second file of session {task.id}"))
            continue
        seen.add(task.id)
        if opts.verify and opts.verifier is not None and task.scored and task.check.kind == "test_command":
            task = opts.verifier(task, opts.verify_timeout_s)
        task = HarvestedTask.model_validate(scrub_data(task, opts.home))
        tasks.append(task)
        if ran_tests(session):
            report.with_test_run += 1
            report.with_test_run_scored += int(task.scored)
        if not task.scored:
            report.unscored_why[task.id] = _unscored(task)
    report.kept, report.scored = len(tasks), sum(t.scored for t in tasks)
    report.unscored = report.kept - report.scored
    report.by_check = dict(Counter(t.check.kind for t in tasks))
    if not opts.dry_run:
        if opts.out is None:
            raise BadInput("give -o OUT (a folder for tasks.jsonl and harvest.json), or --dry-run")
        write(Path(opts.out), tasks, report, opts.home)
    return HarvestResult(report, tasks)


def _one(f: Path, opts: HarvestOptions) -> tuple[str | None, HarvestedTask | None, Session | None]:
    try:
        s = READERS[opts.harness](f)
    except OSError as e:
        return f"unreadable: {e.strerror or e}", None, None
    started = s.started_at
    if opts.project and opts.project not in (s.cwd or "") and opts.project not in f.parent.name:
        return f"filtered out: project is not {opts.project!r}", None, s
    if (opts.since or opts.until) and started is None:
        return "filtered out: no start date", None, s
    if opts.since and started and started.date() < opts.since:
        return f"filtered out: started before {opts.since}", None, s
    if opts.until and started and started.date() > opts.until:
        return f"filtered out: started after {opts.until}", None, s
    if opts.used_skill and opts.used_skill not in s.skills_used:
        return f"filtered out: did not use skill {opts.used_skill!r}", None, s
    if opts.unused_skill and opts.unused_skill in s.skills_used:
        return f"filtered out: used skill {opts.unused_skill!r}", None, s
    task = mine(s)
    return (None if task else "no user request"), task, s


def _unscored(t: HarvestedTask) -> str:
    if t.check.kind == "none":
        return t.check.why or "no check"
    if t.check.kind == "rubric":
        return "a rubric check: scored only with a judge model"
    return f"no workspace: {t.start.how}"


def _shown(path: Path | str, home: str | None) -> str:
    return str(scrub_data(str(path), home))


def write(out: Path, tasks: list[HarvestedTask], report: HarvestReport, home: str | None) -> None:
    out.mkdir(parents=True, exist_ok=True)
    lines = "".join(json.dumps(scrub_data(t, home), ensure_ascii=False) + "\n" for t in tasks)
    atomic_write_text(out / TASKS_FILE, lines)
    atomic_write_text(out / REPORT_FILE, json.dumps(scrub_data(report, home), indent=2, ensure_ascii=False) + "\n")


def read_tasks(out: Path) -> list[HarvestedTask]:
    """The tasks of a harvest folder (`OUT/tasks.jsonl`)."""
    path = Path(out) / TASKS_FILE if Path(out).is_dir() else Path(out)
    if not path.is_file():
        raise BadInput(f"no harvested tasks at {path}: run `skillopt harvest --from claude-code|codex -o {out}` first")
    tasks = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                tasks.append(HarvestedTask.model_validate_json(line))
            except ValueError as e:
                raise BadInput(f"{path}:{n}: not a harvested task ({str(e).splitlines()[0]})") from None
    return tasks
