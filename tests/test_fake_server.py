"""The scripted fake model server, driven by the real OpenAI and Anthropic SDKs and raw httpx."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import anthropic
import httpx
import openai
import pytest

from tests.fakes.server import (
    FakeModelServer,
    FakeReply,
    FakeRequest,
    Script,
    ScriptError,
    ToolCall,
    Usage,
    always,
    rule_based,
    sequence,
    user_contains,
)
from tests.helpers import REPO

RULE = "Always answer in capitals."
LONG = "The quick brown fox jumps over the lazy dog and keeps on running far away"
WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


def oai(srv: FakeModelServer, **kw) -> openai.OpenAI:
    return openai.OpenAI(base_url=srv.openai_url, api_key="sk-test", **kw)


def claude(srv: FakeModelServer, **kw) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=srv.base_url, api_key="sk-ant-test", **kw)


# ---- OpenAI chat completions ---------------------------------------------------------------

def test_chat_answers_by_the_system_rule_and_logs_the_request():
    with FakeModelServer(rule_based(RULE, "HELLO", "hello")) as srv:
        client = oai(srv)
        good = client.chat.completions.create(model="m1", messages=[
            {"role": "system", "content": RULE}, {"role": "user", "content": "greet me"}])
        bad = client.chat.completions.create(model="m1", messages=[{"role": "user", "content": "greet me"}])
    assert good.choices[0].message.content == "HELLO" and bad.choices[0].message.content == "hello"
    assert good.choices[0].finish_reason == "stop" and good.usage.total_tokens > 0
    first = srv.requests[0]
    assert (first.method, first.path, first.api) == ("POST", "/v1/chat/completions", "chat")
    assert first.headers["authorization"] == "Bearer sk-test" and first.body["model"] == "m1"
    assert first.fake.system == RULE and first.fake.last_user_text == "greet me" and first.fake.turn == 0
    assert [c.system for c in srv.calls] == [RULE, ""]


def test_chat_stream_sends_deltas_and_usage_when_asked():
    with FakeModelServer(always(FakeReply(text=LONG, usage=Usage(11, 7)))) as srv:
        stream = oai(srv).chat.completions.create(model="m", messages=[{"role": "user", "content": "go"}],
                                                  stream=True, stream_options={"include_usage": True})
        chunks = list(stream)
    deltas = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(deltas) > 3 and "".join(deltas) == LONG
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].choices == [] and chunks[-1].usage.prompt_tokens == 11
    assert chunks[-1].usage.completion_tokens == 7


def test_chat_tool_calls_then_tool_results_count_a_turn():
    script = Script(default="The weather in Paris is sunny.")
    script.when(lambda r: r.turn == 0, FakeReply(tool_calls=[("get_weather", {"city": "Paris"}, "call_1")]))
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "weather", "parameters": WEATHER}}]
    with FakeModelServer(script) as srv:
        client = oai(srv)
        messages = [{"role": "user", "content": "weather in Paris?"}]
        first = client.chat.completions.create(model="m", messages=messages, tools=tools)
        call = first.choices[0].message.tool_calls[0]
        messages += [first.choices[0].message.model_dump(exclude_none=True),
                     {"role": "tool", "tool_call_id": call.id, "content": "sunny, 21C"}]
        second = client.chat.completions.create(model="m", messages=messages, tools=tools)
    assert first.choices[0].finish_reason == "tool_calls" and first.choices[0].message.content is None
    assert (call.id, call.function.name, json.loads(call.function.arguments)) == ("call_1", "get_weather",
                                                                                   {"city": "Paris"})
    assert second.choices[0].message.content == "The weather in Paris is sunny."
    req = srv.calls[1]
    assert req.turn == 1 and req.tool_names == ["get_weather"] and req.tools[0].parameters == WEATHER
    assert req.messages[1].tool_calls == (ToolCall("get_weather", {"city": "Paris"}, "call_1"),)
    assert [(m.role, m.text, m.tool_call_id) for m in req.tool_results] == [("tool", "sunny, 21C", "call_1")]


async def test_async_chat_stream_assembles_tool_call_arguments():
    args = {"city": "Rome", "days": [1, 2, 3], "note": "a fairly long argument to split in pieces"}
    with FakeModelServer(always(FakeReply(tool_calls=[ToolCall("get_weather", args)]))) as srv:
        client = openai.AsyncOpenAI(base_url=srv.openai_url, api_key="k")
        stream = await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}],
                                                      stream=True)
        parts, finish = [], None
        async for chunk in stream:
            for tc in chunk.choices[0].delta.tool_calls or []:
                parts.append(tc.function.arguments or "")
            finish = chunk.choices[0].finish_reason or finish
        await client.close()
    assert len(parts) > 2 and json.loads("".join(parts)) == args and finish == "tool_calls"


def test_chat_json_schema_and_extra_fields_reach_both_sides():
    schema = {"type": "object", "properties": {"answer": {"type": "string"}}}
    seen: list[FakeRequest] = []

    def script(req: FakeRequest) -> FakeReply:
        seen.append(req)
        return FakeReply(text='{"answer": "4"}', extra={"prompt_token_ids": [1, 2, 3]},
                         choice_extra={"token_ids": [7, 8]})

    with FakeModelServer(script) as srv:
        client = oai(srv)
        fmt = {"type": "json_schema", "json_schema": {"name": "a", "schema": schema}}
        done = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "2+2"}],
                                              response_format=fmt)
        chunks = list(client.chat.completions.create(model="m", messages=[{"role": "user", "content": "2+2"}],
                                                     stream=True))
    assert seen[0].json_schema == schema and seen[0].response_format["type"] == "json_schema"
    assert done.model_extra["prompt_token_ids"] == [1, 2, 3] and done.choices[0].model_extra["token_ids"] == [7, 8]
    assert chunks[0].model_extra["prompt_token_ids"] == [1, 2, 3]
    assert chunks[-1].choices[0].model_extra["token_ids"] == [7, 8]


def test_chat_error_statuses_use_the_openai_error_shape_and_retries_work():
    with FakeModelServer(always(FakeReply(status=429, text="slow down"))) as srv:
        with pytest.raises(openai.RateLimitError) as err:
            oai(srv, max_retries=0).chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    assert err.value.status_code == 429 and err.value.body["message"] == "slow down"
    assert err.value.body["type"] == "rate_limit_exceeded"
    flaky = sequence([FakeReply(status=500, headers={"retry-after-ms": "1"}), "recovered"], cycle=False)
    with FakeModelServer(flaky) as srv:
        done = oai(srv, max_retries=2).chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    assert done.choices[0].message.content == "recovered" and len(srv.requests) == 2 and flaky.calls == 2


def test_finish_length_maps_to_each_api():
    with FakeModelServer(always(FakeReply(text="cut", finish="length"))) as srv:
        chat = oai(srv).chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
        resp = oai(srv).responses.create(model="m", input="x")
        msg = claude(srv).messages.create(model="m", max_tokens=5, messages=[{"role": "user", "content": "x"}])
    assert chat.choices[0].finish_reason == "length" and msg.stop_reason == "max_tokens"
    assert resp.status == "incomplete" and resp.incomplete_details.reason == "max_output_tokens"


# ---- Anthropic Messages --------------------------------------------------------------------

def test_messages_create_reads_system_blocks_and_returns_tool_use():
    script = Script(default="done").when(user_contains("weather"),
                                         FakeReply(text="Let me check.", tool_calls=[("get_weather", {"city": "Oslo"})]))
    tools = [{"name": "get_weather", "description": "weather", "input_schema": WEATHER}]
    system = [{"type": "text", "text": "You are terse."}, {"type": "text", "text": RULE}]
    with FakeModelServer(script) as srv:
        client = claude(srv)
        msg = client.messages.create(model="claude-x", max_tokens=100, system=system, tools=tools,
                                     messages=[{"role": "user", "content": "weather in Oslo?"}])
        use = msg.content[1]
        follow = client.messages.create(model="claude-x", max_tokens=100, system=system, tools=tools, messages=[
            {"role": "user", "content": "weather in Oslo?"},
            {"role": "assistant", "content": [b.model_dump() for b in msg.content]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "snow"},
                                         {"type": "text", "text": "thanks"}]}])
    assert msg.stop_reason == "tool_use" and msg.content[0].text == "Let me check."
    assert (use.type, use.name, use.input) == ("tool_use", "get_weather", {"city": "Oslo"})
    assert use.id.startswith("toolu_") and msg.model == "claude-x" and msg.usage.input_tokens > 0
    assert follow.stop_reason == "end_turn" and follow.content[0].text == "done"
    req = srv.calls[1]
    assert req.api == "messages" and RULE in req.system and req.turn == 1 and req.last_user_text == "thanks"
    assert [(m.role, m.text) for m in req.messages] == [("user", "weather in Oslo?"), ("assistant", "Let me check."),
                                                          ("tool", "snow"), ("user", "thanks")]
    headers = srv.requests[0].headers
    assert headers["x-api-key"] == "sk-ant-test" and "anthropic-version" in headers


def test_messages_stream_text_and_tool_use():
    reply = FakeReply(text=LONG, tool_calls=[("search", {"query": "fox facts", "limit": 3})], usage=(20, 9))
    with FakeModelServer(always(reply)) as srv:
        with claude(srv).messages.stream(model="m", max_tokens=50,
                                         messages=[{"role": "user", "content": "hi"}]) as stream:
            text = "".join(stream.text_stream)
            final = stream.get_final_message()
    assert text == LONG and final.content[0].text == LONG
    assert final.content[1].input == {"query": "fox facts", "limit": 3} and final.stop_reason == "tool_use"
    assert (final.usage.input_tokens, final.usage.output_tokens) == (20, 9)
    assert srv.requests[0].body["stream"] is True


async def test_async_messages_stream_events_in_order():
    with FakeModelServer(always("short answer")) as srv:
        client = anthropic.AsyncAnthropic(base_url=srv.base_url, api_key="k")
        async with client.messages.stream(model="m", max_tokens=5,
                                          messages=[{"role": "user", "content": "hi"}]) as stream:
            kinds = [event.type async for event in stream]
        await client.close()
    raw = [k for k in kinds if k not in ("text", "input_json")]  # the SDK adds derived events
    assert raw == ["message_start", "content_block_start", "content_block_delta", "content_block_stop",
                   "message_delta", "message_stop"]


def test_messages_errors_and_count_tokens():
    with FakeModelServer(always(FakeReply(status=529, text="busy"))) as srv:
        client = claude(srv, max_retries=0)
        with pytest.raises(anthropic.APIStatusError) as err:
            client.messages.create(model="m", max_tokens=5, messages=[{"role": "user", "content": "hi"}])
        counted = client.messages.count_tokens(model="m", messages=[{"role": "user", "content": "x" * 400}])
    assert err.value.status_code == 529
    assert err.value.body == {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}
    assert counted.input_tokens == 100
    assert [r.api for r in srv.requests] == ["messages", "count_tokens"]


# ---- OpenAI Responses ----------------------------------------------------------------------

def test_responses_create_with_string_and_item_inputs():
    script = Script(default="final answer").when(lambda r: r.turn == 0,
                                                 FakeReply(tool_calls=[("lookup", {"id": 7}, "call_9")]))
    tools = [{"type": "function", "name": "lookup", "description": "find", "parameters": WEATHER}]
    with FakeModelServer(script) as srv:
        client = oai(srv)
        first = client.responses.create(model="gpt-x", instructions=RULE, input="find 7", tools=tools)
        call = first.output[0]
        second = client.responses.create(model="gpt-x", instructions=RULE, tools=tools, input=[
            {"role": "user", "content": "find 7"},
            {"type": "function_call", "call_id": call.call_id, "name": call.name, "arguments": call.arguments},
            {"type": "function_call_output", "call_id": call.call_id, "output": "item seven"}])
    assert (call.type, call.name, call.call_id, json.loads(call.arguments)) == ("function_call", "lookup", "call_9",
                                                                              {"id": 7})
    assert first.output_text == "" and second.output_text == "final answer" and second.status == "completed"
    assert second.usage.total_tokens == second.usage.input_tokens + second.usage.output_tokens
    req = srv.calls[1]
    assert req.api == "responses" and req.system == RULE and req.turn == 1 and req.last_user_text == "find 7"
    assert req.tool_results[0].text == "item seven" and req.tool_results[0].tool_call_id == "call_9"
    assert srv.requests[0].path == "/v1/responses"


def test_responses_stream_emits_the_official_event_sequence():
    reply = FakeReply(text=LONG, tool_calls=[("lookup", {"id": 1})])
    with FakeModelServer(always(reply)) as srv:
        events = list(oai(srv).responses.create(model="m", input="hi", stream=True))
    kinds = [e.type for e in events]
    assert kinds[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"]
    assert kinds[-1] == "response.completed" and "response.output_text.done" in kinds
    assert kinds.count("response.output_item.done") == 2 and "response.function_call_arguments.done" in kinds
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == LONG
    args = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    assert json.loads(args) == {"id": 1}
    final = events[-1].response
    assert final.output_text == LONG and final.output[1].type == "function_call" and final.usage.output_tokens > 0


async def test_async_responses_stream_helper_and_json_schema():
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    with FakeModelServer(always('{"n": 4}')) as srv:
        client = openai.AsyncOpenAI(base_url=srv.openai_url, api_key="k")
        fmt = {"format": {"type": "json_schema", "name": "n", "schema": schema}}
        async with client.responses.stream(model="m", input=[{"role": "developer", "content": "be exact"},
                                                             {"role": "user", "content": "2+2"}], text=fmt) as s:
            deltas = [e.delta async for e in s if e.type == "response.output_text.delta"]
            final = await s.get_final_response()
        await client.close()
    assert "".join(deltas) == '{"n": 4}' and final.output_text == '{"n": 4}'
    assert srv.calls[0].json_schema == schema and srv.calls[0].system == "be exact"


def test_responses_custom_tool_calls_come_back_as_custom_items():
    tools = [{"type": "custom", "name": "apply_patch", "description": "patch"}]
    with FakeModelServer(always(FakeReply(tool_calls=[("apply_patch", {"input": "*** Begin Patch"})]))) as srv:
        out = oai(srv).responses.create(model="m", input="fix it", tools=tools)
    assert out.output[0].type == "custom_tool_call" and out.output[0].input == "*** Begin Patch"
    assert srv.calls[0].tool("apply_patch").kind == "custom"


def test_responses_errors_use_the_openai_error_shape():
    with FakeModelServer(always(FakeReply(status=400, text="bad input"))) as srv:
        with pytest.raises(openai.BadRequestError) as err:
            oai(srv, max_retries=0).responses.create(model="m", input="x", stream=True)
    assert err.value.body["message"] == "bad input" and err.value.body["type"] == "invalid_request_error"


# ---- raw HTTP ------------------------------------------------------------------------------

def test_raw_paths_without_v1_models_health_and_unknown_routes():
    with FakeModelServer(always("pong"), models=["a", "b"]) as srv, httpx.Client(base_url=srv.base_url) as http:
        chat = http.post("/chat/completions", json={"model": "m", "messages": [{"role": "user", "content": "x"}]})
        resp = http.post("/responses?api-version=1", json={"model": "m", "input": "x"})
        models = http.get("/v1/models").json()
        one = http.get("/v1/models/a").json()
        health = http.get("/health")
        missing = http.post("/v1/embeddings", json={})
        broken = http.post("/v1/messages", content=b"{not json", headers={"anthropic-version": "2023-06-01"})
    assert chat.json()["choices"][0]["message"]["content"] == "pong" and chat.headers["x-request-id"]
    assert resp.json()["output"][0]["content"][0]["text"] == "pong"
    assert [m["id"] for m in models["data"]] == ["a", "b"] and one["id"] == "a"
    assert health.status_code == 200 and health.json() == {"status": "ok"}
    assert missing.status_code == 404 and "no route" in missing.json()["error"]["message"]
    assert broken.status_code == 400 and broken.json()["type"] == "error"
    assert [(r.path, r.query, r.api) for r in srv.requests][:2] == [("/chat/completions", "", "chat"),
                                                                    ("/responses", "api-version=1", "responses")]


def test_raw_sse_framing_of_each_api():
    body = {"model": "m", "stream": True, "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]}
    with FakeModelServer(always("a b c d e f")) as srv, httpx.Client(base_url=srv.openai_url) as http:
        chat = http.post("/chat/completions", json=body)
        msgs = http.post("/messages", json=body)
        resp = http.post("/responses", json={"model": "m", "input": "x", "stream": True})
    assert chat.headers["content-type"].startswith("text/event-stream")
    assert chat.headers["transfer-encoding"] == "chunked"
    lines = [x for x in chat.text.split("\n") if x]
    assert all(x.startswith("data: ") for x in lines) and lines[-1] == "data: [DONE]"
    frames = [f for f in msgs.text.split("\n\n") if f]
    names = [f.split("\n")[0].removeprefix("event: ") for f in frames]
    assert names[0] == "message_start" and names[-2:] == ["message_delta", "message_stop"]
    assert all(json.loads(f.split("\n")[1].removeprefix("data: "))["type"] == n for f, n in zip(frames, names))
    assert "data: [DONE]" not in resp.text and resp.text.rstrip().split("\n")[-2] == "event: response.completed"


def test_raw_gzip_and_chunked_request_bodies():
    payload = json.dumps({"model": "m", "messages": [{"role": "user", "content": "zipped"}]}).encode()
    with FakeModelServer(always(lambda req: req.last_user_text.upper())) as srv, httpx.Client() as http:
        zipped = http.post(srv.openai_url + "/chat/completions", content=gzip.compress(payload),
                           headers={"content-encoding": "gzip", "content-type": "application/json"})
        chunked = http.post(srv.openai_url + "/chat/completions", content=iter([payload[:10], payload[10:]]))
    assert zipped.json()["choices"][0]["message"]["content"] == "ZIPPED"
    assert chunked.json()["choices"][0]["message"]["content"] == "ZIPPED"


# ---- scripting helpers, concurrency, lifecycle ---------------------------------------------

def test_sequence_cycles_and_script_rules_match_in_order():
    cycling = sequence(["one", FakeReply(text="two"), lambda req: f"three:{req.model}"])
    req = FakeRequest(api="chat", model="m", system="", messages=())
    assert [cycling(req).text for _ in range(4)] == ["one", "two", "three:m", "one"]
    sticky = sequence(["a", "b"], cycle=False)
    assert [sticky(req).text for _ in range(3)] == ["a", "b", "b"]
    script = Script(default="default")
    script.when(lambda r: r.model == "x", "first").when(lambda r: r.model == "x", "second")

    @script.when(lambda r: r.model == "y")
    def _(r: FakeRequest) -> str:
        return "decorated"

    assert [script(FakeRequest(api="chat", model=m, system="", messages=())).text
            for m in ("x", "y", "z")] == ["first", "decorated", "default"]


def test_script_errors_answer_500_and_fail_the_with_block():
    def broken(req: FakeRequest) -> FakeReply:
        raise ValueError("oops")

    with pytest.raises(ScriptError, match="oops"):
        with FakeModelServer(broken) as srv:
            r = httpx.post(srv.openai_url + "/chat/completions", json={"model": "m", "messages": []})
            assert r.status_code == 500 and "oops" in r.json()["error"]["message"]


def test_concurrent_requests_are_all_recorded_and_delay_applies():
    script = Script(default=lambda req: req.last_user_text).when(user_contains("slow"),
                                                                FakeReply(text="late", delay_s=0.2))
    with FakeModelServer(script) as srv:
        client = oai(srv)

        def ask(i: int) -> str:
            text = "slow" if i == 0 else f"q{i}"
            return client.chat.completions.create(model="m", messages=[{"role": "user", "content": text}]
                                                  ).choices[0].message.content

        with ThreadPoolExecutor(16) as pool:
            answers = list(pool.map(ask, range(40)))
    assert answers[0] == "late" and answers[1:] == [f"q{i}" for i in range(1, 40)]
    assert sorted(c.last_user_text for c in srv.calls) == sorted(["slow"] + [f"q{i}" for i in range(1, 40)])


def test_stops_cleanly_with_open_connections_and_refuses_afterwards():
    with FakeModelServer(always("x")) as srv, httpx.Client(base_url=srv.openai_url) as http:
        assert http.get("/models").status_code == 200  # leaves a keep-alive connection open
        url = srv.openai_url
        srv.stop()
        with pytest.raises(httpx.TransportError):
            http.get("/models", timeout=2)
    with pytest.raises(httpx.TransportError):
        httpx.get(url + "/models", timeout=2)


def test_standalone_process_prints_its_url_and_logs_requests(tmp_path):
    log = tmp_path / "requests.jsonl"
    proc = subprocess.Popen([sys.executable, "-m", "tests.fakes.server", "--port", "0", "--text", "from afar",
                             "--log", str(log)], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:")
        reply = anthropic.Anthropic(base_url=url, api_key="k").messages.create(
            model="m", max_tokens=5, messages=[{"role": "user", "content": "hi"}])
        assert reply.content[0].text == "from afar"
    finally:
        proc.terminate()
        assert proc.wait(10) == 0
    logged = [json.loads(line) for line in log.read_text().splitlines()]
    assert logged[0]["path"] == "/v1/messages" and logged[0]["body"]["messages"][0]["content"] == "hi"


# ---- the real agent binaries ---------------------------------------------------------------

def _shell_step(req: FakeRequest) -> FakeReply:
    """Turn 0: ask for the agent's shell tool to write a file; then report the tool result."""
    if req.turn > 0:
        return FakeReply(text="finished: " + req.tool_results[-1].text[:100])
    if "Bash" in req.tool_names:
        return FakeReply(text="Writing.", tool_calls=[("Bash", {"command": "echo ran > out.txt", "description": "w"})])
    return FakeReply(text="Writing.", tool_calls=[("exec_command", {"cmd": "echo ran > out.txt"})])


