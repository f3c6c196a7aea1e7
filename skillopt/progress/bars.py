"""Rich progress bars on stderr, fed by engine events (`progress="rich"`, a terminal's default)."""

from __future__ import annotations

from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from skillopt.engine.events import Event, Note, PhaseStarted, RolloutDone, RunFinished, RunStarted, StepDone, VersionSaved
from skillopt.progress.console import console


class ProgressView:
    """Progress of a run on stderr: the run (step k/N, its ETA, rollouts, errors and cost so far) and
    the phase under way (baseline, a step's rollouts, a screen, a gate), each with its own bar."""

    def __init__(self, verbose: bool = False):
        self.verbose = verbose
        self.progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(),
                                 TextColumn("{task.fields[status]}"), console=console, transient=True)
        self.task = None
        self.run_task = None
        self.total_steps: int | None = None
        self.step = 0
        self.rollouts = self.errors = 0
        self.cost: float | None = 0.0  # None: some call had tokens but no known price
        self.base_cost: float | None = 0.0  # at the last step's end (every role, from the meter)
        self.base_rollouts = 0

    def _status(self) -> str:
        cost = "cost unknown" if self.cost is None or self.base_cost is None else f"${self.base_cost + self.cost:.4f}"
        errors = f", {self.errors} errored" if self.errors else ""
        return f"{self.base_rollouts + self.rollouts} rollouts{errors}, {cost}"

    def _refresh_run(self) -> None:
        if self.run_task is not None:
            of = f"/{self.total_steps}" if self.total_steps else ""
            self.progress.update(self.run_task, description=f"step {self.step}{of}", completed=self.step,
                                 status=self._status())

    def __call__(self, event: Event) -> None:
        if isinstance(event, RunStarted):
            verb = "resuming" if event.resumed else "run"
            console.print(f"{verb} {event.run_id}")
            self.total_steps, self.step = event.total_steps, event.step
            self.progress.start()
            if self.total_steps:
                self.run_task = self.progress.add_task("", total=self.total_steps, completed=self.step, status="")
                self._refresh_run()
        elif isinstance(event, PhaseStarted):
            if self.task is not None:
                self.progress.remove_task(self.task)
            self.task = self.progress.add_task(f"  {event.name}", total=event.total, status="")
        elif isinstance(event, RolloutDone):
            if not event.cached:
                self.rollouts += 1
                self.errors += event.record.errored
                c = event.record.cost_usd
                if c is None and (event.record.input_tokens or event.record.output_tokens):
                    self.cost = None
                elif self.cost is not None:
                    self.cost += c or 0.0
            if self.task is not None:
                t = self.progress.tasks[[x.id for x in self.progress.tasks].index(self.task)]
                if t.total is not None and t.completed >= t.total:  # more rollouts than announced: say so
                    self.progress.update(self.task, total=t.completed + 1)
                self.progress.advance(self.task)
            self._refresh_run()
        elif isinstance(event, VersionSaved) and event.gate is not None:
            g = event.gate
            mark = "[green]accept[/]" if g.accepted else "[red]reject[/]"
            self.progress.console.print(f"  gate {event.version.label}: {mark} - {escape(g.reason)}")
        elif isinstance(event, StepDone):
            m = event.metrics
            self.step = m.step
            self.base_cost = None if m.cost_unknown else m.cost_usd
            self.base_rollouts, self.rollouts, self.cost = m.rollouts, 0, 0.0
            of = f"/{self.total_steps}" if self.total_steps else ""
            self.progress.console.print(
                f"step {m.step}{of} (epoch {m.epoch + 1}): train {_f(m.train_hard)}, "
                f"{m.candidates} candidates, {m.selected} gated, "
                f"decision {m.decision or 'none'}, val {_f(m.val)}; {self._status()}")
            self._refresh_run()
        elif isinstance(event, Note):
            self.progress.console.print(f"  {event.text}", markup=False)
        elif isinstance(event, RunFinished):
            self.progress.stop()

    def stop(self) -> None:
        self.progress.stop()


def _f(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"
