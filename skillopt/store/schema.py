"""The run schema: every file a run writes, as the pydantic model it is written and read as.

A run folder carries its schema version in `run.json` (none: version 1, the runs made before the
schema was typed end to end). `SCHEMA_VERSION` bumps only with a migration appended to
`store.migrate.MIGRATIONS`, which `RunStore.open` applies to an older run before anything reads it.
Readers (report, compare, tracking, progress) read these models, never the JSON behind them.

| file                                   | model                                    |
|----------------------------------------|------------------------------------------|
| run.json                               | `RunMeta`                                |
| config.yaml                            | `config.StoredConfig` (the resolved `RunConfig`, redacted) |
| skills/index.jsonl (one line a change) | `SkillVersion`                           |
| rollouts.jsonl                         | `RolloutRecord`                          |
| calls.jsonl                            | `models.types.CallRecord`                |
| steps/NNNN/batch.json                  | `StepBatch`                              |
| steps/NNNN/reflections.json            | list of `Reflection`                     |
| steps/NNNN/candidates.json             | list of `Candidate` (screen, gate)       |
| steps/NNNN/gate.json                   | `GateDecision` (the step's last)         |
| consolidation/epoch-NNN.json           | `GateDecision` (non-inferiority)         |
| metrics.jsonl                          | `MetricLine`: `StepMetrics` or `ConsolidationMetrics` |
| state.json                             | `RunState` (edit ledger, Pareto pool, meter) |
| summary.json                           | `RunSummary`                             |

`Candidate`, `GateDecision`, `Reflection`, `EditLedger` and `ParetoPool` are part of this schema:
they live in `skillopt/record.py`, a floor below both this package and the optimizer that makes
them; changing one is a schema change.
"""

from __future__ import annotations

import time
from typing import Annotated, Literal, Union

from pydantic import BaseModel, Field

from skillopt.models.meter import MeterSnapshot
from skillopt.record import Candidate, EditLedger, GateDecision, ParetoPool, Reflection
from skillopt.stats import Interval, PairedLift
from skillopt.store.scores import SplitScore, per_task

SCHEMA_VERSION = 2

# "diagnostic": a skill tried to tell the user something, never a candidate (engine/protected.py)
VersionStatus = Literal["seed", "candidate", "accepted", "rejected", "screened-out", "manual", "diagnostic"]


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


def shown_status(status: str, stop_reason: str | None) -> str:
    """The status every view shows: a run stopped by Ctrl-C or SIGTERM is `interrupted` (stored as
    `stopped` with that reason, so files of older releases still read)."""
    return "interrupted" if status == "stopped" and stop_reason == "interrupted" else status


class ProtectedCheck(BaseModel):
    """A protected region of the skill left out, tried on one step's train batch (engine/protected.py)."""

    step: int
    text: str  # the region's words, cut
    tasks: int  # paired tasks
    failed: int  # of them, failed by the incumbent
    solved_without: int  # failed by the incumbent, solved without the region
    lost_without: int  # solved by the incumbent, failed without the region
    likely_cause: bool
    rollouts: int = 0

    def verdict(self) -> str:
        """One line for the user: the progress notes, the final table, the report."""
        said = (f"without the protected text \"{self.text}\" the target solved {self.solved_without} of the "
                f"{self.failed} failed train tasks of step {self.step} and lost {self.lost_without} of the "
                f"{self.tasks - self.failed} it solved")
        if self.likely_cause:
            return (f"{said}: it may be what makes the target fail. It is yours, so skillopt never edits it; "
                    f"reword it or leave it out, and run again")
        return f"{said}: no sign that it makes the target fail"


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
    consolidated: list[int] = Field(default_factory=list)  # versions a consolidation was asked to rewrite
    incumbent: int = 0
    best: int = 0  # the selected skill: the last incumbent (every accept passed the sequential test)
    baseline_val: SplitScore | None = None
    incumbent_val: SplitScore | None = None
    ledger: EditLedger = Field(default_factory=EditLedger)
    pool: ParetoPool = Field(default_factory=ParetoPool)
    decisions: int = 0  # gate decisions made (numbers the fresh draws of sampled targets)
    protected: list[ProtectedCheck] | None = None  # each protected region left out once (None: not yet checked)
    stop_reason: str | None = None
    meter: MeterSnapshot = Field(default_factory=MeterSnapshot)
    updated_at: float = Field(default_factory=now)


