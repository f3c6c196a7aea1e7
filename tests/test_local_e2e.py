"""The embedded local model through the real CLI (slow: a real llama.cpp server and real weights)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import cli_env, run_cli

pytest.importorskip("xllamacpp", reason="the 'local' extra is not installed")
pytestmark = pytest.mark.slow

SMOL = "local:smollm2-135m"


def _descendants(pid: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(d.name))
    out, todo = set(), [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.add(c)
            todo.append(c)
    return out


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"


def test_one_step_run_on_the_local_model(tmp_path):
    args = ["run", "--preset", "quick", "--target_model", SMOL, "--optimizer_model", SMOL, "--run-id", "local",
            "--train-size", "2", "--val-size", "2", "--test-size", "2", "--batch-size", "2",
            "--set", "limits.max_tokens=96", "--set", "models.optimizer_max_tokens=256"]
    r = run_cli(args, tmp_path, cli_env(tmp_path), timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    run = tmp_path / "runs" / "local"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["steps"] == 1
    assert summary["scores"]["seed"]["test"]["n"] == 2 and summary["scores"]["seed"]["val"]["n"] == 2
    rollouts = [json.loads(x) for x in (run / "rollouts.jsonl").read_text().splitlines()]
    assert rollouts and all(r["output"] or r["error"] for r in rollouts)
    assert sum(1 for r in rollouts if r["output"].strip()) >= len(rollouts) // 2  # a real model answered
    assert (run / "steps" / "0001" / "reflections.json").exists()
    assert summary["meter"]["roles"]["optimizer"]["calls"] >= 1
    assert "baseline" in r.stdout and "test" in r.stdout


def test_no_server_survives_sigint(tmp_path):
    args = [sys.executable, "-m", "skillopt", "run", "--preset", "quick", "--target_model", SMOL,
            "--optimizer_model", SMOL, "--run-id", "sigint"]
    proc = subprocess.Popen(args, cwd=tmp_path, env=cli_env(tmp_path), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)
    seen: set[int] = set()
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        seen |= _descendants(proc.pid)
        if seen and (tmp_path / "runs" / "sigint" / "rollouts.jsonl").exists():
            break
        time.sleep(0.5)
    assert seen, "the local model server never started"
    proc.send_signal(signal.SIGINT)
    proc.wait(60)
    assert proc.returncode in (130, 1, -signal.SIGINT), proc.stderr.read()[-2000:] if proc.stderr else ""
    time.sleep(1.0)
    survivors = [p for p in seen if _alive(p)]
    assert not survivors, f"orphaned processes after SIGINT: {survivors}"
    state = json.loads((tmp_path / "runs" / "sigint" / "state.json").read_text())
    assert state["status"] == "stopped"


def test_no_server_survives_an_error_exit(tmp_path):
    # the target is local (its server starts), the optimizer is unreachable: the CLI dies by SIGTERM
    code = ("import sys; from skillopt.models.local import ensure_server; s = ensure_server('smollm2-135m'); "
            "print(s.pid, flush=True); raise RuntimeError('boom')")
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=cli_env(tmp_path), capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 1 and "boom" in r.stderr
    pid = int(r.stdout.split()[0])
    time.sleep(1.0)
    assert not _alive(pid)