@pytest.mark.slow
def test_real_claude_code_runs_a_tool_loop_against_the_fake(tmp_path):
    sdk = pytest.importorskip("claude_agent_sdk")
    binary = Path(sdk.__file__).parent / "_bundled" / "claude"
    if not binary.is_file():
        pytest.skip("claude-agent-sdk has no bundled claude binary")
    (tmp_path / "home").mkdir()
    with FakeModelServer(_shell_step) as srv:
        env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path / "home"), "ANTHROPIC_BASE_URL": srv.base_url,
               "ANTHROPIC_API_KEY": "sk-ant-fake", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}
        r = subprocess.run([str(binary), "-p", "write the file", "--output-format", "json", "--model", "fake-model",
                            "--allowedTools", "Bash"], cwd=tmp_path, env=env, capture_output=True, text=True,
                           timeout=120, check=False, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr + r.stdout
    assert json.loads(r.stdout)["result"].startswith("finished") and (tmp_path / "out.txt").read_text() == "ran\n"
    calls = srv.calls
    assert [c.turn for c in calls] == [0, 1] and all(c.api == "messages" and c.stream for c in calls)
    assert any("write the file" in m.text for m in calls[0].messages if m.role == "user")


@pytest.mark.slow
def test_real_codex_runs_a_tool_loop_against_the_fake(tmp_path):
    codex_bin = pytest.importorskip("codex_cli_bin")
    home = tmp_path / "codex-home"
    home.mkdir()
    with FakeModelServer(_shell_step) as srv:
        provider = (f'model_providers.fake={{name="fake",base_url="{srv.openai_url}",wire_api="responses",'
                    f'env_key="FAKE_KEY"}}')
        env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "CODEX_HOME": str(home), "FAKE_KEY": "sk-fake"}
        r = subprocess.run([str(codex_bin.bundled_codex_path()), "exec", "--skip-git-repo-check", "--json",
                            "-c", provider, "-c", "model_provider=fake", "-m", "fake-model",
                            "--dangerously-bypass-approvals-and-sandbox", "write the file"],
                           cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
                           check=False, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr + r.stdout
    assert (tmp_path / "out.txt").read_text() == "ran\n"
    assert '"text":"finished: ' in r.stdout
    calls = srv.calls
    assert [c.turn for c in calls] == [0, 1] and all(c.api == "responses" and c.stream for c in calls)
    assert calls[0].last_user_text == "write the file" and calls[1].tool_results