class Undecided(BaseModel):
    """The candidate that came closest to acceptance without a decision: ahead after every validation
    pair, short of the gate's bound (`sequential_test.pairs_to_decide` sizes the split it would need)."""

    version: int
    origin: str
    wins: int
    losses: int
    pairs: int
    pairs_needed: int

    def text(self) -> str:
        return (f"v{self.version:03d} ({self.origin}) won {self.wins} and lost {self.losses} over all {self.pairs} "
                f"validation pairs, short of the gate; about {self.pairs_needed} pairs would give an edit this good "
                f"an 80% chance to pass (a larger --val-size, where the data has the tasks)")


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
    closest_undecided: Undecided | None = None  # an edit the validation split was too small to decide
    protected: list[ProtectedCheck] = Field(default_factory=list)  # whether a protected region makes the target fail
    meter: MeterSnapshot = Field(default_factory=MeterSnapshot)
    started_at: float = 0.0
    finished_at: float = Field(default_factory=now)

    @property
    def test_lift(self) -> PairedLift | None:
        """best - seed on the sealed test split: the paired lift every view shows (`stats.PairedLift`)."""
        if self.test_delta is None:
            return None
        d = self.test_delta
        return PairedLift(interval=d, wins=self.test_wins, losses=self.test_losses,
                          ties=max(0, d.n - self.test_wins - self.test_losses))

    def findings(self) -> list[str]:
        """What the run found besides its scores, a line each: the edit the validation split was too small
        to decide, and each protected region left out once. The final table and the report show them."""
        out = [f"undecided: {self.closest_undecided.text()}"] if self.closest_undecided else []
        return out + [f"protected: {c.verdict()}" for c in self.protected]


class RunMeta(BaseModel):
    """run.json: which schema the folder is written in (and by which release)."""

    schema_version: int = SCHEMA_VERSION
    written_by: str = ""  # skillopt's version


class StepBatch(BaseModel):
    """steps/NNNN/batch.json: the incumbent a step started from, its train batch and the batch's score."""

    version: int
    tasks: list[str]
    train: SplitScore | None = None  # runs from before it was recorded


class StepMetrics(BaseModel):
    """One line of metrics.jsonl per step (and the `StepDone` event's metrics)."""

    type: Literal["step"] = "step"
    step: int
    epoch: int  # 0-based
    version: int  # the incumbent after the step
    learning_rate: int
    train_hard: float | None  # None: every rollout of the batch errored
    train_errors: int = 0
    candidates: int = 0
    proposed: int = 0  # edits proposed over all candidates
    selected: int = 0  # candidates gated
    applied: int = 0  # candidates stored as versions
    leaked: int = 0
    screened_out: int = 0
    screen_rollouts: int = 0
    val_rollouts: int = 0
    decision: Literal["accept", "reject"] | None = None
    val: float | None = None  # the incumbent's validation score after the step
    tokens: int = 0
    cost_usd: float = 0.0
    cost_unknown: bool = False
    rollouts: int = 0  # rollouts paid so far in the run

    @property
    def numbers(self) -> dict[str, float]:
        """The numeric metrics (trackers log these), with `accepted` as 0/1 when a decision was made."""
        out = {k: float(v) for k, v in self.model_dump(exclude={"type", "step", "decision"}).items()
               if isinstance(v, (int, float)) and not isinstance(v, bool)}
        if self.decision is not None:
            out["accepted"] = 1.0 if self.decision == "accept" else 0.0
        return out


class ConsolidationMetrics(BaseModel):
    """One line of metrics.jsonl per end-of-epoch consolidation: gated, or (decision "none") why the
    rewrite made no candidate (not shorter, changed nothing, a protected passage dropped, unreadable)."""

    type: Literal["consolidation"] = "consolidation"
    consolidate_epoch: int  # 1-based
    version: int | None = None  # the consolidated candidate; None when the rewrite made none
    decision: Literal["accept", "reject", "none"]
    reason: str = ""
    val_rollouts: int = 0


MetricLine = Annotated[Union[StepMetrics, ConsolidationMetrics], Field(discriminator="type")]


__all__ = ["SCHEMA_VERSION", "Candidate", "ConsolidationMetrics", "GateDecision", "MetricLine", "Reflection",
           "RolloutRecord", "RunMeta", "RunState", "RunSummary", "SkillVersion", "SplitScore", "StepBatch",
           "StepMetrics", "VersionStatus", "now", "per_task"]
