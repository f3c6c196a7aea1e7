"""The codex harness drives the real Codex binary (bundled by openai-codex-cli-bin) against the fake
model server, in SDK (app-server) and CLI (`codex exec --json`) mode: native skill discovery and
use, the normalized trace, the summary, isolation, the patch of coding tasks, and failures
(timeout, crash, tool-call limit, empty answer) as failed rollouts."""

from __future__ import annotations

import asyncio
import json
import os
import time
import tomllib
from pathlib import Path

import pytest

from skillopt.benchmarks.base import Task
from skillopt.errors import BadInput
from skillopt.harness.agent_common import NUDGE
from skillopt.harness.agent_env import DUMMY_KEY, AgentOptions, Endpoint
from skillopt.harness.base import Limits, Rollout
from skillopt.harness.codex import app_server_event, codex_config
from skillopt.harness.registry import HarnessContext, check_compatible, make_harness
from skillopt.harness.workspace import write_skill
from skillopt.models import Models, ProviderEnv
from skillopt.models.spec import parse_model_spec
from skillopt.skill import Skill
from skillopt.traces.events import ErrorEvent, MessageEvent, SkillUsedEvent, ToolCallEvent, ToolResultEvent, UsageEvent
from skillopt.traces.summary import summarize
from tests.fakes.agent_scripts import endless_commands, run_command, silent_until_nudged, skill_then_command
from tests.fakes.server import FakeModelServer

pytest.importorskip("openai_codex", reason="pip install openai-codex (bundles the codex binary)")

SKILL = Skill.parse("---\nname: mathy\ndescription: Use this skill for arithmetic word problems.\n---\n"
                    "# Mathy\nWork it out with python, then end with 'Answer: <number>'.\n")
TASK = Task(id="six-by-seven", prompt="What is 6*7? End with 'Answer: <number>'.")
MODES = ["sdk", "cli"]


async def rollout(srv: FakeModelServer, tmp_path: Path, task: Task = TASK, limits: Limits | None = None,
                  **options) -> tuple[Rollout, Path]:
    harness = make_harness("codex", HarnessContext(models=Models(env=ProviderEnv()), options=options))
    ws = tmp_path / f"ws-{task.id}"
    ws.mkdir()
    for rel, content in task.files.items():
        (ws / rel).write_text(content)
    write_skill(ws, SKILL, harness.skill_dir)
    target = parse_model_spec(f"vllm:fake-model@{srv.openai_url}")
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
async def test_rollout_discovers_and_reads_the_skill_natively(mode, tmp_path, monkeypatch):
    user_home = tmp_path / "user-home"
    (user_home / ".codex" / "skills" / "leaky").mkdir(parents=True)
    (user_home / ".codex" / "skills" / "leaky" / "SKILL.md").write_text("---\nname: leaky\ndescription: x\n---\nx\n")
    (user_home / ".codex" / "config.toml").write_text('model = "gpt-user"\n')
    monkeypatch.setenv("HOME", str(user_home))
    monkeypatch.setenv("CODEX_HOME", str(user_home / ".codex"))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-user-secret")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    script = skill_then_command("mathy", "echo computing; python3 -c 'print(6*7)'; ls no-such-file",
                                "I computed it.\nAnswer: 42")
    with FakeModelServer(script) as srv:
        r, ws = await rollout(srv, tmp_path, mode=mode)
    assert r.error is None, r.error
    assert r.output.text.endswith("Answer: 42") and r.output.patch is None
    assert isinstance(r.trace[0], MessageEvent) and r.trace[0].text == TASK.prompt
    discovered = [e.text for e in r.trace if isinstance(e, MessageEvent) and e.text.startswith("skill ")]
    assert discovered and discovered[0].startswith("skill discovered: mathy")
    calls = [e for e in r.trace if isinstance(e, ToolCallEvent)]
    assert [c.name for c in calls] == ["shell", "shell"]
    assert calls[0].input == {"command": "cat .agents/skills/mathy/SKILL.md"}
    assert [e.how for e in r.trace if isinstance(e, SkillUsedEvent)] == ["read SKILL.md (shell)"]
    results = {e.id: e for e in r.trace if isinstance(e, ToolResultEvent)}
    assert "name: mathy" in results[calls[0].id].output and not results[calls[0].id].is_error
    assert results[calls[1].id].is_error and results[calls[1].id].output.startswith("[exit code 2]")
    usage = [e for e in r.trace if isinstance(e, UsageEvent)]
    assert len(usage) == 1 and usage[0].turns == 3 and r.usage.input_tokens > 0 and r.usage.calls == 3
    assert r.raw_log and len(r.raw_log.splitlines()) > 5
    s = summarize(r.trace, r.error)
    assert "skill: discovered natively; used (read SKILL.md (shell) at call 1)" in s
    assert "shell(command=echo computing; python3 -c 'print(6*7)'; ls no-such-file) -> FAILED" in s
    assert "turns=3, tool calls=2 (1 failed)" in s
    # what reached the server: a streamed Responses call listing the skill, with the dummy key
    first = srv.requests[0]
    assert first.path == "/v1/responses" and first.body["stream"] is True and first.body["model"] == "fake-model"
    body = json.dumps(first.body)
    assert "mathy: Use this skill for arithmetic word problems." in body and "leaky" not in body
    assert all(req.headers.get("authorization") == f"Bearer {DUMMY_KEY}" for req in srv.requests)
    assert "user-secret" not in json.dumps([req.headers for req in srv.requests])
    assert (ws / ".home" / ".codex" / "config.toml").exists() and not (user_home / ".codex" / "sessions").exists()


