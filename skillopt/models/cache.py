"""A persistent response cache: a resumed run replays model answers instead of paying again."""

from __future__ import annotations

import hashlib
import json
import threading
from pathlib import Path

from skillopt.models.spec import ModelSpec
from skillopt.models.types import ChatRequest, ChatResponse
from skillopt.io.files import append_jsonl, read_jsonl


def request_key(spec: ModelSpec, req: ChatRequest, salt: str = "") -> str:
    payload = json.dumps({"spec": str(spec), "req": req.model_dump(mode="json"), "salt": salt}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()


class ResponseCache:
    """Append-only JSONL of (key, response). Loaded once; safe across threads."""

    def __init__(self, path: Path):
        self.path = path
        self._lock = threading.Lock()
        self._items: dict[str, ChatResponse] = {}
        for rec in read_jsonl(path):
            try:
                self._items[rec["key"]] = ChatResponse.model_validate(rec["response"])
            except (KeyError, ValueError):
                continue
        self.hits = 0

    def get(self, key: str) -> ChatResponse | None:
        with self._lock:
            hit = self._items.get(key)
            if hit is not None:
                self.hits += 1
            return hit

    def put(self, key: str, resp: ChatResponse) -> None:
        with self._lock:
            self._items[key] = resp
        append_jsonl(self.path, {"key": key, "response": resp.model_dump(mode="json")})
