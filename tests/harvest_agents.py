"""Real Claude Code / Codex sessions for the harvest tests, the fixtures and perf/harvest.py: the
real binaries (in CLI mode, through our harnesses) run a scripted fake model on a workspace; each
leaves its transcript where it always does (`<ws>/.home/.claude/projects/...`,
`<ws>/.home/.codex/sessions/...`)."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from skillopt.benchmarks.base import Task
from skillopt.git import base_commit
from skillopt.harness.base import Limits
from skillopt.harness.registry import HarnessContext, make_harness
from skillopt.harness.workspace import write_skill
from skillopt.models import Models, ProviderEnv
from skillopt.models.spec import parse_model_spec
from skillopt.skill import Skill
from tests.fakes.agent_scripts import is_agent, shell_call
from tests.fakes.script import FakeReply, FakeRequest, ToolCall
from tests.fakes.server import FakeModelServer

SKILL = Skill.parse("---\nname: fixer\ndescription: Use this skill to fix failing tests.\n---\n# Fixer\n"
                    "Run the tests first, then fix the code.\n")
CALC = "def add(a, b):\n    return a - b\n"
TEST = ("import unittest\nfrom calc import add\n\n\nclass T(unittest.TestCase):\n"
        "    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n")
TEST_CMD = "python3 -m unittest -q"
RUNNING = re.compile(r"Process running with session ID (\d+)")


@dataclass(frozen=True)
class Step:
    """One agent turn: a shell command, another tool call (built from the request), or the answer."""

    command: str | None = None
    tool: Callable[[FakeRequest, Path], ToolCall] | None = None
    answer: str | None = None


def shell(command: str) -> Step:
    return Step(command=command)


def claude_edit(rel: str, old: str, new: str) -> list[Step]:
    """Claude Code edits a file only after reading it."""
    return [Step(tool=lambda req, ws: ToolCall("Read", {"file_path": str(ws / rel)})),
            Step(tool=lambda req, ws: ToolCall("Edit", {"file_path": str(ws / rel), "old_string": old,
                                                         "new_string": new}))]


def claude_write(rel: str, content: str) -> Step:
    return Step(tool=lambda req, ws: ToolCall("Write", {"file_path": str(ws / rel), "content": content}))


def scripted(steps: Sequence[Step], ws: Path, after: str = "Done.", poll: bool = True):
    """A fake model: step i answers when i tool results came back; then `after`. A follow-up user
    message (a resumed session) is answered with `after` as well. With `poll`, a Codex command still
    running when its wait ended is waited on (write_stdin) before the next step."""
    def script(req: FakeRequest) -> FakeReply:
        if not is_agent(req):
            return FakeReply(text="ok")
        users = [m for m in req.messages if m.role == "user" and m.text.strip()
                 and not m.text.lstrip().startswith("<")]  # Codex sends its context as user messages
        results = req.tool_results
        running = RUNNING.search(results[-1].text) if results else None
        if running and poll:  # Codex's exec_command came back before the command ended (a loaded machine): wait on it
            return FakeReply(tool_calls=(ToolCall("write_stdin", {"session_id": int(running.group(1)), "chars": "",
                                                                   "yield_time_ms": 30000}),))
        done = sum(1 for m in results if not (poll and RUNNING.search(m.text)))  # a step is done when its command ended
        if done < len(steps) and len(users) <= 1:
            st = steps[done]
            if st.answer is not None:
                return FakeReply(text=st.answer)
            call = shell_call(req, st.command) if st.command else st.tool(req, ws)
            return FakeReply(text="Working on it.", tool_calls=(call,))
        return FakeReply(text=after)
    return script


def repo(ws: Path, files: dict[str, str] | None = None) -> str:
    """A workspace that is a git repository with one commit (fixed identity and dates: the same
    files give the same commit id)."""
    ws.mkdir(parents=True, exist_ok=True)
    for rel, text in (files or {"calc.py": CALC, "test_calc.py": TEST}).items():
        (ws / rel).parent.mkdir(parents=True, exist_ok=True)
        (ws / rel).write_text(text)
        # written long ago: a fix of the same size made within the second of the first test run would
        # otherwise keep the .pyc that run wrote (Python checks the source's size and mtime in seconds),
        # and the test after the fix failed (about 1 session in 5, on an idle machine)
        os.utime(ws / rel, (1_000_000_000, 1_000_000_000))
    return base_commit(ws, "base")


def run_session(harness: str, ws: Path, prompt: str, steps: Sequence[Step], answer: str = "Done.",
                follow_up: str | None = None, timeout_s: float = 90, poll: bool = True) -> Path:
    """One session of the real binary in `ws` (a prepared repository); returns its transcript."""
    return asyncio.run(_session(harness, ws, prompt, steps, answer, follow_up, timeout_s, poll))


async def _session(harness: str, ws: Path, prompt: str, steps: Sequence[Step], answer: str,
                   follow_up: str | None, timeout_s: float, poll: bool) -> Path:
    h = make_harness(harness, HarnessContext(models=Models(env=ProviderEnv()), options={"mode": "cli"}))
    write_skill(ws, SKILL, h.skill_dir)
    with FakeModelServer(scripted(steps, ws, answer, poll)) as srv:
        spec = f"anthropic:fake-model@{srv.base_url}" if harness == "claude-code" else \
            f"vllm:fake-model@{srv.openai_url}"
        target = parse_model_spec(spec)
        r = await h.run(Task(id="s", kind="code", prompt=prompt), SKILL, ws, target, Limits(timeout_s=timeout_s))
        if r.error:
            raise RuntimeError(f"{harness} session failed: {r.error}")
        found = transcripts(harness, ws)
        if follow_up and harness == "claude-code":  # the user answers in the same session
            env = h.agent_env(ws, target, Limits(timeout_s=timeout_s), h.endpoint(target))
            argv = [h.binary(), "-p", "--output-format", "stream-json", "--verbose", "--model", "fake-model",
                    "--permission-mode", "bypassPermissions", "--setting-sources", "project",
                    "--resume", found[0].stem, "--", follow_up]
            await asyncio.to_thread(subprocess.run, argv, cwd=ws, env=env, capture_output=True, timeout=timeout_s,
                                    check=True)
    return found[0]


def transcripts(harness: str, ws: Path) -> list[Path]:
    home = ws / ".home"
    pattern = ".claude/projects/*/*.jsonl" if harness == "claude-code" else ".codex/sessions/*/*/*/rollout-*.jsonl"
    found = sorted(home.glob(pattern))
    if not found:
        raise RuntimeError(f"{harness} wrote no transcript under {home}")
    return found