async def test_coding_task_returns_the_workspace_diff_with_new_files(tmp_path):
    task = Task(id="fix", kind="code", prompt="Set x to 2 and add notes.", files={"main.py": "x = 1\n"})
    command = "sed -i 's/x = 1/x = 2/' main.py && printf 'done\\n' > NOTES.md"
    with FakeModelServer(run_command(command, "Changed main.py and added NOTES.md.")) as srv:
        r, ws = await rollout(srv, tmp_path, task=task, mode="sdk")
    assert r.error is None, r.error
    patch = r.output.patch or ""
    assert "diff --git a/main.py b/main.py" in patch and "+x = 2" in patch
    assert "diff --git a/NOTES.md b/NOTES.md" in patch and "new file mode" in patch
    assert ".agents" not in patch and ".home" not in patch


@pytest.mark.parametrize("mode", MODES)
async def test_timeout_kills_the_whole_process_group(mode, tmp_path):
    marker = f"skillopt-hang-codex-{mode}-{os.getpid()}"
    command = f"python3 -c 'import time; time.sleep(120)' {marker}"
    with FakeModelServer(run_command(command, "never")) as srv:
        t0 = time.monotonic()
        r, _ = await rollout(srv, tmp_path, limits=Limits(timeout_s=6), mode=mode)
        took = time.monotonic() - t0
    assert r.error and "timed out after 6s" in r.error
    assert took < 20
    assert any(isinstance(e, ToolCallEvent) and marker in str(e.input) for e in r.trace)  # partial trace kept
    await asyncio.sleep(0.3)
    assert _running(marker) == []


@pytest.mark.parametrize("mode", MODES)
async def test_empty_final_answer_is_retried_once_with_a_nudge(mode, tmp_path):
    with FakeModelServer(silent_until_nudged("Answer: 42")) as srv:
        r, _ = await rollout(srv, tmp_path, mode=mode)
    assert r.error is None, r.error
    assert r.output.text == "Answer: 42"
    assert [e.text for e in r.trace if isinstance(e, MessageEvent) and e.role == "user"] == [TASK.prompt, NUDGE]


async def test_tool_call_limit_stops_the_agent_with_its_reason(tmp_path):
    with FakeModelServer(endless_commands()) as srv:
        r, _ = await rollout(srv, tmp_path, limits=Limits(timeout_s=60, max_turns=3), mode="cli")
    assert r.error and "stopped after 3 tool calls (max_turns)" in r.error
    assert len([e for e in r.trace if isinstance(e, ToolCallEvent)]) == 4


@pytest.mark.parametrize("mode", MODES)
async def test_a_crashed_agent_is_a_failed_rollout_not_an_exception(mode, tmp_path):
    with FakeModelServer(run_command("true", "x")) as srv:
        r, _ = await rollout(srv, tmp_path, mode=mode, binary="/bin/false")
    assert r.error and ("exited with code 1" in r.error or "codex failed" in r.error)
    assert any(isinstance(e, ErrorEvent) for e in r.trace)


