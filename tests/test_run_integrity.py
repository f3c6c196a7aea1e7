"""One writer per run, and a meter that survives crashes (real CLI, chat harness, fake server).

- Two resumes of the same run at once: the second is refused with one line naming the first's pid,
  and the first finishes with no rollout paid twice and no version number given to two skills.
- A run killed with SIGKILL again and again while rollouts are in flight: its usage is what the
  fake server answered minus what was in flight at the kills, and `--max-rollouts N` holds.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from tests.fakes.server import FakeModelServer, FakeReply, FakeRequest
from tests.helpers import cli_env, run_cli, write_jsonl
from tests.test_train_e2e import Scripted, _run_args, code_tasks


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def test_a_second_resume_of_a_running_run_is_refused(tmp_path):
    data = write_jsonl(tmp_path / "codes.jsonl", code_tasks(12))
    env = cli_env(tmp_path)
    script = Scripted()
    with FakeModelServer(script) as srv:
        first = run_cli(_run_args(data, srv.openai_url, "codes", max_rollouts="2"), tmp_path, env)
        assert first.returncode == 3, first.stderr  # stopped by its budget
        script.hang_after = len(script.target_calls)  # the next resume holds the run, waiting on the model
        more = ["--max-rollouts", "1000"]
        holder = subprocess.Popen([sys.executable, "-m", "skillopt", "run", "--resume", "codes", *more], cwd=tmp_path,
                                  env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert script.hung.wait(180), "the first resume never reached the model"
            second = run_cli(["run", "--resume", "codes", *more], tmp_path, env)
            assert second.returncode == 2, second.stderr
            lines = [x for x in second.stderr.splitlines() if x.strip()]
            assert len(lines) == 1 and f"run codes is in use by process {holder.pid}" in lines[0], second.stderr
            assert "Traceback" not in second.stderr
        finally:
            script.hang_after = None
            script.release.set()
            out, err = holder.communicate(timeout=300)
    assert holder.returncode == 0, err[-3000:]
    run = tmp_path / "runs" / "codes"
    keys = [json.loads(x)["key"] for x in (run / "rollouts.jsonl").read_text().splitlines()]
    assert len(keys) == len(set(keys)), "a rollout was paid twice"
    versions: dict[int, str] = {}
    for line in (run / "skills" / "index.jsonl").read_text().splitlines():
        v = json.loads(line)
        assert versions.setdefault(v["version"], v["sha"]) == v["sha"], "one version number, two skills"
    assert json.loads((run / "summary.json").read_text())["status"] == "finished"


class Metered:
    """A slow target (so rollouts are in flight when the run is killed) with fixed usage per call."""

    def __init__(self) -> None:
        self.calls = 0
        self.lock = threading.Lock()

    def __call__(self, req: FakeRequest) -> FakeReply:
        with self.lock:
            self.calls += 1
        return FakeReply(text="Answer: unknown", usage=(10, 5), delay_s=0.05)


def test_kill_9_again_and_again_usage_is_what_was_recorded_and_the_budget_holds(tmp_path):
    data = write_jsonl(tmp_path / "codes.jsonl", code_tasks(40))
    env = cli_env(tmp_path)
    budget, concurrency, kills = 24, 4, 4
    script = Metered()
    log = tmp_path / "runs" / "k" / "rollouts.jsonl"
    with FakeModelServer(script) as srv:
        url = srv.openai_url
        args = ["run", "--benchmark", str(data), "--harness", "chat", "--target_model", f"openai-compatible:t@{url}",
                "--optimizer_model", f"openai-compatible:o@{url}", "--run-id", "k", "--train-size", "4",
                "--val-size", "30", "--test-size", "4", "--concurrency", str(concurrency),
                "--max-rollouts", str(budget)]
        killed = 0
        for attempt in range(kills):
            seen = _lines(log)
            proc = subprocess.Popen([sys.executable, "-m", "skillopt", *(args if attempt == 0 else
                                                                          ["run", "--resume", "k"])],
                                    cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            deadline = time.monotonic() + 120
            while proc.poll() is None and _lines(log) < seen + 3 and time.monotonic() < deadline:
                time.sleep(0.01)
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                killed += 1
            proc.wait(30)
        final = run_cli(["run", "--resume", "k"], tmp_path, env)
    assert final.returncode == 3, final.stderr[-3000:]  # stopped by its budget
    assert "rollout budget reached" in final.stdout + final.stderr
    recorded = _lines(log)
    in_flight = script.calls - recorded  # answered by the server, never recorded: lost to a kill
    assert killed >= 2
    assert recorded == budget, "the budget did not hold"
    assert 0 <= in_flight <= killed * concurrency, (script.calls, recorded)
    meter = json.loads((tmp_path / "runs" / "k" / "summary.json").read_text())["meter"]
    assert meter["rollouts"] == recorded
    target = meter["roles"]["target"]
    assert (target["input_tokens"], target["output_tokens"]) == (10 * recorded, 5 * recorded)
