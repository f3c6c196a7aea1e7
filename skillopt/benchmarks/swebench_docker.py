"""`swebench`: SWE-bench instances in their official containers (needs a Docker engine).

Instances come from a hub name (`verified`, `lite`, `full` or any `owner/name`, through
`swebench.harness.utils.load_swebench_dataset`) or a local `.json` / `.jsonl` / `.parquet` file, in
the SWE-bench 5.x row shape: each row carries its `image` (else `swebench/sweb.eval.x86_64.<id>`,
`__` written `_1776_`), `eval_script`, `log_parser` and `eval_type`.

Per rollout:
- `prepare` pulls the instance image if needed, copies `/testbed` out of a container into the
  workspace (the agent on the host edits that copy) and, with `mount_workspace` (default), starts a
  *work* container with the workspace mounted at `/testbed` and the resource limits, so the agent
  can run commands in the instance's environment: `.skillopt/env <command>` (a script `prepare`
  writes; `.skillopt/` is kept out of the diff).
- `score` removes the work container, takes the patch (`out.patch`, else the workspace's
  `git diff`), and evaluates it as SWE-bench's harness does, in a fresh container with the limits:
  apply with the same fallbacks, run the row's eval script (through `make_test_spec`, which records
  the test exit code) under a timeout, grade the log with swebench's parser and report rules.
  Reward 1.0 when resolved. Logs per rollout: `patch.diff`, `eval.sh`, `test_output.txt`,
  `report.json` under `log_dir/<instance>/<workspace>/`.

Every container carries the labels `skillopt=1` and `skillopt.session=<id>`; each is removed on
every way out (normal end, failed apply, timeout, error), and `close()` (also run at exit) removes
any left. A missing Docker engine fails in the factory (`preflight`), before any rollout; an image
that cannot be pulled is a scored failure of that rollout.
"""

from __future__ import annotations

import asyncio
import atexit
import io
import os
import shlex
import tarfile
import tempfile
import uuid
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from skillopt.benchmarks.base import (
    RolloutOutput,
    Score,
    Split,
    SplitSizes,
    Task,
    assign_splits,
    data_hash,
)
from skillopt.benchmarks.registry import benchmark
from skillopt.benchmarks.swe_grading import (
    APPLY_CMDS,
    APPLY_PATCH_FAIL,
    APPLY_PATCH_PASS,
    TESTS_TIMEOUT,
    GradeReport,
    SweInstance,
    git,
    grade_log,
    grading,
    instance_of,
    load_instances,
    parse_instance,
    rollout_patch,
    swe_task,
    write_logs,
)
from skillopt.errors import BadInput, require

DATASETS = {"verified": "SWE-bench/SWE-bench_Verified", "lite": "SWE-bench/SWE-bench_Lite",
            "full": "SWE-bench/SWE-bench"}
WORKDIR = "/testbed"
PATCH_PATH = "/tmp/patch.diff"
ENV_SCRIPT = """\
#!/bin/sh
# Runs a command in this task's container (the repository's environment), in /testbed.
exec docker exec -w /testbed {name} bash -c 'source /opt/miniconda3/bin/activate testbed >/dev/null 2>&1; eval "$1"' _ "$*"
"""
ENV_NOTE = ("The repository's environment (its Python and dependencies) runs in a container that sees "
            "this folder as /testbed: run commands there with `.skillopt/env <command>`, "
            "for example `.skillopt/env python -m pytest tests/test_x.py`.")


class SetupError(Exception):
    """An image that cannot be pulled, a container that cannot start: a scored failure."""


def image_name(inst: SweInstance, namespace: str = "swebench") -> str:
    """The row's image, else the published name SWE-bench derives from the instance id."""
    if inst.image:
        return inst.image
    key = f"sweb.eval.x86_64.{inst.instance_id}:latest".lower()
    return f"{namespace}/{key}".replace("__", "_1776_")


def eval_script(inst: SweInstance, namespace: str = "swebench") -> str:
    """The row's eval script as swebench runs it (`make_test_spec`: test exit code recorded)."""
    grading()
    from swebench.harness.utils import make_test_spec

    return make_test_spec({**inst.row(), "image": image_name(inst, namespace)}).eval_script


def apply_commands(path: str = PATCH_PATH) -> list[str]:
    """SWE-bench's patch fallbacks, as shell commands on the patch file in the container."""
    return [f"{shlex.join(cmd)} {path}" for cmd in APPLY_CMDS]


@dataclass(frozen=True)
class ContainerLimits:
    memory: str = "8g"
    cpus: float = 2.0
    pids: int = 4096
    eval_timeout_s: float = 1800.0


