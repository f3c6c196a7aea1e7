"""Replies kept across runs, for the embedded models: a repeated run replays them instead of asking
again (`train.replay`), so a run that is only repeated makes no model call.

Only the embedded models qualify: a `local:` name pins the weights by sha256 and the server is this
package's llama.cpp, so a kept reply is one that exact model gave to exactly that request (every
field of it: messages, cap, temperature, seed, schema). Rollouts ask at temperature 0 when the gate
runs deterministic (`gate.deterministic`); the optimizer samples unless `models.optimizer_temperature`
says otherwise, and a replayed sample is the first run's draw, not a new one: `--set
train.replay=false` asks again. A remote server's name says nothing
about what it serves, and a paid API's model changes under its name: their replies are never kept
across runs (a run's own `models.cache.ResponseCache` still replays them on `--resume`).

The key is the per-run cache's (`request_key`), salted with the model's identity (`identity`), so
other weights or another llama.cpp build are a miss. One file per reply under `<cache>/responses/`
(`io.kept`).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from importlib import metadata
from pathlib import Path

from pydantic import BaseModel

from skillopt.io.kept import KeptEntries
from skillopt.models.cache import request_key
from skillopt.models.spec import ModelSpec
from skillopt.models.types import ChatRequest, ChatResponse

FORMAT = 1


class KeptReply(BaseModel):
    format: int = FORMAT
    response: ChatResponse


@cache  # asked on every optimizer call; the installed build does not change while a run lasts
def identity(spec: ModelSpec) -> str | None:
    """What makes this model's replies reproducible (weights and server build), or None when
    nothing does: replies of that model are not kept."""
    if spec.provider != "local":
        return None
    from skillopt.models.local.registry import MODELS

    model = MODELS.get(spec.model.strip().lower())
    if model is None:
        return None
    try:
        server = metadata.version("xllamacpp")
    except metadata.PackageNotFoundError:
        return None
    return f"{model.name} sha256:{model.sha256} xllamacpp:{server}"


def default_root() -> Path:
    """`<cache>/responses`, beside the kept rollouts and the embedded models' weights."""
    from skillopt.models.local.registry import default_cache_dir

    return default_cache_dir().parent / "responses"


class ReplayCache:
    """Kept replies under `root`; `warn` receives the one warning line about unreadable entries."""

    def __init__(self, root: Path, warn: Callable[[str], None] | None = None):
        self.entries = KeptEntries(root, "the reply cache", warn)
        self.hits = self.stored = 0

    def key(self, spec: ModelSpec, req: ChatRequest) -> str | None:
        who = identity(spec)
        return None if who is None else request_key(spec.model_copy(update={"base_url": None}), req, who)

    def get(self, key: str) -> ChatResponse | None:
        entry = self.entries.read(KeptReply, FORMAT, key)
        if entry is None:
            return None
        self.hits += 1
        return entry.response

    def put(self, key: str, resp: ChatResponse) -> None:
        if self.entries.write(KeptReply(response=resp), FORMAT, key):
            self.stored += 1
