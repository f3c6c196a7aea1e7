"""What the agent harnesses (claude-code, codex) share: options, an isolated home and environment,
process groups that die as a whole, a bound on concurrent agent processes, and the workspace diff.

Every agent process starts through a *launcher* (a two-line script in the rollout's home) that
puts it in a new session, records its pid, and keeps only the environment variables the harness
chose, whatever the SDK that spawns it merged in. So a timeout can kill the whole process group,
and the user's own keys, settings and skills never reach a rollout.
"""

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
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from skillopt.errors import BadInput
from skillopt.harness.base import Limits
from skillopt.models.spec import ModelSpec
from skillopt.models.types import ProviderEnv

NUDGE = ("You stopped without giving a final answer. Reply now with your final answer only, "
         "in the format the task asked for.")
HOME_DIR = ".home"  # the rollout's own HOME, inside the workspace
GIT_EXCLUDES = (".claude/", ".agents/", f"{HOME_DIR}/", "__pycache__/", "*.pyc")
EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"  # git's empty tree: base of a repo with no commit
# Inherited by agent processes (nothing else from the user's environment is).
PASS_ENV = ("PATH", "LANG", "LANGUAGE", "TERM", "TZ", "TMPDIR", "SHELL", "USER", "LOGNAME", "SSL_CERT_FILE",
            "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY",
            "NO_PROXY", "http_proxy", "https_proxy", "all_proxy", "no_proxy")
PASS_PREFIXES = ("LC_",)


class AgentOptions(BaseModel):
    """Options of the agent harnesses, from `harness_options` (config) or `--harness-mode`.

    Unset values fall back to `Limits` (turns, timeout, tokens) or to the agent's own default.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    mode: Literal["sdk", "cli", "auto"] = "auto"
    binary: str | None = None  # CLI mode: the agent executable (default: on PATH, else the SDK's bundled one)
    model: str | None = None  # overrides the target spec's model name for the agent
    allowed_tools: tuple[str, ...] | None = None  # claude-code: --allowedTools
    disallowed_tools: tuple[str, ...] | None = None  # claude-code: --disallowedTools
    tools: tuple[str, ...] | None = None  # claude-code: --tools (the built-in tools it may see)
    permission_mode: str = "bypassPermissions"  # claude-code
    sandbox: Literal["read-only", "workspace-write", "danger-full-access"] = "danger-full-access"  # codex
    max_turns: int | None = None
    timeout_s: float | None = None
    max_output_tokens: int | None = None  # per model reply; default max(limits.max_tokens, 8192)
    reasoning_effort: str | None = None  # claude: --effort; codex: model_reasoning_effort
    max_processes: int = 4  # agent processes running at once in this Python process
    max_retries: int = 2  # the agent's own retries of a failed model request
    stream_idle_timeout_s: float = 120.0
    nudge_empty: bool = True  # retry once with a nudge when the final answer is empty
    env: dict[str, str] = {}  # extra environment variables for the agent process

    @field_validator("allowed_tools", "disallowed_tools", "tools", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(p.strip() for p in value.split(",") if p.strip())
        return value

    @classmethod
    def parse(cls, harness: str, options: dict[str, Any]) -> "AgentOptions":
        """Validate once, when the harness is made: a bad option fails before any rollout."""
        try:
            return cls(**{k: v for k, v in options.items() if v is not None})
        except ValidationError as e:
            err = e.errors()[0]
            where = ".".join(str(p) for p in err.get("loc", ()))
            known = ", ".join(sorted(cls.model_fields))
            raise BadInput(f"bad {harness} harness option {where!r}: {err.get('msg')} (options: {known})") from None

    def turns(self, limits: Limits) -> int:
        return self.max_turns or limits.max_turns

    def timeout(self, limits: Limits) -> float:
        return self.timeout_s or limits.timeout_s

    def output_tokens(self, limits: Limits) -> int:
        return self.max_output_tokens or max(limits.max_tokens, 8192)


@dataclass(frozen=True)
class Endpoint:
    """Where the agent sends its model calls. `base_url` None: the agent's own default (the vendor)."""

    base_url: str | None
    api_key: str
    bearer: bool = False  # send the key as `Authorization: Bearer` (vLLM) rather than the vendor header
    query: tuple[tuple[str, str], ...] = ()  # extra URL parameters (Azure's api-version)


DUMMY_KEY = "sk-skillopt-no-key"
AZURE_RESPONSES_VERSION = "2025-04-01-preview"


