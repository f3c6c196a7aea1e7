"""OpenAI Responses API on the wire: ``POST /v1/responses``, JSON or named SSE events."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

from tests.fakes.script import FakeReply, FakeRequest, Usage
from tests.fakes.sse import json_pieces, new_id, now, pieces, sse
from tests.fakes.wire_chat import error_body  # the Responses API shares the OpenAI error shape

__all__ = ["body", "error_body", "events"]


def usage_json(usage: Usage) -> dict[str, Any]:
    return {"input_tokens": usage.input_tokens, "input_tokens_details": {"cached_tokens": usage.cached_tokens},
            "output_tokens": usage.output_tokens, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": usage.input_tokens + usage.output_tokens}


def _items(req: FakeRequest, reply: FakeReply) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    if reply.text or not reply.tool_calls:
        part = {"type": "output_text", "text": reply.text, "annotations": [], "logprobs": []}
        items.append({"id": new_id("msg_"), "type": "message", "status": "completed", "role": "assistant",
                      "content": [part]})
    for c in reply.tool_calls:
        tool = req.tool(c.name)
        call_id = c.id or new_id("call_")
        if tool is not None and tool.kind == "custom":
            text = c.arguments.get("input", "") if isinstance(c.arguments, dict) else c.arguments_json
            items.append({"id": new_id("ctc_"), "type": "custom_tool_call", "status": "completed",
                          "call_id": call_id, "name": c.name, "input": text})
        else:
            items.append({"id": new_id("fc_"), "type": "function_call", "status": "completed",
                          "call_id": call_id, "name": c.name, "arguments": c.arguments_json})
    return items


def _status(reply: FakeReply) -> tuple[str, dict[str, str] | None]:
    finish = reply.finish_reason
    if finish in ("stop", "tool_calls"):
        return "completed", None
    return "incomplete", {"reason": "max_output_tokens" if finish == "length" else finish}


def _response(req: FakeRequest, rid: str, status: str, output: list[dict[str, Any]],
              usage: dict[str, Any] | None, incomplete: dict[str, str] | None = None) -> dict[str, Any]:
    b = req.body
    return {"id": rid, "object": "response", "created_at": now(), "status": status, "background": False,
            "error": None, "incomplete_details": incomplete, "instructions": b.get("instructions"),
            "max_output_tokens": b.get("max_output_tokens"), "max_tool_calls": None, "model": req.model,
            "output": output, "parallel_tool_calls": b.get("parallel_tool_calls", True),
            "previous_response_id": b.get("previous_response_id"),
            "reasoning": b.get("reasoning") or {"effort": None, "summary": None}, "service_tier": "default",
            "store": b.get("store", True), "temperature": b.get("temperature", 1.0),
            "text": b.get("text") or {"format": {"type": "text"}}, "tool_choice": b.get("tool_choice", "auto"),
            "tools": b.get("tools") or [], "top_p": b.get("top_p", 1.0), "truncation": b.get("truncation", "disabled"),
            "usage": usage, "user": None, "metadata": b.get("metadata") or {}}


def body(req: FakeRequest, reply: FakeReply, usage: Usage) -> dict[str, Any]:
    status, incomplete = _status(reply)
    out = _response(req, new_id("resp_"), status, _items(req, reply), usage_json(usage), incomplete)
    return {**out, **reply.extra}


def events(req: FakeRequest, reply: FakeReply, usage: Usage) -> Iterator[bytes]:
    seq = itertools.count()

    def event(kind: str, **fields: Any) -> bytes:
        return sse({"type": kind, "sequence_number": next(seq), **fields}, kind)

    rid = new_id("resp_")
    started = _response(req, rid, "in_progress", [], None)
    yield event("response.created", response=started)
    yield event("response.in_progress", response=started)
    items = _items(req, reply)
    for index, item in enumerate(items):
        for kind, fields in _item_events(index, item):
            yield event(kind, **fields)
    status, incomplete = _status(reply)
    final = {**_response(req, rid, status, items, usage_json(usage), incomplete), **reply.extra}
    yield event(f"response.{status}", response=final)


def _item_events(index: int, item: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    at = {"item_id": item["id"], "output_index": index}
    kind = item["type"]
    if kind == "message":
        yield "response.output_item.added", {"output_index": index,
                                             "item": {**item, "status": "in_progress", "content": []}}
        part = item["content"][0]
        yield "response.content_part.added", {**at, "content_index": 0, "part": {**part, "text": ""}}
        for piece in pieces(part["text"]):
            yield "response.output_text.delta", {**at, "content_index": 0, "delta": piece, "logprobs": []}
        yield "response.output_text.done", {**at, "content_index": 0, "text": part["text"], "logprobs": []}
        yield "response.content_part.done", {**at, "content_index": 0, "part": part}
    elif kind == "function_call":
        yield "response.output_item.added", {"output_index": index,
                                             "item": {**item, "status": "in_progress", "arguments": ""}}
        for piece in json_pieces(item["arguments"]):
            yield "response.function_call_arguments.delta", {**at, "delta": piece}
        yield "response.function_call_arguments.done", {**at, "name": item["name"], "arguments": item["arguments"]}
    else:
        yield "response.output_item.added", {"output_index": index,
                                             "item": {**item, "status": "in_progress", "input": ""}}
        for piece in json_pieces(item["input"]):
            yield "response.custom_tool_call_input.delta", {**at, "delta": piece}
        yield "response.custom_tool_call_input.done", {**at, "input": item["input"]}
    yield "response.output_item.done", {"output_index": index, "item": item}
