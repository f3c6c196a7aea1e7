"""Progress in a log: with stderr not a terminal (CI, nohup, a container, `> log 2>&1`) a run prints
plain lines (a line per phase and every tenth of it, with step, phase, done/total, errors, ETA), never
Rich bars; `--progress none` prints none; a phase with no rollout ending still gets a line every
interval (the heartbeat)."""

from __future__ import annotations

import io
import re
import subprocess
import sys
import time

from skillopt.progress.plain import PlainProgress, resolve_kind
from skillopt.config import RunConfig, StoredConfig
from skillopt.engine.events import PhaseStarted, RunStarted
from tests.fakes.server import FakeModelServer, FakeReply
from tests.helpers import cli_env, write_jsonl

LINE = re.compile(r"^\[\d\d:\d\d\] ")


def _run(tmp_path, *extra: str) -> subprocess.CompletedProcess:
    write_jsonl(tmp_path / "qa.jsonl", [{"id": f"q{i}", "question": f"{i}+1?", "answer": str(i + 1)} for i in range(8)])
    with FakeModelServer(lambda req: FakeReply(text="Answer: 2", usage=(10, 5))) as srv:
        spec = f"openai-compatible:fake@{srv.openai_url}"
        return subprocess.run(
            [sys.executable, "-m", "skillopt", "run", "--benchmark", "qa.jsonl", "--target-model", spec,
             "--optimizer-model", spec, "--epochs", "1", "--batch-size", "2", "--train-size", "2", "--val-size", "4",
             "--test-size", "2", "--set", "train.consolidate=false", *extra],
            cwd=tmp_path, env=cli_env(tmp_path), capture_output=True, text=True, timeout=300)


def test_a_run_logged_to_a_file_prints_plain_progress_lines(tmp_path):
    r = _run(tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = r.stderr.splitlines()
    assert all(LINE.match(x) for x in lines if x.strip()), r.stderr  # every line a log line: no bars, no escapes
    assert "\x1b[" not in r.stderr and "━" not in r.stderr
    assert any("baseline val: 0/4 rollouts" in x for x in lines), r.stderr
    assert any("baseline val: 4/4 rollouts" in x for x in lines), r.stderr
    assert any(re.search(r"step 1 rollouts: 1/2 rollouts, eta \d\d:\d\d; run: 5 rollouts", x) for x in lines), r.stderr
    assert any(re.search(r"\] step 1/1 \(epoch 1\): train .*; \d+ rollouts, cost unknown$", x) for x in lines), r.stderr
    assert any("test v000: 2/2 rollouts" in x for x in lines), r.stderr


def test_progress_none_prints_no_progress(tmp_path):
    r = _run(tmp_path, "--progress", "none")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "rollouts" not in r.stderr and "━" not in r.stderr


def test_the_heartbeat_prints_while_no_rollout_ends():
    out = io.StringIO()
    view = PlainProgress(interval_s=0.2, out=out)
    view(RunStarted("r", StoredConfig.of(RunConfig()), resumed=False, total_steps=4, step=1))
    view(PhaseStarted("gate v002", 40))
    time.sleep(1.5)
    view.stop()
    lines = out.getvalue().splitlines()
    assert lines[0].endswith("run r, 4 steps")
    beats = [x for x in lines if "step 1/4 gate v002: 0/40 rollouts" in x]
    assert len(beats) >= 3, lines  # the phase line, then one every interval while nothing ends


def test_progress_kinds():
    assert resolve_kind("plain") == "plain" and resolve_kind("none") == "none" and resolve_kind(False) == "none"
    assert resolve_kind(True) == ("rich" if sys.stderr.isatty() else "plain")
