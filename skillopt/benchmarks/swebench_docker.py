"""`swebench`: SWE-bench instances in their containers (needs a Docker engine).

Instances come from a hub name (`verified`, `lite`, `full` or any `owner/name`), a local `.json` /
`.jsonl` / `.parquet` file of SWE-bench 5.x rows (each with its `image`, else
`<image_prefix>/sweb.eval.x86_64.<id>:latest`, `eval_script`, `log_parser`, `eval_type`), or
`swe-local`: the shipped `swe-local` tasks in the images `skillopt benchmarks build-images` makes.

Where the agent works (`agent_in_container`):
- **inside the instance's container** (default): `prepare` writes a `TaskContainer` into the
  workspace; the agent harness starts a container from the image (limits, labels, host network),
  mounts its agent binary read-only, and runs the agent there on the container's own `/testbed`;
  the patch is the `git diff` taken there (new files included). Nothing else of the host is visible.
- **on the host**: `prepare` copies `/testbed` out of a container into the workspace, and (with
  `mount_workspace`) starts a *work* container that sees it at `/testbed`, so the agent can run
  commands in the instance's environment with `.skillopt/env <command>`.

`score` grades the patch in a fresh container from the same image (`swe_docker_grading.evaluate`):
reward 1.0 when resolved. Logs per rollout (`patch.diff`, `eval.sh`, `test_output.txt`,
`report.json`) go to `log_dir/<instance>/<time>-<id>/` (default: `swe-logs/` beside the workspaces,
under the run, where no agent container can see them). Containers are removed on every way out;
before any rollout, containers a dead skillopt process left (kill -9) are removed. A missing
Docker engine or image fails in `preflight`, before any rollout, with one line.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import time
import uuid
import weakref
from collections.abc import Sequence
from functools import cached_property
from pathlib import Path
from typing import Any

from skillopt.benchmarks.base import RolloutOutput, Score, SplitSizes, SplitTasks, Task
from skillopt.benchmarks.docker_engine import (
    WORKDIR,
    ContainerLimits,
    ContainerSpec,
    Docker,
    SetupError,
    container_name,
    docker_client,
    labels,
    remove_orphans,
)
from skillopt.benchmarks.environment import TaskContainer
from skillopt.benchmarks.registry import benchmark
from skillopt.benchmarks.swe_docker_grading import evaluate, image_name
from skillopt.git import base_commit
from skillopt.benchmarks.swe_grading import (
    GradeReport,
    SweInstance,
    grading,
    instance_of,
    load_instances,
    parse_instance,
    rollout_patch,
    swe_task,
)
from skillopt.errors import BadInput

DATASETS = {"verified": "SWE-bench/SWE-bench_Verified", "lite": "SWE-bench/SWE-bench_Lite",
            "full": "SWE-bench/SWE-bench"}
ENV_SCRIPT = """\
#!/bin/sh
# Runs a command in this task's container (the repository's environment), in /testbed.
exec docker exec -w /testbed {name} bash -c 'source /opt/miniconda3/bin/activate testbed >/dev/null 2>&1; eval "$1"' _ "$*"
"""
ENV_NOTE = ("The repository's environment (its Python and dependencies) runs in a container that sees "
            "this folder as /testbed: run commands there with `.skillopt/env <command>`, "
            "for example `.skillopt/env python -m pytest tests/test_x.py`.")


def load_rows(dataset: str, split: str = "test", prefix: str = "local") -> list[SweInstance]:
    """Rows of a local file, a hub data set, or `swe-local`; rows without an eval script are refused."""
    path = Path(dataset)
    if dataset == "swe-local":
        from skillopt.benchmarks.swe_images import swebench_row
        from skillopt.benchmarks.swe_local import default_tasks_file

        return [swebench_row(i, prefix) for i in load_instances(default_tasks_file())]
    if path.suffix in (".json", ".jsonl"):
        instances = load_instances(path)
    elif path.suffix == ".parquet":
        if not path.is_file():
            raise BadInput(f"SWE-bench file {path} not found")
        import pyarrow.parquet as pq

        rows = pq.read_table(path).to_pylist()
        instances = [parse_instance(r, f"{path}[{i}]") for i, r in enumerate(rows)]
    else:
        grading()
        from swebench.harness.utils import load_swebench_dataset

        name = DATASETS.get(dataset.lower(), dataset)
        try:
            rows = load_swebench_dataset(name, split)
        except Exception as e:
            raise BadInput(f"SWE-bench data set {name!r} (split {split}) cannot be loaded: "
                           f"{str(e).splitlines()[0][:200] if str(e) else type(e).__name__}") from None
        instances = [parse_instance(dict(r), f"{name}[{i}]") for i, r in enumerate(rows)]
    lacking = [i.instance_id for i in instances if not i.eval_script]
    if lacking:
        raise BadInput(f"{dataset}: {len(lacking)} rows (e.g. {lacking[0]}) have no eval_script: the Docker path "
                       "needs SWE-bench 5.x rows (image, eval_script, log_parser, eval_type)")
    return instances


class SWEBenchDocker(SplitTasks):
    """SWE-bench in containers (see the module docstring)."""

    max_answer_tokens = 4096
    uses_docker = True  # RunsContainers: on a Ray cluster, each rollout takes a `docker` slot

    def __init__(self, load: Any, sizes: SplitSizes | None = None, docker: Docker | None = None,
                 limits: ContainerLimits | None = None, prefix: str = "swebench", agent_in_container: bool = True,
                 mount_workspace: bool = True, log_dir: Path | None = None, name: str = "swebench"):
        self.name = name
        self._load = load
        self.sizes = sizes or SplitSizes()
        self._docker = docker
        self.limits = limits or ContainerLimits()
        self.prefix, self.agent_in_container = prefix, agent_in_container
        self.host_agent_uses_docker = not agent_in_container  # benchmarks.base.DrivesContainerFromHost
        self.mount_workspace, self.log_dir = mount_workspace, log_dir
        self._work: dict[str, Any] = {}  # workspace -> its work container (agent on the host)
        self._setup_errors: dict[str, str] = {}
        self.run_id: str | None = None  # labels its containers (`LabelsByRun`)
        atexit.register(_close_ref, weakref.ref(self))

    @property
    def docker(self) -> Docker:
        if self._docker is None:
            self._docker = Docker(docker_client())
        return self._docker

    def preflight(self) -> None:
        """Before any rollout: the swe extra, a Docker engine, no containers left by a dead skillopt,
        and every instance's image here (pulled when it is not)."""
        grading()
        remove_orphans(self.docker.client)
        for image in sorted({image_name(instance_of(t), self.prefix) for t in self.tasks("all")}):
            try:
                self.docker.ensure_image(image)
            except SetupError as e:
                hint = (" (build it: skillopt benchmarks build-images --benchmark swe-local)"
                        if "sweb.eval." in image and not image.startswith("swebench/") else "")
                raise BadInput(f"{e}{hint}") from None

    @cached_property
    def _by_id(self) -> dict[str, Task]:
        note = "" if self.agent_in_container or not self.mount_workspace else ENV_NOTE
        return {i.instance_id: swe_task(i, note) for i in self._load()}

    def bind_run(self, run_id: str) -> None:
        """`LabelsByRun`: the containers started from now on carry `run_id`."""
        self.run_id = run_id

    def prepare(self, task: Task, ws: Path) -> None:
        """The agent's container (inside), or `/testbed` copied into the workspace and a work container
        (on the host). Failures are remembered and scored, never raised."""
        inst, key = instance_of(task), str(Path(ws).resolve())
        if self.agent_in_container:
            lim = self.limits
            TaskContainer(image=image_name(inst, self.prefix), instance=inst.instance_id, workdir=WORKDIR,
                          memory=lim.memory, cpus=lim.cpus, pids=lim.pids, wall_s=lim.wall_s,
                          run=self.run_id).write(Path(ws))
            return
        try:
            self._copy_testbed(inst, Path(ws))
            if self.mount_workspace:
                self._start_work(inst, Path(ws))
        except Exception as e:  # SetupError, docker errors, a broken archive...
            self._setup_errors[key] = str(e) or type(e).__name__

    def _copy_testbed(self, inst: SweInstance, ws: Path) -> None:
        spec = ContainerSpec(image=image_name(inst, self.prefix), name=container_name("copy", inst.instance_id),
                             labels=labels("copy", inst.instance_id, self.run_id), limits=self.limits)
        box = self.docker.create(spec, start=False)
        try:
            self.docker.copy_out(box, WORKDIR, ws)
        finally:
            self.docker.remove(box)
        _commit_leftovers(ws)

    def _start_work(self, inst: SweInstance, ws: Path) -> None:
        spec = ContainerSpec(image=image_name(inst, self.prefix), name=container_name("work", inst.instance_id),
                             labels=labels("work", inst.instance_id, self.run_id), limits=self.limits,
                             mounts={str(ws.resolve()): WORKDIR}, environment={"PYTHONDONTWRITEBYTECODE": "1"})
        self._work[str(ws.resolve())] = self.docker.create(spec)
        env = ws / ".skillopt" / "env"
        env.parent.mkdir(exist_ok=True)
        env.write_text(ENV_SCRIPT.format(name=spec.name), encoding="utf-8")
        env.chmod(0o755)

    def release(self, ws: Path) -> None:
        """Remove the workspace's work container, giving its files back to this user first."""
        container = self._work.pop(str(Path(ws).resolve()), None)
        if container is None:
            return
        if hasattr(os, "getuid") and os.getuid() != 0:
            try:
                self.docker.exec(container, f"chown -R {os.getuid()}:{os.getgid()} {WORKDIR}", 300)
            except Exception:
                pass
        self.docker.remove(container)

    def grade(self, task: Task, patch: str, log_dir: Path | None = None, run: str | None = None,
              run_empty: bool = False) -> GradeReport:
        """Grade a patch for a task (blocking)."""
        return evaluate(self.docker, instance_of(task), patch, self.limits, self.prefix, log_dir, run, run_empty)

    async def score(self, task: Task, out: RolloutOutput, ws: Path) -> Score:
        await asyncio.to_thread(self.release, ws)
        err = self._setup_errors.pop(str(Path(ws).resolve()), None)
        if err:
            return Score(hard=0, soft=0, feedback=f"setup failed, nothing was graded: {err}")
        patch, where = await asyncio.to_thread(rollout_patch, out, None if self.agent_in_container else Path(ws))
        stamp = f"{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:6]}"
        log_dir = (self.log_dir or Path(ws).parent / "swe-logs") / task.id / stamp
        report = await asyncio.to_thread(self.grade, task, patch, log_dir, self.run_id)
        s = report.score
        return s.model_copy(update={"feedback": f"{s.feedback} (patch from {where})"}) if patch else s

    def close(self) -> None:
        """Remove every container this benchmark started (also run at interpreter exit)."""
        self._work.clear()
        if self._docker is not None:
            self._docker.close()


