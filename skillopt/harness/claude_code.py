"""The `claude-code` harness: Claude Code solves the task in a fresh workspace.

The skill sits in `<ws>/.claude/skills/<name>/SKILL.md`, where Claude Code discovers it; the model
sees its description and loads it with the `Skill` tool. Two ways to drive the same binary:

- `sdk`: `claude_agent_sdk.query()` (the package bundles the binary);
- `cli`: `claude -p --output-format stream-json --verbose`, one JSON event per line.

Both yield the same events (system init, assistant text / tool_use, user tool_result, result),
which `ClaudeTrace` turns into normalized trace events. Each rollout has its own HOME and
CLAUDE_CONFIG_DIR under `<ws>/.home`, and talks to an Anthropic Messages endpoint.
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib.util
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

from skillopt.benchmarks.base import RolloutOutput, Task
from skillopt.errors import BadInput, MissingExtra
from skillopt.harness.agent_common import (
    NUDGE, AgentOptions, Launcher, agent_home, child_env, endpoint, kill_group, mentions_skill_file,
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

# Variables the SDK adds to the CLI's environment that the launcher lets through.
SDK_ENV_PREFIXES = ("CLAUDE_CODE_ENTRYPOINT", "CLAUDE_AGENT_SDK", "CLAUDE_CODE_SDK_", "CLAUDE_CODE_PRINT_BG")
INSTALL_HINT = 'pip install "skillopt[claude-code]" (bundles Claude Code), or npm i -g @anthropic-ai/claude-code'


class ClaudeTrace:
    """Claude Code stream-json events -> normalized trace events, final answer, usage."""

    def __init__(self, skill_name: str, t0: float, target: ModelSpec, prices: dict | None = None):
        self.skill, self.t0, self.target, self.prices = skill_name, t0, target, prices
        self.events: list[TraceEvent] = []
        self.session_id: str | None = None
        self.answer = ""  # of the last session
        self.errors: list[str] = []  # why the agent failed (empty: it did not)
        self.usage = Usage()
        self._texts: list[str] = []
        self._init_seen = False

    def t(self) -> float:
        return round(time.monotonic() - self.t0, 3)

    def add(self, event: TraceEvent) -> None:
        self.events.append(event)

    def fail(self, message: str) -> None:
        self.errors.append(message)
        self.add(ErrorEvent(t=self.t(), message=message))

    def start_session(self, prompt: str) -> None:
        self.answer, self._texts = "", []
        self.add(MessageEvent(t=self.t(), role="user", text=prompt))

    def feed(self, ev: dict[str, Any]) -> None:
        kind = ev.get("type")
        self.session_id = ev.get("session_id") or self.session_id
        if kind == "system":
            self._system(ev)
        elif kind == "assistant":
            self._assistant(ev)
        elif kind == "user":
            self._user(ev)
        elif kind == "result":
            self._result(ev)

    def _system(self, ev: dict[str, Any]) -> None:
        if ev.get("subtype") == "init" and isinstance(ev.get("skills"), list) and not self._init_seen:
            self._init_seen = True
            self.add(discovery_event(self.skill, [str(s) for s in ev["skills"]], t=self.t()))
        elif ev.get("subtype") == "api_retry":
            status = ev.get("error_status") or ev.get("error") or "unknown error"
            self.add(ErrorEvent(t=self.t(), message=f"model API retry {ev.get('attempt')}/{ev.get('max_retries')}: {status}"))

    def _assistant(self, ev: dict[str, Any]) -> None:
        msg = ev.get("message") or {}
        main = not ev.get("parent_tool_use_id")
        for block in msg.get("content") or []:
            btype = block.get("type")
            if btype == "text" and block.get("text", "").strip():
                self.add(MessageEvent(t=self.t(), role="assistant", text=block["text"]))
                if main:
                    self._texts.append(block["text"])
            elif btype == "tool_use":
                name, inp = block.get("name", "?"), block.get("input")
                self.add(ToolCallEvent(t=self.t(), id=block.get("id", ""), name=name, input=inp))
                self._skill_use(name, inp)
        if ev.get("error"):
            self.add(ErrorEvent(t=self.t(), message=f"assistant message error: {ev['error']}"))

    def _skill_use(self, tool: str, inp: Any) -> None:
        inp = inp if isinstance(inp, dict) else {}
        if tool == "Skill" and str(inp.get("skill", "")).split(":")[-1].lstrip("/") == self.skill:
            self.add(SkillUsedEvent(t=self.t(), name=self.skill, how="Skill tool"))
        elif any(mentions_skill_file(str(inp.get(k, "")), self.skill) for k in ("file_path", "path", "command")):
            self.add(SkillUsedEvent(t=self.t(), name=self.skill, how=f"read SKILL.md ({tool})"))

    def _user(self, ev: dict[str, Any]) -> None:
        content = (ev.get("message") or {}).get("content")
        if isinstance(content, str):
            if content.strip():
                self.add(MessageEvent(t=self.t(), role="user", text=content))
            return
        for block in content or []:
            if block.get("type") == "tool_result":
                self.add(ToolResultEvent(t=self.t(), id=block.get("tool_use_id", ""), output=_text_of(block.get("content")),
                                         is_error=bool(block.get("is_error"))))
            elif block.get("type") == "text" and block.get("text", "").strip():
                self.add(MessageEvent(t=self.t(), role="user", text=block["text"]))

    def _result(self, ev: dict[str, Any]) -> None:
        u = ev.get("usage") or {}
        tokens_in = sum(int(u.get(k) or 0) for k in ("input_tokens", "cache_creation_input_tokens",
                                                       "cache_read_input_tokens"))
        tokens_out = int(u.get("output_tokens") or 0)
        turns = int(ev.get("num_turns") or 0)
        cost = cost_usd(self.target, tokens_in, tokens_out, self.prices)
        if cost is None and self.target.provider == "anthropic" and _priced(ev):
            cost = ev.get("total_cost_usd")
        self.add(UsageEvent(t=self.t(), input_tokens=tokens_in, output_tokens=tokens_out, cost_usd=cost, turns=turns))
        self.usage = self.usage + Usage(input_tokens=tokens_in, output_tokens=tokens_out, cost_usd=cost, calls=turns)
        result = ev.get("result")
        self.answer = result if isinstance(result, str) and result.strip() else (self._texts[-1] if self._texts else "")
        if ev.get("is_error") or (ev.get("subtype") not in (None, "success")):
            detail = "; ".join(str(e) for e in ev.get("errors") or []) or (result if isinstance(result, str) else "")
            self.fail(f"claude code ended with {ev.get('subtype')}: {detail}".rstrip(": "))


def _priced(ev: dict[str, Any]) -> bool:
    """Claude Code's own cost figure is meaningful only for models it knows the price of."""
    usage = ev.get("modelUsage") or ev.get("model_usage") or {}
    return bool(usage) and all((m or {}).get("costBasis") != "unknown" for m in usage.values())


