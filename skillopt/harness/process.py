"""Agent processes: the launcher (new session, pid file, exact environment), killing a process
tree, whether a pid is alive, a bound on concurrent agent processes, and streaming a CLI's output
under a timeout (`watchdog`)."""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import signal
import subprocess
import sys
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

# -- the launcher: new session, pid file, exact environment ---------------------------------------

_LAUNCHER = """import json, os, sys
spec = json.loads(%r)
os.setsid()
with open(spec["pidfile"], "w") as f:
    f.write(str(os.getpid()))
env = {k: v for k, v in os.environ.items() if k in spec["keep"] or k.startswith(tuple(spec["prefixes"]))}
args, at = spec["args"], spec["env_flags_at"]
if at is not None:  # `docker exec`: each kept variable passed into the container by name
    args = args[:at] + [x for k in sorted(env) for x in ("-e", k)] + args[at:]
    env.update(spec["host_env"])
os.execve(spec["binary"], [spec["binary"], *args, *sys.argv[1:]], env)
"""


@dataclass(frozen=True)
class Launcher:
    """An executable that runs `binary args...` in its own session with only the `keep` variables."""

    path: Path
    pidfile: Path

    @classmethod
    def write(cls, home: Path, name: str, binary: str, args: tuple[str, ...], keep: tuple[str, ...],
              prefixes: tuple[str, ...] = (), env_flags_at: int | None = None) -> "Launcher":
        """`env_flags_at`: `binary` is `docker`, and `-e NAME` for every kept variable goes at that index
        of `args` (the docker CLI's own variables, `DOCKER_HOST`..., stay on this side)."""
        folder = home / "bin"
        folder.mkdir(parents=True, exist_ok=True)
        pidfile = folder / f"{name}.pid"
        host_env = {k: v for k, v in os.environ.items() if k.startswith("DOCKER_")} if env_flags_at is not None else {}
        spec = {"binary": binary, "args": list(args), "pidfile": str(pidfile), "keep": list(keep),
                "prefixes": list(prefixes), "env_flags_at": env_flags_at, "host_env": host_env}
        script = folder / f"{name}_launcher.py"
        script.write_text(_LAUNCHER % json.dumps(spec), encoding="utf-8")
        path = folder / name
        path.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} -I -S {shlex.quote(str(script))} \"$@\"\n",
                        encoding="utf-8")
        path.chmod(0o755)
        return cls(path, pidfile)

    def pid(self) -> int | None:
        try:
            return int(self.pidfile.read_text().strip())
        except (OSError, ValueError):
            return None


def _tree(root: int) -> dict[int, int]:
    """{pid: process group} of `root` and all its descendants, from /proc (just `root` elsewhere).

    Agents start some children in sessions of their own (Claude Code runs each Bash command with
    setsid), so killing the agent's group alone would leave them running.
    """
    parents: dict[int, tuple[int, int]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        names = []
    for name in names:
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    fields = f.read().rsplit(b")", 1)[1].split()
                parents[int(name)] = (int(fields[1]), int(fields[2]))
            except (OSError, IndexError, ValueError):
                continue
    tree = {root: parents.get(root, (0, root))[1]}
    frontier = [root]
    while frontier:
        parent = frontier.pop()
        for pid, (ppid, pgid) in parents.items():
            if ppid == parent and pid not in tree:
                tree[pid] = pgid
                frontier.append(pid)
    return tree


def _signal_tree(tree: dict[int, int], sig: int) -> None:
    own = os.getpgrp()
    for group in {g for g in tree.values() if g > 1 and g != own}:
        try:
            os.killpg(group, sig)
        except (ProcessLookupError, PermissionError):
            pass
    for pid, group in tree.items():
        if pid > 1 and group != own:
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass


def kill_tree(pid: int | None, grace_s: float = 1.0) -> None:
    """End an agent and everything it started: its process group and every descendant's group.

    SIGTERM first (the agent may clean up) when `grace_s` > 0, then SIGKILL. Never touches this
    process's own group. Never raises.
    """
    if not pid or pid <= 1 or pid == os.getpgrp():
        return
    tree = _tree(pid)
    if grace_s > 0:
        _signal_tree(tree, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and any(pid_alive(p) for p in tree):
            time.sleep(0.05)
    if pid_alive(pid):
        tree.update(_tree(pid))
    _signal_tree(tree, signal.SIGKILL)


def pid_alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie does not)."""
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    try:  # a zombie is dead for our purpose
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return True


# -- a bound on concurrent agent processes ---------------------------------------------------------

_SLOTS: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[int, asyncio.Semaphore]]" = (
    weakref.WeakKeyDictionary())


def process_slots(size: int) -> asyncio.Semaphore:
    """The module-level semaphore (one per event loop and size) every agent process holds while it runs."""
    per_loop = _SLOTS.setdefault(asyncio.get_running_loop(), {})
    if size not in per_loop:
        per_loop[size] = asyncio.Semaphore(max(1, size))
    return per_loop[size]


# -- CLI processes ---------------------------------------------------------------------------------

@dataclass
class ProcessResult:
    returncode: int | None
    stderr: str
    timed_out: bool = False
    stopped: str | None = None  # why the harness stopped it early (e.g. turn limit)


async def stream_process(argv: list[str], cwd: Path, env: dict[str, str], timeout_s: float,
                         on_line: Callable[[str], str | None]) -> ProcessResult:
    """Run a CLI agent in its own process group, feeding stdout lines to `on_line` as they come.

    `on_line` may return a reason to stop the agent. On timeout or stop, the agent and everything
    it started are killed (`kill_tree`).
    Stdin is /dev/null. Raises `OSError` only when the binary cannot start.
    """
    proc = await asyncio.create_subprocess_exec(
        *argv, cwd=str(cwd), env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, start_new_session=True, limit=64 * 1024 * 1024)
    err_tail: list[bytes] = []
    stopped: list[str] = []

    async def read_out() -> None:
        assert proc.stdout is not None
        async for raw in proc.stdout:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            if line.strip():
                reason = on_line(line)
                if reason:
                    stopped.append(reason)
                    return

    async def read_err() -> None:
        assert proc.stderr is not None
        async for raw in proc.stderr:
            err_tail.append(raw)
            del err_tail[:-200]

    err_task = asyncio.create_task(read_err())
    timed_out = False
    try:
        await asyncio.wait_for(read_out(), timeout_s)
        if not stopped:
            await asyncio.wait_for(proc.wait(), max(1.0, timeout_s / 10))
    except asyncio.TimeoutError:
        timed_out = not stopped
    finally:
        await asyncio.to_thread(kill_tree, proc.pid)
        try:
            await asyncio.wait_for(proc.wait(), 5)
        except asyncio.TimeoutError:
            pass
        err_task.cancel()
    stderr = b"".join(err_tail).decode("utf-8", "replace")
    return ProcessResult(proc.returncode, stderr, timed_out, stopped[0] if stopped else None)


@contextmanager
def watchdog(timeout_s: float, pid: Callable[[], int | None]) -> Iterator[list[bool]]:
    """`with watchdog(t, launcher.pid) as fired:` SIGKILLs the agent's process tree after t seconds.

    An SDK that is cancelled shuts its agent down politely (seconds); killing the group at the
    deadline makes its stream end at once. `fired[0]` says whether the deadline was hit.
    """
    fired = [False]

    def fire() -> None:
        fired[0] = True
        kill_tree(pid(), grace_s=0)

    handle = asyncio.get_running_loop().call_later(timeout_s, fire)
    try:
        yield fired
    finally:
        handle.cancel()
