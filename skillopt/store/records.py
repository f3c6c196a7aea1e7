"""Persisted records of a run. Versioned: `SCHEMA_VERSION` bumps with an explicit migration."""

from __future__ import annotations

import time
from typing import Any, Literal

from pydantic import BaseModel, Field

from skillopt.models.meter import MeterSnapshot

SCHEMA_VERSION = 1

VersionStatus = Literal["seed", "candidate", "accepted", "rejected", "manual"]


def now() -> float:
    return round(time.time(), 3)


class SkillVersion(BaseModel):
    version: int
    parent: int | None = None
    sha: str
    origin: str  # "seed", "step 3", "consolidate epoch 1", "manual"
    status: VersionStatus = "candidate"
    step: int | None = None
    val_score: float | None = None
    created_at: float = Field(default_factory=now)

    @property
    def label(self) -> str:
        return f"v{self.version:03d}"


class RolloutRecord(BaseModel):
    key: str
    task_id: str
    split: str
    version: int
    skill_sha: str
    harness: str
    model: str
    trial: int = 0
    hard: float = 0.0
    soft: float = 0.0
    feedback: str = ""
    output: str = ""
    patch: str | None = None
    summary: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = None
    duration_s: float = 0.0
    error: str | None = None
    trace_file: str | None = None
    created_at: float = Field(default_factory=now)


class SplitScore(BaseModel):
    hard: float
    soft: float
    n: int


class RunState(BaseModel):
    """The checkpoint written after every step; `skillopt run --resume` starts from it."""

    schema_version: int = SCHEMA_VERSION
    run_id: str
    status: Literal["running", "stopped", "finished", "failed"] = "running"
    fingerprint: str
    epoch: int = 0  # epoch in progress (0-based)
    batch_index: int = 0  # next batch within the epoch
    step: int = 0  # steps completed over the whole run
    consolidated_epochs: list[int] = Field(default_factory=list)
    incumbent: int = 0
    best: int = 0
    baseline_val: SplitScore | None = None
    incumbent_val: SplitScore | None = None
    rejected_buffer: list[dict[str, Any]] = Field(default_factory=list)
    stop_reason: str | None = None
    meter: MeterSnapshot = Field(default_factory=MeterSnapshot)
    updated_at: float = Field(default_factory=now)


class RunSummary(BaseModel):
    schema_version: int = SCHEMA_VERSION
    run_id: str
    status: str
    benchmark: str
    harness: str
    target_model: str
    optimizer_model: str
    data_hash: str = ""
    versions: dict[str, int] = Field(default_factory=dict)  # seed / best / final -> version
    scores: dict[str, dict[str, SplitScore | None]] = Field(default_factory=dict)  # role -> split -> score
    edits_accepted: int = 0
    edits_rejected: int = 0
    candidates_accepted: int = 0
    candidates_rejected: int = 0
    steps: int = 0
    stop_reason: str | None = None
    meter: MeterSnapshot = Field(default_factory=MeterSnapshot)
    started_at: float = 0.0
    finished_at: float = Field(default_factory=now)
