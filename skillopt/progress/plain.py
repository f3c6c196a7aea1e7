"""Progress as plain log lines, for a log file, CI, nohup or a container (stderr not a terminal), and
the choice between it and the Rich bars (`--progress plain|rich|none`, `progress=` in Python).

A line when a phase starts, then one every `every` rollouts (a tenth of the phase) or every
`interval_s` seconds, whichever comes first, even while no rollout ends:

    [03:42] step 2/8 gate v004: 12/40 rollouts, 1 errored, eta 01:05; run: 96 rollouts, $0.0123
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Literal

from skillopt.engine.events import Event, Note, PhaseStarted, RolloutDone, RunFinished, RunStarted, StepDone, VersionSaved
from skillopt.errors import BadInput
from skillopt.progress.console import console

ProgressKind = Literal["auto", "plain", "rich", "none"]
KINDS = ("auto", "plain", "rich", "none")


def _clock(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60:02d}:{s % 60:02d}"


class PlainProgress:
    """Engine events as log lines on stderr (see the module's docstring)."""

    def __init__(self, interval_s: float = 30.0, out=None):
        self.interval_s = interval_s
        self.out = out  # a text stream; None: the stderr console (`progress.console`)
        self.t0 = time.monotonic()
        self.lock = threading.Lock()
        self.total_steps: int | None = None
        self.step = 0
        self.phase: str | None = None
        self.phase_total = self.done = self.errors = 0
        self.phase_t0 = self.last_line = self.t0
        self.run_rollouts = self.run_errors = 0
        self.cost: float | None = 0.0
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None

    # output ------------------------------------------------------------------------------------
    def _print(self, text: str) -> None:
        line = f"[{_clock(time.monotonic() - self.t0)}] {text}"
        self.last_line = time.monotonic()
        if self.out is not None:
            print(line, file=self.out, flush=True)
        else:
            console.print(line, markup=False, highlight=False)

    def _where(self) -> str:
        of = f"/{self.total_steps}" if self.total_steps else ""
        return f"step {self.step}{of}" if self.total_steps or self.step else ""

    def status_line(self) -> str:
        """Where the run is: step, phase, done/total, errors, ETA of the phase; rollouts and cost so far."""
        where = self._where() if self.step else ""  # a phase named "step 3 ..." says it itself
        parts = [p for p in (where, self.phase) if p and not (p == where and (self.phase or "").startswith("step"))]
        head = " ".join(parts) or "working"
        errors = f", {self.errors} errored" if self.errors else ""
        eta = ""
        if 0 < self.done < self.phase_total:
            rate = (time.monotonic() - self.phase_t0) / self.done
            eta = f", eta {_clock(rate * (self.phase_total - self.done))}"
        cost = "cost unknown" if self.cost is None else f"${self.cost:.4f}"
        run_errors = f", {self.run_errors} errored" if self.run_errors else ""
        return (f"{head}: {self.done}/{self.phase_total} rollouts{errors}{eta}; run: {self.run_rollouts} "
                f"rollouts{run_errors}, {cost}")

    # events ------------------------------------------------------------------------------------
    def __call__(self, event: Event) -> None:
        with self.lock:
            self._on(event)

    def _on(self, event: Event) -> None:
        if isinstance(event, RunStarted):
            self.total_steps, self.step = event.total_steps, event.step
            steps = f", {event.total_steps} steps" if event.total_steps else ""
            self._print(f"{'resuming' if event.resumed else 'run'} {event.run_id}{steps}")
            self._start_heartbeat()
        elif isinstance(event, PhaseStarted):
            self.phase, self.phase_total, self.done, self.errors = event.name, event.total, 0, 0
            self.phase_t0 = time.monotonic()
            self._print(self.status_line())
        elif isinstance(event, RolloutDone):
            self.done += 1
            self.phase_total = max(self.phase_total, self.done)
            if not event.cached:
                self.run_rollouts += 1
                self.errors += event.record.errored
                self.run_errors += event.record.errored
                c = event.record.cost_usd
                if c is None and (event.record.input_tokens or event.record.output_tokens):
                    self.cost = None
                elif self.cost is not None:
                    self.cost += c or 0.0
            every = max(1, self.phase_total // 10)
            if self.done % every == 0 or self.done == self.phase_total \
                    or time.monotonic() - self.last_line >= self.interval_s:
                self._print(self.status_line())
        elif isinstance(event, VersionSaved) and event.gate is not None:
            g = event.gate
            self._print(f"gate {event.version.label}: {'accept' if g.accepted else 'reject'} - {g.reason}")
        elif isinstance(event, StepDone):
            m = event.metrics
            self.step = m.step
            self.cost = None if m.cost_unknown else m.cost_usd
            self.run_rollouts = m.rollouts
            val = "-" if m.val is None else f"{m.val:.3f}"
            cost = "cost unknown" if self.cost is None else f"${self.cost:.4f}"
            errors = f", {self.run_errors} errored" if self.run_errors else ""
            self._print(f"{self._where()} (epoch {m.epoch + 1}): train {m.train_hard:.3f}, {m.candidates} "
                        f"candidates, {m.selected} gated, decision {m.decision or 'none'}, val {val}; "
                        f"{self.run_rollouts} rollouts{errors}, {cost}")
        elif isinstance(event, Note):
            self._print(event.text.strip())
        elif isinstance(event, RunFinished):
            self.stop()

    # the heartbeat: a line every interval_s even while nothing ends --------------------------------
    def _start_heartbeat(self) -> None:
        if self._beat is not None and self._stop.is_set():  # a run after one that finished (compare: an
            self._stop, self._beat = threading.Event(), None  # evaluation run per split): beat again
        if self._beat is None:
            self._beat = threading.Thread(target=self._heartbeat, args=(self._stop,), name="skillopt-progress",
                                          daemon=True)
            self._beat.start()

    def _heartbeat(self, stop: threading.Event) -> None:
        while not stop.wait(min(self.interval_s, 5.0)):
            with self.lock:
                if time.monotonic() - self.last_line >= self.interval_s:
                    self._print(self.status_line())

    def stop(self) -> None:
        self._stop.set()


class _Silent:
    def __call__(self, event: Event) -> None:
        pass

    def stop(self) -> None:
        pass


def resolve_kind(kind: str | bool | None) -> str:
    """`plain`, `rich` or `none`: `auto` (and True) is Rich bars on a terminal, plain lines otherwise."""
    if kind is None or kind is False:
        return "none"
    if kind is True:
        kind = "auto"
    if kind not in KINDS:
        raise BadInput(f"unknown progress {kind!r}: choose one of {', '.join(KINDS)}")
    if kind == "auto":
        return "rich" if sys.stderr.isatty() else "plain"
    return kind


def progress_view(kind: str | bool | None, verbose: bool = False):
    """The listener that shows a run's progress (with a `stop()`), for `resolve_kind(kind)`."""
    chosen = resolve_kind(kind)
    if chosen == "none":
        return _Silent()
    if chosen == "plain":
        return PlainProgress()
    from skillopt.progress.bars import ProgressView

    return ProgressView(verbose)
