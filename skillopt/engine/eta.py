"""The run's own ETA, from the throughput it measures: a note within the first minute, then one per step.

The plan is counted from the configuration and the splits: the baseline on val, then per step the
batch's rollouts, the screens and the gate (the incumbent's val rollouts are cached: a gate pays about
one val split per candidate), consolidation per epoch, and the test split for the seed and the best
skill. Rollouts that are not run (a cache hit) are not timed. Time is two parts, each measured:
seconds per rollout (wall time while rollouts run, over rollouts run) and seconds per step outside
rollouts (the optimizer's calls); until a step has ended, an optimizer call is estimated from the
tokens/s the rollouts reached.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from skillopt.config import RunConfig
from skillopt.engine.events import Emitter, Event, Note, PhaseStarted, RolloutDone, StepDone

FIRST_NOTE_S = 20.0  # the first estimate once this much of the first phase was measured (or it ended)
MIN_ROLLOUTS = 3


@dataclass(frozen=True)
class Plan:
    """What a run will do, counted from its configuration."""

    rollouts: int
    steps: int
    optimizer_calls_per_step: int
    optimizer_tokens: int  # the cap of one optimizer reply

    @classmethod
    def of(cls, cfg: RunConfig, val: int, test: int, steps: int) -> Plan:
        t = cfg.train
        trials = cfg.gate.trials
        proposals = t.max_reflections_per_step + int(t.demonstrations) + int(t.merge) + t.rules_per_step
        screens = min(proposals, cfg.gate.per_step + 1) * t.minibatch_size if t.screen else 0
        per_step = t.batch_size * t.trials + screens + cfg.gate.per_step * val * trials
        consolidation = t.epochs * val * trials if t.consolidate else 0
        rollouts = val * trials + steps * per_step + consolidation + 2 * test * trials
        return cls(rollouts, steps, max(1, proposals), cfg.models.optimizer_max_tokens)


def clock(seconds: float) -> str:
    s = max(0, int(seconds))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60:02d}:{s % 60:02d}"


class RunEta:
    """A listener: notes the run's ETA (see the module docstring)."""

    def __init__(self, emit: Emitter, plan: Plan, steps_done: int = 0):
        self.emit, self.plan = emit, plan
        self.t0, self.wall0 = time.monotonic(), time.time()
        self.steps_done = steps_done
        self.done = 0  # rollouts of the plan done (run or reused)
        self.ran = 0  # rollouts run, and the wall time and tokens while they ran
        self.rollout_s = 0.0
        self.tokens = 0
        self.phase_t0: float | None = None
        self.last_end: float | None = None
        self.noted = False

    def __call__(self, event: Event) -> None:
        now = time.monotonic()
        if isinstance(event, PhaseStarted):
            self._close_phase()
            self.phase_t0 = now
        elif isinstance(event, RolloutDone):
            self.done += 1
            # run now: not a cache hit, nor a rollout an earlier run made (reused: engine.rollout_cache)
            if not event.cached and event.record.created_at >= self.wall0 - 1:
                self.ran += 1
                self.tokens += event.record.output_tokens
                self.last_end = now
            if not self.noted and self.ran >= MIN_ROLLOUTS and now - self.t0 >= FIRST_NOTE_S:
                self._note(now, "")
        elif isinstance(event, StepDone):
            self._close_phase()
            self.steps_done = event.step
            self._note(now, f" after step {event.step}")

    def _close_phase(self) -> None:
        """Add the wall time from the phase's start to its last rollout to the rollouts' time."""
        if self.phase_t0 is not None and self.last_end is not None and self.last_end > self.phase_t0:
            self.rollout_s += self.last_end - self.phase_t0
            if not self.noted and self.ran >= MIN_ROLLOUTS:  # the first phase ended before FIRST_NOTE_S
                self._note(time.monotonic(), "")
        self.phase_t0 = self.last_end = None

    def _rollout_s(self) -> float:
        """Wall time while rollouts ran, the phase in progress included."""
        current = (self.last_end - self.phase_t0) if self.phase_t0 is not None and self.last_end is not None else 0.0
        return self.rollout_s + max(0.0, current)

    def remaining_s(self, now: float) -> float | None:
        rollout_s = self._rollout_s()
        if self.ran < MIN_ROLLOUTS or rollout_s <= 0:
            return None
        per_rollout = rollout_s / self.ran
        left_rollouts = max(0, self.plan.rollouts - self.done)
        left_steps = max(0, self.plan.steps - self.steps_done)
        if self.steps_done:
            other = max(0.0, (now - self.t0) - rollout_s) / self.steps_done  # the optimizer's part of a step
        else:  # no step yet: an optimizer call of half its cap at the rollouts' measured tokens/s
            tok_s = self.tokens / rollout_s if self.tokens else 0.0
            other = self.plan.optimizer_calls_per_step * (self.plan.optimizer_tokens / 2 / tok_s) if tok_s else 0.0
        return left_rollouts * per_rollout + left_steps * other

    def _note(self, now: float, when: str) -> None:
        left = self.remaining_s(now)
        if left is None:
            return
        self.noted = True
        rate = self.ran / (self._rollout_s() or (now - self.t0)) * 60
        self.emit(Note(f"eta: about {clock(left)} left{when} ({clock(now - self.t0)} so far; {rate:.0f} rollouts/min "
                       f"measured, {self.done} of about {self.plan.rollouts} rollouts done)"))
