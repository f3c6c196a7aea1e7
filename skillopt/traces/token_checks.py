"""Checks that a token dataset is what the model read and wrote: the drift a fake server cannot show.

`check_rows(rows, tokenizer)` looks at dataset rows (`skillopt.traces.export`) with the served
model's own tokenizer (anything with `decode(ids)`; for `local:` targets `LlamaCppTokens`):

- the completion ids decode exactly to the reply's text as the harness got it (a reply that stopped
  on an end-of-generation token may have that one token more, decoded as a special token like
  `<|im_end|>`); for a tool call, its name and every string in its arguments are in the decoded text;
- the prompt ids decode to a text that holds, in order, every message the harness sent;
- there is one finite logprob, at most 0, per completion id;
- and it counts the turns whose prompt starts with the previous turn's prompt + completion ids
  (`extends_previous`): where it does not, the chat template re-rendered earlier turns.

`recompute_logprobs(row, scorer, ...)` asks the server again for the log-probability of sampled
completion positions (`LlamaCppTokens.next_logprobs`) and compares it with the captured one.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

_SPECIAL = re.compile(r"^<[^<>\s]{1,40}>$|^</s>$")


class Decoder(Protocol):
    def decode(self, ids: list[int]) -> str: ...


class Scorer(Protocol):
    def next_logprobs(self, ids: list[int], n: int = 20) -> dict[int, float]: ...


@dataclass(frozen=True)
class RowProblem:
    instance_id: str
    rollout_key: str
    turn: int
    what: str


@dataclass(frozen=True)
class TokenCheck:
    """What `check_rows` found. `decode_mismatches` counts rows whose prompt or completion ids do not
    decode to the text the harness saw; `chain_breaks` turns after the first that do not extend the
    previous turn's ids (recorded in the data, not a fault of the capture)."""

    rows: int
    turns_after_first: int
    chain_breaks: int
    decode_mismatches: int
    bad_logprobs: int
    problems: tuple[RowProblem, ...] = field(default_factory=tuple)

    @property
    def ok(self) -> bool:
        return not self.decode_mismatches and not self.bad_logprobs

    def as_dict(self) -> dict[str, Any]:
        return {"rows": self.rows, "turns_after_first": self.turns_after_first, "chain_breaks": self.chain_breaks,
                "decode_mismatches": self.decode_mismatches, "bad_logprobs": self.bad_logprobs,
                "problems": [p.__dict__ for p in self.problems]}


def check_rows(rows: Iterable[dict[str, Any]], tokenizer: Decoder) -> TokenCheck:
    """Every row's ids against its texts; see the module docstring."""
    n = later = breaks = decode_bad = lp_bad = 0
    problems: list[RowProblem] = []
    for row in rows:
        n += 1
        if row.get("turn", 0) > 0:
            later += 1
            breaks += not row.get("extends_previous", True)
        found = completion_problems(row, tokenizer) + prompt_problems(row, tokenizer)
        decode_bad += bool(found)
        lp = logprob_problems(row)
        lp_bad += bool(lp)
        problems += [RowProblem(str(row.get("instance_id", "")), str(row.get("rollout_key", "")),
                                int(row.get("turn", 0)), what) for what in found + lp]
    return TokenCheck(n, later, breaks, decode_bad, lp_bad, tuple(problems))


def _messages(row: dict[str, Any]) -> list[dict[str, Any]]:
    try:
        messages = json.loads(row.get("messages") or "[]")
    except ValueError:
        return []
    return [m for m in messages if isinstance(m, dict)] if isinstance(messages, list) else []


def _texts(content: Any) -> list[str]:
    if isinstance(content, str):
        return [content]
    if isinstance(content, list):
        return [p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)]
    return []