@dataclass(frozen=True)
class ContainerSpec:
    """What `docker create` is given for one container."""

    image: str
    name: str
    labels: dict[str, str]
    limits: ContainerLimits
    mounts: dict[str, str] = field(default_factory=dict)  # host path -> container path
    environment: dict[str, str] = field(default_factory=dict)
    command: str = "tail -f /dev/null"
    user: str = "root"

    def create_kwargs(self) -> dict[str, Any]:
        return {
            "image": self.image, "name": self.name, "command": self.command, "detach": True, "user": self.user,
            "working_dir": WORKDIR, "labels": dict(self.labels), "environment": dict(self.environment),
            "mem_limit": self.limits.memory, "memswap_limit": self.limits.memory,
            "nano_cpus": int(self.limits.cpus * 1e9), "pids_limit": self.limits.pids,
            "volumes": {h: {"bind": c, "mode": "rw"} for h, c in self.mounts.items()} or None,
        }


def container_spec(inst: SweInstance, purpose: str, session: str, limits: ContainerLimits,
                   namespace: str = "swebench", mount: Path | None = None) -> ContainerSpec:
    name = f"skillopt-{purpose}-{inst.instance_id.lower()}-{uuid.uuid4().hex[:8]}"
    name = "".join(c if c.isalnum() or c in "_.-" else "-" for c in name)
    return ContainerSpec(image=image_name(inst, namespace), name=name,
                         labels={"skillopt": "1", "skillopt.session": session, "skillopt.instance": inst.instance_id,
                                 "skillopt.purpose": purpose},
                         limits=limits, mounts={str(mount): WORKDIR} if mount else {},
                         environment={"PYTHONDONTWRITEBYTECODE": "1"} if mount else {})


# ---------------------------------------------------------------- the engine


def docker_client(timeout_s: int = 300):
    """A connected docker SDK client, or a one-line `BadInput` when there is no engine."""
    docker = require("docker", "the swebench benchmark", "swe")
    try:
        client = docker.from_env(timeout=timeout_s)
        client.ping()
        return client
    except Exception as e:  # DockerException, connection errors, permission denied...
        why = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
        raise BadInput(f"the swebench benchmark needs a running Docker engine ({why}): start Docker, "
                       "or use --benchmark swe-local (hidden tests run locally, no Docker)") from None


class Docker:
    """A docker SDK client plus the containers this process started, so each can be removed."""

    def __init__(self, client: Any):
        self.client = client
        self.live: dict[str, Any] = {}

    def ensure_image(self, image: str) -> None:
        try:
            self.client.images.get(image)
            return
        except Exception:
            pass
        try:
            self.client.images.pull(image)
        except Exception as e:
            raise SetupError(f"image {image} cannot be pulled: {str(e).splitlines()[0][:300]}") from None

    def create(self, spec: ContainerSpec, start: bool = True) -> Any:
        self.ensure_image(spec.image)
        try:
            container = self.client.containers.create(**spec.create_kwargs())
        except Exception as e:
            raise SetupError(f"container for {spec.image} cannot be created: {str(e).splitlines()[0][:300]}") from None
        self.live[container.id] = container
        try:
            if start:
                container.start()
        except Exception as e:
            self.remove(container)
            raise SetupError(f"container for {spec.image} cannot start: {str(e).splitlines()[0][:300]}") from None
        return container

    def exec(self, container: Any, cmd: str, timeout_s: float | None = None) -> tuple[int, str, bool]:
        """(exit code, output, timed out); the timeout is enforced inside the container with
        coreutils `timeout` on the command's process group."""
        argv = ["bash", "-c", cmd]
        if timeout_s:
            argv = ["timeout", "-s", "KILL", str(int(timeout_s)), *argv]
        res = container.exec_run(argv, workdir=WORKDIR, user="root")
        out = (res.output or b"").decode("utf-8", errors="replace")
        return res.exit_code, out, bool(timeout_s) and res.exit_code in (124, 137)

    def put_text(self, container: Any, path: str, text: str) -> None:
        data = text.encode()
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            info = tarfile.TarInfo(name=os.path.basename(path))
            info.size, info.mode = len(data), 0o755
            tar.addfile(info, io.BytesIO(data))
        container.put_archive(os.path.dirname(path) or "/", buf.getvalue())

    def copy_out(self, container: Any, src: str, dest: Path) -> None:
        """The contents of folder `src` in the container into `dest`."""
        stream, _ = container.get_archive(src)
        with tempfile.TemporaryFile() as f:
            for chunk in stream:
                f.write(chunk)
            f.seek(0)
            with tarfile.open(fileobj=f) as tar:
                prefix = os.path.basename(src.rstrip("/")) + "/"
                members = []
                for m in tar.getmembers():
                    if m.name.startswith(prefix):
                        m.name = m.name[len(prefix):]
                        members.append(m)
                tar.extractall(dest, members=members, filter="tar")

    def remove(self, container: Any) -> None:
        """Stop and remove a container; never raises."""
        self.live.pop(getattr(container, "id", None), None)
        try:
            container.remove(force=True)
        except Exception:
            pass

    def close(self) -> None:
        for container in list(self.live.values()):
            self.remove(container)


