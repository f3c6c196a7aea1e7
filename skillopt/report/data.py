"""Read-only views of a run directory for compare, lineage and the report.

Everything here reads the run record (config, state, summary, skill versions, rollouts, steps,
metrics) in the run schema (`store.schema`), and the SQLite index; nothing writes (a run from an
older release is upgraded by `RunStore` when it is opened).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from skillopt.config import StoredConfig
from skillopt.errors import BadInput
from skillopt.record import Candidate, GateDecision
from skillopt.store.schema import (
    ConsolidationMetrics, RolloutRecord, RunState, RunSummary, SkillVersion, SplitScore, StepMetrics, shown_status,
)
from skillopt.store.index import RunIndex
from skillopt.store.layout import RunPaths, index_path
from skillopt.store.scores import latest_per_trial
from skillopt.store.run_store import RunStore

SPLITS = ("train", "val", "test")


@dataclass
class RunView:
    """One run, as the reports read it. Cached: build a new view to see later changes."""

    store: RunStore
    _memo: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def open(cls, runs_dir: Path, run_id: str) -> RunView:
        if not run_id or run_id.strip() != run_id:
            raise BadInput(f"bad run id {run_id!r}")
        return cls(RunStore.open(runs_dir, run_id))

    @property
    def run_id(self) -> str:
        return self.store.run_id

    @property
    def runs_dir(self) -> Path:
        return self.store.root.parent

    @cached_property
    def config(self) -> StoredConfig:
        return self.store.read_config()

    @cached_property
    def state(self) -> RunState | None:
        return self.store.read_state()

    @cached_property
    def summary(self) -> RunSummary | None:
        return self.store.read_summary()

    @cached_property
    def rollouts(self) -> list[RolloutRecord]:
        """Every rollout of the run: from the SQLite index when it holds all of them (the indexed
        fields only: no output, feedback or summary), else parsed from rollouts.jsonl."""
        index = self._index(self.run_id, self.store)
        return index.rollout_rows([self.run_id]) if index is not None else self.store.rollouts()

    def usage_of_first(self, n: int) -> tuple[int, float]:
        """Target tokens and known cost of the run's first `n` rollouts."""
        index = self._index(self.run_id, self.store)
        if index is not None:
            return index.usage_of_first(self.run_id, n)
        done = self.rollouts[:n]
        return sum(r.input_tokens + r.output_tokens for r in done), sum(r.cost_usd or 0.0 for r in done)

    def _index(self, run_id: str, store: RunStore) -> RunIndex | None:
        """The index, when it answers for `run_id` (it holds exactly what rollouts.jsonl holds)."""
        if "index" not in self._memo:
            db = index_path(self.runs_dir)
            self._memo["index"] = RunIndex(db) if db.exists() else None
        index = self._memo["index"]
        return index if index is not None and index.answers_for(run_id, store.paths.rollouts) else None

    @cached_property
    def metrics(self) -> list[StepMetrics | ConsolidationMetrics]:
        return self.store.metrics()

    def versions(self) -> list[SkillVersion]:
        return self.store.versions()

    # facts about the run --------------------------------------------------------------------------
    @property
    def benchmark(self) -> str:
        return self.config.benchmark

    @property
    def harness(self) -> str:
        return self.config.harness

    @property
    def target_model(self) -> str:
        return self.config.target_model

    @property
    def optimizer_model(self) -> str:
        return self.config.optimizer_model

    @property
    def mode(self) -> str:
        return self.config.mode

    @property
    def status(self) -> str:
        if self.state is not None:
            return shown_status(self.state.status, self.state.stop_reason)
        return shown_status(self.summary.status, self.summary.stop_reason) if self.summary else "new"

    @property
    def in_progress(self) -> bool:
        """True when the run has not finished: still running, interrupted, or stopped by its budget."""
        return self.status != "finished"

    @property
    def data_hash(self) -> str:
        return self.summary.data_hash if self.summary else ""

    def role_version(self, role: str) -> int | None:
        """The version number of `seed`, `best` or `final` (None when unknown)."""
        if role == "seed":
            return 0
        if self.state is not None:
            return self.state.best if role == "best" else self.state.incumbent
        if self.summary is not None:
            return self.summary.versions.get(role)
        return None

    # rollouts -----------------------------------------------------------------------------------------
    def records_for(self, sha: str, split: str | None = None) -> list[RolloutRecord]:
        """Rollouts of the skill content `sha` (whatever version number they were stored under).

        `split=None` or `"all"` gives every split. One per (task, trial): the latest scored one over
        an errored one (`store.scores.latest_per_trial`).
        """
        memo = ("records", sha, split)
        if memo not in self._memo:
            self._memo[memo] = latest_per_trial(
                r for r in self._pool(sha, split) if r.skill_sha == sha and (split in (None, "all") or r.split == split))
        return self._memo[memo]

    def _pool(self, sha: str | None = None, split: str | None = None) -> list[RolloutRecord]:
        """This run's rollouts, plus for an evaluation run those it reused from its source run; only
        those of `sha` on `split` when the index answers (it selects them), else all of them."""
        stores = [self.store]
        source = self.config.skill if self.mode == "eval" else None
        if source and not source.lower().endswith(".md"):
            run_id = source.partition(":")[0]
            if RunPaths(self.runs_dir / run_id).config.exists() and run_id != self.run_id:
                stores.append(RunStore(self.runs_dir / run_id))
        indexes = [self._index(s.run_id, s) for s in stores]
        first = indexes[0]
        if first is not None and all(ix is not None for ix in indexes):
            return first.rollout_rows([s.run_id for s in stores], sha, split)
        if "pool" not in self._memo:
            self._memo["pool"] = [r for s in stores for r in (self.rollouts if s is self.store else s.rollouts())]
        return self._memo["pool"]

    def split_score(self, version: int, split: str) -> SplitScore | None:
        recs = self.records_for(self.store.version(version).sha, split)
        if not recs:
            return None
        return SplitScore.of(recs)

    # gate decisions ---------------------------------------------------------------------------------------
    def gates(self) -> dict[int, GateDecision]:
        """Gate decisions by candidate version: each candidate's, each consolidation's, then gate.json."""
        if "gates" in self._memo:
            return self._memo["gates"]
        out: dict[int, GateDecision] = {}
        for c in self.candidates():
            if c.gate is not None:
                out[c.gate.candidate] = c.gate
        for g in self.consolidations().values():
            out[g.candidate] = g
        for g in self.store.step_gates():
            out.setdefault(g.candidate, g)
        self._memo["gates"] = out
        return out

    def step_of(self, version: SkillVersion) -> float | None:
        """Where a version sits on the step axis: its step, or (consolidation) half a step after the
        last step of its epoch."""
        if version.step is not None:
            return float(version.step)
        if version.origin.startswith("consolidate"):
            last = 0
            for m in self.metrics:
                if isinstance(m, StepMetrics):
                    last = m.step
                elif m.version == version.version:
                    return last + 0.5
        return None

    def candidates(self) -> list[Candidate]:
        """Every candidate of every step (steps/*/candidates.json), with its screen and gate."""
        if "candidates" not in self._memo:
            self._memo["candidates"] = self.store.candidates()
        return self._memo["candidates"]

    def consolidations(self) -> dict[int, GateDecision]:
        """The consolidation gate decisions, by epoch (1-based)."""
        if "consolidations" not in self._memo:
            self._memo["consolidations"] = self.store.consolidations()
        return self._memo["consolidations"]

    def step_metrics(self) -> list[StepMetrics]:
        return [m for m in self.metrics if isinstance(m, StepMetrics)]