def _strings(value: Any) -> list[str]:
    """The string leaves of a JSON value."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def completion_problems(row: dict[str, Any], tokenizer: Decoder) -> list[str]:
    ids = list(row.get("gold_completion_ids") or [])
    text = decoded = tokenizer.decode(ids)
    messages = _messages(row)
    reply = messages[-1] if messages and messages[-1].get("role") == "assistant" else {}
    calls = reply.get("tool_calls") or []
    if not calls:
        seen = row.get("completion") or ""
        if decoded == seen:
            return []
        end = tokenizer.decode(ids[-1:]) if ids else ""
        if _SPECIAL.match(end) and decoded.endswith(end) and decoded[:-len(end)] == seen:
            return []  # the end-of-generation token the reply stopped on
        return [f"completion ids decode to {_short(decoded)}, the harness got {_short(seen)}"]
    out = []
    for call in calls:
        fn = call.get("function") or {}
        try:
            args = json.loads(fn.get("arguments") or "{}")
        except ValueError:
            args = fn.get("arguments")
        for needed in [fn.get("name") or "", *_strings(args)]:
            if needed and needed not in text and json.dumps(needed)[1:-1] not in text:
                out.append(f"tool call {fn.get('name')!r}: {_short(needed)} is not in the decoded completion")
    return out


def prompt_problems(row: dict[str, Any], tokenizer: Decoder) -> list[str]:
    ids = list(row.get("prompt_ids") or [])
    if not ids:
        return ["no prompt ids"]
    prompt = tokenizer.decode(ids)
    at = 0
    for message in _messages(row)[:-1]:
        wanted = [t.strip() for t in _texts(message.get("content"))]
        wanted += [(c.get("function") or {}).get("name", "") for c in message.get("tool_calls") or []]
        for text in filter(None, wanted):
            found = prompt.find(text, at)
            if found < 0:
                return [f"the prompt ids do not hold the {message.get('role')} message {_short(text)} "
                        f"in order (decoded prompt: {len(prompt)} chars)"]
            at = found + len(text)
    return []


def logprob_problems(row: dict[str, Any]) -> list[str]:
    ids, logprobs = row.get("gold_completion_ids") or [], row.get("logprobs") or []
    if len(logprobs) != len(ids):
        return [f"{len(logprobs)} logprobs for {len(ids)} completion ids"]
    bad = [x for x in logprobs if not (math.isfinite(x) and x <= 1e-6)]
    return [f"{len(bad)} logprobs not finite or above 0 (first {bad[0]})"] if bad else []


@dataclass(frozen=True)
class Recomputed:
    position: int
    token: int
    captured: float
    recomputed: float | None  # None: not among the server's top `n` (then below its last)
    floor: float  # the lowest of the top `n` recomputed
    best: float = 0.0  # the highest of the top `n` recomputed (a greedy reply's own token, give or take rounding)


def recompute_logprobs(row: dict[str, Any], scorer: Scorer, positions: Sequence[int] = (),
                       sample: int = 4, n: int = 20) -> list[Recomputed]:
    """The server's log-probability of completion tokens, asked again: at `positions`, or `sample`
    positions spread over the completion."""
    prompt, ids, logprobs = list(row["prompt_ids"]), list(row["gold_completion_ids"]), list(row["logprobs"])
    if not positions:
        step = max(1, len(ids) // max(1, sample))
        positions = list(range(0, len(ids), step))[:sample]
    out = []
    for k in positions:
        top = scorer.next_logprobs(prompt + ids[:k], n)
        out.append(Recomputed(k, ids[k], logprobs[k], top.get(ids[k]), min(top.values(), default=0.0),
                              max(top.values(), default=0.0)))
    return out


def logprob_mismatches(found: Iterable[Recomputed], tolerance: float) -> list[Recomputed]:
    """Positions where the captured logprob is off the recomputed one by more than `tolerance` (or,
    for a token outside the top n, above the top n's lowest by more than that)."""
    return [r for r in found if (abs(r.captured - r.recomputed) > tolerance if r.recomputed is not None
                                 else r.captured > r.floor + tolerance)]


def _short(text: str, limit: int = 80) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "...")
