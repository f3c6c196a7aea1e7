"""A folder of kept entries: one JSON file per key, written atomically, read back or ignored.

What a run keeps for later runs (`engine.rollout_cache`: rollouts; `models.replay`: model replies)
lives under the user's cache folder, one file per entry named by the sha256 of its key, in 256
subfolders. A kept entry is a convenience, never a result a run depends on: a folder that cannot be
written, or an entry that cannot be read (a torn or edited file), is said once per run in one
warning line and the work is done again.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from skillopt.io.files import atomic_write_text

E = TypeVar("E", bound=BaseModel)


class KeptEntries:
    """Entries of one kind under `root`. `what` names them in the warning (\"the seed rollout
    cache\"), `warn` receives that one line."""

    def __init__(self, root: Path, what: str, warn: Callable[[str], None] | None = None):
        self.root, self.what, self.warn = root, what, warn
        self._warned = False

    def path(self, *key: object) -> Path:
        digest = hashlib.sha256(json.dumps(list(key), default=str).encode()).hexdigest()
        return self.root / digest[:2] / f"{digest}.json"

    def read(self, model: type[E], *key: object) -> E | None:
        """The entry kept under `key`, or None when there is none or it cannot be read (warned)."""
        path = self.path(*key)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except OSError as e:
            self.warn_once(f"{path}: {e}")
            return None
        try:
            return model.model_validate_json(text)
        except ValidationError:
            self.warn_once(f"{path} cannot be read")
            return None

    def write(self, entry: BaseModel, *key: object) -> bool:
        """Keep `entry` under `key`; False (warned once) when the folder cannot be written."""
        try:
            atomic_write_text(self.path(*key), entry.model_dump_json())
        except OSError as e:
            self.warn_once(f"cannot write {self.root}: {e}")
            return False
        return True

    def warn_once(self, why: str) -> None:
        if not self._warned and self.warn is not None:
            self.warn(f"warning: {self.what}: {why}; ignored (that work is done again)")
        self._warned = True
