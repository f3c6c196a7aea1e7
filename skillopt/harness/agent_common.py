"""What the agent harnesses (claude-code, codex) share (what the agent is given, its options,
endpoint and environment, is in `skillopt.harness.agent_env`).

- `AgentHarness` / `AgentTrace` / `AgentRun`: the rollout around the agent (git, process slot,
  deadline, nudge, patch, metering) and the trace it builds; subclasses drive their agent;
- processes: every SDK-spawned agent starts through a `Launcher` (a small script in the rollout's
  home) that puts it in a new session, records its pid and keeps only the variables the harness
  chose, whatever the SDK merged in; CLI agents start in a new session too. `kill_tree` ends an
  agent and all it started, `process_slots` bounds how many run at once;
- the workspace as a git repository, for the patch of coding tasks.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import importlib.util
import json
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from skillopt.benchmarks.base import RolloutOutput, Task
from skillopt.errors import BadInput, MissingExtra
from skillopt.harness.agent_env import ANTHROPIC_URL, AgentOptions, Endpoint, agent_home, task_prompt
from skillopt.harness.base import ErrorKind, Limits, Rollout, Usage
from skillopt.harness.place import Place, open_place
from skillopt.harness.process import Launcher, ProcessResult, kill_tree, process_slots, stream_process
from skillopt.models.prices import cost_usd
from skillopt.models.spec import ModelSpec
from skillopt.models.types import CallRecord
from skillopt.skill import Skill
from skillopt.traces.events import ErrorEvent, MessageEvent, TraceEvent, UsageEvent

NUDGE = ("You stopped without giving a final answer. Reply now with your final answer only, "
         "in the format the task asked for.")

# -- the shape every agent harness shares ------------------------------------------------------------

_INFRA = re.compile(
    r"API Error: (?:429|5\d\d)|API Error: Connection|overloaded|rate.?limit|ECONNREFUSED|ECONNRESET|"
    r"connection (?:error|refused|reset)|cannot reach|stream disconnected|Service Unavailable|Bad Gateway|"
    r"malformed reply|Internal Server Error|exited with code -?9\b|\bfailed: (?:FileNotFoundError|OSError|PermissionError|SetupError)",
    re.IGNORECASE)


def error_kind(errors: list[str]) -> ErrorKind | None:
    """Whose failure the errors of an agent rollout were: "infra" when the model endpoint failed
    (after the agent's own retries) or the agent could not run at all; "agent" otherwise (it gave
    up, ran out of turns or time, gave no answer); None without errors."""
    if not errors:
        return None
    return "infra" if any(_INFRA.search(e) for e in errors) else "agent"


class AgentTrace:
    """Builds a rollout's normalized trace as the agent's native events arrive (`feed`), with the
    final answer, the usage, and the reasons the agent failed (none: it did not)."""

    def __init__(self, skill: str, t0: float, target: ModelSpec, prices: dict | None = None):
        self.skill, self.t0, self.target, self.prices = skill, t0, target, prices
        self.events: list[TraceEvent] = []
        self.answer = ""  # of the last session / turn
        self.errors: list[str] = []
        self.usage = Usage()
        self.session_id: str | None = None  # to resume the agent's conversation (the nudge)
        self.nudged = False

    def t(self) -> float:
        return round(time.monotonic() - self.t0, 3)

    def add(self, event: TraceEvent) -> None:
        self.events.append(event)

    def fail(self, message: str) -> None:
        self.errors.append(message)
        self.add(ErrorEvent(t=self.t(), message=message))

    def start(self, prompt: str) -> None:
        self.answer = ""
        self.nudged = self.nudged or prompt == NUDGE
        self.add(MessageEvent(t=self.t(), role="user", text=prompt))

    def count(self, tokens_in: int, tokens_out: int, calls: int | None, cost: float | None = None) -> None:
        """One usage report of the agent (a session or a turn): an event and the running total."""
        cost = cost if cost is not None else cost_usd(self.target, tokens_in, tokens_out, self.prices)
        self.add(UsageEvent(t=self.t(), input_tokens=tokens_in, output_tokens=tokens_out, cost_usd=cost, turns=calls))
        self.usage = self.usage + Usage(input_tokens=tokens_in, output_tokens=tokens_out, cost_usd=cost,
                                        calls=calls or 0)

    def feed(self, event: dict[str, Any]) -> str | None:
        """Take one native event; return a reason to stop the agent, else None."""
        raise NotImplementedError


@dataclass
class AgentRun:
    """One rollout's agent: where it runs, with what, and what it recorded so far.

    `env` is the environment as the agent sees it; `place` says where it runs (`harness.place`).
    """

    ws: Path
    env: dict[str, str]
    binary: str
    trace: AgentTrace
    timeout_s: float
    raw: list[str] = field(default_factory=list)  # the native log, one JSON object a line
    deadline: float = 0.0
    place: Place | None = None  # where the agent runs; None: here, in `ws`
    private: Path | None = None  # this process's own folder for the rollout, outside the agent's reach

    @property
    def cwd(self) -> str:
        """The working folder as the agent sees it."""
        return self.place.cwd if self.place is not None else str(self.ws)

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def timed_out(self) -> None:
        self.trace.fail(f"timed out after {self.timeout_s:.0f}s")

    def log_stderr(self, text: str) -> None:
        if text.strip():
            self.raw.append(json.dumps({"type": "skillopt:stderr", "text": text[-4000:]}))

    def feed_line(self, line: str) -> str | None:
        """A CLI agent's stdout line: logged, and fed to the trace when it is a JSON object."""
        self.raw.append(line)
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            return None
        return self.trace.feed(event) if isinstance(event, dict) else None

    async def stream(self, argv: list[str]) -> "ProcessResult":
        """Run a CLI agent where it runs (`stream_process`), its stdout lines fed to `feed_line`."""
        cmd, env = self.place.command(argv, self.env) if self.place is not None else (argv, self.env)
        try:
            return await stream_process(cmd, self.ws, env, self.left(), self.feed_line)
        finally:
            if self.place is not None:
                await asyncio.to_thread(self.place.stop)

    def launcher(self, name: str, args: tuple[str, ...] = (), prefixes: tuple[str, ...] = ()) -> "Launcher":
        """The executable an SDK starts the agent through: in this process's private folder for the
        rollout (outside the agent's reach, so it cannot point the pidfile at another process)."""
        binary, args, env_flags_at = (self.place.launcher_args(self.binary, args) if self.place is not None
                                      else (self.binary, args, None))
        return Launcher.write(self.private or agent_home(self.ws), name, binary, args, keep=tuple(self.env),
                              prefixes=prefixes, env_flags_at=env_flags_at)

    def kill(self, pid: int | None) -> None:
        """End the agent started through a launcher, and whatever it left running."""
        kill_tree(pid)
        if self.place is not None:
            self.place.stop()


