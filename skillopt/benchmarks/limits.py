"""Run an untrusted command: own process group, wall-clock timeout, resource limits, output to a file.

`run_limited(cmd, cwd=..., timeout_s=...)` starts the command through a tiny launcher (this file's
`_LAUNCHER`, run with `python -S -c`) that sets the resource limits and `exec`s the command, so no
`preexec_fn` runs in a threaded parent. The command gets its own session (process group); on
timeout, and after every normal exit, the whole group is killed, so no stray child survives.
Output (stdout and stderr together) goes to a file, never a pipe, so a grandchild that keeps the
pipe open cannot hang the parent; the result carries its tail.

This bounds time, memory, CPU and file sizes. It is not a security sandbox by itself: `wrap` (a
`skillopt.sandbox.Sandbox`'s `wrap`, given by the run) puts the command in one, with only its own
folder, its interpreter and no network in reach.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

# Sets the limits given as JSON in argv[1], then execs argv[2:]. Stdlib only (it runs with -S).
_LAUNCHER = """\
import json, os, resource, sys
for name, value in json.loads(sys.argv[1]).items():
    limit = getattr(resource, name, None)
    if limit is None:
        continue
    try:
        soft, hard = resource.getrlimit(limit)
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(limit, (value, hard))
    except (ValueError, OSError):
        pass
try:
    os.execvp(sys.argv[2], sys.argv[2:])
except OSError as e:
    sys.stderr.write(f"cannot run {sys.argv[2]}: {e.strerror}\\n")
    sys.exit(127)
"""


@dataclass(frozen=True)
class ResourceLimits:
    """Per-process limits (None: leave the inherited limit). Memory is address space (RLIMIT_AS)."""

    memory_mb: int | None = 2048
    cpu_s: int | None = None  # CPU seconds; None: derived from the timeout
    file_mb: int | None = 256  # largest file the command may write
    open_files: int | None = 1024
    core: bool = False  # allow core dumps

    def rlimits(self, timeout_s: float | None) -> dict[str, int]:
        out: dict[str, int] = {}
        if self.memory_mb:
            out["RLIMIT_AS"] = self.memory_mb * 1024 * 1024
        cpu = self.cpu_s or (int(timeout_s) + 5 if timeout_s else None)
        if cpu:
            out["RLIMIT_CPU"] = cpu
        if self.file_mb:
            out["RLIMIT_FSIZE"] = self.file_mb * 1024 * 1024
        if self.open_files:
            out["RLIMIT_NOFILE"] = self.open_files
        if not self.core:
            out["RLIMIT_CORE"] = 0
        return out


@dataclass(frozen=True)
class SandboxResult:
    returncode: int | None  # None when killed for the timeout
    output: str  # the tail of stdout+stderr (at most `tail_chars`)
    timed_out: bool
    duration_s: float
    output_path: Path | None = None  # the full output, when the caller gave a path

    @property
    def ok(self) -> bool:
        return not self.timed_out and self.returncode == 0


def kill_group(pid: int) -> None:
    """SIGKILL a process group (the leader's pid is the group id); quiet when it is gone."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _tail(path: Path, limit: int) -> str:
    with path.open("rb") as f:
        f.seek(0, os.SEEK_END)
        size = f.tell()
        f.seek(max(0, size - limit))
        return f.read().decode("utf-8", errors="replace")


def run_limited(cmd: list[str], *, cwd: Path | str, timeout_s: float, env: dict[str, str] | None = None,
                limits: ResourceLimits | None = None, output_path: Path | None = None,
                stdin_text: str | None = None, tail_chars: int = 2_000_000,
                wrap: Callable[[list[str]], list[str]] | None = None) -> SandboxResult:
    """Run `cmd` with a timeout and resource limits in its own process group (inside `wrap`'s
    sandbox, when given; it must show this Python to the command).

    Never raises for the command's failure (non-zero exit, crash, timeout); a command that cannot
    be started exits 127 with a `cannot run ...` line.
    """
    limits = limits or ResourceLimits()
    launcher = [sys.executable, "-S", "-c", _LAUNCHER, json.dumps(limits.rlimits(timeout_s))]
    own_file = output_path is None
    out_path = Path(output_path) if output_path else Path(tempfile.mkstemp(prefix="sandbox-", suffix=".log")[1])
    t0 = time.monotonic()
    timed_out = False
    try:
        with out_path.open("wb") as out, tempfile.TemporaryFile() as stdin:
            if stdin_text is not None:
                stdin.write(stdin_text.encode())
                stdin.seek(0)
            argv = [*launcher, *cmd]
            proc = subprocess.Popen(wrap(argv) if wrap else argv, cwd=str(cwd), env=env, stdin=stdin, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True)
            try:
                returncode: int | None = proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                timed_out, returncode = True, None
            finally:
                kill_group(proc.pid)  # the timeout, or stray children of a finished command
                proc.wait()
        duration = time.monotonic() - t0
        return SandboxResult(returncode, _tail(out_path, tail_chars), timed_out, duration,
                             None if own_file else out_path)
    finally:
        if own_file:
            out_path.unlink(missing_ok=True)


def minimal_env(home: Path | str, extra: dict[str, str] | None = None) -> dict[str, str]:
    """An environment with little of the caller's: PATH, locale, a private HOME, no API keys."""
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "LC_ALL", "TZ", "SYSTEMROOT")}
    env.setdefault("PATH", os.defpath)
    env.update({"HOME": str(home), "TMPDIR": str(home), "PYTHONDONTWRITEBYTECODE": "1",
                "PYTHONHASHSEED": "0", "PYTHONIOENCODING": "utf-8"})
    env.update(extra or {})
    return env
