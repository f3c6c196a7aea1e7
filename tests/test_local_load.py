"""The embedded model under load (slow: a real llama.cpp server and real weights): a run beside a
process that keeps a CPU busy answers every optimizer call, though each call's limit is shorter than
a queued call waits (the limit counts the server's progress, not the wall: models/local/progress.py).
With a wall-clock limit (before), the same run fails: every baseline rollout times out. About 40 s on
an idle 2-core machine; minutes when other work shares it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from tests.helpers import cli_env, run_cli

pytest.importorskip("xllamacpp", reason="the 'local' extra is not installed")
pytestmark = pytest.mark.slow

SMOL = "local:smollm2-135m"


def test_every_optimizer_call_is_answered_beside_a_cpu_burner(tmp_path):
    burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        args = ["run", "--preset", "quick", "--target_model", SMOL, "--optimizer_model", SMOL, "--run-id", "load",
                "--train-size", "2", "--val-size", "2", "--test-size", "0", "--batch-size", "2",
                "--set", "train.max_reflections_per_step=1", "--set", "train.demonstrations=false",
                "--set", "train.merge=false", "--set", "train.ablations_per_step=0",
                "--set", "limits.max_tokens=32", "--set", "models.optimizer_max_tokens=64",
                # shorter than an optimizer call takes behind two rollouts on a busy core: a wall-clock
                # limit would time the calls out; the server's progress keeps them alive
                "--set", "models.timeout_s=2", "--set", "models.retries=0",
                "--set", "train.seed_cache=false"]
        r = run_cli(args, tmp_path, cli_env(tmp_path), timeout=300)
    finally:
        os.kill(burner.pid, signal.SIGKILL)
        burner.wait()
    assert r.returncode == 0, r.stderr[-3000:]
    run = tmp_path / "runs" / "load"
    calls = [json.loads(x) for x in (run / "calls.jsonl").read_text().splitlines()]
    optimizer = [c for c in calls if c["role"] == "optimizer"]
    assert optimizer and all(c["ok"] for c in optimizer), [c.get("error") for c in optimizer if not c["ok"]]
    rollouts = [json.loads(x) for x in (run / "rollouts.jsonl").read_text().splitlines()]
    assert rollouts and not [r for r in rollouts if r["error_kind"] == "infra"]


def test_a_server_follows_the_free_cpus_when_idle(tmp_path):
    from skillopt.models.local import LocalServer

    server = LocalServer("smollm2-135m", slots=2)
    server.start()
    try:
        port = server.port
        server.threads = 99  # as if started while the machine had other CPUs free
        change = server.retune()
        assert change is not None and change[0] == 99 and 1 <= change[1] <= (os.cpu_count() or 1)
        assert server.healthy() and server.port == port and server.restarts >= 1  # clients keep their URL
        pinned = LocalServer("smollm2-135m", slots=1, threads=1)
        assert pinned.retune() is None  # asked-for threads are kept (and a stopped server is left alone)
    finally:
        server.stop()


def test_speculative_decoding_runs_in_the_server():
    """The plumbing perf/local_model.py --limit measures with: a draft model (here the small model drafts for
    itself: same tokenizer) and n-gram lookup each serve a reply, and the draft model's tokens are checked."""
    import httpx

    from skillopt.models.local import LocalServer

    for kwargs in ({"draft": "smollm2-135m", "draft_max": 4}, {"lookup": True}):
        with LocalServer("smollm2-135m", slots=1, threads=1, **kwargs) as server:
            body = {"messages": [{"role": "user", "content": "Count from 1 to 20."}], "max_tokens": 24,
                    "temperature": 0}
            r = httpx.post(f"{server.base_url}/v1/chat/completions", json=body, timeout=120)
            assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"], kwargs
            if "draft" in kwargs:
                timings = r.json()["timings"]
                assert timings.get("draft_n", 0) > 0 and timings.get("draft_n_accepted", 0) > 0, timings
