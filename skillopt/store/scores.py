"""A skill version's score: the one definition that every view uses.

The run's printed summary, `runs list` / `runs show` (and `--json`), `compare`, the report, the
pandas DataFrames and the trackers all read a score through `SplitScore.of` (or `per_task` for
paired per-task values), so they cannot disagree:

- an errored rollout (`error_kind == "infra"`: the model or the machine failed, not the agent)
  is counted apart, in `errors`, and is never a 0;
- the score is the mean over the scored rollouts, one per (task, trial): the latest scored one
  when a rollout was retried (`latest_per_trial`);
- a version with no scored rollout has no score: `hard` and `soft` are None, shown as "-".
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from pydantic import BaseModel, model_validator

from skillopt.stats import Interval, score_interval, wilson_interval


class Scored(Protocol):
    """What a score is computed from: a `RolloutRecord`, or a row of the SQLite index."""

    task_id: str
    trial: int
    hard: float
    soft: float

    @property
    def errored(self) -> bool: ...


R = TypeVar("R", bound=Scored)


def scored(records: Iterable[R]) -> list[R]:
    """The rollouts that carry a score (errored ones left out)."""
    return [r for r in records if not r.errored]


def latest_per_trial(records: Iterable[R]) -> list[R]:
    """One rollout per (task, trial), in first-seen order: the latest scored one, else the latest
    errored one (a rollout retried after an infrastructure failure keeps its score)."""
    out: dict[tuple[str, int], R] = {}
    for r in records:
        k = (r.task_id, r.trial)
        if k not in out or not r.errored or out[k].errored:
            out[k] = r
    return list(out.values())


class SplitScore(BaseModel):
    """Mean scores over the scored rollouts of a split; errored rollouts are counted, not scored.
    No scored rollout: no score (`hard` and `soft` are None)."""

    hard: float | None
    soft: float | None
    n: int  # scored rollouts
    errors: int = 0  # errored rollouts (not scores)

    @model_validator(mode="before")
    @classmethod
    def _no_score_without_rollouts(cls, data: Any) -> Any:
        # runs written before this rule stored 0.0 for a split with no scored rollout
        if isinstance(data, dict) and data.get("n") == 0:
            data = {**data, "hard": None, "soft": None}
        return data

    @classmethod
    def of(cls, records: Iterable[Scored]) -> SplitScore:
        records = list(records)
        ok = scored(records)
        if not ok:
            return cls(hard=None, soft=None, n=0, errors=len(records))
        n = len(ok)
        return cls(hard=round(sum(r.hard for r in ok) / n, 6), soft=round(sum(r.soft for r in ok) / n, 6),
                   n=n, errors=len(records) - n)

    @property
    def has_score(self) -> bool:
        return self.n > 0 and self.hard is not None

    def __str__(self) -> str:
        return self.text()

    def text(self, interval: bool = False) -> str:
        """`0.500 (n=8, 2 errored)`; with `interval`, the Wilson 95% interval of the hard score:
        `0.500 [0.22, 0.78] (n=8)`; no scored rollout: `- (n=0, 8 errored)`."""
        errors = f", {self.errors} errored" if self.errors else ""
        hard = self.hard
        if not self.has_score or hard is None:
            return f"- (n=0{errors})"
        ci = ""
        if interval:
            w = wilson_interval(hard * self.n, self.n)
            ci = f" [{w.lo:.2f}, {w.hi:.2f}]"
        return f"{hard:.3f}{ci} (n={self.n}{errors})"


@dataclass(frozen=True)
class Score(Generic[R]):
    """A skill's score on one split as `compare`, `eval` and the Python API give it: the `SplitScore`
    (n, errors, means), the 95% intervals of the hard and soft scores (None without a scored rollout),
    and the rollouts behind it, one per (task, trial), which the paired test pairs task by task."""

    split: str
    score: SplitScore
    hard: Interval | None
    soft: Interval | None
    tasks: int  # tasks with a scored rollout
    records: tuple[R, ...]

    @classmethod
    def of(cls, split: str, records: Iterable[R]) -> Score[R]:
        every = tuple(records)
        ok = scored(every)
        return cls(split, SplitScore.of(every), score_interval([r.hard for r in ok]) if ok else None,
                   score_interval([r.soft for r in ok]) if ok else None, len({r.task_id for r in ok}), every)


def score_text(s: SplitScore | None, interval: bool = False) -> str:
    """A score as every view prints it ("-" when the split was not scored at all)."""
    return "-" if s is None else s.text(interval)


def score_value(s: SplitScore | None, metric: str = "hard") -> float | None:
    """The number a table or a tracker shows: None when there is no score."""
    if s is None or not s.has_score:
        return None
    return s.hard if metric == "hard" else s.soft


def per_task(records: Iterable[Scored], metric: str) -> dict[str, float]:
    """Mean of `metric` ("hard" or "soft") per task over its scored trials (errored rollouts left out)."""
    sums: dict[str, list[float]] = {}
    for r in scored(records):
        sums.setdefault(r.task_id, []).append(float(getattr(r, metric)))
    return {t: sum(v) / len(v) for t, v in sums.items()}
