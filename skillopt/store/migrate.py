"""Upgrading a run folder written by an older release, one named, tested step at a time.

`MIGRATIONS` is append-only: the migration at position i upgrades schema i + 1 to i + 2, and
`schema.SCHEMA_VERSION` is always one more than its length. `upgrade` applies the ones a folder
needs, in order, and records the new version in run.json after each, so an upgrade interrupted
half way resumes where it stopped (each migration is also safe to run twice). Every file is
rewritten atomically through `io.files`. `RunStore` upgrades a run when it opens it, while
no other process holds the run (`RunStore.lock`).
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from skillopt.errors import BadInput
from skillopt.io.files import atomic_write_json, atomic_write_text, json_line, read_jsonl, release_lock, try_lock
from skillopt.store.schema import SCHEMA_VERSION, RunMeta

META_FILE = "run.json"
LOCK_FILE = ".lock"


@dataclass(frozen=True)
class Migration:
    name: str
    apply: Callable[[Path], None]  # upgrades the run folder in place


def schema_version(root: Path) -> int:
    """The schema a run folder is written in: run.json's, else 1 (runs from before run.json)."""
    path = root / META_FILE
    if not path.exists():
        return 1
    return RunMeta.model_validate_json(path.read_text(encoding="utf-8")).schema_version


def write_meta(root: Path, version: int = SCHEMA_VERSION) -> None:
    from skillopt import __version__

    atomic_write_json(root / META_FILE, RunMeta(schema_version=version, written_by=__version__).model_dump())


def upgrade(root: Path) -> list[str]:
    """Bring the run at `root` to `SCHEMA_VERSION`; the names of the migrations applied."""
    version = schema_version(root)
    if version > SCHEMA_VERSION:
        raise BadInput(f"run {root.name} was written by a newer skillopt (run schema {version}, this one reads "
                       f"up to {SCHEMA_VERSION}): upgrade skillopt to open it")
    if version == SCHEMA_VERSION:
        return []
    done = []
    with _held(root):
        for i in range(schema_version(root) - 1, SCHEMA_VERSION - 1):  # again, now that the run is ours
            MIGRATIONS[i].apply(root)
            write_meta(root, i + 2)
            done.append(MIGRATIONS[i].name)
    return done


class _held:
    """The run's lock for the time of an upgrade; `BadInput` when another process writes the run."""

    def __init__(self, root: Path):
        self.root = root
        self.fd: int | None = None

    def __enter__(self) -> None:
        fd, holder = try_lock(self.root / LOCK_FILE)
        if fd is None:
            raise BadInput(f"run {self.root.name} was written by an older skillopt and is in use by process "
                           f"{holder}: open it once that process has ended (it is then upgraded)") from None
        self.fd = fd

    def __exit__(self, *exc: object) -> None:
        if self.fd is not None:
            release_lock(self.fd)


# 1 -> 2: typed run records ----------------------------------------------------------------------------
def _typed_records(root: Path) -> None:
    """Schema 1 -> 2: metrics lines say their type; the rejected buffer joins the edit ledger; steps
    from before candidates.json get one (from applied.json and gate.json); consolidation decisions
    that only the SQLite index kept are written to consolidation/epoch-NNN.json."""
    _metrics_types(root)
    _state_ledger(root)
    versions = _versions(root)
    for step_dir in sorted((root / "steps").glob("[0-9]*")):
        _step_candidates(step_dir, versions)
    _index_consolidations(root, versions)
    summary = root / "summary.json"
    if summary.exists():
        data = json.loads(summary.read_text(encoding="utf-8"))
        data["schema_version"] = 2
        atomic_write_json(summary, data)


def _metrics_types(root: Path) -> None:
    path = root / "metrics.jsonl"
    if not path.exists():
        return
    lines = []
    for m in read_jsonl(path):  # torn lines are dropped, as every reader did
        if "type" not in m:
            m = {"type": "consolidation" if "consolidate_epoch" in m else "step", **m}
        lines.append(json_line(m))
    atomic_write_text(path, "".join(line + "\n" for line in lines))


