"""Where a task's agent runs: the container a benchmark hands to an agent harness.

A benchmark whose tasks live in container images (swebench) writes a `TaskContainer` into the
workspace (`.skillopt/container.json`) in `prepare`. An agent harness that finds one starts a
container from it (adding its own read-only mounts: the agent binary) and runs its agent inside,
on the container's own copy of the repository (`workdir`); the patch is the `git diff` taken there.
A harness that cannot run inside a container (chat) ignores it.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict

FILE = Path(".skillopt") / "container.json"


class TaskContainer(BaseModel):
    """Image, limits and labels of the container a task's agent works in."""

    model_config = ConfigDict(frozen=True)

    image: str
    instance: str
    workdir: str = "/testbed"
    memory: str = "8g"
    cpus: float = 2.0
    pids: int = 4096
    wall_s: float = 7200.0  # the container stops after this long whatever happens
    network: str = "host"  # the agent reaches model endpoints on the host's 127.0.0.1
    run: str | None = None  # the run it belongs to (a label)

    def write(self, ws: Path) -> None:
        path = Path(ws) / FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self.model_dump_json(indent=2), encoding="utf-8")


def task_container(ws: Path) -> TaskContainer | None:
    """The container the benchmark asked the agent to work in, if any."""
    path = Path(ws) / FILE
    if not path.is_file():
        return None
    return TaskContainer.model_validate_json(path.read_text(encoding="utf-8"))
