"""Fake-model scripts that drive the real Claude Code and Codex binaries through a task.

Each script decides from the conversation so far (how many tool results came back), so it works
whichever API the agent speaks: Claude Code (Anthropic Messages, `Skill` and `Bash` tools) or
Codex (Responses, `exec_command` / `shell` tools).
"""

from __future__ import annotations

import threading

from tests.fakes.script import FakeReply, FakeRequest, ToolCall

NUDGE_MARK = "final answer only"  # in the harness's nudge (skillopt.harness.agent_common.NUDGE)


def is_agent(req: FakeRequest) -> bool:
    """A main-loop agent call (it offers tools), not a side call such as a title or a summary."""
    return bool(req.tools)


def shell_call(req: FakeRequest, command: str) -> ToolCall:
    """Run `command` with whatever shell tool the agent offers."""
    names = req.tool_names
    if "bash" in names:  # mini-swe-agent's one tool
        return ToolCall("bash", {"command": command})
    if "Bash" in names:
        return ToolCall("Bash", {"command": command, "description": "run a command"})
    if "exec_command" in names:
        # Codex returns after yield_time_ms with the command still running ("Process running with session
        # ID N"); a scripted command waits up to 30 s, so a loaded machine does not change the transcript
        return ToolCall("exec_command", {"cmd": command, "yield_time_ms": 30000})
    if "shell_command" in names:
        return ToolCall("shell_command", {"command": command})
    return ToolCall("shell", {"command": ["bash", "-lc", command]})


def use_skill_call(req: FakeRequest, skill: str) -> ToolCall:
    """Load the skill the agent's native way: the Skill tool, or reading its SKILL.md."""
    if "Skill" in req.tool_names:
        return ToolCall("Skill", {"skill": skill})
    return shell_call(req, f"cat .agents/skills/{skill}/SKILL.md")


def skill_then_command(skill: str, command: str, answer: str):
    """Turn 1: use the skill. Turn 2: run `command`. Then: answer `answer`."""
    def script(req: FakeRequest) -> FakeReply:
        if not is_agent(req):
            return FakeReply(text="ok")
        done = len(req.tool_results)
        if done == 0:
            return FakeReply(text="I will use the skill first.", tool_calls=(use_skill_call(req, skill),))
        if done == 1:
            return FakeReply(tool_calls=(shell_call(req, command),))
        return FakeReply(text=answer)
    return script


def run_command(command: str, answer: str):
    """Run one command, then answer."""
    def script(req: FakeRequest) -> FakeReply:
        if is_agent(req) and not req.tool_results:
            return FakeReply(tool_calls=(shell_call(req, command),))
        return FakeReply(text=answer)
    return script


def silent_until_nudged(answer: str):
    """Answer with empty text until the harness nudges for a final answer."""
    def script(req: FakeRequest) -> FakeReply:
        nudged = any(NUDGE_MARK in m.text for m in req.messages if m.role == "user")
        return FakeReply(text=answer if nudged else "")
    return script


def endless_commands(command: str = "echo again"):
    """Never answers: asks for one more command every turn (for turn limits)."""
    return lambda req: FakeReply(tool_calls=(shell_call(req, command),)) if is_agent(req) else FakeReply(text="ok")


class Counter:
    """Counts the agent calls a script answered (thread-safe); wraps another script."""

    def __init__(self, script):
        self.script, self.calls, self._lock = script, 0, threading.Lock()

    def __call__(self, req: FakeRequest) -> FakeReply:
        with self._lock:
            self.calls += 1
        return self.script(req)
