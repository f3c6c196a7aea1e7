"""Prices come from genai-prices; `models.prices` overrides win; a model without a price is unknown
(None), never $0, in every table that shows cost."""

from __future__ import annotations

import json

import pytest

from skillopt.models.prices import cost_usd, has_price
from skillopt.models.spec import parse_model_spec
from tests.fakes.server import FakeModelServer, FakeReply
from tests.helpers import cli_env, run_cli, write_jsonl


def test_list_prices_overrides_and_unknowns():
    for spec in ("openai:gpt-5-mini", "openai:gpt-4o-mini", "anthropic:claude-haiku-4-5", "anthropic:claude-sonnet-4-5",
                 "azure:gpt-5-mini", "openai:o4-mini", "openai:gpt-4.1-nano"):
        c = cost_usd(parse_model_spec(spec), 1000, 1000)
        assert c is not None and 0 < c < 1, spec  # far more models than the 14 a hand-kept table had
    gpt5mini = cost_usd(parse_model_spec("openai:gpt-5-mini"), 1_000_000, 0)
    assert gpt5mini == pytest.approx(0.25)
    # your own price wins, also over a list price; an Azure deployment finds openai:<name>
    assert cost_usd(parse_model_spec("openai:gpt-5-mini"), 1_000_000, 0, {"openai:gpt-5-mini": (9.0, 9.0)}) == 9.0
    assert cost_usd(parse_model_spec("azure:my-deploy"), 0, 1_000_000, {"openai:my-deploy": (1.0, 3.0)}) == 3.0
    for spec in ("azure:my-deploy", "vllm:m@http://h:8000/v1", "openai-compatible:m@http://h/v1", "openai:no-such-model"):
        assert cost_usd(parse_model_spec(spec), 1000, 1000) is None and not has_price(parse_model_spec(spec)), spec
    assert cost_usd(parse_model_spec("local:qwen2.5-coder-0.5b"), 10**6, 10**6) == 0.0


def test_unknown_cost_is_unknown_in_every_table(tmp_path):
    data = write_jsonl(tmp_path / "qa.jsonl", [{"id": f"q{i}", "question": f"{i}+1?", "answer": str(i + 1)}
                                               for i in range(8)])
    with FakeModelServer(lambda req: FakeReply(text=json.dumps({"analysis": "", "edits": []}) if req.json_schema
                                               else "Answer: 1", usage=(50, 5))) as srv:
        args = ["run", "--benchmark", str(data), "--target-model", f"openai-compatible:t@{srv.openai_url}",
                "--optimizer-model", f"openai-compatible:o@{srv.openai_url}", "--run-id", "u", "--epochs", "1",
                "--train-size", "2", "--val-size", "2", "--test-size", "2",
                "--set", "models.prices={'openai-compatible:o': [1.0, 1.0]}"]
        r = run_cli(args, tmp_path, cli_env(tmp_path))
    assert r.returncode == 0, r.stderr
    usage = r.stdout.split("usage by role", 1)[1]
    assert "unknown" in usage.split("target", 1)[1].splitlines()[0]  # the target has no price
    assert "$0" not in usage.split("target", 1)[1].splitlines()[0]
    md = run_cli(["report", "u", "--format", "markdown", "-o", "-"], tmp_path, cli_env(tmp_path)).stdout
    target_row = next(x for x in md.splitlines() if x.startswith("| target |"))
    assert target_row.rstrip().endswith("| unknown |")
    cmp = run_cli(["compare", "u:seed", "u:best", "--format", "markdown"], tmp_path, cli_env(tmp_path)).stdout
    rows = [x for x in cmp.split("### tokens and cost", 1)[1].splitlines() if x.startswith("| u:")]
    assert rows and all("| unknown |" in x for x in rows)
