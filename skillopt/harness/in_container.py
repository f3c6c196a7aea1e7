"""An agent inside the task's container: Claude Code or Codex working on the container's `/testbed`.

`ContainerPlace.open` starts a container from the `TaskContainer` the benchmark wrote (its image,
limits and labels; `--network host`, so model endpoints on the host's 127.0.0.1, the recording proxy
included, answer as they do for an agent on the host), with:

- the agent's binary folders from this host, read-only, under `/skillopt/tools/<n>` (the bundled
  Claude Code and Codex binaries run in any glibc x86-64 image);
- the rollout's home (`<ws>/.home`) at `/skillopt/home`, read-write: the agent's configuration and
  session files, which the harness reads afterwards. Nothing else of the host is visible.

It copies the skill into `/testbed/<skill_dir>` (where the agent discovers it), keeps the harness
folders out of git, and records the tree of `/testbed` as it was (`git write-tree`), so `diff()` is
exactly the agent's work, new files included, whatever the image left uncommitted. Agent processes
start with `docker exec -i` (environment passed by name, so no value is on a command line); `stop()`
kills every process in the container but its keeper; `close()` removes the container.
"""

from __future__ import annotations

import atexit
import os
import shutil
from pathlib import Path

from skillopt.benchmarks.docker_engine import (
    ContainerLimits,
    ContainerSpec,
    Docker,
    SetupError,
    container_name,
    docker_client,
    labels,
)
from skillopt.benchmarks.environment import TaskContainer

ROOT = "/skillopt"
HOME = f"{ROOT}/home"
TOOLS = f"{ROOT}/tools"
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
EXCLUDES = (".claude/", ".agents/", ".home/", "__pycache__/", "*.pyc")
# Only size and whole-second times tell a file changed: an image's index holds the inode numbers and
# times of the build, so git's default check would read every file of /testbed again (seconds per
# hundred MB); racily clean entries are still compared by content.
GIT = "git -c safe.directory='*' -c core.checkStat=minimal"
SETUP = f"""set -e
if [ ! -d .git ]; then
  {GIT} init -q && {GIT} add -A && {GIT} -c user.name=skillopt -c user.email=skillopt@localhost \\
    commit -q --allow-empty -m 'skillopt: workspace before the agent'
fi
mkdir -p .git/info && touch .git/info/exclude
for p in {' '.join(repr(e) for e in EXCLUDES)}; do grep -qxF "$p" .git/info/exclude || echo "$p" >> .git/info/exclude; done
{GIT} add -A && {GIT} write-tree && {GIT} reset -q
cat /proc/1/task/1/children
"""
# Kill every process but the container's init (1), its keeper and this shell.
STOP = 'for p in /proc/[0-9]*; do p=${p#/proc/}; [ "$p" = 1 ] || [ "$p" = {keeper} ] || [ "$p" = $$ ] || kill -9 "$p" 2>/dev/null; done; true'
# Host variables the docker CLI itself may need (never passed into the container).
DOCKER_VARS = ("DOCKER_HOST", "DOCKER_CONFIG", "DOCKER_CONTEXT", "DOCKER_TLS_VERIFY", "DOCKER_CERT_PATH")
_OPEN: dict[int, "ContainerPlace"] = {}  # removed at interpreter exit if still there (Ctrl-C mid-rollout)


