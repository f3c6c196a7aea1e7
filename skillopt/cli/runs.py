"""`skillopt runs list | show RUN[:vN]`."""

from __future__ import annotations

import json
import time

import typer
from rich.table import Table
from rich.tree import Tree

from skillopt.cli.app import Globals, app, new_app, out
from skillopt.store.run import RunStore

runs_app = new_app("List runs and show one run's skill versions and decisions.")
app.add_typer(runs_app, name="runs")


def _all_runs():
    root = Globals.runs_dir
    return sorted((p.parent for p in root.glob("*/config.yaml")), key=lambda p: p.stat().st_mtime)


@runs_app.command("list", help="List runs under --runs-dir.\n\nExample: skillopt runs list")
def list_() -> None:
    table = Table()
    for col in ("run", "status", "benchmark", "harness", "target", "versions", "val (seed -> best)", "test best", "updated"):
        table.add_column(col)
    for path in _all_runs():
        store = RunStore(path)
        cfg, state, summary = store.read_config(), store.read_state(), store.read_summary()
        val = test = "-"
        if summary:
            sc = summary.scores
            seed_val, best_val = (sc.get("seed") or {}).get("val"), (sc.get("best") or {}).get("val")
            best_test = (sc.get("best") or {}).get("test")
            val = f"{seed_val.hard:.3f} -> {best_val.hard:.3f}" if seed_val and best_val else "-"
            test = f"{best_test.hard:.3f}" if best_test else "-"
        status = cfg.get("mode", "train") + ":" + (state.status if state else "new")
        table.add_row(path.name, status, str(cfg.get("benchmark")), str(cfg.get("harness")),
                      str(cfg.get("target_model")), str(len(store.versions())), val, test,
                      time.strftime("%Y-%m-%d %H:%M", time.localtime(path.stat().st_mtime)))
    out.print(table)


@runs_app.command("show", help="Show a run's version tree with gate decisions, or one version.\n\n"
                               "Example: skillopt runs show RUN   |   skillopt runs show RUN:v2")
def show(ref: str = typer.Argument(..., help="RUN or RUN:vN")) -> None:
    run_id, _, which = ref.partition(":")
    store = RunStore.open(Globals.runs_dir, run_id)
    if which:
        from skillopt.store.refs import resolve_skill_ref

        r = resolve_skill_ref(ref, Globals.runs_dir)
        v = store.version(r.version or 0)
        out.print(f"{r.label}  parent={v.parent}  origin={v.origin}  status={v.status}  val={v.val_score}  sha={v.sha[:12]}")
        out.print(r.skill.render(), markup=False)
        return
    state, cfg = store.read_state(), store.read_config()
    out.print(f"run {run_id}: {cfg.get('benchmark')} / {cfg.get('harness')} / {cfg.get('target_model')}  "
              f"status={state.status if state else 'new'}")
    versions = store.versions()
    nodes: dict[int, Tree] = {}
    root = Tree("versions")
    for v in versions:
        gate = _gate_for(store, v.version)
        marks = []
        if state and v.version == state.best:
            marks.append("best")
        if state and v.version == state.incumbent:
            marks.append("current")
        label = (f"{v.label} [{v.status}] {v.origin}  val={'-' if v.val_score is None else f'{v.val_score:.3f}'}"
                 f"{'  <' + ','.join(marks) + '>' if marks else ''}")
        if gate:
            label += f"\n  gate: {gate['reason']} (wins {gate['wins']}, losses {gate['losses']}, ties {gate['ties']}, evaluated {gate['evaluated']}/{gate['total']})"
        parent = nodes.get(v.parent) if v.parent is not None else None
        nodes[v.version] = (parent or root).add(label)
    out.print(root)


def _gate_for(store: RunStore, version: int) -> dict | None:
    for path in sorted(store.root.glob("steps/*/gate.json")):
        data = json.loads(path.read_text())
        if data.get("candidate") == version:
            return data
    return None
