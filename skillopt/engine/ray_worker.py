"""What runs on a Ray worker: the rollouts of one run, in a `LocalExecutor` of the worker's own.

A worker process builds, once per run, everything a rollout needs from the `WorkerSpec` the driver
sends (typed values: the run's configuration, the provider settings, the limits): the benchmark
(its preflight too: a Docker engine, the instance images), the harness with its models, the
bubblewrap sandbox and, for agent harnesses, a model relay of its own on the node's 127.0.0.1, so
agents never hold the key there either. Workspaces and grading logs go to a folder of the node
(`executor.work_dir`, default its temp folder), never to the run folder: the driver alone writes
the run store. Each task returns the `RolloutResult` packed (compressed JSON).

For an embedded-model target (`local:`), each node serves the model itself: the driver starts a
`NodeModel` actor on every node, and the worker processes there reach its one llama.cpp server on
the node's 127.0.0.1 (a node that joins later has each worker process serve its own).

Imported by Ray in worker processes; it imports ray only inside its functions.
"""

from __future__ import annotations

import asyncio
import atexit
import hashlib
import os
import shutil
import sys
import tempfile
import threading
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict

import skillopt
from skillopt.config import RunConfig
from skillopt.engine.executor import LocalExecutor, RolloutJob
from skillopt.errors import SkilloptError
from skillopt.harness.base import Limits
from skillopt.models.spec import parse_model_spec
from skillopt.models.types import ProviderEnv


class WorkerSpec(BaseModel):
    """What a worker needs to run a run's rollouts. `data`: a `.jsonl` benchmark's content, so the
    file need not exist on the nodes (sent apart, through Ray's object store)."""

    model_config = ConfigDict(frozen=True)

    run_id: str
    config: RunConfig
    env: ProviderEnv  # keys reach the workers in the task's arguments, in the cluster's memory
    limits: Limits  # the effective limits (benchmark defaults, deterministic mode)
    data_name: str | None = None  # the .jsonl file's name, when `data` is sent


@dataclass(frozen=True)
class NodeReport:
    """A node's answer to the probe that runs before any rollout: its versions, or why it cannot run."""

    node: str
    python: str
    skillopt: str
    error: str | None = None


def node_label() -> str:
    """This node, as records name it: its address and the start of its Ray node id."""
    import ray

    ctx = ray.get_runtime_context()
    node_id = ctx.get_node_id()
    ip = next((n["NodeManagerAddress"] for n in ray.nodes() if n["NodeID"] == node_id), "?")
    return f"{ip}/{node_id[:8]}"


def node_model_name(run_id: str, job_id: str, node_id: str) -> str:
    """The name of the `NodeModel` actor of a run's driver on a node (in the driver's Ray namespace;
    the job id, so a resumed run never meets the actors of the driver it replaces)."""
    return f"model-{run_id}-{job_id}-{node_id}"


class NodeModel:
    """The embedded model of one node, for the rollouts that run there: a Ray actor that the driver
    pins to the node when the target is `local:`. One llama.cpp server on the node's 127.0.0.1, with
    as many slots as the node runs rollouts at once; started on first use (with the reply length the
    first rollout asks for), restarted if it died, stopped with the actor (it ends with the driver)."""

    def __init__(self, name: str, slots: int):
        self.name, self.slots = name, slots
        self.server = None

    def check(self) -> str | None:
        """Why this node cannot serve the model (no `local` extra, no weights), or None."""
        from skillopt.models.local import LocalServer, check_local_model

        try:
            check_local_model(self.name)
        except SkilloptError as e:
            return str(e)
        self.server = LocalServer(self.name, slots=self.slots)
        return None

    def base_url(self, reply_tokens: int | None) -> str:
        assert self.server is not None, "check() first"
        if reply_tokens and not self.server.alive():
            self.server.reply_tokens = reply_tokens
        return self.server.ensure_running().base_url


def use_node_model(run_id: str, model: str) -> bool:
    """Make this worker process reach `model` through its node's `NodeModel`; False if the node has
    none (it joined the cluster after the run started: this process then serves its own)."""
    import ray

    from skillopt.models.local import serve_elsewhere

    try:
        ctx = ray.get_runtime_context()
        actor = ray.get_actor(node_model_name(run_id, ctx.get_job_id(), ctx.get_node_id()))
    except ValueError:
        return False
    serve_elsewhere(model, lambda reply_tokens: ray.get(actor.base_url.remote(reply_tokens)))
    return True


