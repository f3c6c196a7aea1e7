"""The claude-code harness drives the real Claude Code binary (bundled by claude-agent-sdk) against
the fake model server, in SDK and CLI mode: native skill discovery and use, the normalized trace,
the summary, isolation from the user's own setup, the patch of coding tasks, and failures
(timeout, crash, turn limit, empty answer) as failed rollouts."""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path

import pytest

from skillopt.benchmarks.base import Task
from skillopt.errors import BadInput
from skillopt.harness.agent_common import NUDGE
from skillopt.harness.agent_env import DUMMY_KEY
from skillopt.harness.base import Limits, Rollout
from skillopt.harness.registry import HarnessContext, check_compatible, make_harness
from skillopt.harness.workspace import write_skill
from skillopt.models import Models, ProviderEnv
from skillopt.models.spec import parse_model_spec
from skillopt.skill import Skill
from skillopt.traces.events import ErrorEvent, MessageEvent, SkillUsedEvent, ToolCallEvent, ToolResultEvent, UsageEvent
from skillopt.traces.summary import summarize
from tests.fakes.agent_scripts import endless_commands, run_command, silent_until_nudged, skill_then_command
from tests.fakes.server import FakeModelServer

pytest.importorskip("claude_agent_sdk", reason="pip install claude-agent-sdk (bundles Claude Code)")

SKILL = Skill.parse("---\nname: mathy\ndescription: Use this skill for arithmetic word problems.\n---\n"
                    "# Mathy\nWork it out with python, then end with 'Answer: <number>'.\n")
TASK = Task(id="six-by-seven", prompt="What is 6*7? End with 'Answer: <number>'.")
MODES = ["sdk", "cli"]


async def rollout(srv: FakeModelServer, tmp_path: Path, task: Task = TASK, limits: Limits | None = None,
                  **options) -> tuple[Rollout, Path]:
    harness = make_harness("claude-code", HarnessContext(models=Models(env=ProviderEnv()), options=options))
    ws = tmp_path / f"ws-{task.id}"
    ws.mkdir()
    for rel, content in task.files.items():
        (ws / rel).write_text(content)
    write_skill(ws, SKILL, harness.skill_dir)
    target = parse_model_spec(f"anthropic:fake-model@{srv.base_url}")
    return await harness.run(task, SKILL, ws, target, limits or Limits(timeout_s=60)), ws


def _running(marker: str) -> list[int]:
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and marker in (proc / "cmdline").read_bytes().decode(errors="replace"):
                pids.append(int(proc.name))
        except OSError:
            pass
    return pids


