"""Run schema migrations: an older run folder is upgraded, step by step, when it is opened."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from skillopt.errors import BadInput
from skillopt.store import RunStore
from skillopt.store.migrate import MIGRATIONS, schema_version, upgrade, write_meta
from skillopt.store.schema import SCHEMA_VERSION, ConsolidationMetrics, StepMetrics

FIXTURE = Path(__file__).parent / "fixtures" / "run_v1" / "runs-dir"


def _legacy(tmp_path: Path) -> Path:
    shutil.copytree(FIXTURE, tmp_path / "runs")
    return tmp_path / "runs" / "legacy"


def test_every_schema_version_has_its_migration():
    assert len(MIGRATIONS) == SCHEMA_VERSION - 1
    assert len({m.name for m in MIGRATIONS}) == len(MIGRATIONS)


def test_the_v1_fixture_is_upgraded_on_open(tmp_path):
    root = _legacy(tmp_path)
    assert schema_version(root) == 1 and not (root / "run.json").exists()
    before = (root / "rollouts.jsonl").read_bytes()
    store = RunStore.open(tmp_path / "runs", "legacy")
    assert schema_version(root) == SCHEMA_VERSION
    metrics = store.metrics()
    assert [type(m) for m in metrics] == [StepMetrics, ConsolidationMetrics, StepMetrics]
    assert metrics[2].decision == "accept" and metrics[1].consolidate_epoch == 1
    assert "rejected_buffer" not in json.loads((root / "state.json").read_text())
    assert store.read_state().ledger.rejected  # the screened-out edit is still credited
    assert [c.status for c in store.candidates()] == ["screened-out", "accepted"]
    assert store.consolidations()[1].accepted is False
    assert store.read_batch(2).version == 0 and store.read_batch(2).train.n == 2
    assert (root / "rollouts.jsonl").read_bytes() == before  # untouched: schema 1 rollouts are schema 2 rollouts
    assert upgrade(root) == []  # nothing left to do


def test_older_shapes_are_carried_into_the_typed_records(tmp_path):
    """Schema 1 runs from before the edit ledger, candidates.json and consolidation files."""
    root = _legacy(tmp_path)
    state = json.loads((root / "state.json").read_text())
    rejected = state["ledger"]["rejected"]
    state["ledger"]["rejected"] = []
    state["rejected_buffer"] = rejected
    (root / "state.json").write_text(json.dumps(state))
    lines = [json.loads(x) for x in (root / "metrics.jsonl").read_text().splitlines()]
    (root / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in lines) + '{"step": 3, "ep')  # torn
    step2 = root / "steps" / "0002"
    cand = json.loads((step2 / "candidates.json").read_text())[0]
    (step2 / "candidates.json").unlink()
    (step2 / "applied.json").write_text(json.dumps([{"edit": e, "status": "applied", "detail": ""}
                                                    for e in cand["edits"]]))
    consolidation = json.loads((root / "consolidation" / "epoch-001.json").read_text())
    (root / "consolidation" / "epoch-001.json").unlink()
    db = sqlite3.connect(root.parent / "skillopt.db")
    db.execute("UPDATE skill_versions SET gate_json=? WHERE run_id='legacy' AND version=?",
               (json.dumps(consolidation), consolidation["candidate"]))
    db.commit()
    db.close()

    assert upgrade(root) == ["typed-records"]
    store = RunStore(root)
    assert [e.text for e in store.read_state().ledger.rejected] == [e["text"] for e in rejected]
    assert len(store.metrics()) == 3
    (c,) = store.read_candidates(2)
    assert c.status == "accepted" and c.version == cand["version"] and c.gate.accepted
    assert [e.text for e in c.edits] == [e["text"] for e in cand["edits"]]
    assert store.consolidations()[1].candidate == consolidation["candidate"]


def test_a_run_from_a_newer_release_is_refused(tmp_path):
    root = _legacy(tmp_path)
    write_meta(root, SCHEMA_VERSION + 1)
    with pytest.raises(BadInput, match="newer skillopt"):
        RunStore.open(tmp_path / "runs", "legacy")


def test_a_run_in_use_is_not_upgraded_under_its_writer(tmp_path):
    root = _legacy(tmp_path)
    holder = RunStore.__new__(RunStore)  # a writer of the old release: it holds the lock, nothing else
    holder.root, holder._lock_fd = root, None
    holder.lock()
    try:
        with pytest.raises(BadInput, match="in use by process"):
            RunStore.open(tmp_path / "runs", "legacy")
    finally:
        holder.unlock()
    assert schema_version(root) == 1
    RunStore.open(tmp_path / "runs", "legacy")
    assert schema_version(root) == SCHEMA_VERSION


def test_a_new_run_is_written_in_the_current_schema(tmp_path):
    store = RunStore.create(tmp_path / "runs", "fresh")
    assert schema_version(store.root) == SCHEMA_VERSION
    assert json.loads((store.root / "run.json").read_text())["written_by"]
