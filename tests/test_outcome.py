"""What an agent rollout did, read from its trace (`skillopt.traces.outcome`), for Claude Code and
Codex shaped traces: exit codes, the last test run, the diff, the stop, and each failure kind."""

from __future__ import annotations

from skillopt.traces.events import ErrorEvent, MessageEvent, ToolCallEvent, ToolResultEvent
from skillopt.traces.outcome import FAILURE_KINDS, failure_kinds, read
from skillopt.traces.summary import summarize

PATCH = "diff --git a/pkg/core.py b/pkg/core.py\n--- a/pkg/core.py\n+++ b/pkg/core.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n"


def call(i: int, name: str, inp: dict, output: str, failed: bool = False) -> list:
    return [ToolCallEvent(id=f"c{i}", name=name, input=inp), ToolResultEvent(id=f"c{i}", output=output, is_error=failed)]


def claude_trace() -> list:
    return [MessageEvent(role="user", text="fix it"),
            *call(1, "Bash", {"command": "python -m pytest -q tests/test_core.py", "description": "run"},
                  "Exit code 1\n1 failed in 0.1s\nE assert 1 == 2", failed=True),
            *call(2, "Edit", {"file_path": "/w/pkg/core.py", "old_string": "x = 1", "new_string": "x = 2"}, "ok"),
            *call(3, "Bash", {"command": "python -m pytest -q tests/test_core.py"}, "1 passed in 0.1s"),
            MessageEvent(role="assistant", text="Fixed.")]


def codex_trace() -> list:
    return [MessageEvent(role="user", text="fix it"),
            *call(1, "shell", {"command": "sed -i 's/x = 1/x = 2/' pkg/cor.py"},
                  "[exit code 2]\nsed: can't read pkg/cor.py: No such file or directory", failed=True),
            ErrorEvent(message="timed out after 60s")]


def test_exit_codes_tests_and_stop_of_a_claude_code_trace():
    o = read(claude_trace())
    assert [(c.text, c.exit, c.edit) for c in o.commands] == [
        ("python -m pytest -q tests/test_core.py", 1, False), ("Edit /w/pkg/core.py", None, True),
        ("python -m pytest -q tests/test_core.py", 0, False)]
    assert [t.index for t in o.tests] == [1, 3]
    assert o.stop == "answered after 3 tool calls, the last `python -m pytest -q tests/test_core.py` (exit 0)"
    s = summarize(claude_trace(), patch=PATCH)
    assert "  1. Bash(command=python -m pytest -q tests/test_core.py) -> FAILED (exit 1)" in s
    assert "shell commands: 2 (1 failed); exit codes #1:1, #3:0" in s
    assert "last test run (call #3, 2 test runs): `python -m pytest -q tests/test_core.py` -> exit 0; " \
           "output tail: 1 passed in 0.1s" in s
    assert "diff: 1 file (+1 -1): pkg/core.py" in s and "diff lines: -x = 1 ⏎ +x = 2" in s
    assert failure_kinds(claude_trace(), patch=PATCH, gold_files=["pkg/core.py"]) == []


def test_each_failure_kind_is_read_from_the_trace():
    kinds = failure_kinds(codex_trace(), "timed out after 60s", patch="", gold_files=["pkg/core.py"])
    assert kinds == ["tests never run", "edit did not apply", "time-out"]
    s = summarize(codex_trace(), "timed out after 60s", patch="")
    assert "tests: never run" in s and "diff: none (the workspace is unchanged)" in s
    assert "stopped after 1 tool call, the last `sed -i 's/x = 1/x = 2/' pkg/cor.py` (exit 2): timed out after 60s" in s
    no_tools = [MessageEvent(role="user", text="fix it"), MessageEvent(role="assistant", text="It is fixed.")]
    assert failure_kinds(no_tools, patch="") == ["no tool call", "tests never run"]
    wrong = [*call(1, "Bash", {"command": "pytest"}, "ok")]
    assert failure_kinds(wrong, patch=PATCH, gold_files=["pkg/other.py"]) == ["wrong file"]
    assert set(FAILURE_KINDS) == {"no tool call", "shell rejected a command", "wrong file", "tests never run",
                                  "edit did not apply", "time-out"}


def test_a_command_the_shell_could_not_run_is_its_own_failure_kind():
    """Python sent to /bin/sh as a command, a program the sandbox lacks, bash's own "command not found":
    tool misuse the optimizer must see named; a program that ran and failed (sed, pytest) is not it."""
    rejected = [("import cmath\ndef f(z):\n    return cmath.phase(z)",
                 '[exit code 2]\n/bin/sh: 2: import: not found\n/bin/sh: 3: Syntax error: "(" unexpected'),
                ("python -c 'print(1)'", "[exit code 127]\n/bin/sh: 1: python: not found"),
                ("your_command_here", "bash: line 1: your_command_here: command not found"),
                ("./run.sh", "[exit code 126]\n")]
    ran = [("sed -i 's/a/b/' x.py", "[exit code 2]\nsed: can't read x.py: No such file or directory"),
           ("python3 -m pytest -q", "[exit code 1]\nE   ImportError: cannot import name 'f'\n1 failed"),
           ("grep -rn 'not found' .", "[exit code 1]\n")]
    for command, output in rejected:
        events = call(1, "bash", {"command": command}, output, failed=True)
        assert "shell rejected a command" in failure_kinds(events, patch=""), command
    for command, output in ran:
        events = call(1, "bash", {"command": command}, output, failed=True)
        assert "shell rejected a command" not in failure_kinds(events, patch=""), command


def test_a_chat_answer_gets_no_agent_lines():
    chat = [MessageEvent(role="user", text="q"), MessageEvent(role="assistant", text="Answer: 42")]
    s = summarize(chat)
    assert "shell commands" not in s and "tests:" not in s and "stopped" not in s


def test_a_file_written_by_the_shell_is_an_edit():
    """Bash-only agents (mini-swe-agent) write every file with a redirect or a heredoc: those are edits (a
    failed one is "edit did not apply"); a redirect to /dev/null or to a descriptor, or a command's output
    kept in a file by anything but cat / echo / printf / tee, is not."""
    writes = ["cat > solution.py <<'EOF'\ndef f():\n    return 1\nEOF", "# the file\ncat <<EOF > solution.py\nx = 1",
              "echo 'x = 1' > pkg/core.py", "echo x >> notes.txt", 'printf "a" > "b.py"', "echo x | tee -a f.py"]
    others = ["ls -la 2>&1", "echo hi > /dev/null", "cat a.py 2>/dev/null", "echo oops >&2", "cat solution.py",
              "python -m pytest -q > out.txt", "echo x | tee /dev/null", "grep -rn 'a > b' pkg/"]
    events = [e for i, c in enumerate(writes + others, 1) for e in call(i, "bash", {"command": c}, "")]
    assert [c.edit for c in read(events).commands] == [True] * len(writes) + [False] * len(others)
    failed = call(1, "bash", {"command": "cat > pkg/nowhere/x.py <<'EOF'\nx = 1\nEOF"},
                  "[exit code 2]\nsh: 1: cannot create pkg/nowhere/x.py: Directory nonexistent", failed=True)
    assert "edit did not apply" in failure_kinds(failed, patch="")