class WorkerContext:
    """One worker process's means to run one run's rollouts (see the module docstring)."""

    def __init__(self, spec: WorkerSpec, data: bytes | None):
        from skillopt.engine.setup import harness_parts, make_models, open_benchmark
        from skillopt.models.meter import Meter
        from skillopt.benchmarks.base import LabelsByRun
        from skillopt.sandbox import RunsUntrustedCode
        from skillopt.store.layout import RunPaths

        self.root = Path(spec.config.executor.work_dir or tempfile.gettempdir()) / "skillopt" / spec.run_id
        cfg = spec.config
        if data is not None:  # the data file, written on this node
            path = self.root / "data" / (spec.data_name or "benchmark.jsonl")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            cfg = cfg.model_copy(update={"benchmark": str(path)})
        target = parse_model_spec(cfg.target_model) if cfg.target_model else None
        if target is not None and target.provider == "local":  # the node's server, not one per process
            use_node_model(spec.run_id, target.model)
        self._stack = ExitStack()
        try:
            benchmark = self._stack.enter_context(open_benchmark(cfg))
            models = make_models(cfg, spec.env, Meter(), None)
            harness, sandbox, relay = harness_parts(cfg, benchmark, models)
            if isinstance(benchmark, RunsUntrustedCode):  # grading logs stay on this node
                benchmark.isolate(sandbox, RunPaths(self.root).grading)
            if isinstance(benchmark, LabelsByRun):
                benchmark.bind_run(spec.run_id)
            if relay is not None:  # this node's relay: agents here reach their model through it
                self._stack.enter_context(relay)
            self.executor = LocalExecutor(harness, benchmark, spec.limits, RunPaths(self.root).work, os.getpid())
        except BaseException:
            self._stack.close()
            raise
        self.node = node_label()
        self._loop = asyncio.new_event_loop()
        threading.Thread(target=self._loop.run_forever, name="skillopt-rollouts", daemon=True).start()

    def run(self, job: RolloutJob) -> bytes:
        result = asyncio.run_coroutine_threadsafe(self.executor.execute(job), self._loop).result()
        return result.model_copy(update={"node": self.node}).pack()

    def close(self) -> None:
        self._stack.close()
        self._loop.call_soon_threadsafe(self._loop.stop)
        for lane in self.executor.lanes.work.glob(f"lane-{os.getpid()}-*"):
            shutil.rmtree(lane, ignore_errors=True)


_CONTEXT: tuple[str, WorkerContext] | None = None
_LOCK = threading.Lock()


def context(spec_json: str, data: bytes | None) -> WorkerContext:
    """This process's context for the run `spec_json` describes, built on first use (a worker
    process serves one driver; a new run replaces the old context)."""
    global _CONTEXT
    digest = hashlib.sha256(spec_json.encode()).hexdigest()
    with _LOCK:
        if _CONTEXT is not None and _CONTEXT[0] == digest:
            return _CONTEXT[1]
        if _CONTEXT is not None:
            _CONTEXT[1].close()
            _CONTEXT = None
        ctx = WorkerContext(WorkerSpec.model_validate_json(spec_json), data)
        _CONTEXT = (digest, ctx)
        return ctx


@atexit.register
def _close() -> None:
    if _CONTEXT is not None:
        _CONTEXT[1].close()


def run_rollout(spec_json: str, data: bytes | None, job: RolloutJob) -> bytes:
    """The Ray task of one rollout: its `RolloutResult`, packed."""
    return context(spec_json, data).run(job)


def probe(spec_json: str, data: bytes | None) -> NodeReport:
    """The Ray task run once on every node before any rollout: can this node run the run's
    rollouts (extras installed, sandbox, Docker, data)? Builds the context the rollouts will use."""
    python = ".".join(map(str, sys.version_info[:2]))
    try:
        node = context(spec_json, data).node
    except SkilloptError as e:
        return NodeReport(node_label(), python, skillopt.__version__, error=str(e))
    except Exception as e:  # noqa: BLE001 - anything that stops this node, said in one line
        return NodeReport(node_label(), python, skillopt.__version__, error=f"{type(e).__name__}: {e}")
    return NodeReport(node, python, skillopt.__version__)
