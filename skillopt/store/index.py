"""`runs/skillopt.db`: a SQLite index across runs. The schema evolves by append-only migrations.

WAL journal with `synchronous=NORMAL`: a commit appends to the WAL without an fsync (the WAL is
synced at checkpoints), readers never block the writer, and rollouts arrive in batches (one
transaction for many rows, `add_rollouts`). The index is derived data: after a power loss it may
miss the last rows, and the next run or eval of that run directory fills them in again from
rollouts.jsonl (`sync_rollouts`)."""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from skillopt.store.schema import RolloutRecord, RunSummary, SkillVersion
from skillopt.io.redact import redact

if TYPE_CHECKING:
    from skillopt.config import StoredConfig  # typing only

Migration = tuple[str, Callable[[sqlite3.Connection], None]]


def _m001_initial(db: sqlite3.Connection) -> None:
    db.executescript("""
    CREATE TABLE runs (
        run_id TEXT PRIMARY KEY, created_at REAL, status TEXT, benchmark TEXT, harness TEXT,
        target_model TEXT, optimizer_model TEXT, config_json TEXT, summary_json TEXT, path TEXT
    );
    CREATE TABLE skill_versions (
        run_id TEXT, version INTEGER, parent INTEGER, sha TEXT, origin TEXT, status TEXT,
        step INTEGER, val_score REAL, gate_json TEXT, created_at REAL,
        PRIMARY KEY (run_id, version)
    );
    CREATE TABLE rollouts (
        run_id TEXT, key TEXT, task_id TEXT, split TEXT, version INTEGER, skill_sha TEXT,
        harness TEXT, model TEXT, trial INTEGER, hard REAL, soft REAL, input_tokens INTEGER,
        output_tokens INTEGER, cost_usd REAL, duration_s REAL, error TEXT, created_at REAL,
        PRIMARY KEY (run_id, key)
    );
    CREATE INDEX rollouts_by_sha ON rollouts (skill_sha, task_id);
    """)


def _m002_data_hash(db: sqlite3.Connection) -> None:
    db.execute("ALTER TABLE runs ADD COLUMN data_hash TEXT")


def _m003_rollouts_bytes(db: sqlite3.Connection) -> None:
    # the size of rollouts.jsonl when the index last held every line of it: equal sizes mean the
    # index answers for the run's rollouts, and readers need not parse the file
    db.execute("ALTER TABLE runs ADD COLUMN rollouts_bytes INTEGER")
    db.execute("CREATE INDEX rollouts_by_run_sha ON rollouts (run_id, skill_sha, split)")


def _m004_skill_used(db: sqlite3.Connection) -> None:
    # whether the agent loaded the skill (1 / 0; NULL: always in its prompt, or not recorded)
    db.execute("ALTER TABLE rollouts ADD COLUMN skill_used INTEGER")


def _m005_error_kind(db: sqlite3.Connection) -> None:
    # "infra": an errored rollout, not a score (see store.scores). Rows of failed rollouts indexed
    # before this column cannot tell an agent's failure (a score) from an infrastructure one (none):
    # they are dropped and their runs no longer answer from the index, so readers parse
    # rollouts.jsonl until the next run or eval of that folder indexes them again (`sync_rollouts`).
    db.execute("ALTER TABLE rollouts ADD COLUMN error_kind TEXT")
    db.execute("UPDATE runs SET rollouts_bytes=NULL WHERE run_id IN "
               "(SELECT DISTINCT run_id FROM rollouts WHERE error IS NOT NULL)")
    db.execute("DELETE FROM rollouts WHERE error IS NOT NULL")


MIGRATIONS: list[Migration] = [
    ("001_initial", _m001_initial),
    ("002_data_hash", _m002_data_hash),
    ("003_rollouts_bytes", _m003_rollouts_bytes),
    ("004_skill_used", _m004_skill_used),
    ("005_error_kind", _m005_error_kind),
]