class AgentHarness:
    """An agent harness around its agent: options, mode, git for coding tasks, the process slot, the
    deadline, the patch, metering and the `Rollout`. `run` never raises because the agent failed.

    Subclasses say which SDK and binary they use and implement `new_trace`, `agent_env` and
    `drive` (which runs the agent, and nudges it once when its final answer is empty).
    """

    name: str
    apis: frozenset[str]
    skill_dir: str
    sdk_module: str  # the Python SDK that drives the agent
    extra: str  # the skillopt extra that installs it
    cli_name: str  # the agent's executable on PATH
    install_hint: str
    submit_command: str | None = None  # the command that ends a rollout, for an agent that has one

    def action(self, command: str) -> str:
        """One shell command as this agent's reply holds it (a skill's example run shows it so)."""
        return f"```bash\n{command}\n```"

    def __init__(self, ctx: Any):
        self.models = ctx.models
        self.opts = AgentOptions.parse(self.name, ctx.options)
        self.mode = self._resolve_mode()
        self.sandbox, self.relay = ctx.sandbox, ctx.relay

    def bundled_binary(self) -> str | None:
        """The binary the SDK package ships, if installed."""
        return None

    def _resolve_mode(self) -> str:
        has_sdk = importlib.util.find_spec(self.sdk_module) is not None
        if self.opts.mode == "sdk" and not has_sdk:
            raise MissingExtra(f"the {self.name} harness in sdk mode", self.extra, self.sdk_module)
        if self.opts.mode == "sdk" or (self.opts.mode == "auto" and has_sdk):
            return "sdk"
        if not (self.opts.binary or shutil.which(self.cli_name) or self.bundled_binary()):
            raise BadInput(f"the {self.name} harness needs its agent: {self.install_hint}")
        return "cli"

    def binary(self) -> str | None:
        """The option's binary; else the SDK's bundled one (sdk mode) or the one on PATH (cli mode)."""
        if self.opts.binary:
            return self.opts.binary
        bundled, on_path = self.bundled_binary(), shutil.which(self.cli_name)
        return (bundled or on_path) if self.mode == "sdk" else (on_path or bundled)

    def needs_nudge(self, trace: AgentTrace) -> bool:
        return self.opts.nudge_empty and not trace.answer.strip() and not trace.errors and bool(trace.session_id)

    def tools(self, binary: str) -> list[str]:
        """Host folders the agent needs besides its workspace (its binary's), for a container."""
        return [str(Path(binary).resolve().parent)]

    async def run(self, task: Task, skill: Skill, ws: Path, target: ModelSpec, limits: Limits) -> Rollout:
        t0 = time.monotonic()
        trace = self.new_trace(skill.name, t0, target, limits)
        coding = task.kind in ("code", "swe")
        run: AgentRun | None = None
        place: Place | None = None
        patch: str | None = None
        try:
            binary = self.binary()
            if binary is None:
                raise FileNotFoundError(f"no {self.cli_name} binary: {self.install_hint}")
            with self.model_access(target) as ep, tempfile.TemporaryDirectory(prefix="skillopt-agent-") as private:
                async with process_slots(self.opts.max_processes):
                    # git of a coding task runs in the sandbox too: the repository is the agent's to configure
                    place = await asyncio.to_thread(open_place, ws, coding, self.tools(binary), self.skill_dir,
                                                    self.opts.timeout(limits), self.sandboxed(ws, binary),
                                                    functools.partial(self.sandbox.wrap, ws=ws))
                    if place.setup_error:
                        trace.add(ErrorEvent(t=trace.t(), message=place.setup_error))
                    env = place.agent_env(self.agent_env(ws, target, limits, ep))
                    run = AgentRun(ws, env, binary, trace, self.opts.timeout(limits), place=place,
                                   private=Path(private))
                    run.deadline = time.monotonic() + run.timeout_s  # waiting for a slot does not count
                    try:
                        await self.drive(run, task_prompt(task), target, limits)
                    finally:
                        self.after(run)
                        if coding:
                            patch = await asyncio.to_thread(place.diff) or ""
        except Exception as e:  # the agent failed; the run goes on (the Harness contract)
            trace.fail(f"{self.name} failed: {type(e).__name__}: {e}")
        finally:
            if place is not None:
                await asyncio.to_thread(place.close)
        if not trace.errors and not trace.answer.strip():
            trace.fail("empty final answer" + (" (after a nudge)" if trace.nudged else ""))
        if trace.usage.calls or trace.usage.input_tokens:
            self.models.meter.record(CallRecord(role="target", model=str(target), input_tokens=trace.usage.input_tokens,
                                                output_tokens=trace.usage.output_tokens, cost_usd=trace.usage.cost_usd))
        raw = run.raw if run is not None else []
        return Rollout(task_id=task.id, output=RolloutOutput(text=trace.answer, patch=patch), trace=trace.events,
                       usage=trace.usage, duration_s=time.monotonic() - t0, error="; ".join(trace.errors) or None,
                       error_kind=error_kind(trace.errors),
                       raw_log="\n".join(raw) + "\n" if raw else None)

    @contextmanager
    def model_access(self, target: ModelSpec) -> Iterator[Endpoint]:
        """The endpoint the agent is given: the target's own, or with a relay, the relay's URL and a
        per-rollout token (the key stays in this process), valid until the block ends."""
        ep = self.endpoint(target)
        if self.relay is None:
            yield ep
            return
        with self.relay.lease(ep.base_url or ANTHROPIC_URL, ep.api_key) as ticket:
            yield dataclasses.replace(ep, base_url=ticket.base_url, api_key=ticket.token)

    def sandboxed(self, ws: Path, binary: str) -> Callable[[list[str]], list[str]]:
        """How this rollout's agent command lines are wrapped: its sandbox, showing it its binary (and
        helper tools) read-only."""
        shown = [binary, *self.tool_dirs(), *self.opts.sandbox_paths]
        return lambda argv: self.sandbox.wrap(argv, ws, read_only=shown)

    @property
    def sandboxed_agent(self) -> bool:
        """Whether the agent runs inside skillopt's sandbox (not --no-sandbox)."""
        return self.sandbox.name != "none"

    def tool_dirs(self) -> list[str]:
        """Folders of helper tools the agent runs besides its binary (they go on its PATH)."""
        return []

    # what each agent says
    def new_trace(self, skill: str, t0: float, target: ModelSpec, limits: Limits) -> AgentTrace:
        raise NotImplementedError

    def endpoint(self, target: ModelSpec) -> Endpoint:
        """The target's endpoint in the API this agent speaks, with the real key."""
        raise NotImplementedError

    def agent_env(self, ws: Path, target: ModelSpec, limits: Limits, ep: Endpoint) -> dict[str, str]:
        """The agent's whole environment; `ep` is the endpoint (and key, or relay token) to give it."""
        raise NotImplementedError

    async def drive(self, run: AgentRun, prompt: str, target: ModelSpec, limits: Limits) -> None:
        raise NotImplementedError

    def after(self, run: AgentRun) -> None:
        """Read what the agent left on disk (e.g. its session file) once it has stopped."""
