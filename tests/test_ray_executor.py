"""`--executor ray` on a real Ray cluster: a head node and a worker node started with `ray start` on
127.0.0.1 (one CPU each), in a network namespace with only loopback (see tests/ray_cluster.py), the
scripted fake model server in the same namespace, the real CLI.

The training of test_train_e2e (a useless edit rejected, the rule accepted; the target answers
deterministically) runs on the cluster and gives the records and decisions of the local executor.
A worker node killed while it holds a rollout costs nothing: the rollout runs again on a node that
is up, is recorded once and counted once, and no completed rollout runs twice. A driver killed
mid-run resumes on the cluster with nothing lost and nothing paid twice. The cluster stops with no
process left behind.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.fakes.server import FakeModelServer, FakeReply, FakeRequest
from tests.helpers import cli_env, write_jsonl
from tests.ray_cluster import ADDRESS, LoopbackNamespace, RayCluster, unavailable
from tests.test_train_e2e import RULE, Scripted, _run_args, code_tasks

pytestmark = pytest.mark.skipif(unavailable() is not None, reason=unavailable() or "")

RAY = ["--executor", "ray", "--ray-address", ADDRESS]
REPO = Path(__file__).resolve().parents[1]
SAME = ("key", "task_id", "split", "version", "skill_sha", "trial", "hard", "soft", "output", "error", "error_kind")


class Held(Scripted):
    """Test_train_e2e's target and optimizer; after `hold_after` target calls, each new one waits for
    `release` (its rollout is then in flight on some node) and is then answered and counted like
    any other: a call whose caller died meanwhile was paid all the same."""

    def __init__(self, hold_after: int | None = None):
        super().__init__()
        self.hold_after = hold_after
        self.seen = 0
        self.held: list[tuple[str, str]] = []

    def target(self, req: FakeRequest) -> FakeReply:
        with self.lock:
            hold = self.hold_after is not None and self.seen >= self.hold_after
            self.seen += 1
            if hold:
                self.held.append((req.system, req.last_user_text))
        if hold:
            self.release.wait(120)
        return super().target(req)

    def wait_held(self, n: int, proc: subprocess.Popen, timeout_s: float = 240) -> None:
        """Until `n` rollouts wait for the model; a run that ended first, or never got there, fails the
        test with what it printed."""
        deadline = time.monotonic() + timeout_s
        while len(self.held) < n:
            if proc.poll() is not None or time.monotonic() > deadline:
                if proc.poll() is None:
                    proc.kill()
                out, err = proc.communicate(timeout=30)
                pytest.fail(f"only {len(self.held)} of {n} rollouts reached the model ({self.seen} target calls); "
                            f"the run (exit {proc.returncode}) printed:\n{err[-3000:]}\n{out[-2000:]}")
            time.sleep(0.05)


class Place:
    """The namespace, the cluster and a folder per test; runs the CLI inside the namespace."""

    def __init__(self, ns: LoopbackNamespace, cluster: RayCluster, root: Path):
        self.ns, self.cluster, self.root = ns, cluster, root
        self.env = cli_env(root, RAY_USAGE_STATS_ENABLED="0")
        self.data = write_jsonl(root / "codes.jsonl", code_tasks(16))
        self.server = ns.serve(FakeModelServer(Held()))  # one URL for every run: it is in the cache keys

    def serve(self, script: Scripted) -> str:
        """The fake server's URL, now answering with `script`."""
        self.server.script = script
        return self.server.openai_url

    def args(self, url: str, run_id: str, *extra: str) -> list[str]:
        # every run here runs all of its rollouts (the seed's too: none reused from the runs before it in
        # this home), so where each ran and what the meter counted can be compared run for run
        return [*_run_args(self.data, url, run_id), "--concurrency", "4", "--set", "train.seed_cache=false", *extra]

    def start(self, args: list[str]) -> subprocess.Popen:
        return subprocess.Popen(self.ns.command([sys.executable, "-m", "skillopt", *args]), cwd=self.root, env=self.env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def run(self, args: list[str], timeout: float = 300) -> subprocess.CompletedProcess:
        return subprocess.run(self.ns.command([sys.executable, "-m", "skillopt", *args]), cwd=self.root, env=self.env,
                              capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def place(tmp_path_factory):
    root = tmp_path_factory.mktemp("ray")
    ns = LoopbackNamespace()
    cluster = RayCluster(ns, cli_env(root), root)
    try:
        cluster.start(1, 1)  # the head and one worker node, one CPU each: two rollouts at once
        place = Place(ns, cluster, root)
        yield place
        place.server.stop()
    finally:
        cluster.stop()
        ns.close()


@pytest.fixture(scope="module")
def local_run(place) -> Path:
    """The same training with the local executor: what every run on the cluster must equal."""
    r = place.run(place.args(place.serve(Held()), "local", "--executor", "local"))
    assert r.returncode == 0, r.stderr + r.stdout
    return place.root / "runs" / "local"


def records(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "rollouts.jsonl").read_text().splitlines()]


def outcome(run: Path) -> dict:
    """What must not depend on where rollouts ran: every record, every version and decision, the scores."""
    index = [json.loads(x) for x in (run / "skills" / "index.jsonl").read_text().splitlines()]
    versions = {v["version"]: (v["sha"], v["parent"], v["status"], v["val_score"]) for v in index}
    gates = {p.parent.name: json.loads(p.read_text())["accepted"] for p in (run / "steps").glob("*/gate.json")}
    summary = json.loads((run / "summary.json").read_text())
    return {"records": sorted(tuple(r[k] for k in SAME) for r in records(run)), "versions": versions,
            "gates": gates, "scores": summary["scores"], "status": summary["status"]}


def check_counted_once(run: Path) -> None:
    """Each rollout recorded once, and the budget's meter counts exactly what was recorded."""
    keys = [r["key"] for r in records(run)]
    assert len(keys) == len(set(keys)), "a rollout was recorded twice"
    state = json.loads((run / "state.json").read_text())
    assert state["meter"]["rollouts"] == len(keys)


def test_a_run_on_two_nodes_matches_the_local_run(place, local_run):
    r = place.run(place.args(place.serve(Held()), "spread", *RAY))
    assert r.returncode == 0, r.stderr + r.stdout
    run = place.root / "runs" / "spread"
    assert "ray: 2 node(s)" in r.stdout + r.stderr
    assert outcome(run) == outcome(local_run)
    assert outcome(run)["gates"] == {"0002": True} and RULE in (run / "best_skill.md").read_text()
    nodes = Counter(rec["node"] for rec in records(run))
    assert len(nodes) == 2 and None not in nodes, nodes  # both nodes ran rollouts; the driver none
    check_counted_once(run)
    # the driver alone wrote the run: traces came back with the records
    assert all((run / rec["trace_file"]).is_file() for rec in records(run))
    assert not (run / "work").exists() or not any((run / "work").iterdir())


def test_a_worker_node_lost_mid_rollout_costs_nothing(place, local_run):
    """Three nodes of one CPU hold three rollouts; the third node is killed while its rollout waits
    for the model. The run completes with the local run's records; that rollout ran again on a node
    that is up, is recorded once and counted once; no completed rollout ran twice."""
    doomed = place.cluster.add_node(1)
    script = Held(hold_after=2)  # baseline val: 2 answered, then 3 held, one on each node
    proc = place.start(place.args(place.serve(script), "lost-node", *RAY))
    try:
        script.wait_held(3, proc)
        place.cluster.kill(doomed)
    finally:
        with script.lock:
            script.hold_after = None
        script.release.set()
    out, err = proc.communicate(timeout=300)
    place.cluster.wait_alive(2)  # the tests after this one meet the head and one worker node
    assert proc.returncode == 0, err + out
    run = place.root / "runs" / "lost-node"
    assert "ray: 3 node(s)" in out + err
    assert outcome(run) == outcome(local_run)
    check_counted_once(run)
    answered = Counter(script.target_calls)
    again = [call for call, n in answered.items() if n > 1]
    # the lost node's rollout: answered there (paid, never recorded) and once more elsewhere; nothing else twice
    assert len(again) == 1 and answered[again[0]] == 2 and again[0] in script.held, again


def test_a_worker_lost_for_good_is_an_errored_rollout_never_a_score(place, local_run):
    """No retries on the cluster (executor.max_retries=0): a worker process killed mid-rollout makes
    an errored rollout (infrastructure: recorded, not scored), run again later in the same pass."""
    script = Held(hold_after=2)  # baseline val: 2 answered, then 2 held, one on each node
    proc = place.start(place.args(place.serve(script), "lost-worker", *RAY, "--set", "executor.max_retries=0"))
    try:
        script.wait_held(2, proc)
        victim = next(pid for pid in place.ns.processes() if cmdline(pid).startswith("ray::run_rollout"))
        os.kill(victim, signal.SIGKILL)
    finally:
        with script.lock:
            script.hold_after = None
        script.release.set()
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err + out
    run = place.root / "runs" / "lost-worker"
    lost = [r for r in records(run) if r["error_kind"] == "infra"]
    assert len(lost) == 1 and "lost on the Ray cluster" in lost[0]["error"], lost
    assert lost[0]["hard"] == lost[0]["soft"] == 0 and lost[0]["feedback"].startswith("not scored")
    again = [r for r in records(run) if r["key"] == lost[0]["key"] and r["error_kind"] != "infra"]
    assert len(again) == 1 and again[0]["error"] is None  # run again, scored once
    same = outcome(run)
    same["records"] = [r for r in same["records"] if r[SAME.index("error_kind")] != "infra"]
    assert same == outcome(local_run)  # the errored rollout changed nothing: never a score
    state = json.loads((run / "state.json").read_text())
    assert state["meter"]["rollouts"] == len(records(run))


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def test_a_killed_driver_resumes_on_the_cluster(place, local_run):
    script = Held(hold_after=9)  # baseline val (8), then into the step-1 batch
    proc = place.start(place.args(place.serve(script), "driver", *RAY))
    try:
        script.wait_held(1, proc)
        time.sleep(0.5)
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
    finally:
        with script.lock:
            script.hold_after = None
            held_at_kill = set(script.held)
        script.release.set()
    r = place.run(["run", "--resume", "driver"])  # the run's own settings: the same cluster
    assert r.returncode == 0, r.stderr + r.stdout
    run = place.root / "runs" / "driver"
    assert "ray: 2 node(s)" in r.stdout + r.stderr
    assert outcome(run) == outcome(local_run)
    check_counted_once(run)
    answered = Counter(script.target_calls)
    again = {call for call, n in answered.items() if n > 1}
    assert again <= held_at_kill, "a rollout recorded before the kill was paid again"


def test_the_embedded_model_is_served_by_each_node(place):
    """A `local:` target on the cluster: each node serves the model for its own rollouts (one llama.cpp
    server per node, not one per worker process), every rollout is answered, and the servers end
    with the run."""
    pytest.importorskip("xllamacpp", reason="the 'local' extra is not installed")
    data = write_jsonl(place.root / "sums.jsonl", [{"id": f"s{i}", "question": f"What is {i} + 1?", "answer": str(i + 1)}
                                                   for i in range(4)])
    log = Path(place.cluster.env["SKILLOPT_CACHE_DIR"]) / "models" / "logs" / "smollm2-135m.log"
    starts = log.read_text().count(" start smollm2-135m") if log.is_file() else 0
    r = place.run(["eval", "--skill", str(REPO / "skills" / "default" / "SKILL.md"), "--benchmark", str(data),
                   "--split", "all", "--harness", "chat", "--target_model", "local:smollm2-135m", "--concurrency", "4",
                   "--set", "executor.num_cpus=0.5", "--set", "run_id=embedded", *RAY])  # 2 worker processes a node
    assert r.returncode == 0, r.stderr + r.stdout
    recs = records(place.root / "runs" / "embedded")
    assert len(recs) == 4 and all(rec["error"] is None and rec["output"] for rec in recs), recs
    assert len({rec["node"] for rec in recs}) == 2
    assert log.read_text().count(" start smollm2-135m") - starts == 2  # one server on each node
    deadline = time.monotonic() + 20
    while any("skillopt.models.local child" in cmdline(pid) for pid in place.ns.processes()):
        assert time.monotonic() < deadline, "a node's model server outlived the run"
        time.sleep(0.2)


def test_the_cluster_stops_with_no_process_left(place):
    assert place.cluster.stop() == []
    assert place.ns.processes() == []
