"""An interruption (SIGTERM from `timeout` / `docker stop` / systemd / Kubernetes, or Ctrl-C) saves the
run's state, marks it interrupted (never `running` or `new` forever), exits 143 (SIGTERM) or 130
(SIGINT) with the `--resume` hint, and the run then resumes to the end. Real CLI, fake server; the
signal lands while the baseline waits on the model, before the first step."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time

import pytest

from tests.fakes.server import FakeModelServer, FakeReply, FakeRequest
from tests.helpers import cli_env, write_jsonl


class Slow:
    """Answers after `delay_s` (the run is waiting on the model when the signal comes); 0 once released."""

    def __init__(self) -> None:
        self.delay_s = 5.0

    def __call__(self, req: FakeRequest) -> FakeReply:
        return FakeReply(text="Answer: 2", usage=(10, 5), delay_s=self.delay_s)


@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_an_interrupted_run_is_saved_marked_and_resumable(tmp_path, sig, code):
    write_jsonl(tmp_path / "qa.jsonl", [{"id": f"q{i}", "question": f"{i}+1?", "answer": str(i + 1)} for i in range(5)])
    env = cli_env(tmp_path)
    script = Slow()
    with FakeModelServer(script) as srv:
        spec = f"openai-compatible:fake@{srv.openai_url}"
        args = ["run", "--benchmark", "qa.jsonl", "--target-model", spec, "--optimizer-model", spec, "--run-id", "r",
                "--epochs", "1", "--batch-size", "2", "--train-size", "2", "--val-size", "2", "--test-size", "1",
                "--set", "train.consolidate=false", "--runs-dir", "out"]
        proc = subprocess.Popen([sys.executable, "-m", "skillopt", *args], cwd=tmp_path, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 60
            while not srv.calls and time.monotonic() < deadline and proc.poll() is None:
                time.sleep(0.05)
            assert srv.calls, "the run never reached the model"
            proc.send_signal(sig)
            out, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == code, (proc.returncode, err[-2000:])
        assert "Traceback" not in err
        assert "skillopt run --resume r --runs-dir out" in err, err[-2000:]
        state = json.loads((tmp_path / "out" / "r" / "state.json").read_text())
        assert (state["status"], state["stop_reason"]) == ("stopped", "interrupted")
        listed = subprocess.run([sys.executable, "-m", "skillopt", "--runs-dir", "out", "runs", "list"], cwd=tmp_path,
                                env=env, capture_output=True, text=True, timeout=60)
        assert listed.stdout.splitlines()[1].split()[:2] == ["r", "train:interrupted"], listed.stdout
        script.delay_s = 0.0
        with open(tmp_path / "out" / "r" / "rollouts.jsonl", "a") as f:  # damage found on resume: named, not skipped
            f.write("not a record\n")
        done = subprocess.run([sys.executable, "-m", "skillopt", "run", "--resume", "r", "--runs-dir", "out"],
                              cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert re.search(r"warning: 1 line\(s\) of rollouts.jsonl cannot be read and are skipped \(line \d+\)",
                     done.stderr), done.stderr[-3000:]
    assert json.loads((tmp_path / "out" / "r" / "state.json").read_text())["status"] == "finished"
