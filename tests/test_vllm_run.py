"""A training run with a `vllm:` target writes token-level data for every instance (real proxy)."""

from __future__ import annotations

import importlib.util
import json

import pytest

from tests.fakes.server import FakeModelServer
from tests.fakes.vllm import FakeVllm
from tests.helpers import cli_env, run_cli, write_jsonl
from tests.test_train_e2e import Scripted, code_tasks

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("agentlightning") is None,
                       reason='token capture needs pip install "skillopt[vllm]"'),
]


def test_vllm_target_run_writes_streams_and_datasets_then_exports(tmp_path):
    data = write_jsonl(tmp_path / "codes.jsonl", code_tasks(6))
    fake = FakeVllm(Scripted())
    env = cli_env(tmp_path)
    with FakeModelServer(fake) as srv:
        args = ["run", "--benchmark", str(data), "--harness", "chat",
                "--target_model", f"vllm:fake-model@{srv.openai_url}",
                "--optimizer_model", f"openai-compatible:fake-opt@{srv.openai_url}",
                "--run-id", "tok", "--epochs", "2", "--train-size", "2", "--val-size", "2", "--test-size", "2",
                "--batch-size", "2", "--set", "train.consolidate=false",
                "--set", "gate.alpha=0.25"]  # 2 validation tasks: a gate that can accept 2 wins out of 2
        r = run_cli(args, tmp_path, env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    run = tmp_path / "runs" / "tok"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["scores"]["best"]["val"]["hard"] == 1.0  # capture did not change what the agent saw
    instances = {json.loads(x)["task_id"] for x in (run / "rollouts.jsonl").read_text().splitlines()}
    for inst in instances:
        assert (run / "tokens" / f"stream_{inst}.jsonl").stat().st_size > 0
        assert (run / "tokens" / f"dataset-{inst}").is_dir()
    sent = {tuple(s.token_ids) for s in fake.sent if s.token_ids}
    out = tmp_path / "export"
    r = run_cli(["traces", "export", "tok", "--format", "jsonl", "--out", str(out)], tmp_path, env, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = [json.loads(x) for f in out.rglob("*.jsonl") for x in f.read_text().splitlines()]
    assert rows and {tuple(x["gold_completion_ids"]) for x in rows} <= sent
    assert {x["instance_id"] for x in rows} == instances
