"""An agent rollout as the agent-aware proposers read it: its tool calls in order (command, exit
code, whether it edited or ran tests), the tail of its last test run, its diff, where it stopped,
and the failure kinds its trace shows. Built from the normalized trace by `traces.outcome`, so it is
the same for claude-code, codex and mini-swe-agent; a chat rollout (no tool call, no patch) has none.
"""

from __future__ import annotations

import ast
import re

from pydantic import BaseModel, Field

from skillopt.traces.events import TraceEvent
from skillopt.traces.outcome import diff_files, diff_stat, failure_kinds, read

MAX_STEPS = 40  # tool calls kept per trajectory (first and last ones when longer)
MAX_COMMAND_CHARS = 160
MAX_SOURCE_CHARS = 2000  # an edit's whole command is kept up to this (a file written in one command)
MAX_TAIL_CHARS = 600
MAX_SAID_CHARS = 200
# lines of a failed command's output that say why (a shell that could not run it, a Python traceback's last line)
_WHY = re.compile(r"error|not found|unexpected|no such file|denied|cannot|can't|invalid|unknown|usage:", re.I)


class TrajectoryStep(BaseModel):
    index: int  # among the tool calls, from 1
    command: str  # the shell command, or the tool and its target
    exit: int | None = None  # None: the trace does not say
    failed: bool = False
    edit: bool = False
    test: bool = False
    source: str = ""  # an edit's whole command as the agent wrote it (line breaks kept); "" when longer than
    # MAX_SOURCE_CHARS: what an example run shows of the step (optimizer/agent.py)
    said: str = ""  # a failed command: what its output says of why ("/bin/sh: 1: import: not found")
    python: bool = False  # a failed shell command that was Python source (`python_source`): sent to the wrong program


class Trajectory(BaseModel):
    steps: list[TrajectoryStep] = Field(default_factory=list)
    calls: int = 0  # tool calls in all (steps may hold fewer)
    tests_run: int = 0
    test_tail: str = ""  # the last lines of the last test run's output
    test_exit: int | None = None
    diff: str = ""  # "1 file (+1 -1): pkg/core.py"; "" when there is no diff
    diff_files: list[str] = Field(default_factory=list)
    stop: str = ""  # where the agent stopped and why
    failure_kinds: list[str] = Field(default_factory=list)  # outcome.FAILURE_KINDS that the trace shows

    @property
    def tested_after_last_edit(self) -> bool:
        edits = [s.index for s in self.steps if s.edit]
        tests = [s.index for s in self.steps if s.test]
        return bool(tests) and (not edits or max(tests) > max(edits))


def said(output: str) -> str:
    """Why a failed command failed, as its output says it: the first and the last line that name an error
    (the shell's "import: not found" and 'Syntax error: "(" unexpected', a traceback's last line), else
    the output's last line; the harness's own "[exit code N]" line is left out. An exit code alone does
    not tell the optimizer that the agent sent Python to a shell."""
    lines = [ln.strip() for ln in output.splitlines() if ln.strip() and not ln.startswith("[exit code")]
    why = [ln for ln in lines if _WHY.search(ln)]
    picked = list(dict.fromkeys([why[0], why[-1]])) if why else lines[-1:]
    return _clip(" | ".join(picked), MAX_SAID_CHARS)


def python_source(text: str) -> bool:
    """Python source, not a shell command: the text parses as Python and opens by defining or importing
    something. A shell line parses as a Python expression surprisingly often (`ls -la`, and
    `cat > f.py <<'EOF'` before the code of a heredoc), but never as `import`, `def` or `class`."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return False
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom)
    return bool(tree.body) and isinstance(tree.body[0], kinds)


PYTHON_TO_SHELL = "python sent to the shell"  # a failure named by a step's `python` flag, not a failure kind


def shows(aim: str, t: Trajectory | None) -> bool:
    """Whether a rollout's trajectory shows the failure `aim` names: Python source sent to the shell, or
    one of `outcome.FAILURE_KINDS`."""
    if t is None:
        return False
    if aim == PYTHON_TO_SHELL:
        return any(s.python for s in t.steps)
    return aim in t.failure_kinds


def _clip(text: str, n: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 3] + "..."


def trajectory(events: list[TraceEvent], error: str | None = None, patch: str | None = None,
               coding: bool = True) -> Trajectory | None:
    """The trajectory of one agent rollout; None for a rollout with no tool call and no patch."""
    o = read(events, error)
    if not o.commands and patch is None:
        return None
    tests = {c.index for c in o.tests}
    steps = [TrajectoryStep(index=c.index, command=_clip(c.text, MAX_COMMAND_CHARS), exit=c.exit, failed=c.failed,
                            edit=c.edit, test=c.index in tests,
                            source=c.text.strip() if c.edit and c.shell and len(c.text) <= MAX_SOURCE_CHARS else "",
                            said=said(c.output) if c.failed else "",
                            python=c.failed and c.shell and python_source(c.text))
             for c in o.commands]
    if len(steps) > MAX_STEPS:
        steps = steps[: MAX_STEPS // 4] + steps[-(MAX_STEPS - MAX_STEPS // 4):]
    last = o.tests[-1] if o.tests else None
    tail = "\n".join(last.output.strip().splitlines()[-8:]) if last is not None else ""
    if len(tail) > MAX_TAIL_CHARS:
        tail = "..." + tail[-(MAX_TAIL_CHARS - 3):]
    return Trajectory(steps=steps, calls=len(o.commands), tests_run=len(o.tests), test_tail=tail,
                      test_exit=last.exit if last is not None else None,
                      diff=diff_stat(patch) if patch and patch.strip() else "", diff_files=diff_files(patch),
                      stop=o.stop, failure_kinds=failure_kinds(events, error, patch, coding=coding))
