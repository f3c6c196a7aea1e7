"""The final table of a run and the commands to try next (the progress bars: `skillopt.progress`)."""

from __future__ import annotations

from pathlib import Path

from rich.table import Table

from skillopt.cli.app import out
from skillopt.store.schema import RunSummary, SplitScore
from skillopt.store.scores import score_text


def _f(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def _score(s: SplitScore | None) -> str:
    """The score with its 95% interval and n (Wilson, on the hard score); errored rollouts apart."""
    return score_text(s, interval=True)


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
    lift = s.test_lift
    if lift is not None:
        out.print(f"test, best - seed: {lift.text()}", markup=False)
    per = f", {s.val_rollouts / s.gate_decisions:.1f} val rollouts per decision" if s.gate_decisions else ""
    out.print(f"candidates {sum(s.candidates.values())} ({', '.join(f'{v} {k}' for k, v in sorted(s.candidates.items())) or 'none'}); "
              f"gate decisions {s.gate_decisions}{per}; steps {s.steps}")
    for line in s.findings():
        out.print(line, markup=False)
    usage = Table(title="usage by role")
    for col in ("role", "calls", "cached", "tokens in", "tokens out", "cost"):
        usage.add_column(col)
    for role, t in sorted(s.meter.roles.items()):
        usage.add_row(role, str(t.calls), str(t.cached_calls), str(t.input_tokens), str(t.output_tokens),
                      cost_text(t.cost_usd, t.input_tokens + t.output_tokens))
    out.print(usage)
    if s.stop_reason and s.status != "failed":  # a failure is the command's one `error:` line
        out.print(f"{s.status}: {s.stop_reason}", markup=False)


EXPORT_FOR = {"claude-code": "claude-skill", "codex": "codex-skill", "mini-swe-agent": "claude-skill"}
SKILL_FOLDER = {"claude-code": ".claude/skills", "codex": ".agents/skills", "mini-swe-agent": ".agents/skills"}


def next_commands(s: RunSummary, runs_dir: Path) -> list[str]:
    """The exact commands worth running after a run ended, for its status."""
    rd = "" if runs_dir == Path("runs") else f" --runs-dir {runs_dir}"
    rid = s.run_id
    if s.status == "stopped":
        return [f"skillopt run --resume {rid}{rd}   (raise the budget with --max-rollouts / --max-cost-usd)",
                f"skillopt report {rid}{rd} -o {rid}.html"]
    if s.status == "failed":
        return [f"skillopt runs show {rid}{rd}", f"skillopt traces show {rid} TASK{rd}"]
    fmt = EXPORT_FOR.get(s.harness, "agents-md")
    where = SKILL_FOLDER.get(s.harness, "skills-out")
    return [f"skillopt report {rid}{rd} -o {rid}.html",
            f"skillopt compare {rid}:seed {rid}:best --diff{rd}",
            f"skillopt export {rid}{rd} --format {fmt} -o {where}"]


def print_next_steps(s: RunSummary, run_dir: Path, runs_dir: Path) -> None:
    out.print(f"run folder: {run_dir}", markup=False, highlight=False)
    out.print("next:", markup=False)
    for c in next_commands(s, runs_dir):
        out.print(f"  {c}", markup=False, highlight=False)
