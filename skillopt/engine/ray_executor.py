"""The `ray` executor: a run's rollouts spread over the nodes of a Ray cluster (`--executor ray`).

Each rollout is a Ray task that asks for what `executor` says one rollout needs (CPUs, memory,
custom resources; a container benchmark adds `docker: 1`), so the cluster's resources bound how
many run at once, and the runner keeps no more than that in flight (`slots`). The task runs on a
worker in a `LocalExecutor` of its own (`engine.ray_worker`): the workspace is prepared there,
the agent runs there, grading happens there. The result (rollout, trace, usage, score) comes back
to this process, the driver, which alone writes the run store, as with the local executor.

Faults:
- a worker process or node lost mid-rollout: Ray runs the task again on a node that is up, at most
  `executor.max_retries` times; the driver records the rollout once, when its result arrives, and
  the budget counts it once. A rollout still lost after that is an errored rollout (infrastructure:
  never a score, retried later), never a crash. A completed rollout is never run again: its
  result is small (compressed) and comes back inline, so no node holds it when it goes down.
- an exception in skillopt's own code on a worker is raised here, as it would be in this process.
- the driver killed: Ray ends its tasks with it; `skillopt run --resume` connects again and runs
  what was not recorded.

Before the first rollout, every node that can hold a rollout builds what it needs (a probe): a
node without the extras, the sandbox, Docker or the data stops the run there in one line, as does
a model endpoint the nodes cannot reach (a URL on this machine's loopback, the embedded `local:`
model, the token-capture proxy behind a `ray://` client connection).
"""

from __future__ import annotations

import logging
import socket
import time
from pathlib import Path
from typing import Any, Self
from urllib.parse import urlsplit

import skillopt
from skillopt.benchmarks.base import Benchmark
from skillopt.benchmarks.registry import is_jsonl_path
from skillopt.config import ExecutorConfig, RunConfig
from skillopt.engine.executor import RolloutJob, RolloutResult, errored
from skillopt.engine.ray_worker import NodeModel, NodeReport, WorkerSpec, node_model_name, probe, run_rollout
from skillopt.errors import BadInput, require
from skillopt.harness.base import Limits
from skillopt.models.spec import ModelSpec
from skillopt.models.types import ProviderEnv

SLOTS_REFRESH_S = 5.0  # how often the cluster's nodes are counted again
LOOPBACK_HOSTS = ("localhost", "::1", "0.0.0.0")


def rollout_resources(ex: ExecutorConfig, docker: bool) -> dict[str, float]:
    """What one rollout asks of a node, in Ray's resource names (memory in bytes)."""
    need = {"CPU": ex.num_cpus, **ex.resources}
    if ex.memory_mb:
        need["memory"] = ex.memory_mb * 2**20
    if docker:
        need.setdefault("docker", 1.0)
    return {k: float(v) for k, v in need.items() if v > 0}


def node_slots(resources: dict[str, float], need: dict[str, float]) -> int:
    """How many rollouts a node with these resources runs at once (unbounded: a large number)."""
    fits = [int(resources.get(k, 0.0) / v + 1e-9) for k, v in need.items()]
    return min(fits) if fits else 10**6


def is_loopback(url: str | None) -> bool:
    host = (urlsplit(url).hostname or "") if url else ""
    return host.startswith("127.") or host in LOOPBACK_HOSTS


def check_reachable(target: ModelSpec, env: ProviderEnv, hosts: set[str], driver: str, capture: bool,
                    client: bool) -> None:
    """Whether the rollouts on these nodes can reach their model; else `BadInput`, in one line.
    `hosts`: the nodes' addresses; `capture`: the target goes through this process's recording proxy;
    `client`: this process talks to the cluster through a `ray://` client connection."""
    if target.provider == "local":  # each node serves it (ray_worker.NodeModel): nothing to reach across nodes
        return
    if capture and client:
        raise BadInput(f"token capture for {target} needs its recording proxy, which runs in this process, to be "
                       f"reachable from the cluster's nodes, and a ray:// client connection gives no such address: "
                       f"run skillopt on the cluster's head node (--ray-address auto) or use --executor local")
    spread = len(hosts | {driver}) > 1
    url = f"http://{driver}" if capture else target.base_url or _env_url(target, env)
    if spread and is_loopback(url):
        where = "the token-capture proxy" if capture else f"the target's URL {url}"
        raise BadInput(f"{where} is on this machine's loopback, which the cluster's other nodes "
                       f"({', '.join(sorted(hosts - {driver})) or '?'}) cannot reach: give the server's address on the "
                       f"cluster's network, or use --executor local")


