"""A fake vLLM server: the scripted fake model server, plus the token fields vLLM >= 0.10.2 adds.

vLLM returns, when asked with ``return_token_ids`` (and ``logprobs``), the prompt's token ids at
the top of a chat completion (``prompt_token_ids``) and each choice's ``token_ids`` and
``logprobs``. ``with_tokens(script)`` wraps any script so that every reply carries them, on chat
completions and on Anthropic Messages (there in the message object), and records what it sent::

    vllm = FakeVllm(always("Answer: 42"))
    with FakeModelServer(vllm) as srv:
        ...
    vllm.sent[0].prompt_ids, vllm.sent[0].token_ids, vllm.sent[0].logprobs

Token ids are the UTF-8 bytes of a text (``ByteTokenizer`` decodes them back), so a test can see
which call a row came from: a prompt's ids are the bytes of ``prompt_text(req)``, a reply's the
bytes of its text (or of its tool calls). Fields are sent only when the request asked for them
(``return_token_ids`` / ``logprobs``), as vLLM does; ``always_send=True`` sends them regardless,
and ``enabled = False`` never (a server that knows no token ids).
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass

from tests.fakes.script import FakeReply, FakeRequest, ScriptFn, resolve

PROMPT_CHARS = 160  # prompt ids cover at most this many characters (the byte "tokenizer" is long)


@dataclass(frozen=True)
class Sent:
    """What the fake vLLM sent for one call (in arrival order)."""

    api: str
    prompt_ids: list[int]
    token_ids: list[int]
    logprobs: list[float]
    text: str
    stream: bool


class ByteTokenizer:
    """Decodes the fake's token ids (UTF-8 bytes); what `TokenCapture(tokenizer=...)` accepts."""

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        return bytes(i for i in ids if 0 <= i < 256).decode("utf-8", errors="replace")


def prompt_text(req: FakeRequest) -> str:
    """The text whose bytes are a call's prompt ids: its turn number and last user text."""
    return f"[turn {req.turn}] {req.last_user_text or req.system}"[:PROMPT_CHARS]


def reply_text(reply: FakeReply) -> str:
    if reply.text or not reply.tool_calls:
        return reply.text
    return json.dumps([[c.name, c.arguments_json] for c in reply.tool_calls])


def _logprob(i: int) -> float:
    return -round(0.01 * (i % 7) + 0.001 * (i % 3), 6)


class FakeVllm:
    """A script wrapper adding vLLM's token fields; `sent` lists what went out, in order."""

    def __init__(self, script: ScriptFn, *, always_send: bool = False):
        self.script = script
        self.always_send = always_send
        self.enabled = True  # False: answer like a server that knows no token ids
        self.sent: list[Sent] = []
        self._lock = threading.Lock()

    def __call__(self, req: FakeRequest) -> FakeReply:
        reply = resolve(self.script, req)
        if not self.enabled or reply.status >= 400 or req.api == "responses":
            return reply
        want_ids = self.always_send or bool(req.body.get("return_token_ids"))
        want_lp = self.always_send or bool(req.body.get("logprobs"))
        if not (want_ids or want_lp):
            return reply
        text = reply_text(reply)
        prompt_ids, token_ids = list(prompt_text(req).encode()), list(text.encode())
        logprobs = [_logprob(i) for i in range(len(token_ids))]
        extra, choice = dict(reply.extra), dict(reply.choice_extra)
        if want_ids:
            extra["prompt_token_ids"] = prompt_ids
            (choice if req.api == "chat" else extra)["token_ids"] = token_ids
        if want_lp:
            content = [{"token": chr(t) if t < 128 else f"<0x{t:02X}>", "logprob": lp, "bytes": [t], "top_logprobs": []}
                       for t, lp in zip(token_ids, logprobs)]
            (choice if req.api == "chat" else extra)["logprobs"] = {"content": content}
        with self._lock:
            self.sent.append(Sent(req.api, prompt_ids if want_ids else [], token_ids if want_ids else [],
                                  logprobs if want_lp else [], text, req.stream))
        return FakeReply(text=reply.text, tool_calls=reply.tool_calls, usage=reply.usage, status=reply.status,
                         delay_s=reply.delay_s, finish=reply.finish, extra=extra, choice_extra=choice,
                         headers=reply.headers)

    def clear(self) -> None:
        with self._lock:
            self.sent.clear()


def with_tokens(script: ScriptFn, *, always_send: bool = False) -> FakeVllm:
    return FakeVllm(script, always_send=always_send)