def _text_of(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(b.get("text", "") if isinstance(b, dict) and b.get("type") == "text" else
                         (f"[{b.get('type')}]" if isinstance(b, dict) else str(b)) for b in content)
    return json.dumps(content, ensure_ascii=False, default=str)


def sdk_message_to_event(msg: Any) -> dict[str, Any]:
    """An SDK message object -> the stream-json event it was parsed from (same shape as the CLI's)."""
    from claude_agent_sdk import AssistantMessage, ResultMessage, SystemMessage, UserMessage

    if isinstance(msg, SystemMessage):
        return dict(msg.data) if msg.data else {"type": "system", "subtype": msg.subtype}
    if isinstance(msg, AssistantMessage):
        return {"type": "assistant", "parent_tool_use_id": msg.parent_tool_use_id, "session_id": msg.session_id,
                "error": msg.error, "message": {"id": msg.message_id, "model": msg.model, "usage": msg.usage,
                                                "content": [_block(b) for b in msg.content]}}
    if isinstance(msg, UserMessage):
        content = msg.content if isinstance(msg.content, str) else [_block(b) for b in msg.content]
        return {"type": "user", "parent_tool_use_id": msg.parent_tool_use_id,
                "message": {"role": "user", "content": content}}
    if isinstance(msg, ResultMessage):
        return {"type": "result", **dataclasses.asdict(msg)}
    data = dataclasses.asdict(msg) if dataclasses.is_dataclass(msg) else {"repr": repr(msg)}
    return {"type": "sdk:" + type(msg).__name__, **data}


def _keep_tail(lines: list[str], n: int):
    def add(line: str) -> None:
        lines.append(line)
        del lines[:-n]
    return add


def _block(block: Any) -> dict[str, Any]:
    kind = type(block).__name__
    data = dataclasses.asdict(block) if dataclasses.is_dataclass(block) else {"repr": repr(block)}
    names = {"TextBlock": "text", "ThinkingBlock": "thinking", "ToolUseBlock": "tool_use",
             "ToolResultBlock": "tool_result"}
    return {"type": names.get(kind, kind), **data}


def _bundled_claude() -> str | None:
    spec = importlib.util.find_spec("claude_agent_sdk")
    if spec is None or not spec.origin:
        return None
    path = Path(spec.origin).parent / "_bundled" / "claude"
    return str(path) if path.exists() else None


class ClaudeCodeHarness:
    name = "claude-code"
    apis: frozenset[str] = frozenset({"messages"})
    skill_dir = ".claude/skills"

    def __init__(self, ctx: HarnessContext):
        self.models = ctx.models
        self.opts = AgentOptions.parse(self.name, ctx.options)
        self.mode = self._resolve_mode()

    def _resolve_mode(self) -> str:
        has_sdk = importlib.util.find_spec("claude_agent_sdk") is not None
        if self.opts.mode == "sdk" and not has_sdk:
            raise MissingExtra("the claude-code harness in sdk mode", "claude-code", "claude-agent-sdk")
        if self.opts.mode == "sdk" or (self.opts.mode == "auto" and has_sdk):
            return "sdk"
        if not (self.opts.binary or shutil.which("claude") or _bundled_claude()):
            raise BadInput(f"the claude-code harness needs Claude Code: {INSTALL_HINT}")
        return "cli"

    def _binary(self) -> str | None:
        """The option's binary; else the SDK's bundled one (sdk mode) or the one on PATH (cli mode)."""
        if self.opts.binary:
            return self.opts.binary
        bundled, on_path = _bundled_claude(), shutil.which("claude")
        return (bundled or on_path) if self.mode == "sdk" else (on_path or bundled)

    async def run(self, task: Task, skill: Skill, ws: Path, target: ModelSpec, limits: Limits) -> Rollout:
        t0 = time.monotonic()
        trace = ClaudeTrace(skill.name, t0, target, self.models.prices)
        raw: list[str] = []
        coding = task.kind in ("code", "swe")
        try:
            if coding and (err := await asyncio.to_thread(prepare_git, ws)):
                trace.add(ErrorEvent(t=trace.t(), message=err))
            env = self._env(ws, target, limits)
            binary = self._binary()
            if binary is None:
                raise FileNotFoundError(f"no Claude Code binary: {INSTALL_HINT}")
            deadline = t0 + self.opts.timeout(limits)
            async with process_slots(self.opts.max_processes):
                await self._session(task_prompt(task), None, ws, env, binary, target, limits, trace, raw, deadline)
                if self.opts.nudge_empty and not trace.answer.strip() and not trace.errors and trace.session_id:
                    await self._session(NUDGE, trace.session_id, ws, env, binary, target, limits, trace, raw, deadline)
        except Exception as e:  # the agent failed; the run goes on (Harness contract)
            trace.fail(f"claude code failed: {type(e).__name__}: {e}")
        patch = await asyncio.to_thread(workspace_diff, ws) if coding else None
        if not trace.errors and not trace.answer.strip():
            trace.fail("empty final answer" + (" (after a nudge)" if self.opts.nudge_empty else ""))
        self._meter(target, trace.usage)
        return Rollout(task_id=task.id, output=RolloutOutput(text=trace.answer, patch=patch), trace=trace.events,
                       usage=trace.usage, duration_s=time.monotonic() - t0, error="; ".join(trace.errors) or None,
                       raw_log="\n".join(raw) + "\n" if raw else None)

    async def _session(self, prompt: str, resume: str | None, ws: Path, env: dict[str, str], binary: str,
                       target: ModelSpec, limits: Limits, trace: ClaudeTrace, raw: list[str], deadline: float) -> None:
        trace.start_session(prompt)
        left = deadline - time.monotonic()
        if left <= 0:
            trace.fail(f"timed out after {self.opts.timeout(limits):.0f}s")
            return
        if self.mode == "sdk":
            await self._run_sdk(prompt, resume, ws, env, binary, target, limits, trace, raw, left)
        else:
            await self._run_cli(prompt, resume, ws, env, binary, target, limits, trace, raw, left)

    def _flags(self, target: ModelSpec, limits: Limits) -> dict[str, Any]:
        o = self.opts
        return {"model": o.model or target.model, "permission_mode": o.permission_mode, "max_turns": o.turns(limits),
                "allowed_tools": list(o.allowed_tools or ()), "disallowed_tools": list(o.disallowed_tools or ()),
                "tools": list(o.tools) if o.tools is not None else None, "effort": o.reasoning_effort}

    async def _run_cli(self, prompt: str, resume: str | None, ws: Path, env: dict[str, str], binary: str,
                       target: ModelSpec, limits: Limits, trace: ClaudeTrace, raw: list[str], timeout: float) -> None:
        f = self._flags(target, limits)
        argv = [binary, "-p", "--output-format", "stream-json", "--verbose", "--model", f["model"],
                "--permission-mode", f["permission_mode"], "--max-turns", str(f["max_turns"]),
                "--setting-sources", "project"]
        for flag, key in (("--allowedTools", "allowed_tools"), ("--disallowedTools", "disallowed_tools")):
            if f[key]:
                argv += [flag, ",".join(f[key])]
        if f["tools"] is not None:
            argv += ["--tools", ",".join(f["tools"])]
        if f["effort"]:
            argv += ["--effort", f["effort"]]
        if resume:
            argv += ["--resume", resume]
        argv += ["--", prompt]

        got_result = False

        def on_line(line: str) -> str | None:
            nonlocal got_result
            raw.append(line)
            try:
                ev = json.loads(line)
            except json.JSONDecodeError:
                return None
            if isinstance(ev, dict):
                trace.feed(ev)
                got_result = got_result or ev.get("type") == "result"
            return None

        res = await stream_process(argv, ws, env, timeout, on_line)
        if res.timed_out:
            trace.fail(f"timed out after {self.opts.timeout(limits):.0f}s")
        elif not got_result:
            tail = res.stderr.strip()[-400:] or "no output"
            trace.fail(f"claude exited with code {res.returncode} before its result: {tail}")
        if res.stderr.strip():
            raw.append(json.dumps({"type": "skillopt:stderr", "text": res.stderr[-4000:]}))

    async def _run_sdk(self, prompt: str, resume: str | None, ws: Path, env: dict[str, str], binary: str,
                       target: ModelSpec, limits: Limits, trace: ClaudeTrace, raw: list[str], timeout: float) -> None:
        from claude_agent_sdk import ClaudeAgentOptions, query

        f = self._flags(target, limits)
        launcher = Launcher.write(Path(env["HOME"]), "claude", binary, (), keep=tuple(env), prefixes=SDK_ENV_PREFIXES)
        stderr: list[str] = []
        options = ClaudeAgentOptions(
            cwd=str(ws), cli_path=str(launcher.path), env=env, model=f["model"], permission_mode=f["permission_mode"],
            max_turns=f["max_turns"], allowed_tools=f["allowed_tools"], disallowed_tools=f["disallowed_tools"],
            tools=f["tools"], effort=f["effort"], setting_sources=["project"], resume=resume,
            stderr=_keep_tail(stderr, 50),
        )
        messages = query(prompt=prompt, options=options)
        got_result = False
        try:
            async with asyncio.timeout(timeout):
                async for msg in messages:
                    ev = sdk_message_to_event(msg)
                    got_result = got_result or ev.get("type") == "result"
                    raw.append(json.dumps(ev, ensure_ascii=False, default=str))
                    trace.feed(ev)
        except TimeoutError:
            trace.fail(f"timed out after {self.opts.timeout(limits):.0f}s")
        except Exception as e:  # the SDK raises for a crashed CLI (ProcessError, CLIConnectionError, ...)
            if not got_result:
                tail = " | ".join(stderr[-5:])
                trace.fail(f"claude code failed: {type(e).__name__}: {e}" + (f" (stderr: {tail[-400:]})" if tail else ""))
        finally:
            await asyncio.to_thread(kill_group, launcher.pid())
            try:
                await asyncio.wait_for(messages.aclose(), 10)
            except (Exception, asyncio.CancelledError):
                pass
        if stderr:
            raw.append(json.dumps({"type": "skillopt:stderr", "text": "\n".join(stderr)[-4000:]}))

    def _env(self, ws: Path, target: ModelSpec, limits: Limits) -> dict[str, str]:
        home = agent_home(ws)
        ep = endpoint(target, self.models.env, "messages")
        model = self.opts.model or target.model
        timeout_ms = int(min(self.opts.timeout(limits), 600) * 1000)
        values = {
            "CLAUDE_CONFIG_DIR": str(home / ".claude"), "IS_SANDBOX": "1",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "CLAUDE_CODE_ATTRIBUTION_HEADER": "0",
            "DISABLE_AUTOUPDATER": "1", "DISABLE_TELEMETRY": "1", "DISABLE_ERROR_REPORTING": "1",
            "CLAUDE_CODE_MAX_RETRIES": str(self.opts.max_retries), "API_TIMEOUT_MS": str(timeout_ms),
            "CLAUDE_STREAM_IDLE_TIMEOUT_MS": str(int(self.opts.stream_idle_timeout_s * 1000)),
            "CLAUDE_CODE_MAX_OUTPUT_TOKENS": str(self.opts.output_tokens(limits)),
            # every model role (background, subagents) uses the target model
            "ANTHROPIC_MODEL": model, "ANTHROPIC_SMALL_FAST_MODEL": model, "ANTHROPIC_DEFAULT_HAIKU_MODEL": model,
            "ANTHROPIC_DEFAULT_SONNET_MODEL": model, "ANTHROPIC_DEFAULT_OPUS_MODEL": model,
            "CLAUDE_CODE_SUBAGENT_MODEL": model,
        }
        if ep.base_url:
            values["ANTHROPIC_BASE_URL"] = ep.base_url
        values["ANTHROPIC_AUTH_TOKEN" if ep.bearer else "ANTHROPIC_API_KEY"] = ep.api_key
        return child_env(home, dict(os.environ), **values, **self.opts.env)

    def _meter(self, target: ModelSpec, usage: Usage) -> None:
        if usage.calls or usage.input_tokens:
            self.models.meter.record(CallRecord(role="target", model=str(target), input_tokens=usage.input_tokens,
                                                output_tokens=usage.output_tokens, cost_usd=usage.cost_usd))


@harness("claude-code", description="Claude Code (claude-agent-sdk or the claude CLI); the skill in .claude/skills",
         apis=frozenset({"messages"}))
def _make_claude_code(ctx: HarnessContext) -> ClaudeCodeHarness:
    return ClaudeCodeHarness(ctx)