def _env_url(target: ModelSpec, env: ProviderEnv) -> str | None:
    return {"openai": env.openai_base_url, "anthropic": env.anthropic_base_url,
            "azure": env.azure_openai_endpoint}.get(target.provider)


class RayExecutor:
    """Rollouts on a Ray cluster; a context manager (connects, checks every node, disconnects).
    See the module docstring."""

    name = "ray"

    def __init__(self, cfg: RunConfig, run_id: str, env: ProviderEnv, limits: Limits, target: ModelSpec,
                 benchmark: Benchmark, docker: bool = False):
        self.cfg, self.ex, self.target, self.env = cfg, cfg.executor, target, env
        self.address = self.ex.address or "auto"
        self.need = rollout_resources(self.ex, docker)
        data, name = None, None
        if is_jsonl_path(cfg.benchmark):  # the nodes get the data, not the path
            data, name = Path(cfg.benchmark).read_bytes(), Path(cfg.benchmark).name
        self._data = data
        self._spec = WorkerSpec(run_id=run_id, config=cfg, env=env, limits=limits, data_name=name).model_dump_json()
        self.run_id = run_id
        self._ray: Any = None
        self._task: Any = None
        self._models: list[Any] = []  # NodeModel actors, one per node, for a local: target
        self._data_ref: Any = None
        self._slots, self._slots_at = 1, 0.0
        self.callback_host = "127.0.0.1"  # where the nodes reach this process (the driver's node address)
        self.note: str | None = None

    # lifecycle ---------------------------------------------------------------------------------------
    def start(self) -> Self:
        ray = self._ray = require("ray", "--executor ray", "ray")
        self._check_address()
        try:
            ray.init(address=self.address, namespace="skillopt", log_to_driver=False, logging_level=logging.WARNING)
        except Exception as e:  # ConnectionError, version mismatch, bad address: one line
            first = (str(e).strip().splitlines() or [type(e).__name__])[0][:300].rstrip(".")
            raise BadInput(f"cannot use the Ray cluster at {self.address}: {first}; start one with `ray start --head` "
                           f"or give its address with --ray-address HOST:PORT (or ray://HOST:10001)") from None
        try:
            self._check_cluster(ray)
        except BaseException:
            self.close()
            raise
        return self

    def _check_address(self) -> None:
        """A HOST:PORT (or ray://) address that nothing answers fails in seconds, not after Ray's long retries."""
        if self.address == "auto":
            return
        hostport = self.address.removeprefix("ray://").rsplit("/", 1)[0]
        host, _, port = hostport.rpartition(":")
        try:
            socket.create_connection((host.strip("[]") or "127.0.0.1", int(port)), timeout=10).close()
        except (OSError, ValueError) as e:
            why = e.strerror if isinstance(e, OSError) and e.strerror else "not HOST:PORT"
            raise BadInput(f"no Ray cluster answers at {self.address} ({why}): start one with `ray start --head` "
                           f"there, or give the address of its head (--ray-address HOST:PORT or ray://HOST:10001)") from None

    def _check_cluster(self, ray: Any) -> None:
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        here = ray.get_runtime_context().get_node_id()
        self.callback_host = next((n["NodeManagerAddress"] for n in nodes if n["NodeID"] == here), "127.0.0.1")
        usable = [n for n in nodes if node_slots(n.get("Resources", {}), self.need) > 0]
        if not usable:
            raise BadInput(f"no node of the Ray cluster at {self.address} has what a rollout asks for "
                           f"({_fmt(self.need)}): start workers with those resources (ray start --num-cpus N "
                           f"--resources '{{\"docker\": 8}}') or ask for less (--set executor.num_cpus=...)")
        check_reachable(self.target, self.env, {n["NodeManagerAddress"] for n in nodes}, self.callback_host,
                        self.target.captures_tokens or self.cfg.capture_tokens, self.address.startswith("ray://"))
        self._data_ref = ray.put(self._data) if self._data is not None else None
        if self.target.provider == "local":
            self._node_models(ray, usable)
        self._probe(ray, usable)
        options: dict[str, Any] = {"num_cpus": self.need.get("CPU", 0.0), "max_retries": self.ex.max_retries,
                                   "retry_exceptions": False}
        if "memory" in self.need:
            options["memory"] = self.need["memory"]
        custom = {k: v for k, v in self.need.items() if k not in ("CPU", "memory")}
        if custom:
            options["resources"] = custom
        self._task = ray.remote(run_rollout).options(**options)
        slots = self.slots()
        self.note = (f"ray: {len(usable)} node(s) at {self.address} run rollouts, {slots} at once "
                     f"({_fmt(self.need)} each)")

    def _node_models(self, ray: Any, nodes: list[dict]) -> None:
        """The embedded model's server of each node (`NodeModel`), checked there before any rollout;
        the actors are this process's: they end with it, and their servers with them."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        actor, job = ray.remote(NodeModel), ray.get_runtime_context().get_job_id()
        self._models = [actor.options(name=node_model_name(self.run_id, job, n["NodeID"]), num_cpus=0,
                                      scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False))
                        .remote(self.target.model, min(node_slots(n.get("Resources", {}), self.need),
                                                       self.cfg.train.concurrency))
                        for n in nodes]
        for node, model in zip(nodes, self._models):
            try:
                why = ray.get(model.check.remote())
            except Exception as e:  # skillopt not importable there, the actor died...
                why = (str(e).strip().splitlines() or [type(e).__name__])[-1][:300]
            if why:
                raise BadInput(f"Ray node {node['NodeManagerAddress']}/{node['NodeID'][:8]} cannot serve the embedded "
                               f"model {self.target}: {why}")

    def _probe(self, ray: Any, nodes: list[dict]) -> None:
        """Every node that can hold a rollout builds what it needs, before the first rollout."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        remote = ray.remote(probe)
        refs = [remote.options(num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False))
                .remote(self._spec, self._data_ref) for n in nodes]
        for node, ref in zip(nodes, refs):
            where = f"{node['NodeManagerAddress']}/{node['NodeID'][:8]}"
            try:
                report: NodeReport = ray.get(ref)
            except Exception as e:  # skillopt not importable there, the worker died...
                first = (str(e).strip().splitlines() or [type(e).__name__])[-1][:300]
                raise BadInput(f"Ray node {where} cannot run rollouts: {first}; install the same skillopt (with "
                               f"the extras this run needs) on every node") from None
            if report.error:
                raise BadInput(f"Ray node {report.node} cannot run rollouts: {report.error}")
            if report.skillopt != skillopt.__version__:
                raise BadInput(f"Ray node {report.node} runs skillopt {report.skillopt}, this process "
                               f"{skillopt.__version__}: install the same version on every node")

    def close(self) -> None:
        if self._ray is not None and self._ray.is_initialized():
            self._ray.shutdown()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # rollouts ----------------------------------------------------------------------------------------
    def slots(self) -> int:
        """Rollouts the cluster's live nodes can run at once (counted again every few seconds)."""
        if self._ray is None or time.monotonic() - self._slots_at < SLOTS_REFRESH_S:
            return self._slots
        nodes = [n for n in self._ray.nodes() if n.get("Alive")]
        self._slots = max(1, sum(node_slots(n.get("Resources", {}), self.need) for n in nodes))
        self._slots_at = time.monotonic()
        return self._slots

    async def execute(self, job: RolloutJob) -> RolloutResult:
        ray = self._ray
        ref = self._task.remote(self._spec, self._data_ref, job)
        try:
            packed = await ref
        except ray.exceptions.RayTaskError as e:  # skillopt's own code raised on the worker: as it would here
            cause = getattr(e, "cause", None)
            raise cause if isinstance(cause, BaseException) else e
        except ray.exceptions.RayError as e:  # the worker or its node was lost, after Ray's retries
            first = (str(e).strip().splitlines() or [""])[0][:200]
            return errored(job.task.id, f"lost on the Ray cluster after {self.ex.max_retries} retries: "
                                        f"{type(e).__name__}: {first}")
        except BaseException:
            ray.cancel(ref)
            raise
        return RolloutResult.unpack(packed)


def _fmt(need: dict[str, float]) -> str:
    return ", ".join(f"{k} {v / 2**20:g} MiB" if k == "memory" else f"{k} {v:g}" for k, v in need.items()) or "nothing"
