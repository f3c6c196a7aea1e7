"""The bubblewrap sandbox (`bwrap`, Debian package `bubblewrap`).

A wrapped command runs in new user, mount, PID, IPC and UTS namespaces, as an unprivileged user
(`skillopt`, uid 1000; the files of the user who started skillopt appear as its own) with every
capability dropped, so it can neither remount what it was shown read-only nor make devices. Being
in a user namespace of its own, an agent can still nest its own sandbox (Codex's bwrap).
Its filesystem is a fresh tmpfs holding only:

- the system, read-only: `/usr` (and the `/bin`, `/lib*` links into it) and a short list of `/etc`
  files that programs need to run (hosts, TLS roots, the dynamic linker's cache), with a `passwd`
  and `group` of its own that name only root, the sandbox user and nobody;
- the paths the caller names, read-only at the same place (the agent's binary, an interpreter);
- the workspace, read-write at the same place (so the paths an agent sees in its prompt are real);
- a private `/tmp`, `/dev` and `/proc` (its own processes only).

Everything else (the run directory with its rollouts and grading logs, other workspaces, the
benchmark data, the user's home with `~/.ssh` and `~/.claude`) does not exist inside. The network
is shared unless `network=False` (then nothing, loopback included, is reachable). Environment
variables pass through unchanged: the caller decides them (agents get only what they need).
`--die-with-parent` ends the sandbox, and all it started, when the process that started it dies.
"""

from __future__ import annotations

import functools
import glob
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from skillopt.errors import BadInput

SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
ETC = ("hosts", "host.conf", "nsswitch.conf", "resolv.conf", "gai.conf", "localtime",
       "timezone", "ssl", "ca-certificates", "ca-certificates.conf", "pki", "alternatives", "ld.so.cache",
       "ld.so.conf", "ld.so.conf.d", "mime.types", "os-release", "debian_version", "inputrc", "bash.bashrc",
       "profile", "environment", "locale.alias", "python3*")
HOSTNAME = "skillopt-sandbox"
UID = GID = 1000
PASSWD = (f"root:x:0:0:root:/root:/bin/sh\nskillopt:x:{UID}:{GID}:skillopt agent:/tmp:/bin/bash\n"
          "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n")
GROUP = f"root:x:0:\nskillopt:x:{GID}:\nnogroup:x:65534:\n"
INSTALL = "install bubblewrap (apt-get install bubblewrap) or pass --no-sandbox to run agents without one"


class Bubblewrap:
    """`Sandbox` on bubblewrap. `binary`: the bwrap executable."""

    name = "bwrap"

    def __init__(self, binary: str = "bwrap"):
        self.binary = binary

    def wrap(self, argv: list[str], ws: Path, *, read_only: Sequence[str | Path] = (),
             network: bool = True) -> list[str]:
        ws = Path(os.path.abspath(ws))
        args = [self.binary, "--die-with-parent", "--new-session", "--unshare-user", "--uid", str(UID), "--gid",
                str(GID), "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try", "--cap-drop",
                "ALL", "--hostname", HOSTNAME]
        if not network:
            args.append("--unshare-net")
        args += system_binds()
        args += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--tmpfs", "/var/tmp", "--tmpfs", "/run"]
        for path in _unique(read_only):
            if not _covered(path):
                args += ["--ro-bind-try", path, path]
        args += ["--bind", os.path.realpath(ws), str(ws), "--chdir", str(ws), "--setenv", "TMPDIR", "/var/tmp",
                 "--", *argv]
        return args


@functools.cache
def system_binds() -> tuple[str, ...]:
    """The read-only system part of the sandbox (computed once: it does not change)."""
    args: list[str] = []
    for path in SYSTEM:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    for pattern in ETC:
        for path in sorted(glob.glob(f"/etc/{pattern}")):
            args += ["--ro-bind-try", path, path]
    for name, text in (("passwd", PASSWD), ("group", GROUP)):
        args += ["--ro-bind", str(_own_file(name, text)), f"/etc/{name}"]
    return tuple(args)


def _own_file(name: str, text: str) -> Path:
    """A file the sandbox shows in place of the host's (the same for every sandbox of this user)."""
    folder = Path(tempfile.gettempdir()) / f"skillopt-sandbox-{os.getuid()}"
    folder.mkdir(mode=0o755, exist_ok=True)
    if folder.stat().st_uid != os.getuid() or folder.is_symlink():  # someone else's: use a folder of our own
        folder = Path(tempfile.mkdtemp(prefix="skillopt-sandbox-"))
    path = folder / name
    if not path.is_file() or path.read_text(encoding="utf-8") != text:
        tmp = folder / f".{name}.{os.getpid()}"
        tmp.write_text(text, encoding="utf-8")
        tmp.chmod(0o644)
        os.replace(tmp, path)
    return path


def _covered(path: str) -> bool:
    """Already visible through the system binds (a binary under /usr)."""
    return any(path == root or path.startswith(root + "/") for root in ("/usr",))


def _unique(paths: Sequence[str | Path]) -> list[str]:
    out: list[str] = []
    for p in paths:
        real = os.path.realpath(p)
        if real not in out:
            out.append(real)
    return out


def interpreter_paths(python: str | Path) -> list[str]:
    """What a Python interpreter needs to be shown: the virtual environment it belongs to (if any)
    and the installation its binary lives in (the standard library)."""
    exe, real = Path(os.path.abspath(python)), Path(os.path.realpath(python))
    paths = [str(real), str(real.parent.parent)]
    if (exe.parent.parent / "pyvenv.cfg").exists():
        paths.append(str(exe.parent.parent))
    return paths


@functools.cache
def check_bwrap(binary: str = "bwrap") -> str:
    """The bwrap path, once it has run a command in the sandbox this module builds; else `BadInput`."""
    path = shutil.which(binary)
    if path is None:
        raise BadInput(f"the agent sandbox needs bubblewrap, which is not installed: {INSTALL}")
    try:
        with tempfile.TemporaryDirectory(prefix="skillopt-probe-") as ws:
            probe = Bubblewrap(path).wrap(["/bin/sh", "-c", "exit 0"], Path(ws))
            res = subprocess.run(probe, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as e:
        raise BadInput(f"bubblewrap ({path}) cannot start: {e}; {INSTALL}") from None
    if res.returncode != 0:
        why = (res.stderr.strip().splitlines() or [f"exit code {res.returncode}"])[-1]
        raise BadInput(f"bubblewrap ({path}) cannot make a sandbox here ({why}); fix that, or pass --no-sandbox "
                       "to run agents without one")
    return path
