"""Typed events the engine emits. Progress bars, metrics, the SQLite index listen to them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Union

from skillopt.config import StoredConfig
from skillopt.record import GateDecision
from skillopt.store.schema import RolloutRecord, RunSummary, SkillVersion, StepMetrics


@dataclass(frozen=True)
class RunStarted:
    run_id: str
    config: StoredConfig  # as the run's config.yaml holds it (redacted)
    resumed: bool
    total_steps: int | None = None  # training runs: steps planned over all epochs
    step: int = 0  # steps already done (a resumed run)


@dataclass(frozen=True)
class PhaseStarted:
    name: str  # "baseline val", "step 3 rollouts", "gate v004", "test v000"
    total: int


@dataclass(frozen=True)
class RolloutDone:
    record: RolloutRecord
    cached: bool


@dataclass(frozen=True)
class RolloutsKept:
    """Rollouts an earlier run made, saved into this one as they were (an evaluation run keeps the
    rollouts it reused from its source run): recorded, not run, so no progress counts them."""

    records: tuple[RolloutRecord, ...]


@dataclass(frozen=True)
class VersionSaved:
    version: SkillVersion
    gate: GateDecision | None = None


@dataclass(frozen=True)
class StepDone:
    step: int
    epoch: int
    metrics: StepMetrics


@dataclass(frozen=True)
class Note:
    text: str


@dataclass(frozen=True)
class RunFinished:
    summary: RunSummary


Event = Union[RunStarted, PhaseStarted, RolloutDone, RolloutsKept, VersionSaved, StepDone, Note, RunFinished]
Listener = Callable[[Event], None]


class Emitter:
    def __init__(self, listeners: list[Listener] | None = None):
        self.listeners = list(listeners or [])

    def __call__(self, event: Event) -> None:
        if isinstance(event, Note):  # notes quote errors (a provider's reply may echo a key): masked like the disk
            from skillopt.io.redact import redact

            event = Note(redact(event.text))
        for fn in self.listeners:
            fn(event)
