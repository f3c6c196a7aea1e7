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
from pathlib import Path
from typing import Any

from skillopt.harness.agent_common import NUDGE, AgentHarness, AgentRun, AgentTrace
from skillopt.harness.agent_env import IDLE_TIMEOUT_S, Endpoint, agent_home, child_env, endpoint, mentions_skill_file
from skillopt.harness.process import watchdog
from skillopt.harness.base import Limits
from skillopt.harness.registry import HarnessContext, harness
from skillopt.models.prices import cost_usd
from skillopt.models.spec import ModelSpec
from skillopt.traces.events import ErrorEvent, MessageEvent, SkillUsedEvent, ToolCallEvent, ToolResultEvent
from skillopt.traces.summary import discovery_event

# Variables the SDK adds to the CLI's environment that the launcher lets through.
SDK_ENV_PREFIXES = ("CLAUDE_CODE_ENTRYPOINT", "CLAUDE_AGENT_SDK", "CLAUDE_CODE_SDK_", "CLAUDE_CODE_PRINT_BG")
INSTALL_HINT = 'pip install "skillopt[claude-code]" (bundles Claude Code), or npm i -g @anthropic-ai/claude-code'


class ClaudeTrace(AgentTrace):
    """Claude Code stream-json events -> normalized trace events, final answer, usage."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._texts: list[str] = []  # the main agent's texts in this session
        self._init_seen = False
        self.results = 0  # `result` events seen (one per finished session)

    def start(self, prompt: str) -> None:
        super().start(prompt)
        self._texts = []

    def feed(self, ev: dict[str, Any]) -> str | None:
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
        return None

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
                if ev.get("error"):  # Claude Code's own message about a failed model call, not the model's
                    self.add(ErrorEvent(t=self.t(), message=f"model call failed ({ev['error']}): {block['text']}"))
                    continue
                self.add(MessageEvent(t=self.t(), role="assistant", text=block["text"]))
                if main:
                    self._texts.append(block["text"])
            elif btype == "tool_use":
                name, inp = block.get("name", "?"), block.get("input")
                self.add(ToolCallEvent(t=self.t(), id=block.get("id", ""), name=name, input=inp))
                self._skill_use(name, inp)

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
        self.results += 1
        u = ev.get("usage") or {}
        tokens_in = sum(int(u.get(k) or 0) for k in ("input_tokens", "cache_creation_input_tokens",
                                                       "cache_read_input_tokens"))
        tokens_out = int(u.get("output_tokens") or 0)
        cost = cost_usd(self.target, tokens_in, tokens_out, self.prices)
        if cost is None and self.target.provider == "anthropic" and _priced(ev):
            cost = ev.get("total_cost_usd")
        self.count(tokens_in, tokens_out, int(ev.get("num_turns") or 0), cost)
        result = ev.get("result") if isinstance(ev.get("result"), str) else ""
        if ev.get("is_error") or ev.get("subtype") not in (None, "success"):
            detail = "; ".join(str(e) for e in ev.get("errors") or []) or result
            kind = "an error" if ev.get("subtype") in (None, "success") else ev["subtype"]
            self.fail(f"claude code ended with {kind}: {detail}".rstrip(": "))
            return  # its `result` is then an error message, not an answer
        self.answer = result if result.strip() else (self._texts[-1] if self._texts else "")


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


class ClaudeCodeHarness(AgentHarness):
    name = "claude-code"
    apis: frozenset[str] = frozenset({"messages"})
    skill_dir = ".claude/skills"
    sdk_module, extra, cli_name, install_hint = "claude_agent_sdk", "claude-code", "claude", INSTALL_HINT

    def bundled_binary(self) -> str | None:
        spec = importlib.util.find_spec("claude_agent_sdk")
        path = Path(spec.origin).parent / "_bundled" / "claude" if spec and spec.origin else None
        return str(path) if path and path.exists() else None

    def new_trace(self, skill: str, t0: float, target: ModelSpec, limits: Limits) -> ClaudeTrace:
        return ClaudeTrace(skill, t0, target, self.models.prices)

    async def drive(self, run: AgentRun, prompt: str, target: ModelSpec, limits: Limits) -> None:
        """One session; a second one, resuming it, with a nudge when the final answer is empty."""
        flags = self._flags(target, limits)
        for text in (prompt, NUDGE):
            resume = run.trace.session_id if text is NUDGE else None
            if text is NUDGE and not self.needs_nudge(run.trace):
                return
            run.trace.start(text)
            if run.left() <= 0:
                return run.timed_out()
            await (self._run_sdk if self.mode == "sdk" else self._run_cli)(run, text, resume, flags)
            if run.trace.errors:
                return

    def _flags(self, target: ModelSpec, limits: Limits) -> dict[str, Any]:
        o = self.opts
        return {"model": o.model or target.model, "permission_mode": o.permission_mode, "max_turns": o.turns(limits),
                "allowed_tools": list(o.allowed_tools or ()), "disallowed_tools": list(o.disallowed_tools or ()),
                "tools": list(o.tools) if o.tools is not None else None, "effort": o.reasoning_effort}

    async def _run_cli(self, run: AgentRun, prompt: str, resume: str | None, f: dict[str, Any]) -> None:
        argv = [run.binary, "-p", "--output-format", "stream-json", "--verbose", "--model", f["model"],
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
        results = run.trace.results
        res = await run.stream(argv + ["--", prompt])
        run.log_stderr(res.stderr)
        if res.timed_out:
            run.timed_out()
        elif run.trace.results == results:  # it died before its `result` event
            tail = res.stderr.strip()[-400:] or "no output"
            run.trace.fail(f"claude exited with code {res.returncode} before its result: {tail}")

    async def _run_sdk(self, run: AgentRun, prompt: str, resume: str | None, f: dict[str, Any]) -> None:
        from claude_agent_sdk import ClaudeAgentOptions, query

        launcher = run.launcher("claude", (), prefixes=SDK_ENV_PREFIXES)
        stderr: list[str] = []
        options = ClaudeAgentOptions(
            cwd=str(run.ws), cli_path=str(launcher.path), env=run.env, model=f["model"],
            permission_mode=f["permission_mode"], max_turns=f["max_turns"], allowed_tools=f["allowed_tools"],
            disallowed_tools=f["disallowed_tools"], tools=f["tools"], effort=f["effort"],
            setting_sources=["project"], resume=resume, stderr=_keep_tail(stderr, 50),
        )
        messages = query(prompt=prompt, options=options)
        got_result = False
        with watchdog(run.left(), launcher.pid) as fired:
            try:
                async with asyncio.timeout(run.left() + 15):  # in case the SDK hangs after the kill
                    async for msg in messages:
                        ev = sdk_message_to_event(msg)
                        got_result = got_result or ev.get("type") == "result"
                        run.raw.append(json.dumps(ev, ensure_ascii=False, default=str))
                        run.trace.feed(ev)
            except Exception as e:  # the SDK raises for a dead CLI (ProcessError, CLIConnectionError, ...)
                if not got_result and not fired[0]:
                    tail = " | ".join(stderr[-5:])[-400:]
                    run.trace.fail(f"claude code failed: {type(e).__name__}: {e}" + (f" (stderr: {tail})" if tail else ""))
            finally:
                await asyncio.to_thread(run.kill, launcher.pid())
                try:
                    await asyncio.wait_for(messages.aclose(), 10)
                except (Exception, asyncio.CancelledError):
                    pass
        run.log_stderr("\n".join(stderr))
        if fired[0]:
            run.timed_out()
        elif not got_result and not run.trace.errors:
            run.trace.fail("claude code ended without a result")

    def endpoint(self, target: ModelSpec) -> Endpoint:
        return endpoint(target, self.models.env, "messages")

    def agent_env(self, ws: Path, target: ModelSpec, limits: Limits, ep: Endpoint) -> dict[str, str]:
        home = agent_home(ws)
        model = self.opts.model or target.model
        values = {
            "CLAUDE_CONFIG_DIR": str(home / ".claude"), "IS_SANDBOX": "1",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "CLAUDE_CODE_ATTRIBUTION_HEADER": "0",
            "DISABLE_AUTOUPDATER": "1", "DISABLE_TELEMETRY": "1", "DISABLE_ERROR_REPORTING": "1",
            "CLAUDE_CODE_MAX_RETRIES": str(self.opts.max_retries),
            "API_TIMEOUT_MS": str(int(min(self.opts.timeout(limits), 600) * 1000)),
            # its watchdog did not fire while llama.cpp read a 10k-token prompt for 566 s: the default
            # stays for a local target too (unlike Codex's)
            "CLAUDE_STREAM_IDLE_TIMEOUT_MS": str(int((self.opts.stream_idle_timeout_s or IDLE_TIMEOUT_S) * 1000)),
            "CLAUDE_CODE_MAX_OUTPUT_TOKENS": str(self.opts.output_tokens(limits)),
            # every model role (background work, subagents) uses the target model
            "ANTHROPIC_MODEL": model, "ANTHROPIC_SMALL_FAST_MODEL": model, "ANTHROPIC_DEFAULT_HAIKU_MODEL": model,
            "ANTHROPIC_DEFAULT_SONNET_MODEL": model, "ANTHROPIC_DEFAULT_OPUS_MODEL": model,
            "CLAUDE_CODE_SUBAGENT_MODEL": model,
        }
        if ep.base_url:
            values["ANTHROPIC_BASE_URL"] = ep.base_url
        values["ANTHROPIC_AUTH_TOKEN" if ep.bearer else "ANTHROPIC_API_KEY"] = ep.api_key
        return child_env(home, dict(os.environ), **values, **self.opts.env)


@harness("claude-code", description="Claude Code (claude-agent-sdk or the claude CLI); the skill in .claude/skills",
         apis=frozenset({"messages"}), agent=True)
def _make_claude_code(ctx: HarnessContext) -> ClaudeCodeHarness:
    return ClaudeCodeHarness(ctx)
