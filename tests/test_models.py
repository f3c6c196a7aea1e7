"""The model layer against the fake server: retries, clear final errors, JSON repair, metering, cache."""

from __future__ import annotations

import asyncio

import pytest
from pydantic import BaseModel

from skillopt.benchmarks.base import Task
from skillopt.errors import ModelCallError
from skillopt.harness.base import Limits
from skillopt.harness.chat import ChatHarness
from skillopt.harness.registry import HarnessContext
from skillopt.models import Message, Models, ResponseCache, RetryPolicy, StructuredFailure
from skillopt.models.spec import parse_model_spec
from skillopt.models.types import ChatRequest, ProviderEnv
from skillopt.skill import Skill
from tests.fakes.server import FakeModelServer, FakeReply, sequence

FAST = RetryPolicy(attempts=3, base_delay_s=0.01)


def _req(text="hi", **kw) -> ChatRequest:
    return ChatRequest(messages=(Message(role="user", content=text),), **kw)


class Verdict(BaseModel):
    answer: int
    why: str


def test_retries_transient_errors_then_succeeds():
    replies = sequence([FakeReply(status=429, text="slow down"), FakeReply(status=503, text="busy"),
                        FakeReply(text="ok")], cycle=False)
    with FakeModelServer(replies) as srv:
        models = Models(retry=FAST)
        spec = parse_model_spec(f"openai-compatible:m@{srv.openai_url}")
        resp = asyncio.run(models.chat(spec, _req(), role="target"))
    assert resp.text == "ok" and replies.calls == 3
    snap = models.meter.snapshot()
    assert snap.roles["target"].calls == 1 and snap.roles["target"].failed_calls == 0


def test_openai_spec_follows_openai_base_url():
    """`openai:<model>` with OPENAI_BASE_URL set calls that server (not the embedded local one)."""
    with FakeModelServer(lambda r: FakeReply(text=f"model={r.model}")) as srv:
        models = Models(env=ProviderEnv(openai_api_key="sk-test", openai_base_url=srv.openai_url), retry=FAST)
        resp = asyncio.run(models.chat(parse_model_spec("openai:gpt-test"), _req(), role="target"))
    assert resp.text == "model=gpt-test"


def test_clear_error_after_the_last_try_and_no_retry_on_400():
    with FakeModelServer(lambda r: FakeReply(status=500, text="boom")) as srv:
        models = Models(retry=FAST)
        spec = parse_model_spec(f"openai-compatible:m@{srv.openai_url}")
        with pytest.raises(ModelCallError, match="gave up after 3 tries"):
            asyncio.run(models.chat(spec, _req(), role="target"))
        assert len(srv.calls) == 3
    with FakeModelServer(lambda r: FakeReply(status=400, text="bad request")) as srv:
        models = Models(retry=FAST)
        spec = parse_model_spec(f"openai-compatible:m@{srv.openai_url}")
        with pytest.raises(ModelCallError, match="HTTP 400"):
            asyncio.run(models.chat(spec, _req(), role="target"))
        assert len(srv.calls) == 1


def test_connection_refused_is_retried_then_reported():
    models = Models(retry=FAST)
    spec = parse_model_spec("openai-compatible:m@http://127.0.0.1:9/v1")
    with pytest.raises(ModelCallError, match="cannot reach the server"):
        asyncio.run(models.chat(spec, _req(), role="optimizer"))


def test_structured_output_sends_schema_and_repairs_once():
    replies = sequence([FakeReply(text="Sure! here it is: {answer: 4"), FakeReply(text='{"answer": 4, "why": "2+2"}')],
                       cycle=False)
    with FakeModelServer(replies) as srv:
        models = Models(retry=FAST)
        spec = parse_model_spec(f"openai-compatible:m@{srv.openai_url}")
        out = asyncio.run(models.chat_json(spec, [Message(role="user", content="2+2?")], Verdict, role="optimizer"))
        assert out == Verdict(answer=4, why="2+2")
        first = srv.calls[0]
        assert first.json_schema is not None and "answer" in first.json_schema["properties"]
        assert "not valid" in srv.calls[1].last_user_text


