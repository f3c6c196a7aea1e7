"""Token capture for vLLM targets: the real recording proxy (agentlightning's LLMProxy, LiteLLM) in
front of a fake vLLM server, the real chat / Claude Code / Codex harnesses through it, and the span
streams and datasets that come out, turn by turn equal to what the server sent; then
`skillopt traces export` round trips. Span-to-row reading and the export run without the proxy.

The end-to-end tests need the `vllm` extra (agentlightning==0.3.0, datasets); one proxy serves the
whole module (it takes about 20 s to start)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from skillopt.benchmarks.base import Task
from skillopt.harness.base import Limits
from skillopt.harness.registry import HarnessContext, make_harness
from skillopt.harness.workspace import write_skill
from skillopt.models import Models, ProviderEnv
from skillopt.models.spec import ModelSpec, parse_model_spec
from skillopt.skill import Skill
from skillopt.traces import capture_proxy, export
from skillopt.traces.export import ExportFilter, RowMeta, export_runs, rows_from_spans
from tests.fakes.agent_scripts import skill_then_command
from tests.fakes.script import FakeReply, always
from tests.fakes.server import FakeModelServer
from tests.fakes.vllm import ByteTokenizer, FakeVllm, prompt_text

HAS_DATASETS = importlib.util.find_spec("datasets") is not None
HAS_PROXY = HAS_DATASETS and importlib.util.find_spec("agentlightning") is not None
needs_datasets = pytest.mark.skipif(not HAS_DATASETS, reason='pip install "skillopt[vllm]" (datasets)')

SKILL = Skill.parse("---\nname: mathy\ndescription: Use this skill for arithmetic word problems.\n---\n"
                    "# Mathy\nWork it out with python, then end with 'Answer: <number>'.\n")
TASK = Task(id="six/seven", prompt="What is 6*7? End with 'Answer: <number>'.", metadata={"repo": "demo/repo"})
META = RowMeta(repo="demo/repo", instance_id="i1", reward=0.5, version=2, resolved=False, rollout_key="k1")


# -- spans -> rows, without the proxy ----------------------------------------------------------------

def call_span(seq: int, prompt: list[int] | None, tokens: list[int] | None, *, rid: str = "", text: str = "hi",
              logprobs: list[float] | None = None, provider: str = "hosted_vllm") -> dict:
    choice = {"index": 0, "message": {"role": "assistant", "content": text, "refusal": None, "tool_calls": None}}
    if tokens is not None:
        choice["token_ids"] = tokens
    if logprobs is not None:
        choice["logprobs"] = {"content": [{"token": "x", "logprob": lp, "top_logprobs": []} for lp in logprobs]}
    attrs = {f"llm.{provider}.messages": repr([{"role": "user", "content": f"q{seq}", "name": None}]),
             f"llm.{provider}.choices": repr([choice]), f"llm.{provider}.id": rid or f"chatcmpl-{seq}"}
    if prompt is not None:
        attrs[f"llm.{provider}.prompt_token_ids"] = repr(prompt)
    return {"name": "raw_gen_ai_request", "sequence_id": seq, "start_time": float(seq), "trace_id": f"t{seq}",
            "span_id": f"s{seq}", "parent_id": "p", "attributes": attrs}


def test_rows_follow_the_turn_order_and_carry_ids_logprobs_reward_and_messages():
    spans = [call_span(2, [3, 4], [5], logprobs=[-0.5]), {"name": "litellm_request", "sequence_id": 1, "attributes": {}},
             call_span(1, [1, 2], [9, 8], logprobs=[-0.1, -0.2]), call_span(3, [1], [2], rid="chatcmpl-1")]
    rows, why = rows_from_spans(spans, META)
    assert why is None
    assert [(r["turn"], r["prompt_ids"], r["gold_completion_ids"], r["logprobs"]) for r in rows] == [
        (0, [1, 2], [9, 8], [-0.1, -0.2]), (1, [3, 4], [5], [-0.5])]  # the retried chatcmpl-1 counted once
    assert all(r["reward"] == 0.5 and r["repo"] == "demo/repo" and r["instance_id"] == "i1" for r in rows)
    messages = json.loads(rows[0]["messages"])
    assert messages == [{"role": "user", "content": "q1"}, {"role": "assistant", "content": "hi"}]  # no None
    assert "prompt" not in rows[0]  # no tokenizer: no prompt column, and no crash


def test_prompt_is_decoded_when_a_tokenizer_is_at_hand_and_a_bad_one_does_not_crash():
    rows, _ = rows_from_spans([call_span(1, list(b"hello"), [1])], META, ByteTokenizer())
    assert rows[0]["prompt"] == "hello"

    class Broken:
        def decode(self, ids):
            raise ValueError("no")

    rows, _ = rows_from_spans([call_span(1, [1], [1])], META, Broken())
    assert rows[0]["prompt"] is None
    assert export.load_tokenizer(None, "no-such/model-anywhere") is None


def test_a_backend_without_token_ids_gives_no_rows_and_says_why():
    rows, why = rows_from_spans([call_span(1, None, None, provider="anthropic")], META)
    assert rows == [] and "returned no token ids for the 1 LLM call" in why
    assert rows_from_spans([], META) == ([], "no LLM call went through the capture proxy")


def test_keys_are_redacted_from_spans_written_to_disk():
    span = {"name": "x", "attributes": {"metadata.user_api_key_hash": "sk-secret", "a": "{'authorization': 'Bearer sk-1'}",
                                        "b": "kept"}}
    text = json.dumps(export.redact_span(span))
    assert "sk-secret" not in text and "sk-1" not in text and "kept" in text


def test_responses_replay_is_a_complete_event_stream():
    response = {"id": "resp_1", "object": "response", "created_at": 1, "status": "completed", "model": "m",
                "output": [{"id": "msg_1", "type": "message", "role": "assistant", "status": "completed",
                            "content": [{"type": "output_text", "text": "Answer: 42", "annotations": []}]},
                           {"id": "fc_1", "type": "function_call", "call_id": "c1", "name": "shell",
                            "arguments": "{\"command\": [\"ls\"]}", "status": "completed"}],
                "usage": {"input_tokens": 3, "output_tokens": 2, "total_tokens": 5}}
    events = sse_data(capture_proxy.responses_events(response))
    kinds = [e["type"] for e in events]
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert "response.output_text.delta" in kinds and "response.function_call_arguments.done" in kinds
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert events[-1]["response"]["output"] == response["output"]


def sse_data(chunks) -> list:
    return [json.loads(chunk.decode().split("data: ", 1)[1]) for chunk in chunks]


def test_messages_and_chat_replays_keep_text_and_tool_input_exactly():
    text = "I computed it.\n\n  Answer:\t42 "
    message = {"id": "msg_1", "type": "message", "role": "assistant", "model": "m", "stop_reason": "tool_use",
               "stop_sequence": None, "usage": {"input_tokens": 3, "output_tokens": 2},
               "content": [{"type": "text", "text": text},
                           {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "ls  -a"}}]}
    events = sse_data(capture_proxy.messages_events(message))
    deltas = [e["delta"] for e in events if e["type"] == "content_block_delta"]
    assert deltas[0]["text"] == text and json.loads(deltas[1]["partial_json"]) == {"command": "ls  -a"}
    assert events[0]["type"] == "message_start" and events[-1]["type"] == "message_stop"
    chat = {"id": "c1", "created": 1, "model": "m", "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
        "role": "assistant", "content": text, "tool_calls": [{"id": "x", "type": "function",
                                                             "function": {"name": "f", "arguments": "{}"}}]}}],
            "usage": {"prompt_tokens": 1}}
    chunks = [
        json.loads(c.decode()[6:]) for c in capture_proxy.chat_events(chat, usage=True) if b"[DONE]" not in c]
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"]) == text
    assert chunks[-1]["usage"] == {"prompt_tokens": 1} and chunks[-2]["choices"][0]["finish_reason"] == "tool_calls"


# -- export of runs (datasets only) ------------------------------------------------------------------

def fake_run(runs: Path, run_id: str, rows_by_instance: dict[str, list[dict]]) -> Path:
    root = runs / run_id
    root.mkdir(parents=True)
    (root / "config.yaml").write_text("benchmark: demo\n")
    for instance, rows in rows_by_instance.items():
        export.save_dataset(export.make_dataset(rows), root / "tokens" / f"dataset-{instance}")
    return root


def row(instance: str, turn: int, *, version: int = 0, reward: float = 1.0, key: str = "k", **extra) -> dict:
    return {"repo": "r", "instance_id": instance, "turn": turn, "prompt_ids": [1, turn], "gold_completion_ids": [2],
            "logprobs": [-0.1], "reward": reward, "messages": "[]", "rollout_key": key, "version": version,
            "resolved": reward >= 1.0, **extra}


@needs_datasets
@pytest.mark.parametrize("fmt", ["hf", "jsonl", "parquet"])
def test_export_merges_runs_and_filters(tmp_path, fmt):
    import datasets

    a = fake_run(tmp_path, "run-a", {"i1": [row("i1", 0), row("i1", 1)],
                                    "i2": [row("i2", 0, reward=0.0, key="k2", prompt="p")]})
    b = fake_run(tmp_path, "run-b", {"i1": [row("i1", 0, version=3, key="k3")]})
    res = export_runs([a, b], tmp_path / "out", fmt)
    assert (res.rows, res.instances, res.runs) == (4, 3, 2)
    if fmt == "hf":
        got = datasets.load_from_disk(str(res.path)).to_list()
    elif fmt == "jsonl":
        got = [json.loads(line) for line in res.path.read_text().splitlines()]
    else:
        got = datasets.Dataset.from_parquet(str(res.path)).to_list()
    assert sorted((r["run_id"], r["instance_id"], r["turn"]) for r in got) == [
        ("run-a", "i1", 0), ("run-a", "i1", 1), ("run-a", "i2", 0), ("run-b", "i1", 0)]
    assert {r["prompt"] for r in got} == {None, "p"}  # a column some instances lack is filled, not fatal
    only = export_runs([a, b], tmp_path / "only", "hf", ExportFilter(resolved_only=True, version=0))
    assert only.rows == 2
    assert export_runs([a, b], tmp_path / "min", "hf", ExportFilter(min_reward=0.5)).rows == 3


@needs_datasets
def test_export_command_round_trips_through_the_cli(tmp_path, monkeypatch):
    import datasets
    import typer
    from typer.testing import CliRunner

    from skillopt.cli.app import Globals
    from skillopt.cli.traces_export import export_command

    fake_run(tmp_path, "run-a", {"i1": [row("i1", 0), row("i1", 1, reward=0.0, key="k2")]})
    app = typer.Typer()
    app.command()(export_command)
    monkeypatch.setattr(Globals, "runs_dir", tmp_path)
    out = tmp_path / "merged"
    result = CliRunner().invoke(app, ["run-a", "--format", "hf", "--out", str(out), "--resolved-only"])
    assert result.exit_code == 0, result.output
    assert "1 rows" in result.output
    assert datasets.load_from_disk(str(out)).to_list()[0]["turn"] == 0
    missing = CliRunner().invoke(app, ["no-such-run"])
    assert missing.exit_code != 0


# -- end to end through the real proxy -----------------------------------------------------------------

@pytest.fixture(scope="module")
def vllm():
    fake = FakeVllm(always("ok"))
    with FakeModelServer(fake) as srv:
        fake.server = srv  # type: ignore[attr-defined]
        yield fake


@pytest.fixture(scope="module")
def capture(vllm, tmp_path_factory):
    from skillopt.traces.tokens import TokenCapture

    target = parse_model_spec(f"vllm:fake-model@{vllm.server.openai_url}")
    with TokenCapture(target, tmp_path_factory.mktemp("tokens"), tokenizer=ByteTokenizer(), repo="demo") as cap:
        yield cap


@pytest.fixture
def fresh(vllm, capture, tmp_path):
    """A clean slate per test: the fake's record, and a tokens folder of the test's own."""
    vllm.clear()
    vllm.enabled, vllm.always_send = True, False
    capture.out_dir = tmp_path / "tokens"
    return tmp_path


async def run_harness(name: str, target: ModelSpec, tmp_path: Path, tag: str, **options):
    harness = make_harness(name, HarnessContext(models=Models(env=ProviderEnv()), options=options))
    ws = tmp_path / f"ws-{name}-{tag}"
    ws.mkdir()
    if harness.skill_dir:
        write_skill(ws, SKILL, harness.skill_dir)
    return await harness.run(TASK, SKILL, ws, target, Limits(timeout_s=90, max_tokens=256))


async def captured(name: str, capture, vllm, tmp_path: Path, **options):
    """One rollout without capture, one with; returns both and what the capture wrote."""
    before = len(vllm.server.calls)
    plain = await run_harness(name, capture.target, tmp_path, "plain", **options)
    without = vllm.server.calls[before:]
    vllm.clear()
    key = f"key-{name}"
    through = capture.target.model_copy(update={"base_url": capture.base_url_for(key)})
    rollout = await run_harness(name, through, tmp_path, "captured", **options)
    result = await capture.collect(key, TASK.id, reward=1.0, version=4, trial=1)
    return plain, rollout, result, (without, vllm.server.calls[before + len(without):])


def assert_dataset_matches(result, vllm, key: str) -> list[dict]:
    import datasets

    rows = datasets.load_from_disk(str(result.dataset_path)).to_list()
    sent = [s for s in vllm.sent if s.prompt_ids]
    assert rows and len(rows) == len(sent) == result.rows
    by_prompt = sorted(sent, key=lambda s: (s.prompt_ids, s.token_ids))
    got = sorted(rows, key=lambda r: (r["prompt_ids"], r["gold_completion_ids"]))
    for r, s in zip(got, by_prompt):
        assert (r["prompt_ids"], r["gold_completion_ids"]) == (s.prompt_ids, s.token_ids)
        assert r["logprobs"] == pytest.approx(s.logprobs)
        assert r["prompt"] == bytes(s.prompt_ids).decode()
    assert [r["turn"] for r in rows] == list(range(len(rows)))
    assert {(r["reward"], r["version"], r["trial"], r["rollout_key"], r["repo"]) for r in rows} == {
        (1.0, 4, 1, key, "demo")}
    for r in rows:
        assert isinstance(json.loads(r["messages"]), list)
    lines = [json.loads(line) for line in result.stream_path.read_text().splitlines()]
    assert len(lines) == result.spans and {line["rollout_key"] for line in lines} == {key}
    return rows


@pytest.mark.slow
@pytest.mark.skipif(not HAS_PROXY, reason='pip install "skillopt[vllm]" (agentlightning)')
async def test_chat_harness_through_the_proxy_records_every_turn(vllm, capture, fresh):
    vllm.script = always("I computed it.\nAnswer: 42")
    plain, rollout, result, (without, withc) = await captured("chat", capture, vllm, fresh)
    assert rollout.error is None and rollout.output.text == plain.output.text == "I computed it.\nAnswer: 42"
    assert [(c.system, c.messages) for c in withc] == [(c.system, c.messages) for c in without]  # same prompt
    rows = assert_dataset_matches(result, vllm, "key-chat")
    assert rows[0]["prompt"] == prompt_text(withc[0]) and rows[0]["completion"] == "I computed it.\nAnswer: 42"
    assert result.stream_path.name == "stream_six_seven.jsonl" and result.dataset_path.name == "dataset-six_seven"


@pytest.mark.slow
@pytest.mark.skipif(not HAS_PROXY or importlib.util.find_spec("claude_agent_sdk") is None,
                    reason="needs the vllm and claude-code extras")
@pytest.mark.parametrize("mode", ["sdk", "cli"])
async def test_claude_code_through_the_proxy_records_every_turn(vllm, capture, fresh, mode):
    vllm.script = skill_then_command("mathy", "python3 -c 'print(6*7)'", "I computed it.\nAnswer: 42")
    plain, rollout, result, _ = await captured("claude-code", capture, vllm, fresh, mode=mode)
    assert rollout.error is None, rollout.error
    assert rollout.output.text == plain.output.text == "I computed it.\nAnswer: 42"
    rows = assert_dataset_matches(result, vllm, "key-claude-code")
    assert len(rows) >= 3  # skill, command, answer (and Claude Code's own side calls)
    assert any("Answer: 42" in r["completion"] for r in rows)


@pytest.mark.slow
@pytest.mark.skipif(not HAS_PROXY or importlib.util.find_spec("openai_codex") is None,
                    reason="needs the vllm and codex extras")
async def test_codex_through_the_proxy_records_every_turn(vllm, capture, fresh):
    vllm.script = skill_then_command("mathy", "python3 -c 'print(6*7)'", "I computed it.\nAnswer: 42")
    plain, rollout, result, _ = await captured("codex", capture, vllm, fresh, mode="cli")
    assert rollout.error is None, rollout.error
    assert rollout.output.text == plain.output.text == "I computed it.\nAnswer: 42"
    rows = assert_dataset_matches(result, vllm, "key-codex")
    assert len(rows) >= 3


@pytest.mark.slow
@pytest.mark.skipif(not HAS_PROXY, reason='pip install "skillopt[vllm]" (agentlightning)')
async def test_a_server_without_token_ids_still_gets_its_span_stream(vllm, capture, fresh):
    vllm.script, vllm.enabled = always("Answer: 42"), False  # a plain server: no token fields
    try:
        for attempt in range(2):
            key = f"key-plain-{attempt}"
            through = capture.target.model_copy(update={"base_url": capture.base_url_for(key)})
            rollout = await run_harness("chat", through, fresh, f"plain-server-{attempt}")
            result = await capture.collect(key, TASK.id, reward=0.0, version=0)
            if attempt == 0:
                first = result
    finally:
        vllm.enabled = True
    result, again = first, result
    assert rollout.output.text == "Answer: 42"
    assert result.spans > 0 and result.stream_path.exists() and result.rows == 0 and result.dataset_path is None
    assert "returned no token ids" in result.skipped and result.note.startswith("token capture: no dataset")
    assert again.skipped and again.note is None  # said once


@pytest.mark.slow
@pytest.mark.skipif(not HAS_PROXY, reason='pip install "skillopt[vllm]" (agentlightning)')
async def test_collected_runs_export_round_trip(vllm, capture, fresh):
    import datasets

    vllm.script = always("Answer: 42")
    run = fresh / "runs" / "run-x"
    capture.out_dir = run / "tokens"
    for trial in range(2):
        key = f"key-{trial}"
        through = capture.target.model_copy(update={"base_url": capture.base_url_for(key)})
        await run_harness("chat", through, fresh, f"export-{trial}")
        await capture.collect(key, TASK.id, reward=float(trial), version=trial, trial=trial)
    res = export_runs([run], fresh / "export", "hf", ExportFilter(resolved_only=True))
    rows = datasets.load_from_disk(str(res.path)).to_list()
    assert [(r["trial"], r["run_id"], r["reward"]) for r in rows] == [(1, "run-x", 1.0)]
    assert rows[0]["gold_completion_ids"] == list(b"Answer: 42")


@pytest.mark.slow
@pytest.mark.skipif(not HAS_PROXY, reason='pip install "skillopt[vllm]" (agentlightning)')
async def test_any_model_name_reaches_the_target_and_is_recorded(vllm, capture, fresh):
    from openai import AsyncOpenAI

    vllm.script = always("Answer: 42")
    key = "key-alias"
    client = AsyncOpenAI(base_url=capture.base_url_for(key), api_key="user-secret-key")
    reply = await client.chat.completions.create(model="claude-haiku-4-5", messages=[{"role": "user", "content": "hi"}])
    result = await capture.collect(key, "alias", reward=1.0, version=0)
    assert reply.choices[0].message.content == "Answer: 42"
    assert vllm.server.calls[-1].model == "fake-model" and result.rows == 1
    assert "user-secret-key" not in result.stream_path.read_text()


@pytest.mark.slow
@pytest.mark.skipif(not HAS_PROXY, reason='pip install "skillopt[vllm]" (agentlightning)')
async def test_a_failing_server_is_a_failed_rollout_and_capture_says_why(vllm, capture, fresh):
    vllm.script = always(FakeReply(status=400, text="bad request"))
    key = "key-failing"
    through = capture.target.model_copy(update={"base_url": capture.base_url_for(key)})
    rollout = await run_harness("chat", through, fresh, "failing")
    result = await capture.collect(key, TASK.id, reward=0.0, version=0)
    assert rollout.error and "400" in rollout.error
    assert result.rows == 0 and result.skipped == "no LLM call of this rollout got an answer from the server"
    assert (await capture.collect("never-opened", TASK.id, reward=0.0, version=0)).skipped


@needs_datasets
def test_appending_rollouts_gives_the_rows_the_whole_rewrite_gave(tmp_path):
    from skillopt.traces.dataset_append import append_dataset

    rollouts = [("k1", [row("i1", 0, key="k1"), row("i1", 1, key="k1")]),
                ("k2", [row("i1", 0, key="k2", reward=0.0)]),
                ("k3", [row("i1", 0, key="k3", version=2), row("i1", 1, key="k3", version=2)]),
                ("k1", [row("i1", 0, key="k1", reward=0.5)]),  # a retried rollout replaces its rows
                ("k4", [row("i1", 0, key="k4")])]
    appended, rewritten = tmp_path / "dataset-a", tmp_path / "dataset-b"
    for key, rows in rollouts:
        append_dataset(appended, rows, key)
        export.upsert_dataset(rewritten, rows, key)
        assert export.read_dataset(appended) == export.read_dataset(rewritten)
    assert [r["rollout_key"] for r in export.read_dataset(appended)] == ["k2", "k3", "k3", "k1", "k4"]
    assert len(list(appended.glob("*.arrow"))) == 4  # one file per rollout, none rewritten
    # a dataset written whole (before appends existed) takes appends too, and replaces its rows
    append_dataset(rewritten, [row("i1", 0, key="k5")], "k5")
    append_dataset(rewritten, [row("i1", 3, key="k2")], "k2")
    append_dataset(appended, [row("i1", 0, key="k5")], "k5")
    append_dataset(appended, [row("i1", 3, key="k2")], "k2")
    assert export.read_dataset(appended) == export.read_dataset(rewritten)
    assert export.run_rows(tmp_path) == []  # (no tokens/ folder here) and the merge still reads both:
    assert len(export.make_dataset(export.read_dataset(appended))) == 6
