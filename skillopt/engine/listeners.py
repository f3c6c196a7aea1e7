"""Listeners that record a run: metrics.jsonl and the SQLite index. Training and evaluation runs
are recorded by the same listeners (`recorders`), given with the others by whoever starts the run."""

from __future__ import annotations

from pathlib import Path

from skillopt.config import StoredConfig
from skillopt.engine.events import (
    Event, Listener, RolloutDone, RolloutsKept, RunFinished, RunStarted, StepDone, VersionSaved,
)
from skillopt.store.index import RunIndex
from skillopt.store.layout import RunPaths, index_path
from skillopt.store.schema import RolloutRecord, now
from skillopt.store.run_store import RunStore


def recorders(runs_dir: Path) -> list[Listener]:
    """The listeners that keep a run's record beside its folder: metrics.jsonl and the SQLite index."""
    return [MetricsWriter(runs_dir), IndexWriter(runs_dir)]


class MetricsWriter:
    def __init__(self, runs_dir: Path):
        self.runs_dir = runs_dir
        self.store: RunStore | None = None

    def __call__(self, event: Event) -> None:
        if isinstance(event, RunStarted):
            self.store = RunStore(self.runs_dir / event.run_id)
        elif isinstance(event, StepDone) and self.store is not None:
            self.store.append_metric(event.metrics)


class IndexWriter:
    """Keeps runs/skillopt.db in step with the run directory. Rollouts are written in batches (one
    transaction per `batch` rollouts, and before any other event), not one transaction each."""

    batch = 256

    def __init__(self, runs_dir: Path):
        self.runs_dir = runs_dir
        self._index: RunIndex | None = None  # opened with the run: a run refused at start leaves no database
        self.run_id: str | None = None
        self.config: StoredConfig | None = None
        self._pending: list[RolloutRecord] = []

    def flush(self) -> None:
        if self._pending and self.run_id is not None:
            self.index.add_rollouts(self.run_id, self._pending)
        self._pending = []

    @property
    def index(self) -> RunIndex:
        if self._index is None:
            self._index = RunIndex(index_path(self.runs_dir))
        return self._index

    def __call__(self, event: Event) -> None:
        if isinstance(event, RolloutDone):
            if not event.cached and self.run_id is not None:
                self._pending.append(event.record)
                if len(self._pending) >= self.batch:
                    self.flush()
            return
        if isinstance(event, RolloutsKept):
            if self.run_id is not None:
                self._pending += event.records
                if len(self._pending) >= self.batch:
                    self.flush()
            return
        self.flush()
        if isinstance(event, RunStarted):
            self.run_id, self.config = event.run_id, event.config
            self.index.upsert_run(event.run_id, self.runs_dir / event.run_id, event.config, "running", now())
            store = RunStore(self.runs_dir / event.run_id)
            for v in store.versions():
                self.index.upsert_version(event.run_id, v)
            if event.resumed:  # rows a crash kept from the index (batches not yet committed)
                self.index.sync_rollouts(event.run_id, store.rollout_lines(), store.rollouts)
        elif self.run_id is None:
            return
        elif isinstance(event, VersionSaved):
            gate = event.gate.model_dump(mode="json") if event.gate else None
            self.index.upsert_version(self.run_id, event.version, gate)
        elif isinstance(event, RunFinished):
            s = event.summary
            for v in RunStore(self.runs_dir / self.run_id).versions():
                self.index.upsert_version(self.run_id, v)
            self.index.upsert_run(self.run_id, self.runs_dir / self.run_id, self.config or StoredConfig(), s.status,
                                  s.started_at, summary=s, data_hash=s.data_hash)
            # every rollout was announced before this event: the index now answers for the run
            self.index.mark_complete(self.run_id, RunPaths(self.runs_dir / self.run_id).rollouts)
