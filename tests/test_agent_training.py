"""A training step through the real CLI with the real Claude Code and Codex binaries as targets.

The scripted agent loads the skill its native way (Skill tool / reading SKILL.md), runs a shell
command, and answers right only when the loaded skill holds the rule; the optimizer (chat API on
the same fake server) proposes the rule. The step must accept it.
"""

from __future__ import annotations

import json
import re

import pytest

from tests.fakes.agent_scripts import shell_call, use_skill_call
from tests.fakes.server import FakeModelServer, FakeReply, FakeRequest
from tests.helpers import cli_env, run_cli, write_jsonl
from tests.test_train_e2e import RULE, code_tasks


def agent_and_optimizer(req: FakeRequest) -> FakeReply:
    if req.api == "chat":  # the optimizer
        edit = {"op": "add", "anchor": "Answer format", "text": RULE, "rationale": "codes follow a pattern",
                "evidence": re.findall(r"FAILED task (\S+)", req.last_user_text)}
        return FakeReply(text=json.dumps({"analysis": "the agent lacked the rule", "edits": [edit]}))
    if not req.tools:  # side calls (titles, summaries)
        return FakeReply(text="ok")
    results = req.tool_results
    if not results:
        return FakeReply(text="Loading the skill.", tool_calls=[use_skill_call(req, "task-solver")])
    if len(results) == 1:
        return FakeReply(text="Checking.", tool_calls=[shell_call(req, "echo looked")])
    question = " ".join(m.text for m in req.messages if m.role == "user")
    item = re.search(r"secret code of item (\d+)", question)
    # Claude Code's Skill tool injects the skill as a user message; Codex reads it with a command
    knows = any(RULE in m.text for m in req.messages)
    answer = f"ZETA-{item.group(1)}" if (knows and item) else "unknown"
    return FakeReply(text=f"Done.\nAnswer: {answer}")


@pytest.mark.parametrize("harness, spec", [("claude-code", "anthropic:fake-agent@{base}"),
                                           ("codex", "openai:fake-agent@{base}/v1")])
@pytest.mark.parametrize("mode", ["cli", "sdk"])
def test_one_training_step_with_a_real_agent(tmp_path, harness, spec, mode):
    data = write_jsonl(tmp_path / "codes.jsonl", code_tasks(6))
    with FakeModelServer(agent_and_optimizer) as srv:
        args = ["run", "--benchmark", str(data), "--harness", harness, "--harness-mode", mode,
                "--target_model", spec.format(base=srv.base_url),
                "--optimizer_model", f"openai-compatible:fake-opt@{srv.openai_url}",
                "--run-id", "agent", "--epochs", "1", "--train-size", "2", "--val-size", "2", "--test-size", "2",
                "--batch-size", "2", "--concurrency", "2", "--set", "train.consolidate=false",
                "--set", "limits.timeout_s=120",
                # a plumbing test on 2 validation tasks: a gate that can accept 2 wins out of 2
                "--set", "gate.alpha=0.25"]
        r = run_cli(args, tmp_path, cli_env(tmp_path), timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    run = tmp_path / "runs" / "agent"
    # the agent's prompts name its working folder: ~10 rollouts, 2 at a time, take turns on 2 folders,
    # so the prompt prefix repeats and a model server's prefix cache carries over between rollouts
    folders = {m for q in srv.requests if q.api in ("messages", "responses")
               for m in re.findall(r"runs/agent/work/([\w.-]+)", json.dumps(q.body))}
    assert 1 <= len(folders) <= 2, folders
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 1 and summary["status"] == "finished"
    assert summary["scores"]["seed"]["val"]["hard"] == 0.0 and summary["scores"]["best"]["val"]["hard"] == 1.0
    gate = json.loads((run / "steps" / "0001" / "gate.json").read_text())
    assert gate["accepted"]
    rollouts = [json.loads(x) for x in (run / "rollouts.jsonl").read_text().splitlines()]
    assert rollouts and not [(x["task_id"], x["split"], x["error"]) for x in rollouts if x["error"]]
    for rec in rollouts:
        events = [json.loads(x) for x in (run / rec["trace_file"]).read_text().splitlines()]
        assert any(e["type"] == "skill_used" for e in events), "the agent did not discover the skill natively"
        assert any(e["type"] == "tool_call" and "looked" in json.dumps(e["input"]) for e in events)
    shown = run_cli(["traces", "show", "agent", rollouts[0]["task_id"]], tmp_path, cli_env(tmp_path))
    assert shown.returncode == 0 and "skill" in shown.stdout.lower()
