"""Unit tests: model specs, schedules, the gate, the budget, config layering, store writes."""

from __future__ import annotations

import json

import pytest

from skillopt.config import PRESETS, parse_override, resolve_config
from skillopt.errors import BadInput, BudgetExceeded
from skillopt.models.meter import Budget, Meter
from skillopt.models.prices import cost_usd
from skillopt.models.spec import parse_model_spec
from skillopt.models.types import CallRecord
from skillopt.optimizer.schedule import Constant, Cosine, Linear, make_schedule
from skillopt.io.files import append_jsonl, atomic_write_text, read_jsonl


@pytest.mark.parametrize("text, provider, model, url", [
    ("openai:gpt-5-mini", "openai", "gpt-5-mini", None),
    ("azure:my-deploy", "azure", "my-deploy", None),
    ("anthropic:claude-sonnet-4-5@http://127.0.0.1:8080", "anthropic", "claude-sonnet-4-5", "http://127.0.0.1:8080"),
    ("vllm:Qwen/Qwen3-8B@http://host:8000/v1/", "vllm", "Qwen/Qwen3-8B", "http://host:8000/v1"),
    ("openai-compatible:m@https://x.y/v1", "openai-compatible", "m", "https://x.y/v1"),
    ("local:qwen2.5-coder-0.5b", "local", "qwen2.5-coder-0.5b", None),
    ("OpenAI:gpt-5", "openai", "gpt-5", None),
])
def test_parse_model_spec(text, provider, model, url):
    spec = parse_model_spec(text)
    assert (spec.provider, spec.model, spec.base_url) == (provider, model, url)
    assert parse_model_spec(str(spec)) == spec


@pytest.mark.parametrize("bad, needle", [
    ("gpt-5", "PROVIDER:MODEL"),
    ("foo:bar", "unknown model provider 'foo'"),
    ("vllm:m", "needs a server URL"),
    ("openai:", "names no model"),
    ("openai:m@ftp://x", "must start with http"),
])
def test_bad_model_specs_are_one_clear_line(bad, needle):
    with pytest.raises(BadInput) as e:
        parse_model_spec(bad)
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_cost_unknown_is_none_not_zero():
    assert cost_usd(parse_model_spec("openai:gpt-5-mini"), 1_000_000, 1_000_000) == pytest.approx(2.25)
    assert cost_usd(parse_model_spec("openai-compatible:mystery@http://h/v1"), 10, 10) is None
    assert cost_usd(parse_model_spec("local:qwen2.5-coder-0.5b"), 10, 10) == 0.0


def test_schedules():
    assert [Constant(3)(s, 10) for s in range(3)] == [3, 3, 3]
    lin = [Linear(4, 1)(s, 4) for s in range(4)]
    assert lin == [4, 3, 2, 1]
    cos = [Cosine(4, 1)(s, 5) for s in range(5)]
    assert cos[0] == 4 and cos[-1] == 1 and cos == sorted(cos, reverse=True)
    assert make_schedule("linear", 2, 1)(0, 1) == 2
    assert min(Linear(1, 0)(s, 3) for s in range(3)) >= 1  # never zero edits


def test_budget_stops_on_cost_tokens_and_rollouts():
    m = Meter(Budget(max_cost_usd=0.01))
    m.record(CallRecord(role="target", model="openai:gpt-5", input_tokens=10, output_tokens=10, cost_usd=0.02))
    with pytest.raises(BudgetExceeded, match="cost budget"):
        m.check()
    m = Meter(Budget(max_tokens=100))
    m.record(CallRecord(role="optimizer", model="x", input_tokens=60, output_tokens=50, cost_usd=None))
    assert "token budget" in m.exceeded()
    assert m.snapshot().cost_unknown  # unknown price stays unknown, not $0
    m = Meter(Budget(max_rollouts=2))
    m.count_rollout()
    m.check()
    m.count_rollout()
    with pytest.raises(BudgetExceeded, match="rollout budget"):
        m.check()


def test_cached_calls_are_not_paid():
    m = Meter()
    m.record(CallRecord(role="target", model="x", input_tokens=5, output_tokens=5, cost_usd=0.1, cached=True))
    snap = m.snapshot()
    assert snap.roles["target"].calls == 0 and snap.roles["target"].cached_calls == 1 and snap.tokens == 0


def test_config_layers_and_overrides():
    cfg = resolve_config(PRESETS["quick"], {"train": {"epochs": 3}}, parse_override("gate.metric=soft"))
    assert cfg.train.epochs == 3 and cfg.gate.metric == "soft" and cfg.splits.train == PRESETS["quick"]["splits"]["train"]
    with pytest.raises(BadInput, match="train.epochs"):
        resolve_config({"train": {"epochs": "many"}})
    with pytest.raises(BadInput, match="bad override"):
        parse_override("train.epochs")


def test_atomic_write_and_torn_jsonl_lines(tmp_path):
    p = tmp_path / "a" / "x.txt"
    atomic_write_text(p, "hello")
    assert p.read_text() == "hello" and not list(p.parent.glob(".*.tmp"))
    log = tmp_path / "log.jsonl"
    append_jsonl(log, {"i": 1})
    with open(log, "a") as f:
        f.write('{"i": 2, "torn')  # power loss mid-line
    append_jsonl(log, {"i": 3})
    assert [r["i"] for r in read_jsonl(log)] == [1, 3]
    assert json.loads(log.read_text().splitlines()[-1]) == {"i": 3}
