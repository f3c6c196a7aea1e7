"""Where an agent process runs: on this host in the workspace, or inside the task's container.

An agent harness builds its agent's command and environment in host terms (the workspace, its
`.home`); the place says how that becomes a running agent:

- `cwd`: the working folder as the agent sees it;
- `agent_env(env)`: the environment as the agent sees it (paths translated);
- `command(argv, env)`: the command and environment of the process to start on this host;
- `launcher_args(binary, args)`: the same for an SDK that starts the agent itself (see `Launcher`);
- `stop()`: end whatever the agent left running there; `diff()`: the patch of a coding task;
  `close()`: give the place back (a container is removed).

`open_place` picks the place: the task's container when the benchmark wrote one into the
workspace (`benchmarks.environment.TaskContainer`), else the host. Only the harness uses it.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from skillopt.git import base_commit, write_excludes


class Place(Protocol):
    cwd: str
    setup_error: str | None  # a problem worth a trace event that did not stop the agent

    def agent_env(self, env: dict[str, str]) -> dict[str, str]: ...

    def command(self, argv: list[str], env: dict[str, str]) -> tuple[list[str], dict[str, str]]: ...

    def launcher_args(self, binary: str, args: tuple[str, ...]) -> tuple[str, tuple[str, ...], int | None]: ...

    def stop(self) -> None: ...

    def diff(self) -> str | None: ...

    def close(self) -> None: ...


Wrap = Callable[[list[str]], list[str]]


class HostPlace:
    """The agent runs here, in the workspace (made a git repository for coding tasks), inside
    skillopt's sandbox: `wrap` turns its command line into the sandboxed one (`sandbox.Sandbox`),
    `git_wrap` the git commands that read what it left (its repository's config is its own)."""

    def __init__(self, ws: Path, coding: bool, wrap: Wrap = list, git_wrap: Wrap = list):
        self.ws, self.cwd, self.coding = Path(ws), str(ws), coding
        self.wrap, self.git_wrap = wrap, git_wrap
        self.setup_error: str | None = None
        if coding:

            self.setup_error = prepare_git(self.ws)  # before the agent: the repository is still ours

    def agent_env(self, env: dict[str, str]) -> dict[str, str]:
        return env

    def command(self, argv: list[str], env: dict[str, str]) -> tuple[list[str], dict[str, str]]:
        return self.wrap(argv), env

    def launcher_args(self, binary: str, args: tuple[str, ...]) -> tuple[str, tuple[str, ...], int | None]:
        wrapped = self.wrap([binary, *args])
        return wrapped[0], tuple(wrapped[1:]), None

    def stop(self) -> None:
        """Nothing: `kill_tree` already ended the agent's whole process tree."""

    def diff(self) -> str | None:
        from skillopt.git import diff

        return diff(self.ws, self.git_wrap)

    def close(self) -> None:
        pass


def runs_in_container(ws: Path) -> bool:
    """Whether the benchmark asked for this workspace's agent to run in the task's container."""
    from skillopt.benchmarks.environment import task_container

    return task_container(ws) is not None


def open_place(ws: Path, coding: bool, tools: list[str], skill_dir: str | None, timeout_s: float,
               wrap: Wrap = list, git_wrap: Wrap = list) -> Place:
    """The task's container when the benchmark asked for one (started here; the container is the
    sandbox), else the host inside skillopt's sandbox (`wrap`, `git_wrap`: see `HostPlace`).
    `tools`: host folders the agent needs (its binary's), mounted read-only in a container, which
    stops on its own `timeout_s` + 5 minutes after it started, whatever happens to this process."""
    from skillopt.benchmarks.environment import task_container

    spec = task_container(ws)
    if spec is None:
        return HostPlace(ws, coding, wrap, git_wrap)
    from skillopt.harness.in_container import ContainerPlace

    place = ContainerPlace(spec.model_copy(update={"wall_s": min(spec.wall_s, timeout_s + 300)}), Path(ws), tools,
                           skill_dir)
    place.open()
    return place


def prepare_git(ws: Path) -> str | None:
    """Make the workspace a git repository with a base commit (unless it is one); hide harness folders.

    Returns an error message when git is missing or fails, else None.
    """
    try:
        if (ws / ".git").exists():
            write_excludes(ws)
        else:
            base_commit(ws, "skillopt: workspace before the agent")
        return None
    except (OSError, subprocess.SubprocessError) as e:
        return f"git: {e}"
