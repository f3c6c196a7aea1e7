"""The `codex` harness: OpenAI Codex solves the task in a fresh workspace.

The skill sits in `<ws>/.agents/skills/<name>/SKILL.md`, where Codex discovers it (its name,
description and path go into the model's instructions). Codex has no Skill tool: using the skill
shows as a command that reads that SKILL.md. Two ways to drive the same binary:

- `sdk`: the official `openai-codex` SDK (`AsyncCodex`, over `codex app-server`; the
  `openai-codex-cli-bin` package bundles the binary);
- `cli`: `codex exec --json`, one JSON event per line (stdin from /dev/null).

Both feed `CodexTrace`, which reads `codex exec --json` events (SDK notifications are converted
to that shape first). Each rollout has its own `CODEX_HOME` (`<ws>/.home/.codex`) holding a
`config.toml` that points Codex at the target's Responses endpoint; after the run, the session
file there tells whether the skill was listed to the model.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import re
import shutil
import time
from pathlib import Path
from typing import Any

from skillopt.benchmarks.base import RolloutOutput, Task
from skillopt.errors import BadInput, MissingExtra
from skillopt.harness.agent_common import (
    NUDGE, AgentOptions, Endpoint, Launcher, agent_home, child_env, endpoint, kill_group, mentions_skill_file,
    prepare_git, process_slots, stream_process, task_prompt, workspace_diff,
)
from skillopt.harness.base import Limits, Rollout, Usage
from skillopt.harness.registry import HarnessContext, harness
from skillopt.models.prices import cost_usd
from skillopt.models.spec import ModelSpec
from skillopt.models.types import CallRecord
from skillopt.skill import Skill
from skillopt.traces.events import (
    ErrorEvent, MessageEvent, SkillUsedEvent, ToolCallEvent, ToolResultEvent, TraceEvent, UsageEvent,
)
from skillopt.traces.summary import discovery_event

KEY_VAR = "SKILLOPT_CODEX_API_KEY"  # the provider's env_key: the key never touches the disk
PROVIDER = "skillopt"
INSTALL_HINT = 'pip install "skillopt[codex]" (bundles codex), or npm i -g @openai/codex'
_BENIGN = ("Model metadata for",)  # Codex warnings that are not failures (unknown model names)
_CAMEL = re.compile(r"(?<!^)(?=[A-Z])")


class CodexTrace:
    """`codex exec --json` events -> normalized trace events, final answer, usage."""

    def __init__(self, skill_name: str, t0: float, target: ModelSpec, max_tool_calls: int,
                 prices: dict | None = None):
        self.skill, self.t0, self.target, self.prices = skill_name, t0, target, prices
        self.max_tool_calls = max_tool_calls
        self.events: list[TraceEvent] = []
        self.thread_id: str | None = None
        self.answer = ""  # of the last turn
        self.errors: list[str] = []
        self.usage = Usage()
        self.turn_done = False
        self._started: set[str] = set()
        self._calls = 0
        self._skill_seen = False

    def t(self) -> float:
        return round(time.monotonic() - self.t0, 3)

    def add(self, event: TraceEvent) -> None:
        self.events.append(event)

    def fail(self, message: str) -> None:
        self.errors.append(message)
        self.add(ErrorEvent(t=self.t(), message=message))

    def start_turn(self, prompt: str) -> None:
        self.answer, self.turn_done = "", False
        self.add(MessageEvent(t=self.t(), role="user", text=prompt))

    def feed(self, ev: dict[str, Any]) -> str | None:
        """Take one event; return a reason to stop the agent (too many tool calls), else None."""
        kind = ev.get("type")
        if kind == "thread.started":
            self.thread_id = ev.get("thread_id") or self.thread_id
        elif kind in ("item.started", "item.completed"):
            return self._item(ev.get("item") or {}, kind == "item.completed")
        elif kind == "turn.completed":
            self.turn_done = True
            self._usage(ev.get("usage") or {}, ev.get("model_calls"))
        elif kind == "turn.failed":
            self.turn_done = True
            self.fail(f"codex turn failed: {(ev.get('error') or {}).get('message', 'unknown error')}")
        elif kind == "error":
            self.add(ErrorEvent(t=self.t(), message=f"codex: {ev.get('message', '')}"))
        return None

    def _item(self, item: dict[str, Any], done: bool) -> str | None:
        kind, iid = item.get("type"), str(item.get("id", ""))
        if kind == "agent_message":
            if done and (item.get("text") or "").strip():
                self.answer = item["text"]
                self.add(MessageEvent(t=self.t(), role="assistant", text=item["text"]))
            return None
        if kind == "error":
            msg = item.get("message", "")
            self.add(MessageEvent(t=self.t(), role="system", text=f"warning: {msg}") if msg.startswith(_BENIGN)
                     else ErrorEvent(t=self.t(), message=f"codex: {msg}"))
            return None
        call = _tool_call(item)
        if call is None:
            return None
        name, inp = call
        if iid not in self._started:
            self._started.add(iid)
            self._calls += 1
            self.add(ToolCallEvent(t=self.t(), id=iid, name=name, input=inp))
            self._skill_use(item)
        if done:
            output, failed = _tool_result(item)
            self.add(ToolResultEvent(t=self.t(), id=iid, output=output, is_error=failed))
        if self._calls > self.max_tool_calls:
            return f"stopped after {self.max_tool_calls} tool calls (max_turns)"
        return None

    def _skill_use(self, item: dict[str, Any]) -> None:
        paths = [a.get("path", "") for a in item.get("command_actions") or [] if isinstance(a, dict)]
        if any(mentions_skill_file(p, self.skill) for p in [item.get("command", ""), *paths]):
            self.add(SkillUsedEvent(t=self.t(), name=self.skill, how="read SKILL.md (shell)"))

    def _usage(self, u: dict[str, Any], calls: int | None) -> None:
        tokens_in, tokens_out = int(u.get("input_tokens") or 0), int(u.get("output_tokens") or 0)
        cost = cost_usd(self.target, tokens_in, tokens_out, self.prices)
        self.add(UsageEvent(t=self.t(), input_tokens=tokens_in, output_tokens=tokens_out, cost_usd=cost, turns=calls))
        self.usage = self.usage + Usage(input_tokens=tokens_in, output_tokens=tokens_out, cost_usd=cost,
                                        calls=calls or 0)


def _tool_call(item: dict[str, Any]) -> tuple[str, Any] | None:
    kind = item.get("type")
    if kind == "command_execution":
        return "shell", {"command": _unwrap_shell(item.get("command", ""))}
    if kind == "file_change":
        return "apply_patch", {"changes": [f"{c.get('kind', '')} {c.get('path', '')}".strip()
                                           for c in item.get("changes") or [] if isinstance(c, dict)]}
    if kind == "mcp_tool_call":
        return f"{item.get('server', 'mcp')}.{item.get('tool', '?')}", item.get("arguments")
    if kind == "web_search":
        return "web_search", {"query": item.get("query", "")}
    if kind in ("dynamic_tool_call", "collab_agent_tool_call", "collab_tool_call"):
        return str(item.get("tool") or kind), item.get("arguments") or item.get("prompt")
    return None


def _unwrap_shell(command: str) -> str:
    """`/bin/bash -lc 'ls -la'` -> `ls -la` (what the model asked for)."""
    m = re.match(r"^\S*(?:ba|z)?sh -l?c (['\"])(.*)\1$", command, re.S)
    return m.group(2) if m else command


def _tool_result(item: dict[str, Any]) -> tuple[str, bool]:
    status = item.get("status", "")
    if item.get("type") == "command_execution":
        code = item.get("exit_code")
        output = item.get("aggregated_output") or ""
        failed = status in ("failed", "declined") or (code is not None and code != 0)
        return (f"[exit code {code}]\n{output}" if code not in (None, 0) else output), failed
    result = item.get("result") or item.get("error") or ""
    text = result if isinstance(result, str) else json.dumps(result, ensure_ascii=False, default=str)
    return text or status, status in ("failed", "declined") or bool(item.get("error"))


def app_server_event(method: str, params: dict[str, Any], state: dict[str, Any]) -> dict[str, Any] | None:
    """An app-server notification (SDK mode) -> the `codex exec --json` event it stands for."""
    if method in ("item/started", "item/completed"):
        item = {_snake(k): (_snake(v) if k in ("type", "status") and isinstance(v, str) else v)
                for k, v in (params.get("item") or {}).items()}
        if item.get("type") == "user_message":
            return None
        if item.get("type") == "command_execution":
            item["command_actions"] = [{_snake(k): v for k, v in a.items()} for a in item.get("command_actions") or []]
        return {"type": method.replace("/", "."), "item": item}
    if method == "thread/tokenUsage/updated":
        state["usage"] = (params.get("tokenUsage") or {}).get("total") or {}
        state["calls"] = state.get("calls", 0) + 1
        return None
    if method == "turn/completed":
        turn = params.get("turn") or {}
        if turn.get("status") == "failed":
            return {"type": "turn.failed", "error": turn.get("error") or {}}
        usage = {_snake(k): v for k, v in (state.get("usage") or {}).items()}
        ev = {"type": "turn.completed", "usage": usage, "model_calls": state.get("calls")}
        state["usage"], state["calls"] = {}, 0
        return ev
    if method == "error":
        return {"type": "error", "message": (params.get("error") or {}).get("message") or json.dumps(params)}
    return None


def _snake(name: str) -> str:
    return _CAMEL.sub("_", name).lower()


def session_facts(codex_home: Path, thread_id: str | None) -> tuple[list[str] | None, int | None]:
    """From Codex's own session file: the skills listed to the model, and the number of model calls."""
    if not thread_id:
        return None, None
    files = sorted((codex_home / "sessions").glob(f"**/rollout-*{thread_id}*.jsonl"))
    if not files:
        return None, None
    listed: list[str] | None = None
    responses: set[str] = set()
    for line in files[-1].read_text(encoding="utf-8", errors="replace").splitlines():
        if "<skills_instructions>" in line:  # the developer message listing the skills (JSON-escaped)
            block = line.split("<skills_instructions>", 1)[1].split("</skills_instructions>", 1)[0]
            listed = re.findall(r"\\n- ([^:\\]+): ", block)
        if '"token_usage_record"' in line:
            try:
                responses.add(str(json.loads(line)["payload"].get("response_id")))
            except (ValueError, KeyError, AttributeError):
                pass
    return listed, len(responses) or None


