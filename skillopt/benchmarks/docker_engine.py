"""The Docker engine as skillopt uses it: a client, container specs with limits, and cleanup.

Every container skillopt starts carries the labels `skillopt=1`, `skillopt.owner=<host>:<pid>:<start>`
(the process that started it; `<start>` tells a reused pid apart), `skillopt.purpose` (`agent`,
`work`, `copy`, `eval`), `skillopt.instance` and, when known, `skillopt.run`. Its first process is
`sleep <wall-clock limit>` under Docker's init, so a container whose owner died (kill -9) stops on
its own; `remove_orphans` removes at once every container whose owner is no longer running, and is
called before any rollout. The process that started a container removes it on every way out
(`Docker.remove`, `Docker.close`, also at interpreter exit).
"""

from __future__ import annotations

import io
import os
import socket
import tarfile
import tempfile
import uuid
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from skillopt.errors import BadInput, require

LABEL = "skillopt"
WORKDIR = "/testbed"


class SetupError(Exception):
    """An image that is missing or cannot be pulled, a container that cannot start."""


@dataclass(frozen=True)
class ContainerLimits:
    """Per container: memory (also the swap limit), CPUs, processes, and a wall-clock limit (s)."""

    memory: str = "8g"
    cpus: float = 2.0
    pids: int = 4096
    eval_timeout_s: float = 1800.0  # the tests of one grading
    wall_s: float = 7200.0  # how long any container may live


