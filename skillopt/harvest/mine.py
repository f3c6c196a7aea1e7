"""One session -> one harvested task: the request, the start state, a check and how sure it is,
and the signals of failure. The text is not redacted here; `harvest.pipeline` redacts before writing.

Checks, best first:
- `test_command`: the last test command the session ran (pytest, npm test, go test, ...). High
  confidence when the session saw that command fail and then pass (it tells a fix from no fix),
  medium when it was seen only passing or only failing; a command that never ran (exit 126/127)
  is no check.
- `file_state`: no test run, but the session edited files and ended without a failure signal:
  those files must exist and hold the lines the session's last edit of each wrote. Low.
- `rubric`: no test run and no edit: the judge grades the answer against the request, with the
  session's accepted final answer as the reference. Low; scored only with a judge model.
A task that needs a workspace (test command, file state) is scored only when its start state
is recovered: the session's folder is a git repository that holds the commit it started from.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from skillopt.git import git
from skillopt.harvest.schema import Check, HarvestedTask, SessionRef, Signal, StartState
from skillopt.harvest.sessions import Call, Message, Session

TEST_COMMAND = re.compile(
    r"(^|[\s;&|(])(pytest|py\.test|python[0-9.]*(?:\s+-[XW]\s+\S+|\s+-[A-Za-ln-z]\S*)*\s+-m\s+(pytest|unittest)|tox|nox|(npm|pnpm|yarn|bun)\s+(run\s+)?test"
    r"|npx\s+(jest|vitest|mocha)|jest|vitest|go\s+test|cargo\s+(test|nextest)|make\s+(test|check)|ctest|mvn\s+test"
    r"|gradle\w*\s+test|\./gradlew\s+test|rspec|phpunit|dotnet\s+test|mix\s+test|swift\s+test)\b")
CORRECTION = re.compile(
    r"^\s*(no\b(?!\s+(problem|worries))|nope|wrong|that'?s (not|wrong)|that is (not|wrong)|not (what|right|quite)"
    r"|don'?t|do not|stop|undo|revert"
    r"|actually|wait|instead|why did you|you (broke|didn'?t|did not|forgot)|it (still )?(fails|doesn'?t work|is broken)"
    r"|still (fails|failing|broken))", re.I)
TEST_FILE = re.compile(r"(^|/)(tests?|__tests__|spec)/|(^|/)test_[^/]*$|_test\.[a-z]+$|\.(test|spec)\.[jt]sx?$"
                       r"|_spec\.rb$|Tests?\.(java|kt|cs|swift)$")
MAX_TEST_BYTES = 300_000  # test files carried in one check
NOT_RUN = (126, 127)  # the shell could not run the command: no verdict on the code
MAX_EXPECT = 20  # lines per file in a file-state check


def has_verdict(c: Call) -> bool:
    """The command ran to its end: its exit code says something about the code."""
    return c.answered and not c.running and c.exit_code not in NOT_RUN


def is_test_command(command: str | None) -> bool:
    return bool(command) and bool(TEST_COMMAND.search(command))


def ran_tests(s: Session) -> bool:
    """The session ran a test command (one the shell could start)."""
    return any(is_test_command(c.command) and has_verdict(c) for c in s.calls)


def mine(s: Session) -> HarvestedTask | None:
    """The task of a session, or None when it has no user request."""
    users = [m for m in s.messages if m.role == "user" and not m.interrupt]
    if not users:
        return None
    request = users[0].text.strip()
    later = [m for m in s.steps[s.steps.index(users[0]) + 1:] if isinstance(m, Message) and m.role == "user"]
    signals = _signals(s, later)
    tests = [c for c in s.calls if is_test_command(c.command) and c.answered]
    start = start_state(s)
    answer = next((m.text for m in reversed(s.messages) if m.role == "assistant"), "")
    check = _test_check(tests) or _file_check(s, signals) or _rubric_check(request, answer, signals)
    if check.kind == "test_command" and start.recovered and start.cwd and start.commit:
        check = with_test_files(check, Path(start.cwd), start.commit)
    needs_ws = check.kind in ("test_command", "file_state")
    scored = needs_ws and start.recovered  # a rubric is scored only when the benchmark has a judge model
    return HarvestedTask(
        id=f"{s.source}-{s.session_id or s.path.stem}", request=request,
        follow_ups=[m.text for m in later if not m.interrupt and not CORRECTION.match(m.text)],
        start=start, check=check, scored=scored, outcome=_outcome(tests, signals), signals=signals,
        skills_used=sorted(s.skills_used), final_answer=answer,
        session=SessionRef(harness=s.source, session_id=s.session_id, file=str(s.path), started=s.started,
                           agent_version=s.version))


def _signals(s: Session, later: list[Message]) -> list[Signal]:
    out: list[Signal] = []
    for c in s.calls:
        if is_test_command(c.command) and has_verdict(c) and c.failed:
            out.append(Signal(kind="test_failed", detail=f"{c.command} -> exit {c.exit_code}"))
        elif c.answered and c.failed:
            what = c.command or c.name
            out.append(Signal(kind="tool_error", detail=f"{what} -> {_first_line(c.output)}"[:300]))
    for m in later:
        if m.interrupt:
            out.append(Signal(kind="interrupted", detail=m.text[:200]))
        elif CORRECTION.match(m.text):
            out.append(Signal(kind="user_correction", detail=m.text[:300]))
    out += [Signal(kind="reverted_edit", detail=d) for d in _reverts(s.calls)]
    return out


def _reverts(calls: list[Call]) -> list[str]:
    """Edits undone later: an Edit whose replacement is put back, or a file restored with git."""
    found, edits = [], []
    for c in calls:
        if c.name == "Edit" and {"old_string", "new_string"} <= set(c.input):
            back = next((e for e in edits if e.input.get("file_path") == c.input.get("file_path")
                         and e.input["new_string"] == c.input["old_string"]
                         and e.input["old_string"] == c.input["new_string"]), None)
            if back is not None:
                found.append(f"edit of {c.input.get('file_path')} undone")
            edits.append(c)
        cmd = c.command or ""
        if re.search(r"\bgit\s+(checkout\s+(--\s+|HEAD\s+)|restore\b|reset\s+--hard|stash\b(?!\s+list))", cmd):
            found.append(f"`{cmd[:200]}`")
    return found


def _first_line(text: str) -> str:
    lines = [ln for ln in (text or "").splitlines() if ln.strip() and not ln.startswith("Exit code")]
    return lines[0][:200] if lines else "(no output)"


def _test_check(tests: list[Call]) -> Check | None:
    ran = [c for c in tests if has_verdict(c)]
    if not ran:
        return None
    command = ran[-1].command or ""
    same = [c for c in ran if c.command == command]
    failed_then_passed = any(c.failed for c in same[:-1]) and not same[-1].failed
    if failed_then_passed:
        conf, why = "high", "the session saw this command fail, then pass after its changes"
    elif not same[-1].failed:
        conf, why = "medium", "seen passing only: it may pass without any change"
    else:
        conf, why = "medium", "seen failing only: the session never made it pass"
    return Check(kind="test_command", command=command, confidence=conf, why=why)


def with_test_files(check: Check, repo: Path, commit: str) -> Check:
    """The check with the test files its repository now holds changed since the start commit (the
    tests the session wrote, when they are still there): without them a test command may pass on
    the start state with no change at all."""
    try:
        changed = git(repo, "diff", "--name-only", commit, "--", check=False).stdout.split("\n")
        changed += git(repo, "ls-files", "--others", "--exclude-standard", check=False).stdout.split("\n")
    except (OSError, subprocess.SubprocessError):
        return check
    files: dict[str, str | None] = {}
    size = 0
    for rel in sorted({c.strip() for c in changed if c.strip() and TEST_FILE.search(c.strip())}):
        path = repo / rel
        text = path.read_text(encoding="utf-8", errors="replace") if path.is_file() else None
        size += len(text or "")
        if size > MAX_TEST_BYTES:
            break
        files[rel] = text
    if not files:
        return check
    why = f"{check.why}; with the {len(files)} test file(s) the session changed, as the repository holds them now"
    return check.model_copy(update={"test_files": files, "why": why})


def _file_check(s: Session, signals: list[Signal]) -> Check | None:
    if any(sig.kind in ("user_correction", "interrupted", "reverted_edit") for sig in signals):
        return None
    files: dict[str, list[str]] = {}
    for c in s.calls:
        if c.failed or c.name not in ("Write", "Edit"):
            continue
        path = str(c.input.get("file_path") or "")
        text = str(c.input.get("content") if c.name == "Write" else c.input.get("new_string") or "")
        lines = [ln for ln in text.splitlines() if ln.strip()][:MAX_EXPECT]
        if path and lines:
            files[_relative(path, s.cwd)] = lines
    if not files:
        return None
    return Check(kind="file_state", files=files, confidence="low",
                 why="the files the session wrote, as it left them; no test run to confirm them")


def _rubric_check(request: str, answer: str, signals: list[Signal]) -> Check:
    if not answer.strip() or any(sig.kind in ("user_correction", "interrupted") for sig in signals):
        return Check(kind="none", why="no test run, no file written, and no accepted answer")
    return Check(kind="rubric", confidence="low",
                 rubric=f"The answer does what the user asked, as the reference answer (which the user "
                        f"accepted) does. The request: {request[:2000]}",
                 why="no test run or file check: a judge compares with the answer the user accepted")


def _relative(path: str, cwd: str | None) -> str:
    if cwd and path.startswith(cwd.rstrip("/") + "/"):
        return path[len(cwd.rstrip("/")) + 1:]
    return path


def _outcome(tests: list[Call], signals: list[Signal]) -> str:
    ran = [c for c in tests if has_verdict(c)]
    if ran:
        return "failure" if ran[-1].failed else "success"
    if any(s.kind in ("user_correction", "interrupted") for s in signals):
        return "failure"
    return "unknown"


def start_state(s: Session) -> StartState:
    """The commit the session started from, checked in its folder (the transcript's record, else
    the last commit made before the session began)."""
    cwd = Path(s.cwd) if s.cwd else None
    if cwd is None or not (cwd / ".git").exists():
        why = "the session's folder is gone" if cwd and not cwd.exists() else "not a git repository"
        return StartState(cwd=s.cwd, commit=s.commit, how=f"not recovered: {why}", clean=s.clean)
    try:
        full, how = None, s.commit_how or ""
        if s.commit:
            res = git(cwd, "rev-parse", "--verify", "-q", f"{s.commit}^{{commit}}", check=False)
            full = res.stdout.strip() if res.returncode == 0 else None
        if full is None and s.started:
            res = git(cwd, "rev-list", "-1", f"--before={s.started}", "--all", check=False)
            full, how = (res.stdout.strip() or None), "the last commit before the session started"
    except (OSError, subprocess.SubprocessError) as e:
        return StartState(cwd=s.cwd, commit=s.commit, how=f"not recovered: git failed ({e})", clean=s.clean)
    if not full:
        return StartState(cwd=s.cwd, commit=s.commit, how="not recovered: the commit is not in the repository",
                          clean=s.clean)
    return StartState(cwd=s.cwd, commit=full, how=how, clean=s.clean, recovered=True)
