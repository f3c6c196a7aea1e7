"""The SQLite index, written in batches (WAL), holds exactly what rollouts.jsonl holds: after a
whole run, after an evaluation, and after a kill -9 and a resume (the batch in memory was lost)."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from tests.fakes.server import FakeModelServer, FakeReply
from tests.helpers import REPO, cli_env, run_cli, write_jsonl
from tests.test_train_e2e import Scripted, _run_args, code_tasks

COLUMNS = "key, task_id, split, version, skill_sha, trial, hard, soft, error"


def _jsonl_rows(run: Path) -> set[tuple]:
    rows = [json.loads(x) for x in (run / "rollouts.jsonl").read_text().splitlines()]
    return {tuple(r[c.strip()] for c in COLUMNS.split(",")) for r in rows}


def _db_rows(runs: Path, run_id: str) -> set[tuple]:
    db = sqlite3.connect(runs / "skillopt.db")
    try:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        return set(db.execute(f"SELECT {COLUMNS} FROM rollouts WHERE run_id=?", (run_id,)).fetchall())
    finally:
        db.close()


def test_index_equals_rollouts_jsonl_after_kill_9_and_resume(tmp_path):
    data = write_jsonl(tmp_path / "codes.jsonl", code_tasks(12))
    script = Scripted(hang_after_target_calls=10)  # baseline 4, batch 4, then the gate: 1 done, 1 hangs
    env = cli_env(tmp_path)
    with FakeModelServer(script) as srv:
        proc = subprocess.Popen([sys.executable, "-m", "skillopt", *_run_args(data, srv.openai_url, "codes")],
                                cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert script.hung.wait(120), "the run never reached the hanging call"
        run = tmp_path / "runs" / "codes"
        deadline = time.monotonic() + 30
        while len(_jsonl_rows(run)) < 9 and time.monotonic() < deadline:  # the gate's first rollout saved
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        on_disk = _jsonl_rows(run)
        assert len(on_disk) >= 9 and len(_db_rows(tmp_path / "runs", "codes")) < len(on_disk)  # batch lost
        script.hang_after = None
        script.release.set()
        r = run_cli(["run", "--resume", "codes"], cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stderr + r.stdout
    assert _db_rows(tmp_path / "runs", "codes") == _jsonl_rows(run)


def test_index_equals_rollouts_jsonl_after_an_evaluation(tmp_path):
    data = write_jsonl(tmp_path / "qa.jsonl", [{"id": f"q{i}", "question": f"{i}+1?", "answer": str(i + 1)}
                                               for i in range(300)])
    with FakeModelServer(lambda req: FakeReply(text="Answer: 2")) as srv:
        r = run_cli(["eval", "--skill", str(REPO / "skills/default/SKILL.md"), "--benchmark", str(data),
                     "--split", "all", "--harness", "chat",
                     "--target_model", f"openai-compatible:fake@{srv.openai_url}", "--concurrency", "16"],
                    cwd=tmp_path, env=cli_env(tmp_path))
    assert r.returncode == 0, r.stderr + r.stdout
    (run,) = [p for p in (tmp_path / "runs").iterdir() if p.is_dir()]
    rows = _jsonl_rows(run)
    assert len(rows) == 300 and _db_rows(tmp_path / "runs", run.name) == rows
    assert not list(run.glob("work/lane-*"))  # the chat harness reads no folder: none was made


def test_reports_from_the_index_equal_reports_from_rollouts_jsonl(tmp_path):
    data = write_jsonl(tmp_path / "codes.jsonl", code_tasks(12))
    env = cli_env(tmp_path)
    with FakeModelServer(Scripted()) as srv:
        r = run_cli(_run_args(data, srv.openai_url, "codes"), cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stderr + r.stdout
    commands = [["compare", "codes:seed", "codes:best", "--format", "json"], ["runs", "show", "codes", "--json"],
                ["report", "codes", "--format", "markdown"]]
    indexed = [run_cli(["--runs-dir", str(tmp_path / "runs"), *c], tmp_path, env) for c in commands]
    db = sqlite3.connect(tmp_path / "runs" / "skillopt.db")
    with db:  # the index no longer answers for the run's rollouts: every reader parses rollouts.jsonl
        db.execute("UPDATE runs SET rollouts_bytes=NULL")
    db.close()
    parsed = [run_cli(["--runs-dir", str(tmp_path / "runs"), *c], tmp_path, env) for c in commands]
    for a, b in zip(indexed, parsed):
        assert a.returncode == 0 and b.returncode == 0, a.stderr + b.stderr
        assert a.stdout == b.stdout