@lru_cache(maxsize=1)
def _process_start() -> str:
    try:
        with open(f"/proc/{os.getpid()}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[19].decode()
    except (OSError, IndexError):
        return "0"


def owner() -> str:
    """This process as a container owner: host, pid and start time (a reused pid is not a match)."""
    return f"{socket.gethostname()}:{os.getpid()}:{_process_start()}"


def owner_alive(value: str) -> bool:
    """Whether the process named by an owner label still runs (owners on other hosts count as alive)."""
    try:
        host, pid, start = value.rsplit(":", 2)
    except ValueError:
        return False
    if host != socket.gethostname():
        return True
    try:
        with open(f"/proc/{int(pid)}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return fields[0] != b"Z" and fields[19].decode() == start
    except (OSError, ValueError, IndexError):
        return False


def labels(purpose: str, instance: str, run: str | None = None, **extra: str) -> dict[str, str]:
    out = {LABEL: "1", f"{LABEL}.owner": owner(), f"{LABEL}.purpose": purpose, f"{LABEL}.instance": instance}
    if run:
        out[f"{LABEL}.run"] = run
    out.update({f"{LABEL}.{k}": v for k, v in extra.items()})
    return out


def container_name(purpose: str, instance: str) -> str:
    name = f"skillopt-{purpose}-{instance.lower()}-{uuid.uuid4().hex[:8]}"
    return "".join(c if c.isalnum() or c in "_.-" else "-" for c in name)


@dataclass(frozen=True)
class ContainerSpec:
    """What `docker create` is given for one container."""

    image: str
    name: str
    labels: dict[str, str]
    limits: ContainerLimits
    mounts: dict[str, str] = field(default_factory=dict)  # host path -> container path (read-write)
    read_only: dict[str, str] = field(default_factory=dict)  # host path -> container path
    environment: dict[str, str] = field(default_factory=dict)
    network: str | None = None  # "host": the container reaches the host's 127.0.0.1
    user: str = "root"

    @property
    def command(self) -> str:
        return f"sleep {int(self.limits.wall_s)}"

    def create_kwargs(self) -> dict[str, Any]:
        volumes = {h: {"bind": c, "mode": "rw"} for h, c in self.mounts.items()}
        volumes.update({h: {"bind": c, "mode": "ro"} for h, c in self.read_only.items()})
        kw = {
            "image": self.image, "name": self.name, "command": self.command, "detach": True, "user": self.user,
            "working_dir": WORKDIR, "labels": dict(self.labels), "environment": dict(self.environment),
            "mem_limit": self.limits.memory, "memswap_limit": self.limits.memory, "init": True,
            "nano_cpus": int(self.limits.cpus * 1e9), "pids_limit": self.limits.pids,
            "volumes": volumes or None,
        }
        if self.network:
            kw["network_mode"] = self.network
        return kw


def docker_client(timeout_s: int = 300, what: str = "the swebench benchmark"):
    """A connected docker SDK client, or a one-line `BadInput` when there is no engine."""
    docker = require("docker", what, "swe")
    try:
        client = docker.from_env(timeout=timeout_s)
        client.ping()
        return client
    except Exception as e:  # DockerException, connection errors, permission denied...
        why = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
        raise BadInput(f"{what} needs a running Docker engine ({why}): start Docker, "
                       "or use --benchmark swe-local (hidden tests run locally, no Docker)") from None


def _first_line(e: BaseException) -> str:
    return (str(e).splitlines() or [type(e).__name__])[0][:300]


class Docker:
    """A docker SDK client plus the containers this process started, so each can be removed."""

    def __init__(self, client: Any):
        self.client = client
        self.live: dict[str, Any] = {}

    def has_image(self, image: str) -> bool:
        try:
            self.client.images.get(image)
            return True
        except Exception:
            return False

    def ensure_image(self, image: str) -> None:
        if self.has_image(image):
            return
        try:
            self.client.images.pull(image)
        except Exception as e:
            raise SetupError(f"image {image} is not here and cannot be pulled: {_first_line(e)}") from None

    def create(self, spec: ContainerSpec, start: bool = True) -> Any:
        self.ensure_image(spec.image)
        try:
            container = self.client.containers.create(**spec.create_kwargs())
        except Exception as e:
            raise SetupError(f"container for {spec.image} cannot be created: {_first_line(e)}") from None
        self.live[container.id] = container
        try:
            if start:
                container.start()
        except Exception as e:
            self.remove(container)
            raise SetupError(f"container for {spec.image} cannot start: {_first_line(e)}") from None
        return container

    def exec(self, container: Any, cmd: str, timeout_s: float | None = None,
             workdir: str = WORKDIR) -> tuple[int, str, bool]:
        """(exit code, output, timed out); the timeout is enforced inside the container with
        coreutils `timeout`."""
        argv = ["bash", "-c", cmd]
        if timeout_s:
            argv = ["timeout", "-s", "KILL", str(int(timeout_s)), *argv]
        res = container.exec_run(argv, workdir=workdir, user="root")
        out = (res.output or b"").decode("utf-8", errors="replace")
        return res.exit_code, out, bool(timeout_s) and res.exit_code in (124, 137)

    def put_files(self, container: Any, folder: str, files: dict[str, bytes], mode: int = 0o644) -> None:
        """Files (relative path -> content) into `folder` of the container, parents made."""
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            made: set[str] = set()
            for rel, data in files.items():
                parts = rel.split("/")[:-1]
                for i in range(1, len(parts) + 1):
                    d = "/".join(parts[:i])
                    if d not in made:
                        made.add(d)
                        info = tarfile.TarInfo(d)
                        info.type, info.mode = tarfile.DIRTYPE, 0o755
                        tar.addfile(info)
                info = tarfile.TarInfo(rel)
                info.size, info.mode = len(data), mode
                tar.addfile(info, io.BytesIO(data))
        container.put_archive(folder, buf.getvalue())

    def put_text(self, container: Any, path: str, text: str) -> None:
        self.put_files(container, os.path.dirname(path) or "/", {os.path.basename(path): text.encode()}, 0o755)

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


def remove_orphans(client: Any, run: str | None = None) -> list[str]:
    """Remove the skillopt containers whose owner process is gone (a crash, kill -9); with `run`,
    only that run's. Returns their names; never raises."""
    filters = {"label": [f"{LABEL}=1"] + ([f"{LABEL}.run={run}"] if run else [])}
    removed = []
    try:
        containers = client.containers.list(all=True, filters=filters)
    except Exception:
        return removed
    for c in containers:
        if not owner_alive((c.labels or {}).get(f"{LABEL}.owner", "")):
            try:
                c.remove(force=True)
                removed.append(c.name)
            except Exception:
                pass
    return removed
