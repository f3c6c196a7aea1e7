"""Run data as pandas DataFrames, for notebooks (as Inspect AI's `evals_df` / `samples_df`).

    import skillopt
    runs = skillopt.runs_df("runs")                      # one row per run
    r = skillopt.rollouts_df(["run-a", "run-b"])          # one row per rollout, across runs
    r.groupby(["run_id", "version", "split"]).hard.mean()
    skillopt.versions_df("run-a"), skillopt.steps_df("run-a"), skillopt.decisions_df("run-a")

`runs`: None (every run under `runs_dir`), one run id, a list of ids, or a `TrainResult`. Every frame
has a `run_id` column. Reads the run record only (files and the SQLite index), never writes.
pandas comes with the `analysis` extra (`pip install "skillopt[analysis]"`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from skillopt.errors import require


def _pd():
    return require("pandas", "run data as DataFrames", "analysis")


def _run_ids(runs: Any, runs_dir: Path) -> tuple[list[str], Path]:
    from skillopt.api import TrainResult
    from skillopt.report.runs_list import all_runs

    if runs is None:
        return [p.name for p in all_runs(runs_dir)], runs_dir
    if isinstance(runs, TrainResult):
        return [runs.run_id], Path(runs.run_dir).parent
    if isinstance(runs, str):
        return [runs], runs_dir
    return [str(r) for r in runs], runs_dir


def _views(runs: Any, runs_dir: str | Path) -> Iterable:
    from skillopt.report.data import RunView

    ids, root = _run_ids(runs, Path(runs_dir))
    for run_id in ids:
        yield RunView.open(root, run_id)


def runs_df(runs_dir: str | Path = "runs"):
    """One row per run: id, folder, mode, status, benchmark, harness, models, versions, best version,
    seed and best scores."""
    from skillopt.report.runs_list import run_rows

    return _pd().DataFrame([r.model_dump() for r in run_rows(Path(runs_dir))])


ROLLOUT_COLUMNS: Sequence[str] = (
    "run_id", "key", "task_id", "split", "version", "skill_sha", "harness", "model", "trial", "hard", "soft",
    "feedback", "output", "summary", "input_tokens", "output_tokens", "cost_usd", "duration_s", "error",
    "error_kind", "skill_used", "trace_file", "created_at")


def rollouts_df(runs: Any = None, runs_dir: str | Path = "runs"):
    """One row per rollout (every field of the record: scores, output, feedback, trace summary,
    usage, error, whether the agent loaded the skill), across runs. An errored rollout
    (`error_kind == "infra"`) has no score: its `hard` and `soft` are missing (NaN), never 0."""
    rows = []
    for view in _views(runs, runs_dir):
        for r in view.store.rollouts():
            row = {"run_id": view.run_id, **r.model_dump(mode="json")}
            if r.errored:
                row["hard"] = row["soft"] = None
            rows.append(row)
    return _pd().DataFrame(rows, columns=list(ROLLOUT_COLUMNS))


def versions_df(runs: Any = None, runs_dir: str | Path = "runs"):
    """One row per skill version: parent, origin, status, step, its val / test scores and trigger rates
    from rollouts, and whether it is the run's seed or best."""
    from skillopt.report.lineage import build_lineage

    rows = []
    for view in _views(runs, runs_dir):
        for n in build_lineage(view).nodes:
            row = {"run_id": view.run_id, "version": n.version, "parent": n.parent, "origin": n.origin,
                   "status": n.status, "step": n.step, "sha": n.sha, "val_score": n.val_score,
                   "seed": "seed" in n.marks, "best": "best" in n.marks}
            for split in ("val", "test"):
                sc = n.scores.get(split)
                row[f"{split}_hard"], row[f"{split}_n"] = (sc.hard, sc.n) if sc else (None, 0)  # hard None: no score
                row[f"{split}_errors"] = sc.errors if sc else 0
                tr = n.trigger.get(split)
                row[f"{split}_trigger"] = tr.rate if tr else None
            rows.append(row)
    return _pd().DataFrame(rows)


def steps_df(runs: Any = None, runs_dir: str | Path = "runs"):
    """One row per training step (metrics.jsonl): train score, candidates, decision, incumbent val
    score, tokens, cost and rollouts so far."""
    rows = [{"run_id": view.run_id, **m.model_dump(exclude={"type"})} for view in _views(runs, runs_dir)
            for m in view.step_metrics()]
    return _pd().DataFrame(rows)


def decisions_df(runs: Any = None, runs_dir: str | Path = "runs"):
    """One row per candidate the optimizer proposed: where it came from, its edits and rationale, the
    leakage check, the screen on train, and the gate's decision with its evidence."""
    rows = []
    for view in _views(runs, runs_dir):
        for c in view.candidates():
            g, sc = c.gate, c.screen
            rows.append({
                "run_id": view.run_id, "step": c.step, "candidate": c.id, "origin": c.origin, "parent": c.parent,
                "version": c.version, "status": c.status, "edits": len(c.edits),
                "edit_texts": [e.text for e in c.edits], "parts": [e.part for e in c.edits],
                "rationale": c.rationale, "leakage": list(c.leakage), "note": c.note,
                "screen_gain": sc.gain if sc else None, "screen_tasks": len(sc.tasks) if sc else None,
                "accepted": g.accepted if g else None, "gate_stop": g.stop if g else None,
                "p_value": g.p_value if g else None, "wins": g.wins if g else None, "losses": g.losses if g else None,
                "ties": g.ties if g else None, "evaluated": g.evaluated if g else None,
                "incumbent_score": g.incumbent_score if g else None,
                "candidate_score": g.candidate_score if g else None, "val_rollouts": g.rollouts if g else None,
                "reason": g.reason if g else None})
    return _pd().DataFrame(rows)