ROLLOUT_COLUMNS = ("key", "task_id", "split", "version", "skill_sha", "harness", "model", "trial", "hard", "soft",
                   "input_tokens", "output_tokens", "cost_usd", "duration_s", "error", "created_at", "skill_used",
                   "error_kind")


@dataclass(frozen=True, slots=True)
class RolloutRow:
    """A rollout as the index holds it: what reports read (scores, usage), without its texts. Read
    like a `RolloutRecord` by compare and the report (same field names)."""

    key: str
    task_id: str
    split: str
    version: int
    skill_sha: str
    harness: str
    model: str
    trial: int
    hard: float
    soft: float
    input_tokens: int
    output_tokens: int
    cost_usd: float | None
    duration_s: float
    error: str | None
    created_at: float
    skill_used: int | None = None  # 1 / 0: the agent loaded the skill; None: always in its prompt, or not recorded
    error_kind: str | None = None  # "infra": an errored rollout, not a score

    @property
    def errored(self) -> bool:
        return self.error_kind == "infra"


class RunIndex:
    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._lock = threading.Lock()
        self.db = sqlite3.connect(str(path), check_same_thread=False, timeout=30)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.migrate()

    def migrate(self) -> None:
        with self._lock, self.db:
            self.db.execute("CREATE TABLE IF NOT EXISTS _migrations (name TEXT PRIMARY KEY, applied_at REAL)")
            done = {r[0] for r in self.db.execute("SELECT name FROM _migrations")}
            for name, fn in MIGRATIONS:
                if name not in done:
                    fn(self.db)
                    self.db.execute("INSERT INTO _migrations VALUES (?, strftime('%s','now'))", (name,))

    def close(self) -> None:
        self.db.close()

    def upsert_run(self, run_id: str, path: Path, stored: StoredConfig, status: str, created_at: float,
                   summary: RunSummary | None = None, data_hash: str | None = None) -> None:
        config = redact(stored.layer())
        with self._lock, self.db:
            self.db.execute(
                """INSERT INTO runs (run_id, created_at, status, benchmark, harness, target_model,
                   optimizer_model, config_json, summary_json, path, data_hash)
                   VALUES (?,?,?,?,?,?,?,?,?,?,?)
                   ON CONFLICT(run_id) DO UPDATE SET status=excluded.status,
                   summary_json=COALESCE(excluded.summary_json, runs.summary_json),
                   data_hash=COALESCE(excluded.data_hash, runs.data_hash)""",
                (run_id, created_at, status, config.get("benchmark"), config.get("harness"),
                 config.get("target_model"), config.get("optimizer_model"), json.dumps(config),
                 json.dumps(redact(summary)) if summary else None, redact(str(path)), data_hash),
            )

    def upsert_version(self, run_id: str, v: SkillVersion, gate: dict | None = None) -> None:
        with self._lock, self.db:
            self.db.execute(
                """INSERT INTO skill_versions VALUES (?,?,?,?,?,?,?,?,?,?)
                   ON CONFLICT(run_id, version) DO UPDATE SET status=excluded.status,
                   val_score=excluded.val_score, gate_json=COALESCE(excluded.gate_json, skill_versions.gate_json)""",
                (run_id, v.version, v.parent, v.sha, v.origin, v.status, v.step, v.val_score,
                 json.dumps(redact(gate)) if gate else None, v.created_at),
            )

    def add_rollouts(self, run_id: str, records: list[RolloutRecord], replace: bool = True) -> None:
        """Many rollouts in one transaction. `replace=False` keeps rows already there."""
        verb = "INSERT OR REPLACE" if replace else "INSERT OR IGNORE"
        with self._lock, self.db:
            self.db.executemany(
                f"{verb} INTO rollouts (run_id, {', '.join(ROLLOUT_COLUMNS)}) VALUES ({','.join('?' * 19)})",
                [(run_id, r.key, r.task_id, r.split, r.version, r.skill_sha, r.harness, redact(r.model), r.trial,
                  r.hard, r.soft, r.input_tokens, r.output_tokens, r.cost_usd, r.duration_s,
                  redact(r.error) if r.error else None, r.created_at,
                  None if r.skill_used is None else int(r.skill_used), r.error_kind) for r in records],
            )

    def mark_complete(self, run_id: str, rollouts_file: Path) -> None:
        """Record that the index holds every line of `rollouts_file` (call when no write is pending)."""
        size = rollouts_file.stat().st_size if rollouts_file.exists() else 0
        with self._lock, self.db:
            self.db.execute("UPDATE runs SET rollouts_bytes=? WHERE run_id=?", (size, run_id))

    def answers_for(self, run_id: str, rollouts_file: Path) -> bool:
        """Whether the index holds exactly what `rollouts_file` holds (so nobody need parse it)."""
        row = self.db.execute("SELECT rollouts_bytes FROM runs WHERE run_id=?", (run_id,)).fetchone()
        size = rollouts_file.stat().st_size if rollouts_file.exists() else 0
        return row is not None and row[0] is not None and row[0] == size

    def rollout_rows(self, run_ids: list[str], sha: str | None = None, split: str | None = None) -> list[RolloutRow]:
        """Rollouts of runs from the index, in the order they were added: the indexed fields only
        (no output, feedback, summary or trace file)."""
        where, args = [f"run_id IN ({','.join('?' * len(run_ids))})"], list(run_ids)
        if sha is not None:
            where.append("skill_sha=?")
            args.append(sha)
        if split not in (None, "all"):
            where.append("split=?")
            args.append(split)
        query = f"SELECT {', '.join(ROLLOUT_COLUMNS)} FROM rollouts WHERE {' AND '.join(where)} ORDER BY rowid"
        return [RolloutRow(*row) for row in self.db.execute(query, args)]

    def usage_of_first(self, run_id: str, n: int) -> tuple[int, float]:
        """Tokens and known cost of the first `n` rollouts of a run, in the order they were added."""
        row = self.db.execute(
            "SELECT COALESCE(SUM(input_tokens + output_tokens), 0), COALESCE(SUM(cost_usd), 0.0) FROM "
            "(SELECT input_tokens, output_tokens, cost_usd FROM rollouts WHERE run_id=? ORDER BY rowid LIMIT ?)",
            (run_id, n)).fetchone()
        return int(row[0]), float(row[1])

    def rollout_count(self, run_id: str) -> int:
        return self.db.execute("SELECT COUNT(*) FROM rollouts WHERE run_id=?", (run_id,)).fetchone()[0]

    def sync_rollouts(self, run_id: str, on_disk: int, load: Callable[[], list[RolloutRecord]]) -> int:
        """Add the rows the index lacks (after a crash) when the run holds `on_disk` records and the
        index fewer; `load` reads them. Returns how many were added."""
        if self.rollout_count(run_id) >= on_disk:
            return 0
        have = {k for (k,) in self.db.execute("SELECT key FROM rollouts WHERE run_id=?", (run_id,))}
        missing = [r for r in load() if r.key not in have]
        self.add_rollouts(run_id, missing, replace=False)
        return len(missing)

    def version_counts(self) -> dict[str, int]:
        return dict(self.db.execute("SELECT run_id, COUNT(*) FROM skill_versions GROUP BY run_id").fetchall())

    def runs(self) -> list[sqlite3.Row]:
        self.db.row_factory = sqlite3.Row
        return list(self.db.execute("SELECT * FROM runs ORDER BY created_at"))

    def versions(self, run_id: str) -> list[sqlite3.Row]:
        self.db.row_factory = sqlite3.Row
        return list(self.db.execute("SELECT * FROM skill_versions WHERE run_id=? ORDER BY version", (run_id,)))