async def test_server_errors_end_as_a_failed_rollout(tmp_path):
    from tests.fakes.server import FakeReply

    with FakeModelServer(lambda req: FakeReply(text="bad request, no such model", status=400)) as srv:
        r, _ = await rollout(srv, tmp_path, mode="cli", max_retries=0)
    assert r.error and "no such model" in r.error


def test_only_targets_that_speak_responses_are_accepted():
    for ok in ("openai:gpt-5-mini", "azure:dep", "vllm:m@http://h:8000/v1", "local:qwen2.5-coder-0.5b"):
        check_compatible("codex", parse_model_spec(ok))
    for bad in ("anthropic:claude-haiku-4-5", "openai-compatible:m@http://h/v1"):
        with pytest.raises(BadInput, match="responses API"):
            check_compatible("codex", parse_model_spec(bad))


def test_config_toml_points_codex_at_the_target_only():
    cfg = tomllib.loads(codex_config("m-1", Endpoint("http://127.0.0.1:1/v1", "sk-secret-value", query=(("api-version", "x"),)),
                                     AgentOptions(reasoning_effort="low", max_retries=1)))
    assert cfg["model"] == "m-1" and cfg["model_provider"] == "skillopt" and cfg["approval_policy"] == "never"
    assert cfg["model_reasoning_effort"] == "low" and cfg["sandbox_mode"] == "danger-full-access"
    provider = cfg["model_providers"]["skillopt"]
    assert provider["base_url"] == "http://127.0.0.1:1/v1" and provider["wire_api"] == "responses"
    assert provider["env_key"] == "SKILLOPT_CODEX_API_KEY" and provider["request_max_retries"] == 1
    assert provider["query_params"] == {"api-version": "x"} and "sk-secret-value" not in json.dumps(cfg)


def test_a_local_target_is_waited_on_for_the_whole_rollout_not_two_minutes():
    """Codex gave up on a silent stream after 120 s and asked again while the embedded model was still
    reading its 6,000-token first prompt (2-3 minutes on 2 cores): the same prompt queued behind itself."""
    limits = Limits(timeout_s=900)
    opts = AgentOptions()
    assert opts.idle_timeout(limits, parse_model_spec("local:qwen2.5-coder-1.5b")) == 900
    assert opts.idle_timeout(limits, parse_model_spec("openai:gpt-5-mini")) == 120
    assert AgentOptions(stream_idle_timeout_s=30).idle_timeout(limits, parse_model_spec("local:qwen2.5-coder-1.5b")) == 30
    cfg = tomllib.loads(codex_config("m", Endpoint("http://127.0.0.1:1/v1", "k"), opts, idle_s=900))
    assert cfg["model_providers"]["skillopt"]["stream_idle_timeout_ms"] == 900_000


def test_app_server_notifications_map_to_exec_events():
    state: dict = {}
    item = {"type": "commandExecution", "id": "c1", "command": "/bin/bash -lc ls", "aggregatedOutput": "a\n",
            "exitCode": 0, "status": "completed", "commandActions": [{"type": "read", "path": "/w/x"}]}
    ev = app_server_event("item/completed", {"item": item}, state)
    assert ev == {"type": "item.completed", "item": {"type": "command_execution", "id": "c1", "command": "/bin/bash -lc ls",
                  "aggregated_output": "a\n", "exit_code": 0, "status": "completed",
                  "command_actions": [{"type": "read", "path": "/w/x"}]}}
    assert app_server_event("thread/tokenUsage/updated", {"tokenUsage": {"total": {"inputTokens": 7, "outputTokens": 2}}},
                            state) is None
    done = app_server_event("turn/completed", {"turn": {"status": "completed"}}, state)
    assert done == {"type": "turn.completed", "usage": {"input_tokens": 7, "output_tokens": 2}, "model_calls": 1}
    failed = app_server_event("turn/completed", {"turn": {"status": "failed", "error": {"message": "boom"}}}, state)
    assert failed == {"type": "turn.failed", "error": {"message": "boom"}}
