"""Listeners that record a run: metrics.jsonl and the SQLite index."""

from __future__ import annotations

from pathlib import Path

from skillopt.engine.events import Event, RolloutDone, RunFinished, RunStarted, StepDone, VersionSaved
from skillopt.store.index import RunIndex
from skillopt.store.records import now
from skillopt.store.run import RunStore


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
    """Keeps runs/skillopt.db in step with the run directory."""

    def __init__(self, runs_dir: Path):
        self.runs_dir = runs_dir
        self._index: RunIndex | None = None  # opened with the run: a run refused at start leaves no database
        self.run_id: str | None = None
        self.config: dict = {}

    @property
    def index(self) -> RunIndex:
        if self._index is None:
            self._index = RunIndex(self.runs_dir / "skillopt.db")
        return self._index

    def __call__(self, event: Event) -> None:
        if isinstance(event, RunStarted):
            self.run_id, self.config = event.run_id, event.config
            self.index.upsert_run(event.run_id, self.runs_dir / event.run_id, event.config, "running", now())
            for v in RunStore(self.runs_dir / event.run_id).versions():
                self.index.upsert_version(event.run_id, v)
        elif self.run_id is None:
            return
        elif isinstance(event, RolloutDone) and not event.cached:
            self.index.add_rollout(self.run_id, event.record)
        elif isinstance(event, VersionSaved):
            gate = event.gate.model_dump(mode="json") if event.gate else None
            self.index.upsert_version(self.run_id, event.version, gate)
        elif isinstance(event, RunFinished):
            s = event.summary
            for v in RunStore(self.runs_dir / self.run_id).versions():
                self.index.upsert_version(self.run_id, v)
            self.index.upsert_run(self.run_id, self.runs_dir / self.run_id, self.config, s.status,
                                  s.started_at, summary=s, data_hash=s.data_hash)
