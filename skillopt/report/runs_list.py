"""The runs under a runs folder, one row each: what `skillopt runs list` prints and `runs_df` holds."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel

from skillopt.config import StoredConfig
from skillopt.errors import BadInput
from skillopt.store.run_store import RunStore
from skillopt.store.schema import shown_status
from skillopt.store.scores import score_value


def all_runs(root: Path) -> list[Path]:
    """Run folders under `root`, oldest first."""
    return sorted((p.parent for p in root.glob("*/config.yaml")), key=lambda p: p.stat().st_mtime)


class RunRow(BaseModel):
    """One run as `runs list` shows it (and `--json` prints it)."""

    run_id: str
    path: str
    mode: str  # train | eval
    status: str
    benchmark: str | None
    harness: str | None
    target_model: str | None
    optimizer_model: str | None
    versions: int
    best: int | None
    seed_val: float | None
    best_val: float | None
    best_test: float | None
    updated: float
    problem: str | None = None  # why the run's files cannot be read (status "damaged"); the others still list


def run_rows(root: Path) -> list[RunRow]:
    """Every run under `root`, oldest first; finished runs from the index (no file of theirs read)."""
    indexed = _indexed_runs(root)
    rows = []
    for path in all_runs(root):
        if path.name in indexed:
            rows.append(indexed[path.name].model_copy(update={"path": str(path.resolve()),
                                                               "updated": path.stat().st_mtime}))
            continue
        store = RunStore(path)
        try:
            cfg, state, summary = store.read_config(), store.read_state(), store.read_summary()
        except BadInput as e:  # one damaged run is shown as such; it does not hide the others
            rows.append(_damaged(path, str(e)))
            continue
        status = shown_status(state.status, state.stop_reason) if state else \
            (shown_status(summary.status, summary.stop_reason) if summary else "new")
        row = _row(path.name, cfg, status, summary,
                   len(store.versions()), state.best if state else None, str(path.resolve()), path.stat().st_mtime)
        if summary is None and state is not None:  # in progress or stopped: its scores so far, from its rollouts
            row = row.model_copy(update=_scores_so_far(store, state.best))
        rows.append(row)
    return rows


def _damaged(path: Path, why: str) -> RunRow:
    return RunRow(run_id=path.name, path=str(path.resolve()), mode="?", status="damaged", benchmark=None, harness=None,
                  target_model=None, optimizer_model=None, versions=0, best=None, seed_val=None, best_val=None,
                  best_test=None, updated=path.stat().st_mtime, problem=why)


def _scores_so_far(store: RunStore, best: int) -> dict[str, float | None]:
    """seed and best on val (best also on test) from the rollouts a run without a summary has, by the
    one definition of a score (`store.scores`)."""
    from skillopt.report.data import RunView

    view = RunView(store)
    return {"seed_val": score_value(view.split_score(0, "val")), "best_val": score_value(view.split_score(best, "val")),
            "best_test": score_value(view.split_score(best, "test"))}


def _row(run_id: str, cfg: StoredConfig, status: str, summary, versions: int, best: int | None, path: str,
         updated: float) -> RunRow:
    sc = summary.scores if summary else {}

    def hard(role: str, split: str) -> float | None:
        return score_value((sc.get(role) or {}).get(split))  # None: not scored, or nothing but errors

    if best is None and summary is not None:
        best = summary.versions.get("best")
    return RunRow(run_id=run_id, path=path, mode=cfg.mode, status=status,
                  benchmark=cfg.benchmark, harness=cfg.harness, target_model=cfg.target_model,
                  optimizer_model=cfg.optimizer_model or None, versions=versions, best=best,
                  seed_val=hard("seed", "val"), best_val=hard("best", "val"), best_test=hard("best", "test"),
                  updated=updated)


def _indexed_runs(root: Path) -> dict[str, RunRow]:
    """The rows of every run the index knows as finished (its summary is in the index)."""
    from skillopt.store.index import RunIndex
    from skillopt.store.layout import index_path
    from skillopt.store.schema import RunSummary

    db = index_path(root)
    if not db.exists():
        return {}
    index = RunIndex(db)
    try:
        counts = index.version_counts()
        rows = {}
        for r in index.runs():
            if r["status"] != "finished" or not r["summary_json"]:
                continue
            cfg, s = StoredConfig.model_validate_json(r["config_json"] or "{}"), RunSummary.model_validate_json(r["summary_json"])
            rows[r["run_id"]] = _row(r["run_id"], cfg, "finished", s, counts.get(r["run_id"], 0), None, "", 0.0)
        return rows
    finally:
        index.close()
