"""Deterministic trace summaries for the optimizer, bounded by a token budget (no LLM call).

A summary says, in this order: whether the agent discovered and used the skill; turns, tool calls
and tokens; every tool call in order with its status (head/tail excerpts of its output, longer for
failures); the error lines; for agent rollouts, exit codes, the last test run, the diff and where the
agent stopped (`outcome.py`); and the final answer's shape (length, lines, last line) with an excerpt.
When the text is over budget, excerpts shrink first, then the middle tool calls are elided (failed
ones are kept longest), so the start, the end and the failures stay visible.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from skillopt.traces.outcome import exit_code, outcome_lines
from skillopt.traces.events import (
    ErrorEvent, MessageEvent, SkillUsedEvent, ToolCallEvent, ToolResultEvent, TraceEvent, UsageEvent,
)

CHARS_PER_TOKEN = 4
DISCOVERED = "skill discovered: "
NOT_DISCOVERED = "skill not discovered: "
# (failed-output excerpt, ok-output excerpt, tool-input length), tried in order until the text fits
_LEVELS = ((600, 200, 160), (400, 120, 120), (240, 60, 100), (160, 0, 80), (100, 0, 60), (60, 0, 48))
_WS = re.compile(r"\s*\n\s*")


def head_tail(text: str, limit: int) -> str:
    """Keep the head and tail of long text, marking what was cut."""
    text = text.strip()
    if len(text) <= limit:
        return text
    keep = limit - len(f" [...{len(text)} chars cut...] ")
    if keep < 2:
        return text[:limit]
    head, tail = keep - keep // 2, keep // 2
    return f"{text[:head]} [...{len(text) - head - tail} chars cut...] {text[-tail:]}"


def discovery_event(name: str, listed: Sequence[str], t: float = 0.0) -> MessageEvent:
    """The system event an agent harness records once it knows which skills the agent was shown."""
    if name in listed:
        return MessageEvent(t=t, role="system", text=f"{DISCOVERED}{name} ({len(listed)} skills listed)")
    shown = ", ".join(listed[:12]) + (", ..." if len(listed) > 12 else "")
    return MessageEvent(t=t, role="system", text=f"{NOT_DISCOVERED}{name} (listed: {shown or 'none'})")


def _one_line(text: str, limit: int) -> str:
    return head_tail(_WS.sub(" ⏎ ", text.strip()), limit)


def _tool_input(value: object, limit: int = 160) -> str:
    if isinstance(value, dict):
        for k in ("command", "cmd", "skill", "file_path", "path", "pattern", "query", "url"):
            if k in value:
                return f"{k}={_one_line(str(value[k]), limit)}"
        return _one_line(json.dumps(value, ensure_ascii=False, default=str), limit)
    return _one_line(str(value if value is not None else ""), limit)


def _skill_line(events: list[TraceEvent]) -> str:
    notes = [e.text for e in events if isinstance(e, MessageEvent) and e.role == "system"
             and e.text.startswith((DISCOVERED, NOT_DISCOVERED))]
    uses: list[str] = []
    calls = 0
    for e in events:
        if isinstance(e, ToolCallEvent):
            calls += 1
        elif isinstance(e, SkillUsedEvent):
            uses.append(e.how if e.how == "system prompt" or not calls else f"{e.how} at call {calls}")
    if uses and uses[0] == "system prompt":
        return "skill: given in the system prompt"
    used = f"used ({'; '.join(dict.fromkeys(uses))})" if uses else "NOT used"
    if not notes:
        return f"skill: {used}"
    if notes[0].startswith(NOT_DISCOVERED):
        return f"skill: NOT discovered by the agent {notes[0][len(NOT_DISCOVERED):].split(' ', 1)[-1]}; {used}"
    return f"skill: discovered natively; {used}"


def _stats_line(calls: list[ToolCallEvent], failed: int, usage: list[UsageEvent]) -> str:
    parts = []
    turns = [u.turns for u in usage if u.turns is not None]
    if turns:
        parts.append(f"turns={sum(turns)}")
    parts.append(f"tool calls={len(calls)}" + (f" ({failed} failed)" if failed else ""))
    if usage:
        parts.append(f"tokens in/out={sum(u.input_tokens for u in usage)}/{sum(u.output_tokens for u in usage)}")
    return ", ".join(parts)


def _step(i: int, call: ToolCallEvent, res: ToolResultEvent | None, fail_n: int, ok_n: int, arg_n: int,
          loads_skill: bool = False) -> list[str]:
    code = exit_code(res, shell=False)  # only where the output says it
    status = " -> no result" if res is None else (" -> FAILED" if res.is_error else " -> ok") + (
        f" (exit {code})" if code is not None else "")
    lines = [f"  {i}. {call.name}({_tool_input(call.input, arg_n)}){status}" + (" (loads the skill)" if loads_skill else "")]
    if res is not None and res.output.strip() and (res.is_error or not loads_skill):  # the optimizer knows the skill
        size = fail_n if res.is_error else ok_n
        if size:
            lines.append(f"     {'err' if res.is_error else 'out'}: {_one_line(res.output, size)}")
    return lines


def _final_lines(final: str, room: int) -> list[str]:
    if not final.strip():
        return ["final answer: <empty>"]
    rows = [ln for ln in final.strip().splitlines() if ln.strip()]
    shape = f"{len(final)} chars, {len(rows)} line{'s' if len(rows) != 1 else ''}"
    lines = [f"final answer ({shape}): {_one_line(final, room)}"]
    if len(rows) > 1 and len(_WS.sub(" ⏎ ", final.strip())) > room:  # the excerpt cut it: show how it ends
        lines.append(f"final answer last line: {_one_line(rows[-1], min(160, room))}")
    return lines


def summarize(events: list[TraceEvent], error: str | None = None, budget_tokens: int = 400,
              patch: str | None = None) -> str:
    """A compact, faithful account of one rollout, at most `budget_tokens * 4` characters.

    For an agent rollout it also says what the optimizer can act on (`outcome.outcome_lines`): the
    shell commands' exit codes, the last test run with its output's tail, the diff (`patch`, of a
    coding task) and where the agent stopped and why."""
    limit = max(200, budget_tokens * CHARS_PER_TOKEN)
    calls = [e for e in events if isinstance(e, ToolCallEvent)]
    results = {e.id: e for e in events if isinstance(e, ToolResultEvent)}
    matched = [results.get(c.id) if c.id else None for c in calls]
    failed = [i for i, r in enumerate(matched) if r is not None and r.is_error]
    loads = _skill_loads(events)
    usage = [e for e in events if isinstance(e, UsageEvent)]
    errors = list(dict.fromkeys([e.message for e in events if isinstance(e, ErrorEvent)]
                                + ([error] if error else [])))
    answers = [e.text for e in events if isinstance(e, MessageEvent) and e.role == "assistant" and e.text.strip()]

    head = [_skill_line(events), _stats_line(calls, len(failed), usage)]
    final = answers[-1] if answers else ""
    tail = [f"error: {_one_line(m, 200)}" for m in errors[:3]]
    if len(errors) > 3:
        tail.append(f"(+{len(errors) - 3} more errors)")
    tail += outcome_lines(events, error, patch, limit)
    tail += _final_lines(final, min(600, max(160, limit // 4)))

    def assemble(step_lines: list[str]) -> str:
        return "\n".join(head + (["tools in order:"] + step_lines if step_lines else []) + tail)

    for fail_n, ok_n, arg_n in _LEVELS:
        steps = [ln for i, c in enumerate(calls) for ln in _step(i + 1, c, matched[i], fail_n, ok_n, arg_n, i in loads)]
        text = assemble(steps)
        if len(text) <= limit:
            return text
    fail_n, ok_n, arg_n = _LEVELS[-1]
    rendered = [_step(i + 1, c, matched[i], fail_n, ok_n, arg_n, i in loads) for i, c in enumerate(calls)]
    keep = len(calls) - 1
    while keep >= 0:
        text = assemble(_elided_steps(rendered, _elide(len(calls), keep, failed), set(failed)))
        if len(text) <= limit:
            return text
        keep -= 1 if len(text) - limit < 400 else max(1, keep // 4)  # far over: shrink faster
    # a tiny budget: tool calls counted only, one short error, a short answer
    tail = [f"error: {_one_line(m, 80)}" for m in errors[:1]] + _final_lines(final, 80)[:1]
    return head_tail(assemble([]), limit)


def _skill_loads(events: list[TraceEvent]) -> set[int]:
    """Indexes (among tool calls) of the calls that loaded the skill (a SkillUsedEvent follows them)."""
    found: set[int] = set()
    calls = -1
    for e in events:
        if isinstance(e, ToolCallEvent):
            calls += 1
        elif isinstance(e, SkillUsedEvent) and calls >= 0:
            found.add(calls)
    return found


def _elided_steps(rendered: list[list[str]], shown: list[int], failed: set[int]) -> list[str]:
    steps: list[str] = []
    prev = -1
    for i in [*shown, len(rendered)]:
        if i != prev + 1:
            gap = range(prev + 1, i)
            steps.append(f"  ... {len(gap)} calls omitted ({sum(1 for j in gap if j in failed)} failed) ...")
        if i < len(rendered):
            steps += rendered[i]
        prev = i
    return steps


def _elide(n: int, keep: int, failed: list[int]) -> list[int]:
    """Which of n calls to show when only `keep` fit: the first, the last, failed ones, then from both ends."""
    order = [0, n - 1, *failed] + [j for i in range(n) for j in (i, n - 1 - i)]
    return sorted(list(dict.fromkeys(j for j in order if 0 <= j < n))[:keep])
