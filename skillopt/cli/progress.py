"""Rich progress bars and the final table, fed by engine events."""

from __future__ import annotations

from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from skillopt.cli.app import console, out
from skillopt.engine.events import Event, Note, PhaseStarted, RolloutDone, RunFinished, RunStarted, StepDone, VersionSaved
from skillopt.stats import wilson_interval
from skillopt.store.records import RunSummary, SplitScore


class ProgressView:
    def __init__(self, verbose: bool = False):
        self.verbose = verbose
        self.progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), console=console, transient=True)
        self.task = None

    def __call__(self, event: Event) -> None:
        if isinstance(event, RunStarted):
            verb = "resuming" if event.resumed else "run"
            console.print(f"{verb} {event.run_id}")
            self.progress.start()
        elif isinstance(event, PhaseStarted):
            if self.task is not None:
                self.progress.remove_task(self.task)
            self.task = self.progress.add_task(event.name, total=event.total)
        elif isinstance(event, RolloutDone) and self.task is not None:
            self.progress.advance(self.task)
        elif isinstance(event, VersionSaved) and event.gate is not None:
            g = event.gate
            mark = "[green]accept[/]" if g.accepted else "[red]reject[/]"
            self.progress.console.print(f"  gate {event.version.label}: {mark} - {escape(g.reason)}")
        elif isinstance(event, StepDone):
            m = event.metrics
            self.progress.console.print(
                f"step {m['step']} (epoch {m['epoch'] + 1}): train {m['train_hard']:.3f}, "
                f"{m.get('proposed', 0)} proposed, {m.get('selected', 0)} selected, "
                f"decision {m.get('decision') or 'none'}, val {_f(m.get('val'))}")
        elif isinstance(event, Note):
            self.progress.console.print(f"  {event.text}", markup=False)
        elif isinstance(event, RunFinished):
            self.progress.stop()

    def stop(self) -> None:
        self.progress.stop()


def _f(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def _score(s: SplitScore | None) -> str:
    """The score with its 95% interval and n (Wilson, on the hard score); errored rollouts apart."""
    if s is None:
        return "-"
    ci = wilson_interval(s.hard * s.n, s.n)
    errors = f", {s.errors} errored" if s.errors else ""
    return f"{s.hard:.3f} [{ci.lo:.2f}, {ci.hi:.2f}] (n={s.n}{errors})"


def cost_text(cost: float | None, tokens: int) -> str:
    if cost is None:
        return "unknown"
    return f"${cost:.4f}" if tokens else "$0"


def print_summary(s: RunSummary) -> None:
    table = Table(title=f"{s.run_id}  ({s.status})")
    table.add_column("skill")
    table.add_column("version")
    table.add_column("val")
    table.add_column("test")
    for role in [r for r in ("seed", "best", "final") if r in s.versions]:
        sc = s.scores.get(role, {})
        label = "baseline" if role == "seed" else role
        table.add_row(label, f"v{s.versions.get(role, 0):03d}", _score(sc.get("val")), _score(sc.get("test")))
    out.print(table)
    if s.test_delta is not None:
        d = s.test_delta
        verdict = "better" if d.lo > 0 else "worse" if d.hi < 0 else "no significant difference"
        out.print(f"test, best - seed: {d.mean:+.3f} (95% CI {d.lo:+.3f} to {d.hi:+.3f}, paired {d.method}, "
                  f"n={d.n}; {s.test_wins} tasks won, {s.test_losses} lost): {verdict}")
    per = f", {s.val_rollouts / s.gate_decisions:.1f} val rollouts per decision" if s.gate_decisions else ""
    out.print(f"candidates {sum(s.candidates.values())} ({', '.join(f'{v} {k}' for k, v in sorted(s.candidates.items())) or 'none'}); "
              f"gate decisions {s.gate_decisions}{per}; steps {s.steps}")
    usage = Table(title="usage by role")
    for col in ("role", "calls", "cached", "tokens in", "tokens out", "cost"):
        usage.add_column(col)
    for role, t in sorted(s.meter.roles.items()):
        usage.add_row(role, str(t.calls), str(t.cached_calls), str(t.input_tokens), str(t.output_tokens),
                      cost_text(t.cost_usd, t.input_tokens + t.output_tokens))
    out.print(usage)
    if s.stop_reason:
        out.print(f"stopped: {s.stop_reason} (resume with: skillopt run --resume {s.run_id})")
