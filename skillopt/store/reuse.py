"""Stored rollouts found by their cache key (`engine.settings.Settings.rollout_key`, the key a run's
`RolloutRunner` uses): the one lookup by which `compare`, `eval` and the Python API reuse a rollout
any run under the runs folder already paid for."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from skillopt.store.layout import rollout_files
from skillopt.store.schema import RolloutRecord


class _KeyOnly(BaseModel):
    """A rollouts.jsonl line read for its cache key alone (the rest is skipped, not built)."""

    model_config = ConfigDict(extra="ignore")
    key: str = ""


def find_rollouts(runs_dir: Path, keys: Collection[str],
                  runs: Collection[str] | None = None) -> dict[str, tuple[Path, RolloutRecord]]:
    """Scored rollouts with these cache keys in any run under `runs_dir` (or only in the runs named
    in `runs`): key -> (the run's folder, record), the first one found, in run-id order. Errored
    rollouts are left out (they are run again). One pass over each run's rollouts.jsonl."""
    found: dict[str, tuple[Path, RolloutRecord]] = {}
    if not keys or (runs is not None and not runs):
        return found
    for run_id, path in rollout_files(runs_dir):
        if runs is not None and run_id not in runs:
            continue
        with path.open(encoding="utf-8") as f:
            for line in f:
                try:  # the key first (a cheap parse); the record only for a wanted key
                    key = _KeyOnly.model_validate_json(line).key
                    if key not in keys or key in found:
                        continue
                    rec = RolloutRecord.model_validate_json(line)
                except ValueError:
                    continue  # a torn last line of an interrupted run
                if not rec.errored:
                    found[key] = (path.parent, rec)
    return found