def test_structured_output_failure_is_recorded_not_raised():
    with FakeModelServer(lambda r: FakeReply(text="no json at all")) as srv:
        models = Models(retry=FAST)
        spec = parse_model_spec(f"openai-compatible:m@{srv.openai_url}")
        out = asyncio.run(models.chat_json(spec, [Message(role="user", content="x")], Verdict, role="optimizer"))
        assert isinstance(out, StructuredFailure) and "no JSON" in out.error and len(srv.calls) == 2
    models = Models(retry=FAST)
    dead = parse_model_spec("openai-compatible:m@http://127.0.0.1:9/v1")
    out = asyncio.run(models.chat_json(dead, [Message(role="user", content="x")], Verdict, role="optimizer"))
    assert isinstance(out, StructuredFailure) and "cannot reach" in out.error


def test_anthropic_provider_meters_cost_by_price_table():
    with FakeModelServer(lambda r: FakeReply(text=f"sys={r.system}", usage=(1000, 100))) as srv:
        models = Models(env=ProviderEnv(anthropic_api_key="k"), retry=FAST)
        spec = parse_model_spec(f"anthropic:claude-sonnet-4-5@{srv.base_url}")
        req = ChatRequest(messages=(Message(role="system", content="S"), Message(role="user", content="u")))
        resp = asyncio.run(models.chat(spec, req, role="optimizer"))
        assert resp.text == "sys=S" and srv.calls[0].api == "messages"
    t = models.meter.snapshot().roles["optimizer"]
    assert (t.input_tokens, t.output_tokens) == (1000, 100)
    assert t.cost_usd == pytest.approx((1000 * 3 + 100 * 15) / 1e6)


def test_response_cache_replays_without_a_call(tmp_path):
    with FakeModelServer(lambda r: FakeReply(text="fresh")) as srv:
        spec = parse_model_spec(f"openai-compatible:m@{srv.openai_url}")
        m1 = Models(cache=ResponseCache(tmp_path / "c.jsonl"), retry=FAST)
        assert asyncio.run(m1.chat(spec, _req("q"), role="optimizer")).text == "fresh"
        m2 = Models(cache=ResponseCache(tmp_path / "c.jsonl"), retry=FAST)  # a resumed process
        again = asyncio.run(m2.chat(spec, _req("q"), role="optimizer"))
        assert again.cached and again.text == "fresh" and len(srv.calls) == 1
        assert m2.meter.snapshot().roles["optimizer"].calls == 0


def test_chat_harness_records_model_failure_instead_of_raising(tmp_path):
    skill = Skill(name="s", description="d", body="Be right.")
    task = Task(id="t1", prompt="What is 2+2?", answers=("4",))
    with FakeModelServer(lambda r: FakeReply(status=401, text="bad key")) as srv:
        harness = ChatHarness(HarnessContext(models=Models(retry=FAST)))
        spec = parse_model_spec(f"openai-compatible:m@{srv.openai_url}")
        rollout = asyncio.run(harness.run(task, skill, tmp_path, spec, Limits()))
    assert rollout.error and "401" in rollout.error and rollout.output.text == ""
    assert any(e.type == "error" for e in rollout.trace)
    with FakeModelServer(lambda r: FakeReply(text="Answer: 4")) as srv:
        harness = ChatHarness(HarnessContext(models=Models(retry=FAST)))
        spec = parse_model_spec(f"openai-compatible:m@{srv.openai_url}")
        rollout = asyncio.run(harness.run(task, skill, tmp_path, spec, Limits(max_tokens=64, stop=("###",))))
        body = srv.calls[0].body
    assert rollout.error is None and rollout.output.text == "Answer: 4"
    assert body["max_tokens"] == 64 and body["stop"] == ["###"]
    assert "Be right." in body["messages"][0]["content"] and body["messages"][1]["content"] == "What is 2+2?"
