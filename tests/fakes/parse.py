"""Reading a request body of any of the three APIs into one ``FakeRequest``."""

from __future__ import annotations

import json
from typing import Any

from tests.fakes.script import Api, FakeRequest, Message, Tool, ToolCall


def parse_request(api: Api, body: dict[str, Any], headers: dict[str, str] | None = None,
                  path: str = "") -> FakeRequest:
    system, messages, tools, fmt = _PARSERS[api](body)
    schema = None
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":  # chat nests it under "json_schema"
        schema = fmt.get("schema") or (fmt.get("json_schema") or {}).get("schema")
    return FakeRequest(api=api, model=str(body.get("model", "")), system="\n\n".join(s for s in system if s),
                       messages=_merge_assistant_runs(messages), tools=tuple(tools), response_format=fmt,
                       json_schema=schema, stream=bool(body.get("stream")), body=body,
                       headers=dict(headers or {}), path=path)


def text_of(content: Any) -> str:
    """The text in a content value: a string, one part, or a list of parts of any API."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, dict):
        content = [content]
    parts = []
    for part in content:
        if isinstance(part, str):
            parts.append(part)
        elif isinstance(part, dict) and isinstance(part.get("text"), str):
            parts.append(part["text"])
        elif isinstance(part, dict) and isinstance(part.get("refusal"), str):
            parts.append(part["refusal"])
    return "\n".join(parts)


def _arguments(raw: Any) -> dict[str, Any] | str:
    if isinstance(raw, dict):
        return raw
    try:
        value = json.loads(raw or "{}")
    except (TypeError, ValueError):
        return str(raw)
    return value if isinstance(value, dict) else str(raw)


def _chat(body: dict[str, Any]) -> tuple:
    system, messages = [], []
    for m in body.get("messages") or []:
        role, content = m.get("role"), m.get("content")
        if role in ("system", "developer"):
            system.append(text_of(content))
        elif role == "assistant":
            calls = tuple(ToolCall(c["function"]["name"], _arguments(c["function"].get("arguments")), c.get("id"))
                          for c in m.get("tool_calls") or [] if c.get("function"))
            messages.append(Message("assistant", text_of(content), calls))
        elif role in ("tool", "function"):
            messages.append(Message("tool", text_of(content), tool_call_id=m.get("tool_call_id") or m.get("name")))
        else:
            messages.append(Message("user", text_of(content)))
    specs = [t.get("function") or {} for t in body.get("tools") or []] + list(body.get("functions") or [])
    tools = [Tool(f.get("name", ""), f.get("description") or "", f.get("parameters") or {}) for f in specs]
    return system, messages, tools, body.get("response_format")


def _messages(body: dict[str, Any]) -> tuple:
    messages, extra_system = [], []
    for m in body.get("messages") or []:
        role, content = m.get("role", "user"), m.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else list(content or [])
        if role == "system":  # Claude Code sends its skill listing as a system entry in messages
            extra_system.append(text_of(blocks))
            continue
        if role == "assistant":
            calls = tuple(ToolCall(b.get("name", ""), b.get("input") or {}, b.get("id"))
                          for b in blocks if b.get("type") in ("tool_use", "server_tool_use"))
            messages.append(Message("assistant", text_of([b for b in blocks if b.get("type") == "text"]), calls))
            continue
        for b in blocks:
            if b.get("type") == "tool_result":
                messages.append(Message("tool", text_of(b.get("content")), tool_call_id=b.get("tool_use_id")))
        others = [b for b in blocks if b.get("type") != "tool_result"]
        if others:
            messages.append(Message("user", text_of(others)))
    tools = [Tool(t.get("name") or t.get("type", ""), t.get("description") or "", t.get("input_schema") or {},
                  "function" if "input_schema" in t else t.get("type", "function"))
             for t in body.get("tools") or []]
    fmt = body.get("output_format") or (body.get("output_config") or {}).get("format")
    return [text_of(body.get("system")), *extra_system], messages, tools, fmt


def _responses(body: dict[str, Any]) -> tuple:
    system, messages = [body.get("instructions") or ""], []
    items = body.get("input")
    if isinstance(items, str):
        items = [{"type": "message", "role": "user", "content": items}]
    for item in items or []:
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role", "user")
            if role in ("system", "developer"):
                system.append(text_of(item.get("content")))
            else:
                messages.append(Message("assistant" if role == "assistant" else "user", text_of(item.get("content"))))
        elif kind == "function_call":
            call = ToolCall(item.get("name", ""), _arguments(item.get("arguments")), item.get("call_id"))
            messages.append(Message("assistant", "", (call,)))
        elif kind == "custom_tool_call":
            call = ToolCall(item.get("name", ""), {"input": item.get("input", "")}, item.get("call_id"))
            messages.append(Message("assistant", "", (call,)))
        elif kind in ("function_call_output", "custom_tool_call_output"):
            messages.append(Message("tool", text_of(item.get("output")), tool_call_id=item.get("call_id")))
    tools = []
    for t in body.get("tools") or []:
        kind = t.get("type", "function")
        params = t.get("parameters") or (t.get("format") if kind == "custom" else None) or {}
        tools.append(Tool(t.get("name") or kind, t.get("description") or "", params, kind))
    return system, messages, tools, (body.get("text") or {}).get("format")


def _merge_assistant_runs(messages: list[Message]) -> tuple[Message, ...]:
    merged: list[Message] = []
    for m in messages:
        if merged and m.role == "assistant" and merged[-1].role == "assistant":
            prev = merged[-1]
            text = "\n".join(t for t in (prev.text, m.text) if t)
            merged[-1] = Message("assistant", text, prev.tool_calls + m.tool_calls)
        else:
            merged.append(m)
    return tuple(merged)


_PARSERS = {"chat": _chat, "messages": _messages, "responses": _responses}
