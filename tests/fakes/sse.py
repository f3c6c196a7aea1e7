"""Small pieces shared by the wire formats: ids, SSE framing, splitting text into deltas."""

from __future__ import annotations

import json
import re
import time
import uuid
from typing import Any


def new_id(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:24]}"


def now() -> int:
    return int(time.time())


def sse(data: dict[str, Any] | str, event: str | None = None) -> bytes:
    """One server-sent event; ``data`` is JSON-encoded unless it is already a string."""
    payload = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {payload}\n\n".encode()


def pieces(text: str, words: int = 2) -> list[str]:
    """``text`` cut into deltas of a few words each; joining them gives ``text`` back."""
    tokens = re.findall(r"\s+|\S+\s*", text)
    return ["".join(tokens[i:i + words]) for i in range(0, len(tokens), words)]


def json_pieces(text: str, size: int = 24) -> list[str]:
    """A JSON string cut into fixed-size fragments, as streamed tool arguments arrive."""
    return [text[i:i + size] for i in range(0, len(text), size)] or [""]
