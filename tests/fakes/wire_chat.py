"""OpenAI chat completions on the wire: ``POST /v1/chat/completions``, JSON or SSE chunks."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from tests.fakes.script import FakeReply, FakeRequest, Usage
from tests.fakes.sse import new_id, now, pieces, sse

FINISH = {"stop": "stop", "length": "length", "tool_calls": "tool_calls"}
ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
               404: "not_found_error", 429: "rate_limit_exceeded"}


def error_body(status: int, message: str) -> dict[str, Any]:
    kind = ERROR_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return {"error": {"message": message, "type": kind, "param": None,
                      "code": "rate_limit_exceeded" if status == 429 else None}}


def usage_json(usage: Usage) -> dict[str, Any]:
    return {"prompt_tokens": usage.input_tokens, "completion_tokens": usage.output_tokens,
            "total_tokens": usage.input_tokens + usage.output_tokens,
            "prompt_tokens_details": {"cached_tokens": usage.cached_tokens, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
                                          "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}}


def _calls(reply: FakeReply) -> list[dict[str, Any]]:
    return [{"id": c.id or new_id("call_"), "type": "function",
             "function": {"name": c.name, "arguments": c.arguments_json}} for c in reply.tool_calls]


def body(req: FakeRequest, reply: FakeReply, usage: Usage) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.text or (None if reply.tool_calls else ""),
                               "refusal": None, "annotations": []}
    if reply.tool_calls:
        message["tool_calls"] = _calls(reply)
    choice = {"index": 0, "message": message, "logprobs": None,
              "finish_reason": FINISH.get(reply.finish_reason, reply.finish_reason), **reply.choice_extra}
    return {"id": new_id("chatcmpl-"), "object": "chat.completion", "created": now(), "model": req.model,
            "choices": [choice], "usage": usage_json(usage), "service_tier": "default",
            "system_fingerprint": None, **reply.extra}


def events(req: FakeRequest, reply: FakeReply, usage: Usage) -> Iterator[bytes]:
    include_usage = bool((req.body.get("stream_options") or {}).get("include_usage"))
    head = {"id": new_id("chatcmpl-"), "object": "chat.completion.chunk", "created": now(), "model": req.model,
            "service_tier": "default", "system_fingerprint": None}
    if include_usage:
        head["usage"] = None

    def chunk(delta: dict[str, Any], finish: str | None = None, **more: Any) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return sse({**head, "choices": [{**choice, **more}]})

    yield sse({**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": "", "refusal": None},
                                    "logprobs": None, "finish_reason": None}], **reply.extra})
    for piece in pieces(reply.text):
        yield chunk({"content": piece})
    for i, call in enumerate(_calls(reply)):
        fn = call["function"]
        yield chunk({"tool_calls": [{"index": i, "id": call["id"], "type": "function",
                                     "function": {"name": fn["name"], "arguments": ""}}]})
        for piece in pieces(fn["arguments"], words=2):
            yield chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]})
    yield chunk({}, FINISH.get(reply.finish_reason, reply.finish_reason), **reply.choice_extra)
    if include_usage:
        yield sse({**head, "choices": [], "usage": usage_json(usage)})
    yield sse("[DONE]")
