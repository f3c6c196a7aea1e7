"""The seed's rollouts, kept across runs: a run that scores the same seed skill on the same data, with
the same model, harness and settings that change a rollout, reuses them instead of running them again.

Every training run scores its seed on the validation split (the gate's baseline) and on the test split
(the summary's reference). Those rollouts depend on nothing the run learns, so a repeated run (or a
run that changes only how the optimizer works) pays for them once. They are kept under the user's cache
folder (`<cache>/rollouts/`, beside the embedded models' weights), one file per rollout, written
atomically and redacted like a run's own files.

The key is the rollout's own cache key (`engine.settings`: skill content, task content, trial, the
settings that matter) together with the whole benchmark data's hash and the split: a changed skill,
model, data file or setting is a miss. Errored rollouts are never kept. An entry that cannot be read
(a torn or edited file) is ignored, with one warning per run, and run again.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, ValidationError

from skillopt.io.files import atomic_write_text
from skillopt.store.schema import RolloutRecord
from skillopt.traces.events import TraceEvent

SEED_SPLITS = frozenset({"val", "test"})
FORMAT = 1  # of an entry; a new format never reads an old one (its key changes)


class SeedEntry(BaseModel):
    """One kept rollout: its record (as the run that made it stored it), its trace and native log."""

    format: int = FORMAT
    record: RolloutRecord
    trace: list[TraceEvent] = []
    raw_log: str | None = None


def default_root() -> Path:
    """`<cache>/rollouts`: the cache folder the embedded models use (`$SKILLOPT_CACHE_DIR`, else
    `~/.cache/skillopt`)."""
    from skillopt.models.local.registry import default_cache_dir

    return default_cache_dir().parent / "rollouts"


class SeedCache:
    """Kept seed rollouts of one benchmark's data (`data_hash`) under `root`. `warn` receives the one
    warning line about unreadable entries."""

    def __init__(self, root: Path, data_hash: str, warn: Callable[[str], None] | None = None):
        self.root, self.data_hash, self.warn = root, data_hash, warn
        self.hits = self.stored = 0
        self._warned = False

    def wants(self, version: int, split: str) -> bool:
        """Whether a rollout of this version on this split is kept: the seed's, on val and test."""
        return version == 0 and split in SEED_SPLITS

    def _path(self, key: str, split: str) -> Path:
        digest = hashlib.sha256(json.dumps([FORMAT, key, self.data_hash, split]).encode()).hexdigest()
        return self.root / digest[:2] / f"{digest}.json"

    def get(self, key: str, split: str) -> SeedEntry | None:
        path = self._path(key, split)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except OSError as e:
            self._warn_once(f"{path}: {e}")
            return None
        try:
            entry = SeedEntry.model_validate_json(text)
        except ValidationError:
            self._warn_once(f"{path} cannot be read")
            return None
        if entry.record.key != key or entry.record.errored:
            self._warn_once(f"{path} holds another rollout")
            return None
        self.hits += 1
        return entry

    def put(self, key: str, split: str, record: RolloutRecord, trace: list[TraceEvent] | None,
            raw_log: str | None) -> None:
        """Keep a scored rollout (errored ones are not results: never kept). A cache that cannot be
        written is not an error of the run: one warning, and the run goes on."""
        if record.errored or record.key != key:
            return
        entry = SeedEntry(record=record, trace=list(trace or []), raw_log=raw_log)
        try:
            atomic_write_text(self._path(key, split), entry.model_dump_json())
        except OSError as e:
            self._warn_once(f"cannot write {self.root}: {e}")
            return
        self.stored += 1

    def _warn_once(self, why: str) -> None:
        if not self._warned and self.warn is not None:
            self.warn(f"warning: the seed rollout cache: {why}; ignored (those rollouts run again)")
        self._warned = True
