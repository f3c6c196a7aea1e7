"""SWE-bench in containers: rollouts/min with 1, 2 and 4 containers at once, against the scripted fake
model server, through the real CLI (`skillopt eval`), with the agent inside the instance's container
and with the agent on the host driving the container's shell. Each rollout: the real agent binary
starts, runs one command that applies the fix, answers; the patch is graded in a fresh container.

Needs a Docker engine and the images (`skillopt benchmarks build-images --ids ...`, built here if
missing). Usage:
    python perf/swe_containers.py [--rollouts 12] [--containers 1,2,4] [--harness claude-code]
                                  [--placement inside,host] [--big-mb 100] [--out perf/results/swe_containers.json]

`--big-mb N` also runs 3 rollouts of each placement on a copy of the toolz image whose `/testbed` holds
N MB more committed files (SWE-bench's repositories are tens to hundreds of MB with their history):
the agent on the host needs `/testbed` copied out for every rollout, the agent inside does not.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.fakes.agent_scripts import shell_call  # noqa: E402
from tests.fakes.server import FakeModelServer, FakeReply, FakeRequest  # noqa: E402
from tests.helpers import cli_env  # noqa: E402
from tests.swe_docker import IDS, images  # noqa: E402


def agent(gold: dict[str, str]):
    def script(req: FakeRequest) -> FakeReply:
        if not req.tools:
            return FakeReply(text="ok")
        if req.tool_results:
            return FakeReply(text="Done.")
        text = "\n".join(m.text for m in req.messages)
        patch = next(p for s, p in gold.items() if s in text)
        return FakeReply(tool_calls=(shell_call(req, f"git apply - <<'EOF'\n{patch}EOF\n"),))
    return script


class PeakContainers:
    """Polls the engine for skillopt containers; `peak` is the most seen at once (by purpose)."""

    def __init__(self):
        import docker

        self.client, self.peak, self._stop = docker.from_env(), {}, threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        while not self._stop.is_set():
            seen: dict[str, int] = {}
            for c in self.client.api.containers(filters={"label": "skillopt=1"}):  # no inspect: no race
                purpose = (c.get("Labels") or {}).get("skillopt.purpose", "?")
                seen[purpose] = seen.get(purpose, 0) + 1
            for k, v in seen.items():
                self.peak[k] = max(self.peak.get(k, 0), v)
            self._stop.wait(0.2)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def big_image(mb: int) -> str:
    """The first instance's image with `mb` MB more of committed files in /testbed (1,000 files)."""
    import docker

    client, name = docker.from_env(), f"local/swe-perf-big:{mb}mb"
    try:
        client.images.get(name)
        return name
    except docker.errors.ImageNotFound:
        pass
    kb = max(1, mb * 1024 // 1000)
    script = (f"mkdir -p /testbed/bulk && for i in $(seq 1000); do head -c {kb}K /dev/urandom > /testbed/bulk/f$i.bin; done "
              "&& cd /testbed && git add -A && git -c user.name=p -c user.email=p@l commit -qm bulk")
    images(IDS)
    box = client.containers.run(f"local/sweb.eval.x86_64.{IDS[0]}:latest", ["bash", "-c", script], detach=True)
    try:
        assert box.wait()["StatusCode"] == 0, box.logs()[-500:]
        box.commit(repository="local/swe-perf-big", tag=f"{mb}mb")
    finally:
        box.remove(force=True)
    return name


def one(harness: str, placement: str, n: int, rollouts: int, srv: FakeModelServer, tmp: Path,
        rows: Path | None = None) -> dict:
    trials = max(1, rollouts // (1 if rows else len(IDS)))
    target = (f"anthropic:fake@{srv.base_url}" if harness == "claude-code" else f"openai:fake@{srv.base_url}/v1")
    cmd = [sys.executable, "-m", "skillopt", "eval", "--skill", str(REPO / "skills/default/SKILL.md"),
           "--benchmark", "swebench", "--split", "all", "--harness", harness, "--target_model", target,
           "--trials", str(trials), "--concurrency", str(n),
           "--set", f"benchmark_options.dataset={rows or 'swe-local'}",
           "--set", f"benchmark_options.instance_ids={IDS[0] if rows else ','.join(IDS)}",
           "--set", f"benchmark_options.agent_in_container={str(placement == 'inside').lower()}",
           "--set", f"harness_options.max_processes={n}", "--set", "harness_options.mode=cli",
           "--set", "benchmark_options.cpus=1", "--set", "benchmark_options.memory=2g"]
    with PeakContainers() as peak:
        t0 = time.perf_counter()
        r = subprocess.run(cmd, cwd=tmp, env=cli_env(tmp), capture_output=True, text=True, timeout=1800)
        wall = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit(f"{harness}/{placement}/{n}: {r.stderr[-2000:]}")
    run = max((tmp / "runs").glob("eval-*"), key=lambda p: p.stat().st_mtime)
    recs = [json.loads(x) for x in (run / "rollouts.jsonl").read_text().splitlines()]
    return {"harness": harness, "placement": placement, "containers": n, "rollouts": len(recs),
            "testbed": "big" if rows else "shipped",
            "wall_s": round(wall, 1), "rollouts_per_min": round(len(recs) / wall * 60, 2),
            "agent_s_mean": round(sum(x["duration_s"] for x in recs) / len(recs), 2),
            "resolved": sum(x["hard"] == 1.0 for x in recs), "errors": sum(bool(x["error"]) for x in recs),
            "peak_containers": peak.peak}


def machine() -> dict:
    docker = subprocess.run(["docker", "version", "--format", "{{.Server.Version}}"], capture_output=True,
                            text=True).stdout.strip()
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return {"cpus": os.cpu_count(), "memory_gib": round(mem, 1), "platform": platform.platform(),
            "python": platform.python_version(), "docker_server": docker,
            "load_avg_at_start": [round(x, 2) for x in os.getloadavg()]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rollouts", type=int, default=12)
    ap.add_argument("--containers", default="1,2,4")
    ap.add_argument("--harness", default="claude-code")
    ap.add_argument("--placement", default="inside,host")
    ap.add_argument("--big-mb", type=int, default=0)
    ap.add_argument("--out", default=str(REPO / "perf" / "results" / "swe_containers.json"))
    args = ap.parse_args()
    images(IDS)
    from skillopt.benchmarks.swe_grading import load_instances
    from skillopt.benchmarks.swe_local import SHIPPED_TASKS

    gold = {i.problem_statement.strip()[:200]: i.patch for i in load_instances(SHIPPED_TASKS) if i.instance_id in IDS}
    result = {"machine": machine(), "time": time.strftime("%Y-%m-%dT%H:%M:%S"), "runs": []}
    with tempfile.TemporaryDirectory() as tmp, FakeModelServer(agent(gold)) as srv:
        for placement in args.placement.split(","):
            for n in (int(x) for x in args.containers.split(",") if x):
                row = one(args.harness, placement, n, args.rollouts, srv, Path(tmp))
                print(json.dumps(row), flush=True)
                result["runs"].append(row)
        if args.big_mb:
            from skillopt.benchmarks.swe_images import swebench_row

            inst = next(i for i in load_instances(SHIPPED_TASKS) if i.instance_id == IDS[0])
            rows = Path(tmp) / "big.jsonl"
            rows.write_text(swebench_row(inst).model_copy(update={"image": big_image(args.big_mb)})
                            .model_dump_json(exclude_none=True) + "\n")
            for placement in args.placement.split(","):
                row = one(args.harness, placement, 1, 3, srv, Path(tmp), rows) | {"extra_mb": args.big_mb}
                print(json.dumps(row), flush=True)
                result["runs"].append(row)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"written: {args.out}")


if __name__ == "__main__":
    main()
