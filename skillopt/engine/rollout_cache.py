"""Rollouts kept across runs: a run that asks for a rollout an earlier run made, with the same skill,
task, data, model, harness and settings, reuses it instead of running it again.

Two scopes (`RolloutCache.every`):

- the seed's val and test rollouts, for any target (`train.seed_cache`): every training run scores
  its seed on the validation split (the gate's baseline) and on the test split (the summary's
  reference); those rollouts depend on nothing the run learns, so a run that changes only how the
  optimizer works pays for them once;
- every rollout, when the target's replies are a function of its request (`models.replay`: the
  embedded model, `train.replay`): with the optimizer's replies kept too, a run that is only
  repeated replays what the first one computed and makes no model call at all.

Entries are kept under the user's cache folder (`<cache>/rollouts/`, beside the embedded models'
weights), one file per rollout, written atomically and redacted like a run's own files
(`io.kept`). The key is the rollout's own cache key (`engine.settings`: skill content, task
content, trial, the settings that matter) together with the whole benchmark data's hash and the
split: a changed skill, model, data file or setting is a miss. Errored rollouts are never kept.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel

from skillopt.io.kept import KeptEntries
from skillopt.store.schema import RolloutRecord
from skillopt.traces.events import TraceEvent

SEED_SPLITS = frozenset({"val", "test"})
FORMAT = 1  # of an entry; a new format never reads an old one (its key changes)


class KeptRollout(BaseModel):
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


class RolloutCache:
    """Kept rollouts of one benchmark's data (`data_hash`) under `root`: the seed's val / test ones,
    or with `every` all of them. `warn` receives the one warning line about unreadable entries."""

    def __init__(self, root: Path, data_hash: str, warn: Callable[[str], None] | None = None,
                 every: bool = False):
        self.root, self.data_hash, self.every = root, data_hash, every
        self.entries = KeptEntries(root, "the rollout cache", warn)
        self.hits = self.stored = 0

    def wants(self, version: int, split: str) -> bool:
        """Whether a rollout of this version on this split is kept."""
        return self.every or (version == 0 and split in SEED_SPLITS)

    def _where(self, key: str, split: str) -> tuple:
        """An entry's own key: the rollout's, the data's and the split."""
        return FORMAT, key, self.data_hash, split

    def get(self, key: str, split: str) -> KeptRollout | None:
        entry = self.entries.read(KeptRollout, *self._where(key, split))
        if entry is None:
            return None
        if entry.record.key != key or entry.record.errored:
            self.entries.warn_once(f"{self.entries.path(*self._where(key, split))} holds another rollout")
            return None
        self.hits += 1
        return entry

    def put(self, key: str, split: str, record: RolloutRecord, trace: list[TraceEvent] | None,
            raw_log: str | None) -> None:
        """Keep a scored rollout (errored ones are not results: never kept). A cache that cannot be
        written is not an error of the run: one warning, and the run goes on."""
        if record.errored or record.key != key:
            return
        entry = KeptRollout(record=record, trace=list(trace or []), raw_log=raw_log)
        if self.entries.write(entry, *self._where(key, split)):
            self.stored += 1