def endpoint(target: ModelSpec, env: ProviderEnv, api: Literal["messages", "responses"]) -> Endpoint:
    """The endpoint of a target for an agent that speaks `api`: direct, never through a translator.

    Anthropic Messages base URLs are given without `/v1` (Claude Code appends `/v1/messages`);
    Responses base URLs end in `/v1` (Codex appends `/responses`).
    """
    base = target.base_url
    if target.provider == "local":
        from skillopt.models.local import ensure_server  # lazy: only for local targets

        base = ensure_server(target.model).base_url
    if api == "messages":
        if target.provider == "anthropic":
            url = base or env.anthropic_base_url
            return Endpoint(_strip_v1(url) if url else None, env.anthropic_api_key or DUMMY_KEY)
        key = (env.vllm_api_key if target.provider == "vllm" else None) or DUMMY_KEY
        return Endpoint(_strip_v1(base or ""), key, bearer=target.provider == "vllm")
    if target.provider == "openai":
        return Endpoint(base or env.openai_base_url or "https://api.openai.com/v1", env.openai_api_key or DUMMY_KEY)
    if target.provider == "azure":
        root = (base or env.azure_openai_endpoint or "").rstrip("/")
        url = root if root.endswith(("/v1", "/openai")) else f"{root}/openai"
        # The Responses API needs a newer api-version than chat completions (Codex's documented setup).
        return Endpoint(url, env.azure_openai_api_key or DUMMY_KEY, query=(("api-version", AZURE_RESPONSES_VERSION),))
    key = (env.vllm_api_key if target.provider == "vllm" else None) or DUMMY_KEY
    return Endpoint(_with_v1(base or ""), key)


def _strip_v1(url: str) -> str:
    url = url.rstrip("/")
    return url[:-3] if url.endswith("/v1") else url


def _with_v1(url: str) -> str:
    url = url.rstrip("/")
    return url if url.endswith("/v1") else f"{url}/v1"


def task_prompt(task) -> str:
    return task.prompt if not task.context else f"{task.context}\n\n{task.prompt}"


def mentions_skill_file(text: str, name: str) -> bool:
    """True when a command or path reads the skill's own SKILL.md."""
    return f"{name}/SKILL.md" in (text or "")


def agent_home(ws: Path) -> Path:
    home = ws / HOME_DIR
    home.mkdir(parents=True, exist_ok=True)
    return home


def child_env(home: Path, inherited: dict[str, str], **values: str) -> dict[str, str]:
    """The agent's whole environment: a few inherited basics, an isolated home, the harness's values."""
    env = {k: v for k, v in inherited.items() if k in PASS_ENV or k.startswith(PASS_PREFIXES)}
    env.setdefault("PATH", os.defpath)
    env.update(HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"), XDG_CACHE_HOME=str(home / ".cache"),
               XDG_DATA_HOME=str(home / ".local" / "share"), XDG_STATE_HOME=str(home / ".local" / "state"))
    loopback = "127.0.0.1,localhost,::1"
    for key in ("NO_PROXY", "no_proxy"):
        env[key] = f"{env[key]},{loopback}" if env.get(key) else loopback
    env.update({k: str(v) for k, v in values.items() if v is not None})
    return env


# -- the launcher: new session, pid file, exact environment ---------------------------------------

_LAUNCHER = """import json, os, sys
spec = json.loads(%r)
os.setsid()
with open(spec["pidfile"], "w") as f:
    f.write(str(os.getpid()))
env = {k: v for k, v in os.environ.items() if k in spec["keep"] or k.startswith(tuple(spec["prefixes"]))}
os.execve(spec["binary"], [spec["binary"], *spec["args"], *sys.argv[1:]], env)
"""


@dataclass(frozen=True)
class Launcher:
    """An executable that runs `binary args...` in its own session with only the `keep` variables."""

    path: Path
    pidfile: Path

    @classmethod
    def write(cls, home: Path, name: str, binary: str, args: tuple[str, ...], keep: tuple[str, ...],
              prefixes: tuple[str, ...] = ()) -> "Launcher":
        folder = home / "bin"
        folder.mkdir(parents=True, exist_ok=True)
        pidfile = folder / f"{name}.pid"
        spec = {"binary": binary, "args": list(args), "pidfile": str(pidfile), "keep": list(keep),
                "prefixes": list(prefixes)}
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