def _state_ledger(root: Path) -> None:
    path = root / "state.json"
    if not path.exists():
        return
    state = json.loads(path.read_text(encoding="utf-8"))
    buffer = state.pop("rejected_buffer", None) or []
    ledger = state.setdefault("ledger", {})
    if buffer and not ledger.get("rejected"):  # a run from before the ledger: its buffer is the ledger's list
        ledger["rejected"] = buffer
    state["schema_version"] = 2
    atomic_write_json(path, state)


def _versions(root: Path) -> dict[int, dict[str, Any]]:
    out: dict[int, dict[str, Any]] = {}
    for v in read_jsonl(root / "skills" / "index.jsonl"):
        out[int(v["version"])] = v  # later lines update earlier ones
    return out


_STATUS = {"accepted": "accepted", "rejected": "rejected", "screened-out": "screened-out"}


def _step_candidates(step_dir: Path, versions: dict[int, dict[str, Any]]) -> None:
    applied_path, cands_path = step_dir / "applied.json", step_dir / "candidates.json"
    if cands_path.exists() or not applied_path.exists():
        return
    step = int(step_dir.name)
    reports = [r for r in json.loads(applied_path.read_text(encoding="utf-8")) if isinstance(r, dict)]
    gate_path = step_dir / "gate.json"
    gate = json.loads(gate_path.read_text(encoding="utf-8")) if gate_path.exists() else None
    made = [v for v in versions.values() if v.get("step") == step and str(v.get("origin", "")).startswith("step")]
    version = made[-1] if made else None
    parent = version.get("parent") if version else (gate or {}).get("incumbent")
    candidate = {
        "id": f"s{step:03d}-c1", "step": step, "origin": "reflection", "parent": int(parent or 0),
        "edits": [r["edit"] for r in reports if r.get("status") == "applied" and isinstance(r.get("edit"), dict)],
        "version": None if version is None else int(version["version"]),
        "applied": [r.get("status", "") if r.get("status") == "applied" else f"{r.get('status')}: {r.get('detail', '')}"
                    for r in reports],
        "gate": gate if gate and version and gate.get("candidate") == version["version"] else None,
        "status": _STATUS.get(str(version.get("status")), "not-gated") if version else "not-applied",
        "note": "recorded before candidates.json (from applied.json)",
    }
    atomic_write_json(cands_path, [candidate])


_CONSOLIDATE = re.compile(r"consolidate epoch (\d+)")


def _index_consolidations(root: Path, versions: dict[int, dict[str, Any]]) -> None:
    wanted = {}
    for v in versions.values():
        m = _CONSOLIDATE.fullmatch(str(v.get("origin", "")))
        if m and not (root / "consolidation" / f"epoch-{int(m.group(1)):03d}.json").exists():
            wanted[int(v["version"])] = int(m.group(1))
    db_path = root.parent / "skillopt.db"
    if not wanted or not db_path.exists():
        return
    try:
        db = sqlite3.connect(db_path.resolve().as_uri() + "?mode=ro", uri=True, timeout=5)
        try:
            rows = db.execute("SELECT version, gate_json FROM skill_versions WHERE run_id=? AND gate_json IS NOT NULL",
                              (root.name,)).fetchall()
        finally:
            db.close()
    except sqlite3.Error:
        return
    for version, gate_json in rows:
        if int(version) in wanted:
            atomic_write_json(root / "consolidation" / f"epoch-{wanted[int(version)]:03d}.json", json.loads(gate_json))


MIGRATIONS: list[Migration] = [
    Migration("typed-records", _typed_records),  # 1 -> 2
]

assert len(MIGRATIONS) == SCHEMA_VERSION - 1, "a schema version without its migration"
