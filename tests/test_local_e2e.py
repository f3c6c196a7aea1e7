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
MAX_OUT = 64


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


def test_a_repeated_run_on_the_local_model_replays_every_call(tmp_path):
    """The embedded model's rollouts and replies are kept across runs (models/replay.py): the same job
    run again reuses every rollout and asks the model nothing, and ends where the first run ended."""
    args = ["run", "--preset", "quick", "--target_model", SMOL, "--optimizer_model", SMOL,
            "--train-size", "2", "--val-size", "2", "--test-size", "2", "--batch-size", "2",
            "--set", "limits.max_tokens=48", "--set", "models.optimizer_max_tokens=128"]

    def run(run_id: str, *more: str) -> dict:
        r = run_cli([*args, "--run-id", run_id, *more], tmp_path, cli_env(tmp_path), timeout=900)
        assert r.returncode == 0, r.stderr[-3000:]
        folder = tmp_path / "runs" / run_id
        return {"out": r.stdout + r.stderr, "summary": json.loads((folder / "summary.json").read_text()),
                "best": (folder / "best_skill.md").read_text(),
                "rollouts": [json.loads(x) for x in (folder / "rollouts.jsonl").read_text().splitlines()]}

    def asked(result: dict) -> tuple[int, int, int]:
        """(rollouts run, optimizer calls made, optimizer calls replayed) by the run's meter."""
        meter = result["summary"]["meter"]
        opt = meter["roles"].get("optimizer", {})
        return meter["rollouts"], opt.get("calls", 0), opt.get("cached_calls", 0)

    first = run("first")
    assert asked(first)[0] > 0 and asked(first)[1] > 0
    second = run("second")
    assert asked(second) == (0, 0, asked(first)[1])  # no model call at all: each reply replayed
    assert second["rollouts"] and all(r["input_tokens"] == 0 and r["output_tokens"] == 0 for r in second["rollouts"])
    assert {(r["task_id"], r["split"], r["version"]): r["hard"] for r in second["rollouts"]} == \
        {(r["task_id"], r["split"], r["version"]): r["hard"] for r in first["rollouts"]}
    assert second["summary"]["scores"] == first["summary"]["scores"] and second["best"] == first["best"]
    assert f"{len(second['rollouts'])} rollouts and" in second["out"] and "train.replay=false" in second["out"]


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

def _optimizer(req):
    from tests.fakes.server import FakeReply

    edit = {"op": "add", "anchor": "", "text": "End with a line `Answer: <number>`.", "rationale": "format",
            "evidence": []}
    return FakeReply(text=json.dumps({"analysis": "the answers lacked the format", "edits": [edit]}))


@pytest.mark.parametrize("harness", ["claude-code"])
def test_agent_training_step_on_the_local_model(tmp_path, harness):
    """The real agent binary talks to the embedded model (Anthropic Messages on the llama.cpp server);
    the optimizer is scripted so the step always has a candidate to gate. Codex on the embedded model
    (Responses) is test_local_tokens' codex rollout, and a Codex training step is test_agent_training's
    against the fake server: a third run here cost 2.5 minutes of CI for no path they miss."""
    pytest.importorskip({"claude-code": "claude_agent_sdk", "codex": "openai_codex"}[harness])
    from tests.fakes.server import FakeModelServer
    from tests.helpers import write_jsonl

    # answers no model can know: the train rollout fails, so there is a reflection and a gate
    data = write_jsonl(tmp_path / "codes.jsonl", [
        {"id": f"item-{i}", "question": f"What is the secret code of item {i}?", "answer": f"ZETA-{i}"}
        for i in range(3)])
    # Claude Code's first request is ~11.7k tokens with all its tools; two tools keep it ~5k,
    # inside SmolLM2's 8k context
    tools = ["--set", "harness_options.tools=Bash,Skill"] if harness == "claude-code" else []
    with FakeModelServer(_optimizer) as srv:
        args = ["run", "--benchmark", str(data), "--harness", harness, "--harness-mode", "cli",
                "--target_model", SMOL, "--optimizer_model", f"openai-compatible:fake-opt@{srv.openai_url}",
                "--run-id", "agent", "--epochs", "1", "--train-size", "1", "--val-size", "1", "--test-size", "0",
                # a 5k-token agent prompt on a busy 2-core machine, two rollouts at once in the gate, took
                # more than 360 s each (both timed out); the test is about mechanics, not speed
                "--batch-size", "1", "--set", "train.consolidate=false", "--set", "limits.timeout_s=900",
                # the scripted edit cannot help a 135M model: past the screen, so the step reaches the gate
                "--set", "train.screen=false", "--set", "train.demonstrations=false",
                "--set", f"harness_options.max_output_tokens={MAX_OUT}", *tools]
        r = run_cli(args, tmp_path, cli_env(tmp_path), timeout=1800)
    assert r.returncode == 0, r.stderr[-3000:]
    run = tmp_path / "runs" / "agent"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["steps"] == 1
    assert (run / "steps" / "0001" / "gate.json").exists(), "no candidate was gated"
    rollouts = [json.loads(x) for x in (run / "rollouts.jsonl").read_text().splitlines()]
    assert len(rollouts) >= 3  # baseline val, train, candidate val (no test split: scoring it is tested elsewhere)
    # every rollout reached the model through the agent's own (long) prompt and got text back; a 135M
    # model may ramble past the output cap, which the agent reports as an error of the rollout (Claude
    # Code first retries up to 3 times). Known and not yet explained: in whole-suite runs one Claude
    # Code session now and then gets no answer to the turn after its "Output token limit hit. Resume
    # directly" message and times out (never seen with the test alone). At most one such rollout, and
    # it must have reached the model first; any other error, or a second timeout, is a bug.
    stalled = [r for r in rollouts if harness == "claude-code" and (r["error"] or "").startswith("timed out")]
    assert len(stalled) <= 1, [(r["task_id"], r["split"], r["error"]) for r in stalled]
    for rec in rollouts:
        events = [json.loads(x) for x in (run / rec["trace_file"]).read_text().splitlines()]
        said = {k: rec[k] for k in ("split", "task_id", "error", "error_kind", "input_tokens", "output_tokens",
                                    "duration_s")}
        if rec in stalled:
            raw = (run / rec["trace_file"]).with_suffix(".raw.log").read_text()
            assert '"type":"assistant"' in raw and "Output token limit hit" in raw, said
            continue
        assert any(e["type"] == "message" and e["role"] == "assistant" and e["text"].strip() for e in events), rec
        assert rec["input_tokens"] > 1000, (said, [e for e in events if e["type"] in ("usage", "error")])
        # every reply kept to the cap: Claude Code sends it; Codex sends none, the local server applies it
        turns = sum(e.get("turns") or 0 for e in events if e["type"] == "usage")
        assert 0 < rec["output_tokens"] <= MAX_OUT * turns, (rec["output_tokens"], turns)
        assert rec["error"] is None or f"{MAX_OUT} output token" in rec["error"] or "max_output" in rec["error"], \
            rec["error"]
    assert len(rollouts) - len(stalled) >= 3
    if harness == "claude-code":  # the skill was discovered natively: listed in Claude Code's init event
        init = json.loads((run / rollouts[0]["trace_file"]).with_suffix(".raw.log").read_text().splitlines()[0])
        assert "task-solver" in init["skills"]
