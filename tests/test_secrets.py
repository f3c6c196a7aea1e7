"""No secret on disk, ever: with a sentinel key in every place a key can come from (the provider key
variables, another key-like variable, `harness_options.env`, the credentials of a model URL) and the
fake server echoing keys back in error bodies, a training run on the chat harness (tracked in
MLflow), one on Claude Code, an eval, a compare, both reports and an export write not one byte of it.
A resume that needs a redacted setting says which one to give again, and works once given."""

from __future__ import annotations

import json
import re
import secrets
from pathlib import Path

import pytest

from tests.fakes.agent_scripts import shell_call
from tests.fakes.server import FakeModelServer, FakeReply, FakeRequest
from tests.helpers import cli_env, run_cli, write_jsonl
from tests.test_train_e2e import RULE, code_tasks

KEY = "sk-SENTINEL-" + secrets.token_hex(16)  # the provider keys
TOKEN = "tok-SENTINEL-" + secrets.token_hex(16)  # another key-like variable, and harness_options.env
PASSWORD = "pw-SENTINEL-" + secrets.token_hex(16)  # in the optimizer's URL
NEEDLES = (KEY, TOKEN, PASSWORD)


def model(req: FakeRequest) -> FakeReply:
    """Optimizer: the rule. Chat target: right under the rule, but echoes its key back for item 1.
    Agent: runs a command that prints its environment, then answers; echoes its key for item 2."""
    user = req.last_user_text
    key = req.headers.get("x-api-key") or req.headers.get("authorization", "")
    if "You improve a skill" in user:
        edit = {"op": "add", "anchor": "Answer format", "text": RULE, "rationale": f"see {key}",
                "evidence": re.findall(r"FAILED task (\S+)", user)}
        return FakeReply(text=json.dumps({"analysis": f"called with {key}", "edits": [edit]}))
    if "Rewrite the skill below" in user:
        return FakeReply(text=json.dumps({"body": "# Task solver\n\n## Answer format\nEnd with 'Answer: X'.\n"}))
    question = " ".join(m.text for m in req.messages if m.role == "user")
    item = re.search(r"item (\d+)", question)
    if req.api == "chat":
        if item and item.group(1) == "1":
            return FakeReply(status=400, text=f"invalid request for key {key}")
        answer = f"ZETA-{item.group(1)}" if item and RULE in req.system else "unknown"
        return FakeReply(text=f"Answer: {answer}")
    if not req.tools:
        return FakeReply(text="ok")
    if not req.tool_results:
        return FakeReply(tool_calls=[shell_call(req, "echo my token is $MY_TOKEN; env | sort")])
    if item and item.group(1) == "2":
        return FakeReply(status=400, text=f"invalid x-api-key {key}")
    return FakeReply(text=f"Answer: ZETA-{item.group(1) if item else 0}")


def _scan(root: Path) -> list[str]:
    hits = []
    for p in root.rglob("*"):
        if p.is_file() and not p.is_symlink():
            data = p.read_bytes()
            hits += [f"{p.relative_to(root)}: {n[:14]}" for n in NEEDLES if n.encode() in data]
    return hits


def test_no_secret_reaches_any_file(tmp_path):
    pytest.importorskip("mlflow", reason="the mlflow extra is not installed")
    pytest.importorskip("claude_agent_sdk", reason="the claude-code extra is not installed")
    data = write_jsonl(tmp_path / "codes.jsonl", code_tasks(8))
    env = cli_env(tmp_path, OPENAI_API_KEY=KEY, ANTHROPIC_API_KEY=KEY, MY_SERVICE_TOKEN=TOKEN)
    env.pop("MLFLOW_TRACKING_URI", None)  # MLflow in this folder (in-process mlflow tests set the variable)
    sizes = ["--train-size", "2", "--val-size", "2", "--test-size", "2", "--epochs", "1", "--batch-size", "2",
             "--set", "train.consolidate=false", "--set", "models.retry_base_delay_s=0.01"]
    with FakeModelServer(model) as srv:
        url = srv.openai_url
        optimizer = f"openai-compatible:fake-opt@{url.replace('http://', f'http://opt:{PASSWORD}@')}"
        chat = run_cli(["run", "--benchmark", str(data), "--harness", "chat", "--target_model", f"openai:fake@{url}",
                        "--optimizer_model", optimizer, "--run-id", "chat", "--track", "mlflow", *sizes],
                       tmp_path, env, timeout=600)
        assert chat.returncode == 0, chat.stderr[-3000:]
        agent = run_cli(["run", "--benchmark", str(data), "--harness", "claude-code", "--harness-mode", "cli",
                         "--target_model", f"anthropic:fake@{srv.base_url}", "--optimizer_model", optimizer,
                         "--run-id", "agent", "--set", f"harness_options.env.MY_TOKEN={TOKEN}",
                         "--set", "limits.timeout_s=120", *sizes], tmp_path, env, timeout=600)
        assert agent.returncode == 0, agent.stderr[-3000:]
        ev = run_cli(["eval", "--skill", "chat:best", "--split", "all", "--set", "run_id=ev"], tmp_path, env)
        assert ev.returncode == 0, ev.stderr[-3000:]
        cmp = run_cli(["compare", "chat:seed", "chat:best", "--format", "json"], tmp_path, env)
        assert cmp.returncode == 0, cmp.stderr[-3000:]
        for args in (["report", "chat", "-o", "report.html"], ["report", "agent", "-o", "report.md"],
                     ["export", "chat", "--format", "claude-skill", "--out", "exported"]):
            r = run_cli(args, tmp_path, env)
            assert r.returncode == 0, (args, r.stderr[-3000:])
        # the secrets were in play: the keys reached the server, were echoed, the agent had its token
        assert any(KEY in json.dumps(q.headers) for q in srv.requests if q.api == "chat")
        assert any(KEY in q.headers.get("x-api-key", "") for q in srv.requests if q.api == "messages")
        assert any(TOKEN in json.dumps(q.body) for q in srv.requests if q.api == "messages")
        leaks = [(q.api, json.dumps(q.body)[:3000]) for q in srv.requests if KEY in json.dumps(q.body)]
        assert not leaks, leaks[0]  # the relay masked the echo
    runs = tmp_path / "runs"
    errors = [json.loads(x)["error"] or "" for x in (runs / "chat" / "rollouts.jsonl").read_text().splitlines()]
    assert any("invalid request for key" in e and "***" in e for e in errors)
    assert (tmp_path / "mlruns").is_dir() and (runs / "skillopt.db").is_file()
    assert (runs / "chat" / "calls.jsonl").is_file() and list((runs / "agent" / "traces").rglob("*.raw.log"))
    assert _scan(tmp_path) == []  # not one byte, anywhere: runs, traces, db, mlruns, reports, export
    # a resume of the agent run: its env token was masked in config.yaml, so it must be given again
    r = run_cli(["run", "--resume", "agent"], tmp_path, env)
    assert r.returncode == 2 and "harness_options.env.MY_TOKEN" in r.stderr, r.stderr
    r = run_cli(["run", "--resume", "agent", "--set", f"harness_options.env.MY_TOKEN={TOKEN}",
                 "--optimizer_model", optimizer], tmp_path, env)
    assert r.returncode == 0, r.stderr[-3000:]
    assert _scan(tmp_path) == []
