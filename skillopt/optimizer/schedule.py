"""Learning-rate schedules: how many edits a step may apply. Tiny strategy objects."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol


class Schedule(Protocol):
    def __call__(self, step: int, total_steps: int) -> int: ...


@dataclass(frozen=True)
class Constant:
    initial: int

    def __call__(self, step: int, total_steps: int) -> int:
        return max(1, self.initial)


@dataclass(frozen=True)
class Linear:
    initial: int
    final: int

    def __call__(self, step: int, total_steps: int) -> int:
        frac = 0.0 if total_steps <= 1 else min(1.0, step / (total_steps - 1))
        return max(1, round(self.initial + (self.final - self.initial) * frac))


@dataclass(frozen=True)
class Cosine:
    initial: int
    final: int

    def __call__(self, step: int, total_steps: int) -> int:
        frac = 0.0 if total_steps <= 1 else min(1.0, step / (total_steps - 1))
        value = self.final + (self.initial - self.final) * (1 + math.cos(math.pi * frac)) / 2
        return max(1, round(value))


def make_schedule(name: str | Schedule, initial: int, final: int) -> Schedule:
    if not isinstance(name, str):
        return name
    return {"constant": lambda: Constant(initial), "linear": lambda: Linear(initial, final),
            "cosine": lambda: Cosine(initial, final)}[name]()
