"""Persisted records of a run. Versioned: `SCHEMA_VERSION` bumps with an explicit migration."""

from __future__ import annotations

import time
from typing import Any, Literal

from pydantic import BaseModel, Field

from skillopt.models.meter import MeterSnapshot
from skillopt.optimizer.credit import EditLedger
from skillopt.optimizer.pool import ParetoPool
from skillopt.stats import Interval

SCHEMA_VERSION = 1

VersionStatus = Literal["seed", "candidate", "accepted", "rejected", "screened-out", "manual"]


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
    error_kind: Literal["infra", "agent"] | None = None  # "infra": not a score (see harness.base.Rollout)
    trace_file: str | None = None
    skill_used: bool | None = None  # the agent loaded the skill (None: always in its prompt, or not recorded)
    created_at: float = Field(default_factory=now)
    node: str | None = None  # where it ran: a Ray node (address/id); None: the process that wrote the run

    @property
    def errored(self) -> bool:
        """An infrastructure failure: never a score, never a cache hit, never gate evidence."""
        return self.error_kind == "infra"


class SplitScore(BaseModel):
    """Mean scores over the scored rollouts of a split; errored rollouts are counted, not scored."""

    hard: float
    soft: float
    n: int
    errors: int = 0


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
    best: int = 0  # the selected skill: the last incumbent (every accept passed the sequential test)
    baseline_val: SplitScore | None = None
    incumbent_val: SplitScore | None = None
    rejected_buffer: list[dict[str, Any]] = Field(default_factory=list)  # runs before the ledger; read once
    ledger: EditLedger = Field(default_factory=EditLedger)
    pool: ParetoPool = Field(default_factory=ParetoPool)
    decisions: int = 0  # gate decisions made (numbers the fresh draws of sampled targets)
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
    versions: dict[str, int] = Field(default_factory=dict)  # seed / best (older runs: also final) -> version
    scores: dict[str, dict[str, SplitScore | None]] = Field(default_factory=dict)  # role -> split -> score
    test_delta: Interval | None = None  # best - seed on the test split, paired per task, 95% interval
    test_wins: int = 0  # test tasks best solved and seed did not
    test_losses: int = 0
    gate_decisions: int = 0
    val_rollouts: int = 0  # validation rollouts paid by gate decisions
    candidates: dict[str, int] = Field(default_factory=dict)  # status -> count
    edits_accepted: int = 0
    edits_rejected: int = 0
    candidates_accepted: int = 0
    candidates_rejected: int = 0
    steps: int = 0
    stop_reason: str | None = None
    meter: MeterSnapshot = Field(default_factory=MeterSnapshot)
    started_at: float = 0.0
    finished_at: float = Field(default_factory=now)