class ContainerPlace:
    """The agent runs inside the task's container (see the module docstring)."""

    def __init__(self, spec: TaskContainer, ws: Path, tools: list[str], skill_dir: str | None):
        self.spec, self.ws, self.skill_dir = spec, Path(ws), skill_dir
        self.cwd = spec.workdir
        self.setup_error: str | None = None
        self.tools = {str(Path(t).resolve()): f"{TOOLS}/{i}" for i, t in enumerate(dict.fromkeys(tools))}
        self.home = (self.ws / ".home").resolve()
        self.docker: Docker | None = None
        self.container = None
        self.base_tree = ""
        self.keeper = ""
        self.image_path = DEFAULT_PATH
        self.cli = shutil.which("docker") or ""

    # -- lifecycle ---------------------------------------------------------------------------------
    def open(self) -> None:
        """Start the container, put the skill in, record the starting tree. Raises `SetupError` (no
        engine or docker command line, no image, no container): an infrastructure failure of the
        rollout, never the agent's."""
        try:
            self._open()
        except SetupError:
            raise
        except Exception as e:  # BadInput (the engine went away), docker API errors
            raise SetupError(f"the agent's container: {(str(e).splitlines() or [type(e).__name__])[0][:300]}") from None

    def _open(self) -> None:
        if not self.cli:
            raise SetupError("running the agent inside the task's container needs the docker command line "
                             "(apt-get install docker.io, or Docker Desktop)")
        s = self.spec
        self.docker = Docker(docker_client(what="running the agent in the task's container"))
        self.home.mkdir(parents=True, exist_ok=True)
        spec = ContainerSpec(image=s.image, name=container_name("agent", s.instance),
                             labels=labels("agent", s.instance, s.run),
                             limits=ContainerLimits(s.memory, s.cpus, s.pids, wall_s=s.wall_s),
                             mounts={str(self.home): HOME}, read_only=dict(self.tools), network=s.network)
        self.container = self.docker.create(spec)
        _OPEN[id(self)] = self
        self.image_path = _image_path(self.docker, s.image)
        if self.skill_dir and (self.ws / self.skill_dir).is_dir():
            files = {str(p.relative_to(self.ws)): p.read_bytes()
                     for p in sorted((self.ws / self.skill_dir).rglob("*")) if p.is_file()}
            self.docker.put_files(self.container, self.cwd, files)
        code, out, _ = self.docker.exec(self.container, SETUP, 600, workdir=self.cwd)
        lines = out.strip().splitlines()
        if code != 0 or len(lines) < 2:
            raise SetupError(f"could not prepare {self.cwd} in the container: {out.strip()[-300:]}")
        self.base_tree, self.keeper = lines[-2].strip(), lines[-1].split()[0]

    def close(self) -> None:
        """Remove the container (every process in it ends); hand the home back to this user."""
        _OPEN.pop(id(self), None)
        if self.docker is None or self.container is None:
            return
        if hasattr(os, "getuid") and os.getuid() != 0:
            try:
                self.docker.exec(self.container, f"chown -R {os.getuid()}:{os.getgid()} {HOME}", 120)
            except Exception:
                pass
        self.docker.remove(self.container)
        self.container = None

    # -- paths and processes -----------------------------------------------------------------------
    def translate(self, value: str) -> str | None:
        """A host path as the agent sees it (None: not visible in the container); other text unchanged."""
        for host, inside in [*self.tools.items(), (str(self.home), HOME), (str(self.ws.resolve()), self.cwd),
                             (str(self.ws), self.cwd)]:
            if value == host or value.startswith(host + "/"):
                return inside + value[len(host):]
        return None if os.path.isabs(value) else value

    def agent_env(self, env: dict[str, str]) -> dict[str, str]:
        out = {}
        for k, v in env.items():
            if k == "PATH":
                mine = [t for t in (self.translate(p) for p in v.split(os.pathsep)) if t and t.startswith(TOOLS)]
                out[k] = os.pathsep.join(mine + [self.image_path])
            elif (t := self.translate(v)) is not None:
                out[k] = t
        return out

    def _exec_head(self) -> list[str]:
        return [self.cli, "exec", "-i", "-w", self.cwd]

    def command(self, argv: list[str], env: dict[str, str]) -> tuple[list[str], dict[str, str]]:
        flags = [x for k in env for x in ("-e", k)]
        inner = [self.translate(a) or a for a in argv]
        assert self.container is not None
        return [*self._exec_head(), *flags, self.container.name, *inner], {**env, **_docker_vars()}

    def launcher_args(self, binary: str, args: tuple[str, ...]) -> tuple[str, tuple[str, ...], int | None]:
        """For `Launcher`: run `docker exec` instead; the launcher inserts `-e NAME` for each variable it
        keeps at index 4 (after `exec -i -w DIR`)."""
        assert self.container is not None
        inner = [self.translate(binary) or binary, *(self.translate(a) or a for a in args)]
        return self.cli, (*self._exec_head()[1:], self.container.name, *inner), 4

    def stop(self) -> None:
        if self.docker is not None and self.container is not None and self.keeper:
            try:
                self.docker.exec(self.container, STOP.replace("{keeper}", self.keeper), 60)
            except Exception:
                pass

    def diff(self) -> str | None:
        """`git diff` of `/testbed` against its starting tree, new files included."""
        if self.docker is None or self.container is None:
            return None
        cmd = f"{GIT} add -A >/dev/null 2>&1 && {GIT} diff --cached --binary {self.base_tree} 2>/dev/null"
        try:
            code, out, _ = self.docker.exec(self.container, cmd, 300, workdir=self.cwd)
        except Exception:
            return None
        return out if code == 0 else None


def _image_path(docker: Docker, image: str) -> str:
    try:
        env = docker.client.images.get(image).attrs.get("Config", {}).get("Env") or []
    except Exception:
        return DEFAULT_PATH
    return next((e.split("=", 1)[1] for e in env if e.startswith("PATH=")), DEFAULT_PATH)


def _docker_vars() -> dict[str, str]:
    return {k: os.environ[k] for k in DOCKER_VARS if k in os.environ}


@atexit.register
def _close_all() -> None:
    for place in list(_OPEN.values()):
        place.close()