def evaluate(docker: Docker, inst: SweInstance, patch: str, session: str, limits: ContainerLimits,
             namespace: str = "swebench", log_dir: Path | None = None) -> GradeReport:
    """Evaluate a patch as SWE-bench's harness does, in a fresh container removed on every path.
    Never raises for the patch, the image or the container: those are reports with `error` set."""
    if not patch.strip():
        return GradeReport(instance_id=inst.instance_id, empty_patch=True)
    script = eval_script(inst, namespace)
    container = None
    steps: list[str] = []
    try:
        container = docker.create(container_spec(inst, "eval", session, limits, namespace))
        docker.put_text(container, PATCH_PATH, patch)
        applied, out = False, ""
        for i, cmd in enumerate(apply_commands()):
            if i:
                docker.exec(container, "git checkout -- . ; git clean -fd", 120)
            code, out, _ = docker.exec(container, cmd, 300)
            if code == 0:
                applied = True
                break
        if not applied and docker.exec(container, f"git apply --check --reverse {PATCH_PATH}", 120)[0] == 0:
            applied, out = True, "already applied"
        if not applied:
            write_logs(log_dir, patch, "\n".join([APPLY_PATCH_FAIL, out]) + "\n", **{"eval.sh": script})
            return GradeReport(instance_id=inst.instance_id, error=f"the patch does not apply: {out[-600:]}")
        steps += [APPLY_PATCH_PASS, out]
        docker.put_text(container, "/eval.sh", script)
        code, output, timed_out = docker.exec(container, "/bin/bash /eval.sh", limits.eval_timeout_s)
        log = "\n".join(steps + [output] + ([TESTS_TIMEOUT] if timed_out else [])) + "\n"
        extra = {"error": f"the tests timed out after {limits.eval_timeout_s:.0f}s"} if timed_out else {}
        with tempfile.TemporaryDirectory(prefix="swebench-log-") as tmp:
            log_path = (log_dir or Path(tmp)) / "test_output.txt"
            write_logs(log_dir, patch, log, **{"eval.sh": script})
            if log_dir is None:
                log_path.write_text(log, encoding="utf-8")
            report = grade_log(inst, log_path, patch, applied=True, timed_out=timed_out, **extra)
        if log_dir is not None:
            (log_dir / "report.json").write_text(report.model_dump_json(indent=2), encoding="utf-8")
        return report
    except SetupError as e:
        return GradeReport(instance_id=inst.instance_id, error=str(e))
    except Exception as e:  # the engine failed mid-way (connection lost, container killed...)
        return GradeReport(instance_id=inst.instance_id, error=f"docker: {type(e).__name__}: {e}"[:600])
    finally:
        if container is not None:
            docker.remove(container)


# ---------------------------------------------------------------- the benchmark


def load_rows(dataset: str, split: str = "test") -> list[SweInstance]:
    """Rows of a local file or a hub data set; rows without an eval script are refused."""
    path = Path(dataset)
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


