"""What an agent rollout did, read from its normalized trace (and its patch), for the optimizer and the
perf scripts: the shell commands it ran with their exit codes, its last test run with the tail of
the output, the diff it left, where it stopped and why, and the kinds of failure a trace shows.

The same for every agent harness: claude-code (`Bash`, `Edit`...), codex (`shell`, `apply_patch`) and
mini-swe-agent (`bash`). A result's exit code is read from the `[exit code N]` head codex and
mini-swe-agent put on failed commands (`Exit code N` for Claude Code); a successful shell command
is exit 0; None where the trace does not say.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from skillopt.traces.events import ErrorEvent, MessageEvent, ToolCallEvent, ToolResultEvent, TraceEvent

SHELL_TOOLS = ("bash", "shell", "exec_command", "shell_command", "local_shell")
EDIT_TOOLS = ("edit", "multiedit", "write", "apply_patch", "str_replace_based_edit_tool", "notebookedit")
_EXIT = re.compile(r"^\s*\[?(?:error:\s*)?exit code:?\s*(-?\d+)\]?", re.IGNORECASE)
_TEST = re.compile(r"(?:^|[\s;&|(/])(?:py\.?test|pytest|unittest|nose2?|tox|nox|runtests\.py|manage\.py test|"
                   r"(?:npm|yarn|pnpm) (?:run )?test|go test|cargo test|make (?:test|check)|ctest)\b|"
                   r"(?:^|[\s/])tests?/\S*\.py\b|\btest_\w+\.py\b", re.IGNORECASE)
_APPLY = re.compile(r"\b(?:git apply|git am|patch -p|patch <|sed -i|perl -pi)\b")
# a file written by the shell: `cat > f <<'EOF'`, `cat <<EOF > f`, `echo ... >> f`, `printf ... > f`, `tee f`
# (bash-only agents such as mini-swe-agent write every file this way); not a redirect to /dev/null or a descriptor
_WRITE = re.compile(r"(?:^|[\s;&|(])(?:cat|echo|printf)\b[^;&|\n]*?(?<![0-9&>])>>?\s*(?!/dev/null\b|&)['\"]?[\w.][\w./-]*"
                    r"|(?:^|[\s;&|])tee\s+(?:-a\s+)?(?!/dev/null\b)[\w.][\w./-]*", re.MULTILINE)
_DIFF_FILE = re.compile(r"^diff --git a/(\S+) b/(\S+)", re.MULTILINE)
FAILURE_KINDS = ("no tool call", "shell rejected a command", "wrong file", "tests never run", "edit did not apply",
                 "time-out")
# the shell's own complaint about a command it could not run: a program it cannot find, or text that is no
# shell syntax (Python sent as a command: "/bin/sh: 2: import: not found", 'Syntax error: "(" unexpected')
_SHELL_REJECTED = re.compile(r"^(?:/usr)?(?:/bin/)?(?:ba|da)?sh: (?:line )?\d+: .*(?:syntax error|not found)",
                             re.I | re.M)


@dataclass(frozen=True)
class Command:
    """One tool call of the agent: the command line (shell) or the tool and its target, its exit code."""

    index: int  # among the tool calls, from 1
    text: str
    shell: bool
    exit: int | None
    failed: bool
    output: str
    edit: bool = False  # an edit tool, or a shell command that edits or writes files (git apply, sed -i, cat > f...)


@dataclass(frozen=True)
class Outcome:
    commands: list[Command] = field(default_factory=list)
    tests: list[Command] = field(default_factory=list)  # the commands that ran tests
    stop: str = ""  # where the agent stopped and why, one line
    errors: list[str] = field(default_factory=list)
    format_errors: int = 0  # replies with no valid action (mini-swe-agent)


def command_text(call: ToolCallEvent) -> tuple[str, bool]:
    """(what the call did, as one string; whether it was a shell command)."""
    inp = call.input if isinstance(call.input, dict) else {}
    cmd = inp.get("command", inp.get("cmd"))
    if isinstance(cmd, list):
        cmd = cmd[-1] if len(cmd) >= 3 and str(cmd[-2]).startswith("-") else " ".join(map(str, cmd))
    if call.name.lower() in SHELL_TOOLS or (cmd is not None and call.name.lower() not in EDIT_TOOLS):
        return str(cmd or ""), True
    target = inp.get("file_path") or inp.get("path") or inp.get("changes") or inp.get("skill") or ""
    return f"{call.name} {target}".strip(), False


def exit_code(result: ToolResultEvent | None, shell: bool) -> int | None:
    if result is None:
        return None
    m = _EXIT.match(result.output or "")
    if m:
        return int(m.group(1))
    if shell:
        return 1 if result.is_error else 0
    return None


def read(events: list[TraceEvent], error: str | None = None) -> Outcome:
    """The outcome of one rollout from its trace (and its error, when the harness gave one)."""
    results = {e.id: e for e in events if isinstance(e, ToolResultEvent) and e.id}
    commands: list[Command] = []
    for e in events:
        if not isinstance(e, ToolCallEvent):
            continue
        text, shell = command_text(e)
        res = results.get(e.id) if e.id else None
        edit = e.name.lower() in EDIT_TOOLS or (shell and bool(_APPLY.search(text) or _WRITE.search(text)))
        commands.append(Command(len(commands) + 1, text, shell, exit_code(res, shell),
                                res is not None and res.is_error, res.output if res is not None else "", edit))
    errors = list(dict.fromkeys([e.message for e in events if isinstance(e, ErrorEvent)] + ([error] if error else [])))
    format_errors = sum(1 for e in events if isinstance(e, ErrorEvent) and e.message.startswith("format error"))
    tests = [c for c in commands if c.shell and _TEST.search(c.text)]
    return Outcome(commands, tests, _stop(events, commands, errors), errors, format_errors)


def _stop(events: list[TraceEvent], commands: list[Command], errors: list[str]) -> str:
    last = commands[-1] if commands else None
    where = (f"after {len(commands)} tool call{'s' if len(commands) != 1 else ''}"
             + (f", the last `{_clip(last.text, 80)}`" + (f" (exit {last.exit})" if last.exit is not None else "")
                if last else ""))
    final = [m for m in errors if not m.startswith(("format error", "model API retry"))]
    if final:
        return f"stopped {where}: {_clip(final[-1], 160)}"
    if last is not None and "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT" in last.text:
        return f"submitted {where}"
    answered = any(isinstance(e, MessageEvent) and e.role == "assistant" and e.text.strip() for e in events)
    return f"answered {where}" if answered else f"ended {where} without an answer"


def _clip(text: str, n: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[:n - 3] + "..."


def diff_files(patch: str | None) -> list[str]:
    return list(dict.fromkeys(b for _, b in _DIFF_FILE.findall(patch or "")))


def diff_stat(patch: str) -> str:
    added = sum(1 for ln in patch.splitlines() if ln.startswith("+") and not ln.startswith("+++"))
    removed = sum(1 for ln in patch.splitlines() if ln.startswith("-") and not ln.startswith("---"))
    files = diff_files(patch)
    return f"{len(files)} file{'s' if len(files) != 1 else ''} (+{added} -{removed}): {', '.join(files[:6])}" + (
        ", ..." if len(files) > 6 else "")


def outcome_lines(events: list[TraceEvent], error: str | None, patch: str | None, room: int) -> list[str]:
    """The optimizer's view of an agent rollout, in about `room` characters: exit codes of the shell
    commands, the last test run and its output's tail, the diff, where it stopped. Empty for a
    rollout with no tool call and no patch (a chat answer)."""
    o = read(events, error)
    if not o.commands and patch is None:
        return []
    lines = []
    shell = [c for c in o.commands if c.shell]
    if shell:
        codes = ", ".join(f"#{c.index}:{'?' if c.exit is None else c.exit}" for c in shell[-12:])
        lines.append(f"shell commands: {len(shell)} ({sum(1 for c in shell if c.failed)} failed); exit codes "
                     f"{'(last 12) ' if len(shell) > 12 else ''}{codes}")
    if o.tests:
        t = o.tests[-1]
        tail = " ".join(t.output.strip().splitlines()[-8:]) if t.output.strip() else "<no output>"
        lines.append(f"last test run (call #{t.index}, {len(o.tests)} test run{'s' if len(o.tests) != 1 else ''}): `{_clip(t.text, 100)}` -> "
                     f"exit {'?' if t.exit is None else t.exit}; output tail: {_clip_tail(tail, max(120, room // 4))}")
    elif o.commands:
        lines.append("tests: never run")
    if patch is not None:
        if patch.strip():
            lines.append(f"diff: {diff_stat(patch)}")
            body = [ln for ln in patch.splitlines() if ln[:1] in "+-" and not ln.startswith(("+++", "---"))]
            lines.append(f"diff lines: {_clip(' ⏎ '.join(body), max(120, room // 3))}")
        else:
            lines.append("diff: none (the workspace is unchanged)")
    lines.append(o.stop)
    return lines


def _clip_tail(text: str, n: int) -> str:
    return text if len(text) <= n else "..." + text[-(n - 3):]


def failure_kinds(events: list[TraceEvent], error: str | None = None, patch: str | None = None,
                  gold_files: list[str] | tuple[str, ...] = (), coding: bool = True) -> list[str]:
    """The failure kinds a rollout's trace shows (`FAILURE_KINDS`), in that order; empty when none does:

    - no tool call: the agent never ran a tool, or replied without a valid action (mini-swe-agent);
    - shell rejected a command: a shell command failed with the shell's own complaint (a program it cannot
      find, text that is no shell syntax, such as Python sent as a command), or exit code 126 / 127;
    - wrong file: its patch touches none of the files the reference fix changes (`gold_files`);
    - tests never run: a coding rollout with no test command;
    - edit did not apply: an edit tool or an editing command (git apply, sed -i...) failed, or it
      edited but left no diff;
    - time-out: the rollout ran out of time.
    """
    o = read(events, error)
    kinds = []
    if not o.commands or o.format_errors:
        kinds.append("no tool call")
    if any(c.shell and c.failed and (c.exit in (126, 127) or _SHELL_REJECTED.search(c.output)) for c in o.commands):
        kinds.append("shell rejected a command")
    files = diff_files(patch)
    if gold_files and files and not set(files) & set(gold_files):
        kinds.append("wrong file")
    if coding and not o.tests:
        kinds.append("tests never run")
    edits = [c for c in o.commands if c.edit]
    if any(c.failed for c in edits) or (coding and edits and patch is not None and not patch.strip()):
        kinds.append("edit did not apply")
    if any("timed out" in m or "time limit" in m for m in o.errors):
        kinds.append("time-out")
    return kinds