@pytest.mark.parametrize("mode", MODES)
async def test_rollout_discovers_and_uses_the_skill_natively(mode, tmp_path, monkeypatch):
    # The user's own setup must not reach the rollout: a skill in ~/.claude, keys and endpoints.
    user_home = tmp_path / "user-home"
    (user_home / ".claude" / "skills" / "leaky").mkdir(parents=True)
    (user_home / ".claude" / "skills" / "leaky" / "SKILL.md").write_text("---\nname: leaky\ndescription: x\n---\nx\n")
    monkeypatch.setenv("HOME", str(user_home))
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(user_home / ".claude"))
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-user-secret")
    monkeypatch.setenv("ANTHROPIC_AUTH_TOKEN", "user-secret-token")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")
    script = skill_then_command("mathy", "echo computing; python3 -c 'print(6*7)'; ls no-such-file",
                                "I computed it.\nAnswer: 42")
    with FakeModelServer(script) as srv:
        r, ws = await rollout(srv, tmp_path, mode=mode)
    assert r.error is None, r.error
    assert r.output.text.endswith("Answer: 42") and r.output.patch is None
    kinds = [type(e).__name__ for e in r.trace]
    assert kinds[0] == "MessageEvent" and r.trace[0].text == TASK.prompt
    discovered = [e.text for e in r.trace if isinstance(e, MessageEvent) and e.role == "system"]
    assert discovered and discovered[0].startswith("skill discovered: mathy")
    calls = [e for e in r.trace if isinstance(e, ToolCallEvent)]
    assert [c.name for c in calls] == ["Skill", "Bash"] and calls[0].input == {"skill": "mathy"}
    assert [e.how for e in r.trace if isinstance(e, SkillUsedEvent)] == ["Skill tool"]
    results = {e.id: e for e in r.trace if isinstance(e, ToolResultEvent)}
    assert "42" in results[calls[1].id].output and results[calls[1].id].is_error  # `ls` failed: exit 2
    usage = [e for e in r.trace if isinstance(e, UsageEvent)]
    assert len(usage) == 1 and usage[0].turns and usage[0].input_tokens > 0 and r.usage.output_tokens > 0
    assert r.usage.cost_usd is None  # an unknown model: no price, never $0
    assert r.raw_log and any(json.loads(line).get("type") == "result" for line in r.raw_log.splitlines())
    # the summary the optimizer sees
    s = summarize(r.trace, r.error)
    assert "skill: discovered natively; used (Skill tool at call 1)" in s
    assert "Bash(command=echo computing; python3 -c 'print(6*7)'; ls no-such-file) -> FAILED" in s
    assert "final answer (" in s and "Answer: 42" in s
    # what reached the model server: the skill's description, the dummy key, nothing of the user's
    first = srv.requests[0]
    assert first.path == "/v1/messages" and first.body["model"] == "fake-model" and first.body["stream"] is True
    assert "mathy: Use this skill for arithmetic word problems." in json.dumps(first.body)
    assert "leaky" not in json.dumps(first.body)
    assert all(req.headers.get("x-api-key") == DUMMY_KEY for req in srv.requests)
    assert "user-secret" not in json.dumps([req.headers for req in srv.requests])
    assert (ws / ".home" / ".claude").is_dir() and not (user_home / ".claude" / "projects").exists()


async def test_coding_task_returns_the_workspace_diff_with_new_files(tmp_path):
    task = Task(id="fix", kind="code", prompt="Set x to 2 and add notes.", files={"main.py": "x = 1\n"})
    command = "sed -i 's/x = 1/x = 2/' main.py && printf 'done\\n' > NOTES.md"
    with FakeModelServer(run_command(command, "Changed main.py and added NOTES.md.")) as srv:
        r, ws = await rollout(srv, tmp_path, task=task, mode="cli")
    assert r.error is None, r.error
    patch = r.output.patch or ""
    assert "diff --git a/main.py b/main.py" in patch and "+x = 2" in patch
    assert "diff --git a/NOTES.md b/NOTES.md" in patch and "new file mode" in patch
    assert ".claude" not in patch and ".home" not in patch
    assert (ws / "main.py").read_text() == "x = 2\n"


@pytest.mark.parametrize("mode", MODES)
async def test_timeout_kills_the_whole_process_group(mode, tmp_path):
    marker = f"skillopt-hang-{mode}-{os.getpid()}"
    command = f"python3 -c 'import time, sys; time.sleep(120)' {marker}"
    with FakeModelServer(run_command(command, "never")) as srv:
        t0 = time.monotonic()
        r, _ = await rollout(srv, tmp_path, limits=Limits(timeout_s=6), mode=mode)
        took = time.monotonic() - t0
    assert r.error and "timed out after 6s" in r.error
    assert took < 20
    assert any(isinstance(e, ToolCallEvent) and marker in str(e.input) for e in r.trace)  # partial trace kept
    await asyncio.sleep(0.3)
    assert _running(marker) == []


async def test_empty_final_answer_is_retried_once_with_a_nudge(tmp_path):
    with FakeModelServer(silent_until_nudged("Answer: 42")) as srv:
        r, _ = await rollout(srv, tmp_path, mode="cli")
    assert r.error is None, r.error
    assert r.output.text == "Answer: 42"
    assert [e.text for e in r.trace if isinstance(e, MessageEvent) and e.role == "user"][-1] == NUDGE
    assert len([e for e in r.trace if isinstance(e, UsageEvent)]) == 2


