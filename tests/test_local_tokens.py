"""Token-level data from a real model: the embedded llama.cpp server (local:smollm2-135m) behind the
real recording proxy, no fake server in the loop. The ids in the datasets are checked against the
model's own tokenizer and chat template (skillopt.traces.token_checks): they decode to what the
client saw, each turn's prompt extends the previous turn's ids, and the logprobs are what the server
gives when asked again. Then a Codex rollout captured end to end, exported with `skillopt traces
export --format hf` and read back with `datasets` in the columns TRL's SFTTrainer (1.16) reads.

Slow: a real model, the proxy (about 20 s to start) and, for Codex, the real binary."""

from __future__ import annotations

import asyncio
import importlib.util
import json

import httpx
import pytest

from skillopt.models.spec import parse_model_spec
from skillopt.traces import token_checks
from skillopt.traces.export import read_dataset
from skillopt.traces.llamacpp_tokens import LlamaCppTokens
from skillopt.traces.tokens import TokenCapture
from tests.helpers import cli_env, run_cli, write_jsonl

pytest.importorskip("xllamacpp", reason="the 'local' extra is not installed")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("agentlightning") is None or importlib.util.find_spec("datasets") is None,
                       reason='token capture needs pip install "skillopt[vllm]"'),
]

SMOL = "smollm2-135m"


def server() -> LlamaCppTokens:
    from skillopt.models.local import ensure_server

    return LlamaCppTokens(ensure_server(SMOL).base_url)


def test_chat_turns_on_the_local_model_are_captured_with_the_models_own_ids(tmp_path):
    messages = [{"role": "system", "content": "You answer in one short sentence."},
                {"role": "user", "content": "Name a colour of the sky."}]
    seen, sent = [], []
    with TokenCapture(parse_model_spec(f"local:{SMOL}"), tmp_path / "tokens") as capture:
        url = capture.base_url_for("k1")
        for turn in range(3):
            sent.append(list(messages))
            r = httpx.post(f"{url}/chat/completions", timeout=300, json={
                "model": SMOL, "messages": messages, "max_tokens": 24, "temperature": 0, "seed": 0})
            assert r.status_code == 200, r.text
            answer = r.json()
            seen.append(answer["choices"][0]["message"]["content"])
            messages += [{"role": "assistant", "content": seen[-1]}, {"role": "user", "content": f"And colour {turn + 2}?"}]
        result = asyncio.run(capture.collect("k1", "sky", reward=1.0, version=0))
    assert result.rows == 3, result
    rows = read_dataset(result.dataset_path)
    tok = server()
    assert [r["completion"] for r in rows] == seen
    check = token_checks.check_rows(rows, tok)
    assert check.ok and check.decode_mismatches == 0, check.as_dict()
    assert (check.turns_after_first, check.chain_breaks) == (2, 0)  # ChatML: every turn extends the one before
    for row, asked in zip(rows, sent):
        template = httpx.post(f"{tok.base_url}/apply-template", json={"messages": asked}, timeout=60).json()["prompt"]
        assert tok.decode(row["prompt_ids"]) == row["prompt"] == template  # the model's own chat template
        assert tok.encode(template) == row["prompt_ids"]
    found = [x for row in rows for x in token_checks.recompute_logprobs(row, tok, sample=4)]
    assert len(found) >= 6
    assert token_checks.logprob_mismatches(found, 1e-3) == [], found  # the same server, asked again
