"""The scripting vocabulary of the fake model server: what a script sees and what it answers.

A script is any callable ``(FakeRequest) -> FakeReply | str``; the server calls it once per
model request, from the server's own threads, so a script that keeps state must lock it.
``always``, ``sequence`` and ``Script`` build the common ones.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

Api = Literal["chat", "messages", "responses"]


class ToolCall(NamedTuple):
    """One tool call, asked for by a reply or found in the conversation.

    ``arguments`` is normally a dict; a str is sent verbatim (to test malformed arguments).
    ``id`` is generated in each API's style when None.
    """

    name: str
    arguments: dict[str, Any] | str | None = None
    id: str | None = None

    @property
    def arguments_json(self) -> str:
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(self.arguments or {})


class Usage(NamedTuple):
    """Token counts reported in the reply (each API's own field names are filled from these)."""

    input_tokens: int
    output_tokens: int
    cached_tokens: int = 0


@dataclass(frozen=True)
class Message:
    """One conversation entry, normalised across APIs.

    ``role`` is "user", "assistant" or "tool" (system text lives in ``FakeRequest.system``).
    Assistant entries carry the tool calls they made; "tool" entries carry a tool's output in
    ``text`` and the call they answer in ``tool_call_id``. Consecutive assistant entries (as the
    Responses API sends them, one item per call) are merged into one.
    """

    role: str
    text: str
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None


@dataclass(frozen=True)
class Tool:
    """A tool offered by the client. ``kind`` is "function", "custom" (Responses free-form
    tools) or the type of a built-in tool (for example "web_search")."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = field(default_factory=dict)
    kind: str = "function"


@dataclass(frozen=True)
class FakeRequest:
    """A model request as a script sees it, whichever API it came through."""

    api: Api
    model: str
    system: str
    messages: tuple[Message, ...]
    tools: tuple[Tool, ...] = ()
    response_format: dict[str, Any] | None = None
    json_schema: dict[str, Any] | None = None
    stream: bool = False
    body: dict[str, Any] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    path: str = ""

    @property
    def turn(self) -> int:
        """How many assistant turns the conversation already holds (0 on the first call)."""
        return sum(1 for m in self.messages if m.role == "assistant")

    @property
    def last_user_text(self) -> str:
        return next((m.text for m in reversed(self.messages) if m.role == "user"), "")

    @property
    def tool_results(self) -> list[Message]:
        return [m for m in self.messages if m.role == "tool"]

    @property
    def tool_names(self) -> list[str]:
        return [t.name for t in self.tools]

    def tool(self, name: str) -> Tool | None:
        return next((t for t in self.tools if t.name == name), None)


@dataclass(frozen=True)
class FakeReply:
    """What the fake model answers.

    ``tool_calls`` accepts ``ToolCall`` or plain ``(name, arguments[, id])`` tuples. ``usage``
    accepts ``Usage`` or ``(input, output)``; None estimates about four characters a token.
    ``status`` >= 400 answers an error in the API's own error shape, with ``text`` as its message.
    ``finish`` is "stop", "length" or "tool_calls" (translated to each API's word; any other
    value is sent verbatim); None means "tool_calls" when there are calls, else "stop".
    ``extra`` is merged into the top-level response object (into the first chunk of a chat
    stream, the ``message_start`` message of a Messages stream, and the final response of a
    Responses stream); ``choice_extra`` into the chat choice (its last chunk when streaming),
    for example ``{"logprobs": ..., "token_ids": [...]}`` of a fake vLLM. ``headers`` are added
    to the HTTP response (for example ``{"retry-after-ms": "10"}``). ``delay_s`` waits before
    answering. ``raw`` is sent verbatim as a 200 JSON body instead of a reply (a malformed body).
    """

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage | None = None
    status: int = 200
    delay_s: float = 0.0
    finish: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    choice_extra: dict[str, Any] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    raw: str | None = None

    def __post_init__(self) -> None:
        calls = tuple(c if isinstance(c, ToolCall) else ToolCall(*c) for c in self.tool_calls)
        object.__setattr__(self, "tool_calls", calls)
        if self.usage is not None and not isinstance(self.usage, Usage):
            object.__setattr__(self, "usage", Usage(*self.usage))

    @property
    def finish_reason(self) -> str:
        return self.finish or ("tool_calls" if self.tool_calls else "stop")

    @property
    def error_message(self) -> str:
        return self.text or f"fake error (HTTP {self.status})"

    def usage_for(self, req: FakeRequest) -> Usage:
        if self.usage is not None:
            return self.usage
        out = len(self.text) + sum(len(c.name) + len(c.arguments_json) for c in self.tool_calls)
        return Usage(estimate_input_tokens(req), max(1, out // 4))


def estimate_input_tokens(req: FakeRequest) -> int:
    chars = len(req.system) + sum(len(m.text) + sum(len(c.arguments_json) for c in m.tool_calls)
                                  for m in req.messages)
    chars += sum(len(t.name) + len(t.description) + len(json.dumps(t.parameters)) for t in req.tools)
    return max(1, chars // 4)


ReplyLike = FakeReply | str | Callable[[FakeRequest], FakeReply | str]
ScriptFn = Callable[[FakeRequest], FakeReply | str]
Predicate = Callable[[FakeRequest], bool]


def resolve(reply: ReplyLike, req: FakeRequest) -> FakeReply:
    """Turn a reply, a text, or a function of the request into a ``FakeReply``."""
    if callable(reply):
        reply = reply(req)
    if isinstance(reply, str):
        return FakeReply(text=reply)
    if isinstance(reply, FakeReply):
        return reply
    raise TypeError(f"a fake script returned {type(reply).__name__}, expected FakeReply or str")


def always(reply: ReplyLike) -> ScriptFn:
    """A script that answers every request the same way."""
    return lambda req: resolve(reply, req)


class sequence:  # used like a function: sequence([...])
    """A script answering call 1 with ``replies[0]``, call 2 with ``replies[1]``, ...

    With ``cycle`` (the default) it starts over after the last; otherwise it repeats the last.
    ``calls`` counts the requests answered.
    """

    def __init__(self, replies: Iterable[ReplyLike], *, cycle: bool = True):
        self.replies = list(replies)
        if not self.replies:
            raise ValueError("sequence() needs at least one reply")
        self.cycle = cycle
        self._counter = itertools.count()
        self._lock = threading.Lock()
        self.calls = 0

    def __call__(self, req: FakeRequest) -> FakeReply:
        with self._lock:
            i = next(self._counter)
            self.calls = i + 1
        n = len(self.replies)
        return resolve(self.replies[i % n if self.cycle else min(i, n - 1)], req)


class Script:
    """Rules tried in order, first match wins, else ``default``.

        script = Script(default="Answer: unknown")
        script.when(system_contains(RULE), "Answer: 42")

        @script.when(lambda r: r.turn > 0)
        def finish(req): return FakeReply(text="done")
    """

    def __init__(self, default: ReplyLike = ""):
        self.default = default
        self.rules: list[tuple[Predicate, ReplyLike]] = []

    def when(self, predicate: Predicate, reply: ReplyLike | None = None) -> Any:
        """Add a rule; returns the script (chainable), or a decorator when ``reply`` is omitted."""
        if reply is None:
            def register(fn: Callable[[FakeRequest], FakeReply | str]) -> Callable[[FakeRequest], FakeReply | str]:
                self.rules.append((predicate, fn))
                return fn
            return register
        self.rules.append((predicate, reply))
        return self

    def __call__(self, req: FakeRequest) -> FakeReply:
        for predicate, reply in self.rules:
            if predicate(req):
                return resolve(reply, req)
        return resolve(self.default, req)


def system_contains(text: str) -> Predicate:
    return lambda req: text in req.system


def user_contains(text: str) -> Predicate:
    return lambda req: text in req.last_user_text


def rule_based(rule: str, correct: ReplyLike, wrong: ReplyLike) -> Script:
    """Answers ``correct`` only when the system prompt holds ``rule``, else ``wrong``."""
    return Script(default=wrong).when(system_contains(rule), correct)
