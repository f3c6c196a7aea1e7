"""Metering of every model call, and the budget that stops a run at the next safe point."""

from __future__ import annotations

import threading
from collections.abc import Callable

from pydantic import BaseModel, ConfigDict, Field

from skillopt.errors import BudgetExceeded
from skillopt.models.types import CallRecord


class Budget(BaseModel):
    model_config = ConfigDict(frozen=True)

    max_cost_usd: float | None = Field(None, gt=0)
    max_rollouts: int | None = Field(None, gt=0)
    max_tokens: int | None = Field(None, gt=0)


class RoleTotals(BaseModel):
    calls: int = 0
    cached_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = 0.0  # None once any paid call had an unknown price
    failed_calls: int = 0

    def add(self, rec: CallRecord) -> None:
        if rec.cached:
            self.cached_calls += 1
            return
        self.calls += 1
        self.failed_calls += 0 if rec.ok else 1
        self.input_tokens += rec.input_tokens
        self.output_tokens += rec.output_tokens
        if rec.cost_usd is None and (rec.input_tokens or rec.output_tokens):
            self.cost_usd = None
        elif self.cost_usd is not None:
            self.cost_usd += rec.cost_usd or 0.0


class MeterSnapshot(BaseModel):
    roles: dict[str, RoleTotals] = {}
    rollouts: int = 0

    @property
    def tokens(self) -> int:
        return sum(r.input_tokens + r.output_tokens for r in self.roles.values())

    @property
    def known_cost_usd(self) -> float:
        return sum(r.cost_usd or 0.0 for r in self.roles.values())

    @property
    def cost_unknown(self) -> bool:
        return any(r.cost_usd is None for r in self.roles.values())


class Meter:
    """Counts calls, tokens, cost and rollouts. Thread-safe; listeners get every record."""

    def __init__(self, budget: Budget | None = None, start: MeterSnapshot | None = None):
        self.budget = budget or Budget()
        self._snap = start.model_copy(deep=True) if start else MeterSnapshot()
        self._lock = threading.Lock()
        self.listeners: list[Callable[[CallRecord], None]] = []

    def record(self, rec: CallRecord) -> None:
        with self._lock:
            self._snap.roles.setdefault(rec.role, RoleTotals()).add(rec)
        for fn in self.listeners:
            fn(rec)

    def restore(self, snap: MeterSnapshot) -> None:
        """Start from what was recorded (a resumed run: its rollouts and calls logs)."""
        with self._lock:
            self._snap = snap.model_copy(deep=True)

    def count_rollout(self) -> None:
        with self._lock:
            self._snap.rollouts += 1

    def snapshot(self) -> MeterSnapshot:
        with self._lock:
            return self._snap.model_copy(deep=True)

    def exceeded(self) -> str | None:
        """The reason the budget is spent, or None."""
        b = self.budget
        if b.max_cost_usd is None and b.max_tokens is None and b.max_rollouts is None:
            return None
        with self._lock:  # read in place: a deep copy per rollout was a measurable cost
            s = self._snap
            if b.max_cost_usd is not None and s.known_cost_usd >= b.max_cost_usd:
                return f"cost budget reached: ${s.known_cost_usd:.4f} >= ${b.max_cost_usd:.4f}"
            if b.max_tokens is not None and s.tokens >= b.max_tokens:
                return f"token budget reached: {s.tokens} >= {b.max_tokens}"
            if b.max_rollouts is not None and s.rollouts >= b.max_rollouts:
                return f"rollout budget reached: {s.rollouts} >= {b.max_rollouts}"
        return None

    def check(self) -> None:
        """Raise `BudgetExceeded` at a safe point when any limit is reached."""
        reason = self.exceeded()
        if reason:
            raise BudgetExceeded(reason)
