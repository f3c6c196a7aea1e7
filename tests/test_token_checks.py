"""The drift checks of token datasets (skillopt.traces.token_checks), the turn-chain columns and the
trainer columns of an export, without a model: the byte "tokenizer" of the fake vLLM decodes the
ids. The same checks run against the real llama.cpp server in tests/test_local_tokens.py."""

from __future__ import annotations

import importlib.util
import json
import math

import pytest

from skillopt.traces import export, token_checks
from skillopt.traces.export import RowMeta, export_runs, rows_from_spans
from tests.fakes.vllm import ByteTokenizer
from tests.helpers import cli_env, run_cli, write_jsonl
from tests.test_tokens import call_span, fake_run, row

META = RowMeta(repo="demo/repo", instance_id="i1", reward=1.0, version=0, resolved=True, rollout_key="k1")
needs_datasets = pytest.mark.skipif(importlib.util.find_spec("datasets") is None,
                                    reason='pip install "skillopt[vllm]" (datasets)')


def test_rows_say_whether_each_turn_extends_the_previous_turns_ids():
    spans = [call_span(1, [1, 2], [3]), call_span(2, [1, 2, 3, 4], [5]), call_span(3, [1, 2, 9], [6])]
    rows, _ = rows_from_spans(spans, META)
    assert [(r["extends_previous"], r["shared_prefix"]) for r in rows] == [(True, 0), (True, 3), (False, 2)]


class Pieces:
    """A tokenizer whose ids name pieces of text: `ids("<|im_end|>", "h", "i")` -> their ids."""

    def __init__(self):
        self.vocab: list[str] = []

    def ids(self, *pieces: str) -> list[int]:
        for piece in pieces:
            if piece not in self.vocab:
                self.vocab.append(piece)
        return [self.vocab.index(p) for p in pieces]

    def decode(self, ids: list[int]) -> str:
        return "".join(self.vocab[i] for i in ids)


def piece_rows(tok: Pieces, *turns: tuple[list[str], list[str], str]) -> list[dict]:
    """Rows whose ids are the given pieces of (prompt, completion); the reply the harness got is `reply`."""
    spans = [call_span(seq, tok.ids(*prompt), tok.ids(*completion), text=reply, logprobs=[-0.5] * len(completion))
             for seq, (prompt, completion, reply) in enumerate(turns, 1)]
    return rows_from_spans(spans, META)[0]


def test_ids_that_decode_to_what_the_harness_saw_pass():
    # call_span's request is one user message "q<seq>"; the prompt holds it; the reply is "hi"
    tok = Pieces()
    rows = piece_rows(tok, (["<|user|>", "q1", "<|end|>"], ["h", "i"], "hi"),
                      (["<|user|>", "q2", "<|end|>"], ["h", "i", "<|im_end|>"], "hi"))  # stopped on its end token
    found = token_checks.check_rows(rows, tok)
    assert found.ok and found.rows == 2 and found.problems == ()


def test_the_checks_catch_ids_that_drifted_from_the_text():
    tok = Pieces()
    rows = piece_rows(tok, (["<|user|>", "q1"], ["h", "o"], "hi"),  # the reply's ids are another text
                      (["<|user|>", "nothing"], ["h", "i"], "hi"),  # the prompt ids lost the message
                      (["q3"], ["h", "i", "!"], "hi"))  # a last token the harness never saw
    rows.append({**rows[0], "turn": 3, "logprobs": [math.nan, 0.1]})  # not finite, above 0
    found = token_checks.check_rows(rows, tok)
    assert (found.decode_mismatches, found.bad_logprobs, found.ok) == (4, 1, False)
    text = json.dumps(found.as_dict())
    assert "completion ids decode to 'ho', the harness got 'hi'" in text
    assert "do not hold the user message 'q2'" in text and "logprobs not finite" in text
    assert "decode to 'hi!'" in text
    assert found.chain_breaks == 2  # nor do turns 1 and 2 extend the turn before (recorded, not a fault)


def test_tool_calls_are_checked_by_name_and_argument_strings():
    call = {"id": "c1", "type": "function", "function": {"name": "shell", "arguments": '{"command": ["ls", "-a"]}'}}
    good = '<tool_call>{"name": "shell", "arguments": {"command": ["ls", "-a"]}}</tool_call>'
    for completion, problems in ((good, 0), (good.replace('"-a"', '"-l"'), 1)):
        r = {"prompt_ids": [1], "gold_completion_ids": list(completion.encode()), "logprobs": [0.0] * len(completion),
             "messages": json.dumps([{"role": "assistant", "content": "", "tool_calls": [call]}]), "completion": ""}
        assert len(token_checks.completion_problems(r, ByteTokenizer())) == problems


def test_recomputed_logprobs_are_compared_within_a_tolerance():
    class Scorer:  # the next-token log-probabilities a server would give: token t -> -t/10
        def next_logprobs(self, ids, n=20):
            return {t: -t / 10 for t in range(1, 6)}

    r = {"prompt_ids": [9], "gold_completion_ids": [1, 2, 7], "logprobs": [-0.1, -0.5, -2.0]}
    found = token_checks.recompute_logprobs(r, Scorer(), positions=[0, 1, 2])
    assert [(x.token, x.recomputed) for x in found] == [(1, -0.1), (2, -0.2), (7, None)]
    assert [x.position for x in token_checks.logprob_mismatches(found, 0.01)] == [1]  # 7: below the top 5


@needs_datasets
def test_an_export_carries_the_columns_trl_sft_reads_from_a_pre_tokenized_dataset(tmp_path):
    import datasets

    run = fake_run(tmp_path, "run-a", {"i1": [row("i1", 0), row("i1", 1)]})
    res = export_runs([run], tmp_path / "out", "hf")
    got = datasets.load_from_disk(str(res.path))
    assert got.features["input_ids"].feature.dtype == "int64"
    for r in got.to_list():
        assert r["input_ids"] == r["prompt_ids"] + r["gold_completion_ids"]
        assert r["completion_mask"] == [0] * len(r["prompt_ids"]) + [1] * len(r["gold_completion_ids"])
    assert export.trainer_columns({"prompt_ids": [], "gold_completion_ids": [4]})["completion_mask"] == [1]


def test_capture_tokens_asked_of_a_target_without_token_ids_fails_before_any_rollout(tmp_path):
    data = write_jsonl(tmp_path / "qa.jsonl", [{"id": "a", "question": "q", "answer": "a"}])
    skill = tmp_path / "SKILL.md"
    skill.write_text("---\nname: s\ndescription: Use it.\n---\n# S\nAnswer.\n")
    r = run_cli(["eval", "--skill", str(skill), "--benchmark", str(data), "--split", "all",
                 "--target-model", "anthropic:claude-sonnet-4-5@http://127.0.0.1:9", "--capture-tokens"],
                tmp_path, cli_env(tmp_path))
    assert r.returncode == 2, r.stderr
    assert "--capture-tokens needs a target that returns token ids" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
