"""Deterministic trace summaries for the optimizer, bounded by a token budget (no LLM call)."""

from __future__ import annotations

import json

from skillopt.traces.events import (
    ErrorEvent, MessageEvent, SkillUsedEvent, ToolCallEvent, ToolResultEvent, TraceEvent, UsageEvent,
)

CHARS_PER_TOKEN = 4


def head_tail(text: str, limit: int) -> str:
    """Keep the head and tail of long text, marking what was cut."""
    text = text.strip()
    if len(text) <= limit:
        return text
    half = max(1, (limit - 20) // 2)
    return f"{text[:half]} [...{len(text) - 2 * half} chars cut...] {text[-half:]}"


def _tool_input(value: object) -> str:
    if isinstance(value, dict):
        for k in ("command", "cmd", "file_path", "path", "pattern", "skill", "query"):
            if k in value:
                return f"{k}={str(value[k])[:160]}"
        return json.dumps(value, ensure_ascii=False)[:160]
    return str(value)[:160]


def summarize(events: list[TraceEvent], error: str | None = None, budget_tokens: int = 400) -> str:
    """A compact, faithful account: skill use, tools in order, failures, errors, turns, final answer."""
    limit = budget_tokens * CHARS_PER_TOKEN
    skill = [e for e in events if isinstance(e, SkillUsedEvent)]
    calls = [e for e in events if isinstance(e, ToolCallEvent)]
    results = {e.id: e for e in events if isinstance(e, ToolResultEvent)}
    errors = [e.message for e in events if isinstance(e, ErrorEvent)] + ([error] if error else [])
    usage = [e for e in events if isinstance(e, UsageEvent)]
    answers = [e.text for e in events if isinstance(e, MessageEvent) and e.role == "assistant" and e.text.strip()]

    lines = [f"skill used: {'yes (' + skill[0].how + ')' if skill else 'no'}"]
    if calls:
        lines.append(f"tools ({len(calls)} calls):")
        for i, c in enumerate(calls, 1):
            res = results.get(c.id)
            status = "" if res is None else (" -> FAILED" if res.is_error else " -> ok")
            lines.append(f"  {i}. {c.name}({_tool_input(c.input)}){status}")
            if res is not None and res.is_error:
                lines.append(f"     {head_tail(res.output, 240)}")
    if usage:
        u = usage[-1]
        turns = f"turns={u.turns}, " if u.turns is not None else ""
        lines.append(f"{turns}tokens in/out={sum(x.input_tokens for x in usage)}/{sum(x.output_tokens for x in usage)}")
    for msg in errors[:3]:
        lines.append(f"error: {head_tail(msg, 300)}")
    final = answers[-1] if answers else ""
    used = sum(len(line) + 1 for line in lines)
    room = max(120, limit - used - 20)
    lines.append(f"final answer ({len(final)} chars): {head_tail(final, room) if final else '<empty>'}")
    text = "\n".join(lines)
    return head_tail(text, limit)
