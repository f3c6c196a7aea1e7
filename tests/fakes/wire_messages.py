"""Anthropic Messages on the wire: ``POST /v1/messages``, JSON or named SSE events."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from tests.fakes.script import FakeReply, FakeRequest, Usage
from tests.fakes.sse import json_pieces, new_id, pieces, sse

FINISH = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}
ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
               404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error", 500: "api_error",
               529: "overloaded_error"}


def error_body(status: int, message: str) -> dict[str, Any]:
    kind = ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    return {"type": "error", "error": {"type": kind, "message": message}}


def usage_json(usage: Usage, output_tokens: int | None = None) -> dict[str, Any]:
    return {"input_tokens": usage.input_tokens, "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": usage.cached_tokens,
            "output_tokens": usage.output_tokens if output_tokens is None else output_tokens,
            "service_tier": "standard"}


def _blocks(reply: FakeReply) -> list[tuple[dict[str, Any], str]]:
    """Content blocks, each with its raw tool input JSON (a str argument is streamed verbatim)."""
    blocks: list[tuple[dict[str, Any], str]] = []
    if reply.text or not reply.tool_calls:
        blocks.append(({"type": "text", "text": reply.text}, ""))
    for c in reply.tool_calls:
        arguments = c.arguments if isinstance(c.arguments, dict) else _as_object(c.arguments_json)
        block = {"type": "tool_use", "id": c.id or new_id("toolu_"), "name": c.name, "input": arguments}
        blocks.append((block, c.arguments_json))
    return blocks


def _as_object(raw: str) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except ValueError:
        return {"_raw": raw}
    return value if isinstance(value, dict) else {"_raw": raw}


def _message(req: FakeRequest, reply: FakeReply, content: list[dict[str, Any]], usage: dict[str, Any],
             stop: str | None) -> dict[str, Any]:
    return {"id": new_id("msg_"), "type": "message", "role": "assistant", "model": req.model,
            "content": content, "stop_reason": stop, "stop_sequence": None, "usage": usage, **reply.extra}


def body(req: FakeRequest, reply: FakeReply, usage: Usage) -> dict[str, Any]:
    stop = FINISH.get(reply.finish_reason, reply.finish_reason)
    return _message(req, reply, [b for b, _ in _blocks(reply)], usage_json(usage), stop)


def events(req: FakeRequest, reply: FakeReply, usage: Usage) -> Iterator[bytes]:
    start = _message(req, reply, [], usage_json(usage, output_tokens=1), None)
    yield sse({"type": "message_start", "message": start}, "message_start")
    yield sse({"type": "ping"}, "ping")
    for index, (block, raw_input) in enumerate(_blocks(reply)):
        yield from _block_events(index, block, raw_input)
    stop = FINISH.get(reply.finish_reason, reply.finish_reason)
    yield sse({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
               "usage": {"output_tokens": usage.output_tokens}}, "message_delta")
    yield sse({"type": "message_stop"}, "message_stop")


def _block_events(index: int, block: dict[str, Any], raw_input: str) -> Iterator[bytes]:
    def delta(d: dict[str, Any]) -> bytes:
        return sse({"type": "content_block_delta", "index": index, "delta": d}, "content_block_delta")

    if block["type"] == "text":
        yield sse({"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}},
                  "content_block_start")
        for piece in pieces(block["text"]):
            yield delta({"type": "text_delta", "text": piece})
    else:
        started = {**block, "input": {}}
        yield sse({"type": "content_block_start", "index": index, "content_block": started}, "content_block_start")
        for piece in json_pieces(raw_input):
            yield delta({"type": "input_json_delta", "partial_json": piece})
    yield sse({"type": "content_block_stop", "index": index}, "content_block_stop")
