"""A real Ray cluster on this machine for the tests and `perf/ray_scaling.py`, in a network
namespace that has only loopback.

Outside a namespace, Ray ignores `--node-ip-address 127.0.0.1`: it picks the machine's external
address and probes a public DNS address to find its own. So every process of a test (the Ray
nodes, the fake model server, skillopt) lives in one namespace whose only interface is `lo`, and
nothing can leave 127.0.0.1. `LoopbackNamespace` holds it (a `sleep` in `unshare -n`); commands
enter it with `nsenter`, and `serve` opens the fake server's socket there from a thread that
joined it. Each node is `ray start --block` in a session of its own, so killing its process group
kills the node (raylet, workers, agents) and nothing else. Needs root.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")
CLONE_NEWNET = 0x40000000
PORT = 6390  # outside Ray's worker ports (10002-19999)
ADDRESS = f"127.0.0.1:{PORT}"
# a lost node is noticed in ~2 s instead of ~30 s (the head's health checks of the other nodes)
FAST_HEALTH = {"health_check_period_ms": 500, "health_check_failure_threshold": 4,
               "health_check_initial_delay_ms": 0, "health_check_timeout_ms": 1000}


def unavailable() -> str | None:
    """Why a cluster cannot run here (the tests skip with it), or None."""
    if os.geteuid() != 0:
        return "the Ray cluster tests need root (a network namespace with only loopback: unshare -n)"
    for tool in ("unshare", "nsenter", "ip"):
        if shutil.which(tool) is None:
            return f"the Ray cluster tests need `{tool}` (util-linux, iproute2)"
    try:
        import ray  # noqa: F401
    except ImportError:
        return "ray is not installed (pip install 'skillopt[ray]')"
    probe = subprocess.run(["unshare", "-n", "true"], capture_output=True)
    if probe.returncode != 0:
        return f"cannot make a network namespace here: {probe.stderr.decode().strip()[:200]}"
    return None


class LoopbackNamespace:
    """A network namespace with only `lo` (up), held by a sleeping process until `close`."""

    def __init__(self) -> None:
        self.holder = subprocess.Popen(["unshare", "-n", "sh", "-c", "ip link set lo up && echo up && exec sleep 1000000"],
                                       stdout=subprocess.PIPE, start_new_session=True)
        assert self.holder.stdout is not None
        if self.holder.stdout.readline().strip() != b"up":
            self.close()
            raise RuntimeError("the loopback namespace did not come up")
        self.path = f"/proc/{self.holder.pid}/ns/net"
        self.inode = os.stat(self.path).st_ino

    def command(self, argv: list[str]) -> list[str]:
        """`argv`, run inside the namespace."""
        return ["nsenter", f"--net={self.path}", *argv]

    def call(self, fn: Callable[[], T]) -> T:
        """`fn()` on a thread that joined the namespace: the sockets it opens live there."""
        out: dict[str, Any] = {}

        def inside() -> None:
            try:
                libc = ctypes.CDLL(None, use_errno=True)
                fd = os.open(self.path, os.O_RDONLY)
                try:
                    if libc.setns(fd, CLONE_NEWNET) != 0:
                        raise OSError(ctypes.get_errno(), "setns into the loopback namespace failed")
                finally:
                    os.close(fd)
                out["value"] = fn()
            except BaseException as e:  # noqa: BLE001 - raised again in the caller
                out["error"] = e

        t = threading.Thread(target=inside)
        t.start()
        t.join()
        if "error" in out:
            raise out["error"]
        return out["value"]

    def serve(self, server: Any) -> Any:
        """Start a `FakeModelServer` whose socket is in the namespace; the caller stops it."""
        return self.call(server.start)

    def processes(self) -> list[int]:
        """Live processes in the namespace, the holder excepted (zombies are not alive)."""
        pids = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == self.holder.pid:
                continue
            try:
                if os.stat(entry / "ns" / "net").st_ino != self.inode:
                    continue
                if (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                    continue
            except (OSError, IndexError):
                continue
            pids.append(int(entry.name))
        return pids

    def close(self) -> None:
        if self.holder.poll() is None:
            os.killpg(self.holder.pid, signal.SIGKILL)
        self.holder.wait(10)


class RayCluster:
    """A head node and worker nodes on 127.0.0.1 in `ns`; every node a process group we can kill."""

    def __init__(self, ns: LoopbackNamespace, env: dict[str, str], logs: Path):
        self.ns, self.logs = ns, logs
        self.env = {**env, "RAY_USAGE_STATS_ENABLED": "0"}
        self.temp = Path(tempfile.mkdtemp(prefix="ray-", dir="/tmp"))  # short: Ray's socket paths must fit
        self.nodes: list[subprocess.Popen] = []
        self.ray = str(Path(sys.executable).parent / "ray")

    def start(self, head_cpus: float, *worker_cpus: float) -> RayCluster:
        self._node(["--head", "--port", str(PORT), "--include-dashboard=false",
                    "--system-config", json.dumps(FAST_HEALTH)], head_cpus)
        for cpus in worker_cpus:
            self.add_node(cpus)
        return self

    def add_node(self, cpus: float, resources: dict[str, float] | None = None) -> subprocess.Popen:
        extra = ["--resources", json.dumps(resources)] if resources else []
        return self._node(["--address", ADDRESS, *extra], cpus)

    def _node(self, args: list[str], cpus: float, timeout_s: float = 120.0) -> subprocess.Popen:
        log = self.logs / f"ray-node-{len(self.nodes)}.log"
        argv = [self.ray, "start", *args, "--node-ip-address", "127.0.0.1", "--num-cpus", f"{cpus:g}",
                "--temp-dir", str(self.temp), "--disable-usage-stats", "--block"]
        with log.open("wb") as out:
            proc = subprocess.Popen(self.ns.command(argv), env=self.env, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        self.nodes.append(proc)
        deadline = time.monotonic() + timeout_s
        while b"Ray runtime started" not in log.read_bytes():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"a Ray node did not start: {log.read_text(errors='replace')[-2000:]}")
            time.sleep(0.2)
        return proc

    def kill(self, node: subprocess.Popen) -> None:
        """The node dies at once (SIGKILL to its process group: raylet, workers, agents)."""
        if node.poll() is None:
            os.killpg(node.pid, signal.SIGKILL)
        node.wait(30)

    def wait_alive(self, n: int, timeout_s: float = 60.0) -> None:
        """Until the head counts exactly `n` live nodes (a killed node is marked dead after missed
        health checks), so that what runs next never sees a node that is gone."""
        code = ("import sys, time, ray\n"
                f"ray.init(address={ADDRESS!r}, log_to_driver=False, logging_level='ERROR')\n"
                f"deadline = time.monotonic() + {timeout_s}\n"
                f"while sum(x['Alive'] for x in ray.nodes()) != {n}:\n"
                "    if time.monotonic() > deadline: sys.exit(1)\n"
                "    time.sleep(0.2)\n")
        r = subprocess.run(self.ns.command([sys.executable, "-c", code]), env=self.env, capture_output=True, text=True,
                           timeout=timeout_s + 60)
        if r.returncode != 0:
            raise RuntimeError(f"the Ray cluster did not come to {n} live node(s): {r.stderr[-2000:]}")

    def stop(self) -> list[int]:
        """Stop every node (worker nodes first); the processes still alive in the namespace."""
        for node in reversed(self.nodes):
            self.kill(node)
        deadline = time.monotonic() + 30
        while (left := self.ns.processes()) and time.monotonic() < deadline:
            time.sleep(0.2)
        shutil.rmtree(self.temp, ignore_errors=True)
        return left
