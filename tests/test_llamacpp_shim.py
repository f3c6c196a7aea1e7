"""TokenShim (skillopt.traces.llamacpp_tokens) against a scripted stand-in for llama.cpp's HTTP
endpoints: the vLLM fields it adds, when it refuses prompt ids, and what it passes through untouched.
The real llama.cpp server behind it runs in tests/test_local_tokens.py (slow)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from skillopt.traces.llamacpp_tokens import LlamaCppTokens, TokenShim


class FakeLlamaCpp:
    """Answers `/v1/chat/completions` (with per-token logprob ids), `/apply-template`, `/tokenize`,
    `/detokenize`, `/completion` and `/v1/models` as llama.cpp does; `prompt_tokens` is the prompt
    count its completions report; `seen` lists (path, body) of every request."""

    def __init__(self, prompt_tokens: int = 3, delay_s: float = 0.0, working: bool = True):
        self.prompt_tokens = prompt_tokens
        self.delay_s, self.working = delay_s, working  # a slow completion; whether /slots shows work meanwhile
        self.seen: list[tuple[str, dict]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _reply(self, obj: dict, status: int = 200) -> None:
                body = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                fake.seen.append((self.path, {}))
                self._reply(fake.answer(self.path, {}))

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["content-length"])) or b"{}")
                fake.seen.append((self.path, body))
                self._reply(fake.answer(self.path, body))

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def answer(self, path: str, body: dict) -> dict:
        if path == "/slots":
            return [{"id": 0, "id_task": 1, "is_processing": self.working}]  # type: ignore[return-value]
        if path == "/v1/chat/completions" and self.delay_s:
            time.sleep(self.delay_s)
        if path == "/v1/models":
            return {"object": "list", "data": [{"id": "m"}]}
        if path == "/apply-template":
            return {"prompt": "<s>" + body["messages"][-1]["content"] + "</s>"}
        if path == "/tokenize":
            return {"tokens": [1, 5, 2]}
        if path == "/detokenize":
            return {"content": "".join({1: "<s>", 5: "q", 2: "</s>"}.get(t, "?") for t in body["tokens"])}
        if path == "/completion":
            return {"completion_probabilities": [{"top_logprobs": [{"id": 7, "logprob": -0.1}, {"id": 8, "logprob": -3.0}]}]}
        content = [{"id": 7, "token": "h", "logprob": -0.1}, {"id": 8, "token": "i", "logprob": -0.2},
                   {"id": 2, "token": "", "logprob": -0.01}] if body.get("logprobs") else None
        return {"id": "chatcmpl-1", "object": "chat.completion", "usage": {"prompt_tokens": self.prompt_tokens},
                "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "hi"},
                             "logprobs": {"content": content} if content else None}]}

    def __enter__(self) -> FakeLlamaCpp:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


def through_shim(upstream: str, method: str, path: str, body: dict | None = None, **shim_args) -> httpx.Response:
    async def go() -> httpx.Response:
        shim = TokenShim(upstream, **shim_args)
        try:
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=shim), base_url="http://shim") as client:
                return await client.request(method, path, json=body)
        finally:
            await shim.aclose()

    return asyncio.run(go())


CHAT = {"model": "m", "messages": [{"role": "user", "content": "q"}]}


def test_a_chat_completion_asking_for_token_ids_gets_vllms_fields():
    with FakeLlamaCpp() as llama:
        r = through_shim(llama.url, "POST", "/v1/chat/completions", {**CHAT, "return_token_ids": True})
    answer = r.json()
    assert r.status_code == 200
    assert answer["prompt_token_ids"] == [1, 5, 2]  # the chat template's text, tokenized by the server
    assert answer["choices"][0]["token_ids"] == [7, 8, 2]  # the reply's ids, its end token included
    sent = dict(llama.seen)
    assert sent["/v1/chat/completions"]["logprobs"] is True and "return_token_ids" not in sent["/v1/chat/completions"]
    assert sent["/apply-template"]["messages"] == CHAT["messages"]  # the same body renders the same prompt
    assert sent["/tokenize"] == {"content": "<s>q</s>", "add_special": True, "parse_special": True}


def test_prompt_ids_the_server_did_not_count_are_left_out():
    with FakeLlamaCpp(prompt_tokens=4) as llama:  # the server read 4 tokens; /tokenize gives 3
        answer = through_shim(llama.url, "POST", "/v1/chat/completions", {**CHAT, "return_token_ids": True}).json()
    assert "prompt_token_ids" not in answer and answer["choices"][0]["token_ids"] == [7, 8, 2]


@pytest.mark.parametrize("method, path, body", [("POST", "/v1/chat/completions", CHAT), ("GET", "/v1/models", None)])
def test_other_requests_pass_through_unchanged(method, path, body):
    with FakeLlamaCpp() as llama:
        r = through_shim(llama.url, method, path, body)
        assert r.json() == llama.answer(path, body or {})
    assert [p for p, _ in llama.seen] == [path]  # no template, no tokenizer asked


def test_the_client_decodes_encodes_and_scores_through_the_server():
    with FakeLlamaCpp() as llama:
        tok = LlamaCppTokens(llama.url + "/v1")
        assert tok.decode([1, 5, 2]) == "<s>q</s>" and tok.encode("<s>q</s>") == [1, 5, 2]
        assert tok.next_logprobs([1, 5, 2], n=2) == {7: -0.1, 8: -3.0}
    assert llama.seen[-1][1]["prompt"] == [1, 5, 2] and llama.seen[-1][1]["n_probs"] == 2


def test_a_slow_completion_is_waited_for_while_the_server_works_and_ends_when_it_stops():
    """No wall-clock limit on a completion (a CPU may read a long agent prompt for many minutes): only
    a server that did no work for `no_progress_s` while the call was open ends it, as a 504."""
    ask = {**CHAT, "return_token_ids": True}
    with FakeLlamaCpp(delay_s=1.5, working=True) as llama:  # three times the limit, busy all along
        r = through_shim(llama.url, "POST", "/v1/chat/completions", ask, no_progress_s=0.5, poll_s=0.1)
    assert r.status_code == 200 and r.json()["choices"][0]["token_ids"] == [7, 8, 2]
    assert sum(p == "/slots" for p, _ in llama.seen) >= 3  # its progress was read while the call was open
    with FakeLlamaCpp(delay_s=3.0, working=False) as llama:  # idle slots: a stuck server
        began = time.monotonic()
        r = through_shim(llama.url, "POST", "/v1/chat/completions", ask, no_progress_s=0.5, poll_s=0.1)
        waited = time.monotonic() - began  # before the fake's handler ends its sleep
    assert r.status_code == 504 and "no progress" in r.json()["error"]["message"]
    assert waited < 2.5