def codex_config(model: str, ep: Endpoint, opts: AgentOptions) -> str:
    """`$CODEX_HOME/config.toml`: one provider (the target's Responses endpoint), no approvals."""
    q = json.dumps  # a JSON string is a valid TOML basic string
    lines = [f"model = {q(model)}", f"model_provider = {q(PROVIDER)}", 'approval_policy = "never"',
             f"sandbox_mode = {q(opts.sandbox)}"]
    if opts.reasoning_effort:
        lines.append(f"model_reasoning_effort = {q(opts.reasoning_effort)}")
    lines += ["", f"[model_providers.{PROVIDER}]", 'name = "skillopt target"', f"base_url = {q(ep.base_url)}",
              f"env_key = {q(KEY_VAR)}", 'wire_api = "responses"', f"request_max_retries = {opts.max_retries}",
              f"stream_max_retries = {opts.max_retries}",
              f"stream_idle_timeout_ms = {int(opts.stream_idle_timeout_s * 1000)}"]
    if ep.query:
        lines.append("query_params = { " + ", ".join(f"{q(k)} = {q(v)}" for k, v in ep.query) + " }")
    if "azure" in (ep.base_url or ""):
        lines.append(f'env_http_headers = {{ "api-key" = {q(KEY_VAR)} }}')
    return "\n".join(lines) + "\n"