async def test_still_empty_after_the_nudge_is_a_failed_rollout(tmp_path):
    with FakeModelServer(silent_until_nudged("")) as srv:
        r, _ = await rollout(srv, tmp_path, mode="sdk")
    assert r.error == "empty final answer (after a nudge)" and r.output.text == ""
    assert NUDGE in [e.text for e in r.trace if isinstance(e, MessageEvent) and e.role == "user"]


async def test_turn_limit_ends_the_rollout_with_its_reason(tmp_path):
    with FakeModelServer(endless_commands()) as srv:
        r, _ = await rollout(srv, tmp_path, limits=Limits(timeout_s=60, max_turns=2), mode="cli")
    assert r.error and "error_max_turns" in r.error
    assert len([e for e in r.trace if isinstance(e, ToolCallEvent)]) == 2
    assert "error: claude code ended with error_max_turns" in summarize(r.trace, r.error)


@pytest.mark.parametrize("mode", MODES)
async def test_a_crashed_agent_is_a_failed_rollout_not_an_exception(mode, tmp_path):
    with FakeModelServer(run_command("true", "x")) as srv:
        r, _ = await rollout(srv, tmp_path, mode=mode, binary="/bin/false")
    assert r.error and ("exited with code 1" in r.error or "claude code failed" in r.error)
    assert any(isinstance(e, ErrorEvent) for e in r.trace)


async def test_concurrent_rollouts_are_isolated(tmp_path):
    script = skill_then_command("mathy", "pwd", "Answer: 42")
    with FakeModelServer(script) as srv:
        tasks = [Task(id=f"t{i}", prompt=TASK.prompt) for i in range(3)]
        results = await asyncio.gather(*[rollout(srv, tmp_path, task=t, mode="sdk", max_processes=2) for t in tasks])
    for r, ws in results:
        assert r.error is None and r.output.text == "Answer: 42"
        pwd = [e.output for e in r.trace if isinstance(e, ToolResultEvent)][-1]
        assert pwd.strip() == str(ws)


def test_only_targets_that_speak_anthropic_messages_are_accepted():
    for ok in ("anthropic:claude-haiku-4-5", "anthropic:fake@http://127.0.0.1:1", "vllm:m@http://h:8000/v1",
               "local:qwen2.5-coder-0.5b"):
        check_compatible("claude-code", parse_model_spec(ok))
    for bad in ("openai:gpt-5-mini", "openai-compatible:m@http://h/v1", "azure:dep"):
        with pytest.raises(BadInput, match="messages API"):
            check_compatible("claude-code", parse_model_spec(bad))


def test_options_are_checked_when_the_harness_is_made():
    models = Models(env=ProviderEnv())
    with pytest.raises(BadInput, match="bogus"):
        make_harness("claude-code", HarnessContext(models=models, options={"bogus": 1}))
    with pytest.raises(BadInput, match="mode"):
        make_harness("claude-code", HarnessContext(models=models, options={"mode": "telepathy"}))
    h = make_harness("claude-code", HarnessContext(models=models, options={"mode": "cli", "allowed_tools": "Bash,Read"}))
    assert h.mode == "cli" and h.opts.allowed_tools == ("Bash", "Read") and h.skill_dir == ".claude/skills"


async def test_server_errors_end_as_a_failed_rollout(tmp_path):
    from tests.fakes.server import FakeReply

    with FakeModelServer(lambda req: FakeReply(text="bad request, no such model", status=400)) as srv:
        r, _ = await rollout(srv, tmp_path, mode="cli", max_retries=0)
    assert r.error and "no such model" in r.error
    assert "error: claude code ended with" in summarize(r.trace, r.error)