def _close_ref(ref: weakref.ReferenceType) -> None:
    bench = ref()
    if bench is not None:
        bench.close()


def _commit_leftovers(ws: Path) -> None:
    """Commit what the image left uncommitted in /testbed, so the diff holds only the agent's work."""
    if (ws / ".git").exists():
        base_commit(ws, "skillopt: the image's uncommitted state")


@benchmark("swebench", description="SWE-bench instances in their Docker images (needs Docker)")
def _swebench(sizes: SplitSizes, dataset: str = "verified", split: str = "test",
              instance_ids: list[str] | str | None = None, image_prefix: str | None = None,
              namespace: str | None = None, agent_in_container: bool = True, memory: str = "8g",
              cpus: float = 2.0, pids: int = 4096, eval_timeout_s: float = 1800.0, wall_s: float = 7200.0,
              mount_workspace: bool = True, log_dir: str | None = None) -> SWEBenchDocker:
    """`image_prefix` (alias `namespace`): where rows without an `image` find theirs
    (default `swebench`, Docker Hub's; `local` for `dataset=swe-local`)."""
    wanted = ([s.strip() for s in instance_ids.split(",")] if isinstance(instance_ids, str)
              else list(instance_ids or []))
    prefix = image_prefix or namespace or ("local" if dataset == "swe-local" else "swebench")

    def load() -> Sequence[SweInstance]:
        rows = load_rows(dataset, split, prefix)
        if wanted:
            unknown = sorted(set(wanted) - {r.instance_id for r in rows})
            if unknown:
                raise BadInput(f"{dataset}: no instance {', '.join(unknown)}")
            rows = [r for r in rows if r.instance_id in set(wanted)]
        return rows

    bench = SWEBenchDocker(load, sizes, limits=ContainerLimits(memory, cpus, pids, eval_timeout_s, wall_s),
                           prefix=prefix, agent_in_container=agent_in_container, mount_workspace=mount_workspace,
                           log_dir=Path(log_dir) if log_dir else None)
    _ = bench.docker  # no Docker engine: one line, before any rollout
    return bench