def kill_group(pid: int | None, grace_s: float = 1.0) -> None:
    """SIGTERM the process group led by `pid`, then SIGKILL what is left. Never raises."""
    if not pid or pid <= 1 or pid == os.getpgrp():
        return
    try:
        os.killpg(pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        return
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pid, 0)
        except (ProcessLookupError, PermissionError):
            return
        time.sleep(0.05)
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


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
    lines: list[str]
    returncode: int | None
    stderr: str
    timed_out: bool = False
    stopped: str | None = None  # why the harness stopped it early (e.g. turn limit)


async def stream_process(argv: list[str], cwd: Path, env: dict[str, str], timeout_s: float,
                         on_line: Callable[[str], str | None]) -> ProcessResult:
    """Run a CLI agent in its own process group, feeding stdout lines to `on_line` as they come.

    `on_line` may return a reason to stop the agent. On timeout or stop the whole group is killed.
    Stdin is /dev/null. Raises `OSError` only when the binary cannot start.
    """
    proc = await asyncio.create_subprocess_exec(
        *argv, cwd=str(cwd), env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, start_new_session=True, limit=64 * 1024 * 1024)
    lines: list[str] = []
    err_tail: list[bytes] = []
    stopped: list[str] = []

    async def read_out() -> None:
        assert proc.stdout is not None
        async for raw in proc.stdout:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            if line.strip():
                lines.append(line)
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
        await asyncio.to_thread(kill_group, proc.pid)
        try:
            await asyncio.wait_for(proc.wait(), 5)
        except asyncio.TimeoutError:
            pass
        err_task.cancel()
    stderr = b"".join(err_tail).decode("utf-8", "replace")
    return ProcessResult(lines, proc.returncode, stderr, timed_out, stopped[0] if stopped else None)


@asynccontextmanager
async def deadline(timeout_s: float) -> AsyncIterator[list[bool]]:
    """`async with deadline(t) as hit:` cancels the body after t seconds; `hit[0]` says it did."""
    hit = [False]
    try:
        async with asyncio.timeout(timeout_s):
            yield hit
    except TimeoutError:
        hit[0] = True


def last_line(text: str, limit: int = 400) -> str:
    lines = [ln for ln in (text or "").strip().splitlines() if ln.strip()]
    return lines[-1][:limit] if lines else ""


# -- the workspace as a git repository: the patch of coding tasks -----------------------------------

def _git(ws: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    env = {"PATH": os.environ.get("PATH", os.defpath), "HOME": str(ws / HOME_DIR), "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_CONFIG_GLOBAL": os.devnull, "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"}
    cmd = ["git", "-c", "user.name=skillopt", "-c", "user.email=skillopt@localhost", "-c", "commit.gpgsign=false",
           "-c", "core.hooksPath=" + os.devnull, "-c", "core.autocrlf=false", *args]
    return subprocess.run(cmd, cwd=ws, env=env, capture_output=True, text=True, check=check, timeout=120)


def prepare_git(ws: Path) -> str | None:
    """Make the workspace a git repository with a base commit (unless it is one); hide harness folders.

    Returns an error message when git is missing or fails, else None.
    """
    try:
        fresh = not (ws / ".git").exists()
        if fresh:
            _git(ws, "init", "-q")
        exclude = ws / ".git" / "info" / "exclude"
        exclude.parent.mkdir(parents=True, exist_ok=True)
        have = exclude.read_text(encoding="utf-8") if exclude.exists() else ""
        extra = [p for p in GIT_EXCLUDES if p not in have.splitlines()]
        if extra:
            exclude.write_text(have + ("" if not have or have.endswith("\n") else "\n") + "\n".join(extra) + "\n",
                               encoding="utf-8")
        if fresh:
            _git(ws, "add", "-A")
            _git(ws, "commit", "-q", "--allow-empty", "-m", "skillopt: workspace before the agent")
        return None
    except (OSError, subprocess.SubprocessError) as e:
        return f"git: {e}"


def workspace_diff(ws: Path) -> str | None:
    """`git diff` of everything the agent changed, new files included (harness folders excluded)."""
    try:
        _git(ws, "add", "-A")
        base = "HEAD" if _git(ws, "rev-parse", "--verify", "-q", "HEAD", check=False).returncode == 0 else EMPTY_TREE
        return _git(ws, "diff", "--cached", "--binary", base).stdout
    except (OSError, subprocess.SubprocessError):
        return None
