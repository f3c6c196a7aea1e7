"""Ray scaling: rollouts/s of `--executor ray` with 1 and 2 worker nodes, against a fake model server
that answers in 200 ms, with 64 rollouts kept in flight by the driver.

The cluster runs on this machine (tests/ray_cluster.py: a loopback-only network namespace, needs
root): a head node with no CPUs for rollouts (the driver's), and two worker nodes that each offer
`--node-cpus` rollout slots (a rollout asks for 1 CPU). The driver keeps `--concurrency` (64)
rollouts in flight, so the nodes' slots bound the rate, as on a real cluster. Each measurement is
`skillopt eval` of one skill on `--tasks` QA tasks; "1 node" restricts rollouts to the first worker
node with a custom resource only it has (`executor.resources`), "2 nodes" uses both. The rate is the
steady state from the records' completion times (the first `--concurrency` rollouts, the workers'
start, are left out); runs alternate 1 and 2 nodes, `--repeats` times, and the medians are kept.

Usage: python perf/ray_scaling.py [--tasks 640] [--node-cpus 4] [--concurrency 64] [--repeats 3]
                                  [--out perf/results/ray_scaling.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from perf.common import RESULTS, machine, measure  # noqa: E402
from tests.fakes.server import FakeModelServer, FakeReply  # noqa: E402
from tests.helpers import cli_env, write_jsonl  # noqa: E402
from tests.ray_cluster import ADDRESS, LoopbackNamespace, RayCluster, unavailable  # noqa: E402

DELAY_S = 0.2


def steady_rate(run: Path, skip: int) -> float:
    """Rollouts per second between the `skip`-th and the last completion."""
    times = sorted(json.loads(line)["created_at"] for line in (run / "rollouts.jsonl").read_text().splitlines())
    if len(times) <= skip + 1:
        raise SystemExit(f"{run}: only {len(times)} rollouts")
    return (len(times) - 1 - skip) / (times[-1] - times[skip])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", type=int, default=640)
    ap.add_argument("--node-cpus", type=int, default=4)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default=str(RESULTS / "ray_scaling.json"))
    args = ap.parse_args()
    if why := unavailable():
        raise SystemExit(f"cannot run: {why}")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        env = cli_env(root, RAY_USAGE_STATS_ENABLED="0")
        data = write_jsonl(root / "qa.jsonl", [{"id": f"q{i:04d}", "question": f"{i}+1?", "answer": str(i + 1)}
                                               for i in range(args.tasks)])
        ns = LoopbackNamespace()
        cluster = RayCluster(ns, env, root)
        server = None
        try:
            cluster.start(0)  # the head: the driver's node, no rollout slots
            cluster.add_node(args.node_cpus, resources={"first_node": args.node_cpus})
            cluster.add_node(args.node_cpus)
            server = ns.serve(FakeModelServer(lambda req: FakeReply(text="Answer: 1", delay_s=DELAY_S)))
            runs: dict[int, list[dict]] = {1: [], 2: []}
            for rep in range(args.repeats):
                for nodes in (1, 2):
                    run_id = f"n{nodes}-r{rep}"
                    argv = [sys.executable, "-m", "skillopt", "eval", "--skill", str(REPO / "skills/default/SKILL.md"),
                            "--benchmark", str(data), "--split", "all", "--harness", "chat",
                            "--target_model", f"openai-compatible:fake@{server.openai_url}",
                            "--concurrency", str(args.concurrency), "--set", f"run_id={run_id}",
                            "--set", "executor.kind=ray", "--set", f"executor.address={ADDRESS}"]
                    if nodes == 1:
                        argv += ["--set", "executor.resources.first_node=1"]
                    m = measure(ns.command(argv), root, env)
                    if m.rc != 0:
                        raise SystemExit(f"eval failed ({m.rc}): {m.stderr[-2000:]}")
                    run = root / "runs" / run_id
                    nodes_used = {json.loads(line)["node"] for line in (run / "rollouts.jsonl").read_text().splitlines()}
                    rate = steady_rate(run, args.concurrency)
                    runs[nodes].append({"rollouts_per_s": round(rate, 2), "wall_s": round(m.wall_s, 2),
                                        "nodes_used": len(nodes_used)})
                    print(f"{nodes} node(s), repeat {rep + 1}: {rate:.1f} rollouts/s ({m.wall_s:.1f} s wall, "
                          f"{len(nodes_used)} node(s) used)", flush=True)
        finally:
            if server is not None:
                server.stop()
            left = cluster.stop()
            ns.close()
    one = statistics.median(r["rollouts_per_s"] for r in runs[1])
    two = statistics.median(r["rollouts_per_s"] for r in runs[2])
    result = {
        "what": "skillopt eval --executor ray: steady-state rollouts/s, 1 vs 2 worker nodes",
        "command": " ".join(["python perf/ray_scaling.py", *sys.argv[1:]]).strip(),
        "fake_server_delay_s": DELAY_S, "tasks": args.tasks, "concurrency": args.concurrency,
        "slots_per_node": args.node_cpus, "repeats": args.repeats,
        "one_node_rollouts_per_s": one, "two_nodes_rollouts_per_s": two, "ratio": round(two / one, 3),
        "ideal_rollouts_per_s_per_node": round(args.node_cpus / DELAY_S, 1),
        "runs": runs, "stray_processes_after_stop": len(left), "niceness": os.nice(0), "machine": machine(),
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(json.dumps({k: v for k, v in result.items() if k not in ("runs", "machine")}, indent=2))


if __name__ == "__main__":
    main()