class SWEBenchDocker:
    """SWE-bench in containers (see the module docstring)."""

    max_answer_tokens = 4096

    def __init__(self, load: Any, sizes: SplitSizes | None = None, docker: Docker | None = None,
                 limits: ContainerLimits | None = None, namespace: str = "swebench",
                 mount_workspace: bool = True, log_dir: Path | None = None, name: str = "swebench"):
        self.name = name
        self._load = load
        self.sizes = sizes or SplitSizes()
        self._docker = docker
        self.limits = limits or ContainerLimits()
        self.namespace, self.mount_workspace, self.log_dir = namespace, mount_workspace, log_dir
        self.session = uuid.uuid4().hex[:12]
        self._work: dict[str, Any] = {}  # workspace -> its work container
        self._setup_errors: dict[str, str] = {}
        atexit.register(_close_ref, weakref.ref(self))

    @property
    def docker(self) -> Docker:
        if self._docker is None:
            self._docker = Docker(docker_client())
        return self._docker

    def preflight(self) -> None:
        """Fail before any rollout when the swe extra or the Docker engine is missing."""
        grading()
        _ = self.docker

    @cached_property
    def _tasks(self) -> dict[str, Task]:
        note = ENV_NOTE if self.mount_workspace else ""
        return {i.instance_id: swe_task(i, note) for i in self._load()}

    @cached_property
    def _splits(self) -> dict[str, list[str]]:
        return assign_splits(list(self._tasks), self.sizes)

    def tasks(self, split: Split = "all") -> list[Task]:
        if split not in self._splits:
            raise BadInput(f"unknown split {split!r}: choose one of {', '.join(self._splits)}")
        return [self._tasks[i] for i in self._splits[split]]

    @property
    def data_hash(self) -> str:
        return data_hash(list(self._tasks.values()))

    def prepare(self, task: Task, ws: Path) -> None:
        """`/testbed` into the workspace, and the work container. Failures are remembered and
        scored (never raised)."""
        inst, key = instance_of(task), str(Path(ws).resolve())
        try:
            box = self.docker.create(container_spec(inst, "copy", self.session, self.limits, self.namespace),
                                     start=False)
            try:
                self.docker.copy_out(box, WORKDIR, Path(ws))
            finally:
                self.docker.remove(box)
            _commit_leftovers(Path(ws))
            if self.mount_workspace:
                spec = container_spec(inst, "work", self.session, self.limits, self.namespace,
                                      mount=Path(ws).resolve())
                self._work[key] = self.docker.create(spec)
                env = Path(ws) / ".skillopt" / "env"
                env.parent.mkdir(exist_ok=True)
                env.write_text(ENV_SCRIPT.format(name=spec.name), encoding="utf-8")
                env.chmod(0o755)
        except Exception as e:  # SetupError, docker errors, a broken archive...
            self._setup_errors[key] = str(e) or type(e).__name__

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

    def grade(self, task: Task, patch: str, log_dir: Path | None = None) -> GradeReport:
        return evaluate(self.docker, instance_of(task), patch, self.session, self.limits, self.namespace, log_dir)

    async def score(self, task: Task, out: RolloutOutput, ws: Path) -> Score:
        await asyncio.to_thread(self.release, ws)
        err = self._setup_errors.pop(str(Path(ws).resolve()), None)
        if err:
            return Score(hard=0, soft=0, feedback=f"setup failed, nothing was graded: {err}")
        patch, where = await asyncio.to_thread(rollout_patch, out, Path(ws))
        log_dir = (self.log_dir or Path(ws).parent / "swe-logs") / task.id / Path(ws).name
        report = await asyncio.to_thread(self.grade, task, patch, log_dir)
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
    if not (ws / ".git").exists():
        return
    (ws / ".git" / "info").mkdir(parents=True, exist_ok=True)
    with (ws / ".git" / "info" / "exclude").open("a", encoding="utf-8") as f:
        f.write("\n.skillopt/\n.claude/\n.agents/\n.home/\n")
    if git(ws, "status", "--porcelain", check=False).stdout.strip():
        git(ws, "add", "-A")
        git(ws, "commit", "-q", "-m", "skillopt: the image's uncommitted state")


@benchmark("swebench", description="SWE-bench instances in their official Docker images (needs Docker)")
def _swebench(sizes: SplitSizes, dataset: str = "verified", split: str = "test",
              instance_ids: list[str] | str | None = None, namespace: str = "swebench", memory: str = "8g",
              cpus: float = 2.0, pids: int = 4096, eval_timeout_s: float = 1800.0, mount_workspace: bool = True,
              log_dir: str | None = None) -> SWEBenchDocker:
    wanted = ([s.strip() for s in instance_ids.split(",")] if isinstance(instance_ids, str)
              else list(instance_ids or []))

    def load() -> Sequence[SweInstance]:
        rows = load_rows(dataset, split)
        if wanted:
            unknown = sorted(set(wanted) - {r.instance_id for r in rows})
            if unknown:
                raise BadInput(f"{dataset}: no instance {', '.join(unknown)}")
            rows = [r for r in rows if r.instance_id in set(wanted)]
        return rows

    bench = SWEBenchDocker(load, sizes, limits=ContainerLimits(memory, cpus, pids, eval_timeout_s),
                           namespace=namespace, mount_workspace=mount_workspace,
                           log_dir=Path(log_dir) if log_dir else None)
    bench.preflight()  # no Docker engine: one line, before any rollout
    return bench