def _bundled_codex() -> tuple[str | None, str | None]:
    """(the codex binary, the folder of its helper tools) from `openai-codex-cli-bin`, if installed."""
    try:
        from codex_cli_bin import bundled_codex_path, bundled_path_dir
    except ImportError:
        return None, None
    try:
        extra = bundled_path_dir()
        return str(bundled_codex_path()), str(extra) if extra else None
    except (FileNotFoundError, OSError):
        return None, None


class CodexHarness:
    name = "codex"
    apis: frozenset[str] = frozenset({"responses"})
    skill_dir = ".agents/skills"

    def __init__(self, ctx: HarnessContext):
        self.models = ctx.models
        self.opts = AgentOptions.parse(self.name, ctx.options)
        self.mode = self._resolve_mode()

    def _resolve_mode(self) -> str:
        has_sdk = importlib.util.find_spec("openai_codex") is not None
        if self.opts.mode == "sdk" and not has_sdk:
            raise MissingExtra("the codex harness in sdk mode", "codex", "openai-codex")
        if self.opts.mode == "sdk" or (self.opts.mode == "auto" and has_sdk):
            return "sdk"
        if not (self.opts.binary or shutil.which("codex") or _bundled_codex()[0]):
            raise BadInput(f"the codex harness needs Codex: {INSTALL_HINT}")
        return "cli"

    def _binary(self) -> str | None:
        if self.opts.binary:
            return self.opts.binary
        bundled, on_path = _bundled_codex()[0], shutil.which("codex")
        return (bundled or on_path) if self.mode == "sdk" else (on_path or bundled)

    async def run(self, task: Task, skill: Skill, ws: Path, target: ModelSpec, limits: Limits) -> Rollout:
        t0 = time.monotonic()
        trace = CodexTrace(skill.name, t0, target, self.opts.turns(limits), self.models.prices)
        raw: list[str] = []
        coding = task.kind in ("code", "swe")
        env: dict[str, str] = {}
        try:
            if coding and (err := await asyncio.to_thread(prepare_git, ws)):
                trace.add(ErrorEvent(t=trace.t(), message=err))
            env = self._env(ws, target)
            binary = self._binary()
            if binary is None:
                raise FileNotFoundError(f"no codex binary: {INSTALL_HINT}")
            deadline = t0 + self.opts.timeout(limits)
            run = self._run_sdk if self.mode == "sdk" else self._run_cli
            async with process_slots(self.opts.max_processes):
                await run(task_prompt(task), ws, env, binary, trace, raw, deadline, limits)
        except Exception as e:  # the agent failed; the run goes on (Harness contract)
            trace.fail(f"codex failed: {type(e).__name__}: {e}")
        if env:
            self._add_session_facts(Path(env["CODEX_HOME"]), trace)
        patch = await asyncio.to_thread(workspace_diff, ws) if coding else None
        if not trace.errors and not trace.answer.strip():
            trace.fail("empty final answer" + (" (after a nudge)" if self.opts.nudge_empty else ""))
        if trace.usage.input_tokens or trace.usage.calls:
            self.models.meter.record(CallRecord(role="target", model=str(target), input_tokens=trace.usage.input_tokens,
                                                output_tokens=trace.usage.output_tokens, cost_usd=trace.usage.cost_usd))
        return Rollout(task_id=task.id, output=RolloutOutput(text=trace.answer, patch=patch), trace=trace.events,
                       usage=trace.usage, duration_s=time.monotonic() - t0, error="; ".join(trace.errors) or None,
                       raw_log="\n".join(raw) + "\n" if raw else None)

    def _needs_nudge(self, trace: CodexTrace) -> bool:
        return self.opts.nudge_empty and not trace.answer.strip() and not trace.errors and bool(trace.thread_id)

    async def _run_cli(self, prompt: str, ws: Path, env: dict[str, str], binary: str, trace: CodexTrace,
                       raw: list[str], deadline: float, limits: Limits) -> None:
        for attempt, text in enumerate((prompt, NUDGE)):
            if attempt and not self._needs_nudge(trace):
                return
            trace.start_turn(text)
            left = deadline - time.monotonic()
            if left <= 0:
                trace.fail(f"timed out after {self.opts.timeout(limits):.0f}s")
                return
            argv = [binary, "exec"] + (["resume", trace.thread_id or ""] if attempt else []) + [
                "--json", "--skip-git-repo-check"] + (["--cd", str(ws)] if not attempt else []) + ["--", text]

            def on_line(line: str) -> str | None:
                raw.append(line)
                try:
                    ev = json.loads(line)
                except json.JSONDecodeError:
                    return None
                return trace.feed(ev) if isinstance(ev, dict) else None

            res = await stream_process(argv, ws, env, left, on_line)
            if res.stderr.strip():
                raw.append(json.dumps({"type": "skillopt:stderr", "text": res.stderr[-4000:]}))
            if res.timed_out:
                trace.fail(f"timed out after {self.opts.timeout(limits):.0f}s")
            elif res.stopped:
                trace.fail(res.stopped)
            elif not trace.turn_done:
                tail = res.stderr.strip()[-400:] or "no output"
                trace.fail(f"codex exited with code {res.returncode} before the turn completed: {tail}")
            if trace.errors:
                return

    async def _run_sdk(self, prompt: str, ws: Path, env: dict[str, str], binary: str, trace: CodexTrace,
                       raw: list[str], deadline: float, limits: Limits) -> None:
        from openai_codex import ApprovalMode, AsyncCodex, CodexConfig, Sandbox

        sandbox = {"read-only": Sandbox.read_only, "workspace-write": Sandbox.workspace_write,
                   "danger-full-access": Sandbox.full_access}[self.opts.sandbox]
        launcher = Launcher.write(Path(env["HOME"]), "codex", binary, ("app-server", "--listen", "stdio://"),
                                  keep=tuple(env))
        codex = AsyncCodex(CodexConfig(launch_args_override=(str(launcher.path),), cwd=str(ws), env=env))
        try:
            async with asyncio.timeout(max(0.1, deadline - time.monotonic())):
                thread = await codex.thread_start(cwd=str(ws), sandbox=sandbox, approval_mode=ApprovalMode.deny_all)
                trace.thread_id = thread.id
                for attempt, text in enumerate((prompt, NUDGE)):
                    if attempt and not self._needs_nudge(trace):
                        break
                    trace.start_turn(text)
                    await self._sdk_turn(thread, text, trace, raw)
                    if trace.errors:
                        break
        except TimeoutError:
            trace.fail(f"timed out after {self.opts.timeout(limits):.0f}s")
        finally:
            await asyncio.to_thread(kill_group, launcher.pid())
            try:
                await asyncio.wait_for(codex.close(), 10)
            except (Exception, asyncio.CancelledError):
                pass

    async def _sdk_turn(self, thread: Any, text: str, trace: CodexTrace, raw: list[str]) -> None:
        turn = await thread.turn(text)
        state: dict[str, Any] = {}
        async for note in turn.stream():
            payload = note.payload
            params = payload.model_dump(mode="json", by_alias=True, exclude_none=True) \
                if hasattr(payload, "model_dump") else (payload if isinstance(payload, dict) else {})
            raw.append(json.dumps({"method": note.method, "params": params}, ensure_ascii=False, default=str))
            ev = app_server_event(note.method, params, state)
            stop = trace.feed(ev) if ev else None
            if stop:
                trace.fail(stop)
                try:
                    await asyncio.wait_for(turn.interrupt(), 5)
                except (Exception, asyncio.TimeoutError):
                    pass
                return
        if not trace.turn_done:
            trace.fail("codex app-server ended the turn without completing it")

    def _add_session_facts(self, codex_home: Path, trace: CodexTrace) -> None:
        listed, calls = session_facts(codex_home, trace.thread_id)
        if listed is not None:
            at = next((i + 1 for i, e in enumerate(trace.events) if isinstance(e, MessageEvent) and e.role == "user"), 0)
            trace.events.insert(at, discovery_event(trace.skill, listed, t=0.0))
        if calls and self.mode == "cli":  # exec's usage events do not count model calls; the session file does
            trace.usage = trace.usage.model_copy(update={"calls": calls})
            usage = [i for i, e in enumerate(trace.events) if isinstance(e, UsageEvent)]
            if len(usage) == 1:
                trace.events[usage[0]] = trace.events[usage[0]].model_copy(update={"turns": calls})

    def _env(self, ws: Path, target: ModelSpec) -> dict[str, str]:
        home = agent_home(ws)
        codex_home = home / ".codex"
        codex_home.mkdir(parents=True, exist_ok=True)
        ep = endpoint(target, self.models.env, "responses")
        (codex_home / "config.toml").write_text(codex_config(self.opts.model or target.model, ep, self.opts),
                                                encoding="utf-8")
        env = child_env(home, dict(os.environ), CODEX_HOME=str(codex_home), **{KEY_VAR: ep.api_key}, **self.opts.env)
        tools = _bundled_codex()[1]
        if tools:  # rg, which Codex prefers for searching
            env["PATH"] = tools + os.pathsep + env["PATH"]
        return env


@harness("codex", description="OpenAI Codex (openai-codex SDK or codex exec --json); the skill in .agents/skills",
         apis=frozenset({"responses"}))
def _make_codex(ctx: HarnessContext) -> CodexHarness:
    return CodexHarness(ctx)
