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
import json
import os
import re
from pathlib import Path
from typing import Any

from skillopt.harness.agent_common import NUDGE, AgentHarness, AgentRun, AgentTrace
from skillopt.harness.agent_env import (IDLE_TIMEOUT_S, AgentOptions, Endpoint, agent_home, child_env, endpoint,
                                        mentions_skill_file)
from skillopt.harness.process import watchdog
from skillopt.harness.base import Limits
from skillopt.harness.place import runs_in_container
from skillopt.harness.registry import HarnessContext, harness
from skillopt.models.spec import ModelSpec
from skillopt.traces.events import ErrorEvent, MessageEvent, SkillUsedEvent, ToolCallEvent, ToolResultEvent, UsageEvent
from skillopt.traces.summary import discovery_event

KEY_VAR = "SKILLOPT_CODEX_API_KEY"  # the provider's env_key: the key never touches the disk
PROVIDER = "skillopt"
INSTALL_HINT = 'pip install "skillopt[codex]" (bundles codex), or npm i -g @openai/codex'
_BENIGN = ("Model metadata for",)  # Codex warnings that are not failures (unknown model names)
_CAMEL = re.compile(r"(?<!^)(?=[A-Z])")


class CodexTrace(AgentTrace):
    """`codex exec --json` events -> normalized trace events, final answer, usage.

    `session_id` is Codex's thread id. More than `max_tool_calls` tool calls stop the agent
    (Codex has no turn limit of its own).
    """

    def __init__(self, *args: Any, max_tool_calls: int, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.max_tool_calls = max_tool_calls
        self.turn_done = False
        self._started: set[str] = set()
        self._calls = 0

    def start(self, prompt: str) -> None:
        super().start(prompt)
        self.turn_done = False

    def feed(self, ev: dict[str, Any]) -> str | None:
        """Take one event; return a reason to stop the agent (too many tool calls), else None."""
        kind = ev.get("type")
        if kind == "thread.started":
            self.session_id = ev.get("thread_id") or self.session_id
        elif kind in ("item.started", "item.completed"):
            return self._item(ev.get("item") or {}, kind == "item.completed")
        elif kind == "turn.completed":
            self.turn_done = True
            u = ev.get("usage") or {}
            self.count(int(u.get("input_tokens") or 0), int(u.get("output_tokens") or 0), ev.get("model_calls"))
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
    home = codex_home.resolve()
    files = sorted(p for p in (codex_home / "sessions").glob(f"**/rollout-*{thread_id}*.jsonl")
                   if p.resolve().is_relative_to(home))  # the agent wrote these: no link out of its home
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


def sandbox_mode(opts: AgentOptions, sandboxed: bool) -> str:
    """Codex's own sandbox mode: the option, or for `auto` workspace-write inside skillopt's sandbox."""
    if opts.sandbox != "auto":
        return opts.sandbox
    return "workspace-write" if sandboxed else "danger-full-access"


def codex_config(model: str, ep: Endpoint, opts: AgentOptions, sandboxed: bool = False,
                 idle_s: float = IDLE_TIMEOUT_S) -> str:
    """`$CODEX_HOME/config.toml`: one provider (the target's Responses endpoint), no approvals; `idle_s`:
    how long a silent stream is waited on (`AgentOptions.idle_timeout`)."""
    q = json.dumps  # a JSON string is a valid TOML basic string
    lines = [f"model = {q(model)}", f"model_provider = {q(PROVIDER)}", 'approval_policy = "never"',
             f"sandbox_mode = {q(sandbox_mode(opts, sandboxed))}"]
    if opts.reasoning_effort:
        lines.append(f"model_reasoning_effort = {q(opts.reasoning_effort)}")
    lines += ["", f"[model_providers.{PROVIDER}]", 'name = "skillopt target"', f"base_url = {q(ep.base_url)}",
              f"env_key = {q(KEY_VAR)}", 'wire_api = "responses"', f"request_max_retries = {opts.max_retries}",
              f"stream_max_retries = {opts.max_retries}",
              f"stream_idle_timeout_ms = {int(idle_s * 1000)}"]
    if ep.query:
        lines.append("query_params = { " + ", ".join(f"{q(k)} = {q(v)}" for k, v in ep.query) + " }")
    if ep.key_header:
        lines.append(f"env_http_headers = {{ {q(ep.key_header)} = {q(KEY_VAR)} }}")
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


class CodexHarness(AgentHarness):
    name = "codex"
    apis: frozenset[str] = frozenset({"responses"})
    skill_dir = ".agents/skills"
    sdk_module, extra, cli_name, install_hint = "openai_codex", "codex", "codex", INSTALL_HINT

    def bundled_binary(self) -> str | None:
        return _bundled_codex()[0]

    def tools(self, binary: str) -> list[str]:
        extra = _bundled_codex()[1]
        return super().tools(binary) + ([extra] if extra else [])

    def new_trace(self, skill: str, t0: float, target: ModelSpec, limits: Limits) -> CodexTrace:
        return CodexTrace(skill, t0, target, self.models.prices, max_tool_calls=self.opts.turns(limits))

    async def drive(self, run: AgentRun, prompt: str, target: ModelSpec, limits: Limits) -> None:
        if self.mode == "sdk":
            await self._run_sdk(run, prompt)
        else:
            await self._run_cli(run, prompt)

    async def _run_cli(self, run: AgentRun, prompt: str) -> None:
        """`codex exec --json PROMPT`, then `codex exec resume THREAD NUDGE` when the answer is empty."""
        trace = run.trace
        assert isinstance(trace, CodexTrace)  # this harness's own (`new_trace`)
        for text in (prompt, NUDGE):
            if text is NUDGE and not self.needs_nudge(trace):
                return
            trace.start(text)
            if run.left() <= 0:
                return run.timed_out()
            head = ["exec", "resume", trace.session_id or ""] if text is NUDGE else ["exec", "--cd", run.cwd]
            argv = [run.binary, *head, "--json", "--skip-git-repo-check", "--", text]
            res = await run.stream(argv)
            run.log_stderr(res.stderr)
            if res.timed_out:
                run.timed_out()
            elif res.stopped:
                trace.fail(res.stopped)
            elif not trace.turn_done:
                tail = res.stderr.strip()[-400:] or "no output"
                trace.fail(f"codex exited with code {res.returncode} before the turn completed: {tail}")
            if trace.errors:
                return

    async def _run_sdk(self, run: AgentRun, prompt: str) -> None:
        """`AsyncCodex` over `codex app-server`: one thread, one turn, a second turn with a nudge if needed."""
        from openai_codex import ApprovalMode, AsyncCodex, CodexConfig, Sandbox

        trace = run.trace
        assert isinstance(trace, CodexTrace)  # this harness's own (`new_trace`)
        sandbox = {"read-only": Sandbox.read_only, "workspace-write": Sandbox.workspace_write,
                   "danger-full-access": Sandbox.full_access}[
                       sandbox_mode(self.opts, self.sandboxed_agent and not runs_in_container(run.ws))]
        launcher = run.launcher("codex", ("app-server", "--listen", "stdio://"))
        codex = AsyncCodex(CodexConfig(launch_args_override=(str(launcher.path),), cwd=str(run.ws), env=run.env))
        with watchdog(run.left(), launcher.pid) as fired:
            try:
                async with asyncio.timeout(run.left() + 15):  # in case the SDK hangs after the kill
                    thread = await codex.thread_start(cwd=run.cwd, sandbox=sandbox,
                                                      approval_mode=ApprovalMode.deny_all)
                    trace.session_id = thread.id
                    for text in (prompt, NUDGE):
                        if text is NUDGE and not self.needs_nudge(trace):
                            break
                        trace.start(text)
                        await self._sdk_turn(thread, text, run)
                        if not trace.turn_done and not trace.errors and not fired[0]:
                            trace.fail("codex app-server ended the turn without completing it")
                        if trace.errors or fired[0]:
                            break
            except Exception as e:  # the SDK raises when the app-server dies (TransportClosedError, ...)
                if not fired[0]:
                    trace.fail(f"codex failed: {type(e).__name__}: {e}")
            finally:
                await asyncio.to_thread(run.kill, launcher.pid())
                try:
                    await asyncio.wait_for(codex.close(), 10)
                except (Exception, asyncio.CancelledError):
                    pass
        if fired[0]:
            run.timed_out()

    async def _sdk_turn(self, thread: Any, text: str, run: AgentRun) -> None:
        turn = await thread.turn(text)
        state: dict[str, Any] = {}
        async for note in turn.stream():
            payload = note.payload
            params = payload.model_dump(mode="json", by_alias=True, exclude_none=True) \
                if hasattr(payload, "model_dump") else (payload if isinstance(payload, dict) else {})
            run.raw.append(json.dumps({"method": note.method, "params": params}, ensure_ascii=False, default=str))
            ev = app_server_event(note.method, params, state)
            stop = run.trace.feed(ev) if ev else None
            if stop:
                run.trace.fail(stop)
                try:
                    await asyncio.wait_for(turn.interrupt(), 5)
                except (Exception, asyncio.TimeoutError):
                    pass
                return

    def after(self, run: AgentRun) -> None:
        """Codex's session file says which skills the model was shown, and how many model calls it made."""
        trace = run.trace
        listed, calls = session_facts(agent_home(run.ws) / ".codex", trace.session_id)
        if listed is not None:
            at = next((i + 1 for i, e in enumerate(trace.events) if isinstance(e, MessageEvent) and e.role == "user"), 0)
            trace.events.insert(at, discovery_event(trace.skill, listed, t=trace.events[at - 1].t if at else 0.0))
        usage = [i for i, e in enumerate(trace.events) if isinstance(e, UsageEvent)]
        if calls and self.mode == "cli" and len(usage) == 1:  # exec's usage events do not count model calls
            trace.events[usage[0]] = trace.events[usage[0]].model_copy(update={"turns": calls})
            trace.usage = trace.usage.model_copy(update={"calls": calls})

    def endpoint(self, target: ModelSpec) -> Endpoint:
        return endpoint(target, self.models.env, "responses", reply_tokens=self.opts.max_output_tokens)

    def tool_dirs(self) -> list[str]:
        """The bundled package's folder: Codex runs helpers beside its binary (its own bwrap, rg)."""
        codex = _bundled_codex()[0]
        return [str(Path(codex).parent.parent)] if codex else []

    def agent_env(self, ws: Path, target: ModelSpec, limits: Limits, ep: Endpoint) -> dict[str, str]:
        home = agent_home(ws)
        codex_home = home / ".codex"
        codex_home.mkdir(parents=True, exist_ok=True)
        # in the task's container (the container is the sandbox) Codex cannot make its own
        (codex_home / "config.toml").write_text(codex_config(self.opts.model or target.model, ep, self.opts,
                                                             self.sandboxed_agent and not runs_in_container(ws),
                                                             self.opts.idle_timeout(limits, target)),
                                                encoding="utf-8")
        env = child_env(home, dict(os.environ), CODEX_HOME=str(codex_home), **{KEY_VAR: ep.api_key}, **self.opts.env)
        tools = _bundled_codex()[1]
        if tools:  # rg, which Codex prefers for searching
            env["PATH"] = tools + os.pathsep + env["PATH"]
        return env


@harness("codex", description="OpenAI Codex (openai-codex SDK or codex exec --json); the skill in .agents/skills",
         apis=frozenset({"responses"}), agent=True)
def _make_codex(ctx: HarnessContext) -> CodexHarness:
    return CodexHarness(ctx)
