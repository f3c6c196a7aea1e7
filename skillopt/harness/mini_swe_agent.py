"""The `mini-swe-agent` harness: the `mini-swe-agent` package (SWE-bench's bash-only reference agent)
solves the task in its workspace.

Its real agent loop (`DefaultAgent`, `LitellmModel`, `LocalEnvironment`, the package's own `mini.yaml`
prompts) runs in a child process (`mini_swe_driver.py`, started through `Sandbox.wrap` like every
agent) by an interpreter that has the package (this one, or option `binary`). The model is the
target's OpenAI-compatible chat endpoint, reached through the relay (the agent holds a lease token,
never a key). mini-swe-agent has no skill discovery of its own: the skill sits in
`<ws>/.agents/skills/<name>/` (the Claude-style folder `skillopt export` writes) and its instance
template names it (name, description, path: `prompts/mini_swe_skill.md.j2`). Using the skill shows
as a command that reads that SKILL.md. Option `skill_in_prompt` puts the skill's text (markers
stripped, as the chat harness sends it) in the instance template instead, for a model that does not
read a file it is pointed to; its folder stays in the workspace for the files it names.

The driver prints each message the agent adds as a JSON line; `MiniTrace` turns them into trace
events: the model's text and bash actions (tool calls), each command's output and exit code
(tool results), format errors (no valid action) as error events, token usage per model call, and
the exit (submitted, step limit, an exception). Option `action_format`: `toolcall` (`mini.yaml`, the
bash tool) or `text` (`mini_textbased.yaml`, a fenced block; for models without tool calls).
"""

from __future__ import annotations

import importlib.util
import json
import os
import site
import sys
from pathlib import Path
from typing import Any

from skillopt.errors import MissingExtra
from skillopt.harness.agent_common import AgentHarness, AgentRun, AgentTrace
from skillopt.harness.agent_env import DUMMY_KEY, Endpoint, agent_home, child_env, mentions_skill_file
from skillopt.harness.base import Limits
from skillopt.harness.place import HostPlace
from skillopt.harness.registry import HarnessContext, harness
from skillopt.models.spec import ModelSpec
from skillopt.prompts import render
from skillopt.traces.events import ErrorEvent, MessageEvent, SkillUsedEvent, ToolCallEvent, ToolResultEvent
from skillopt.traces.summary import discovery_event

DRIVER = Path(__file__).resolve().with_name("mini_swe_driver.py")
KEY_VAR, URL_VAR = "SKILLOPT_MINI_API_KEY", "SKILLOPT_MINI_BASE_URL"  # the relay's token and URL, for the driver
INSTALL_HINT = 'pip install "skillopt[mini-swe-agent]"'
SUBMIT = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
FINISHED = "mini-swe-agent finished"
# exceptions of the model client that mean the endpoint failed, not the agent (litellm's names)
_INFRA_EXC = ("APIConnectionError", "APIError", "InternalServerError", "ServiceUnavailableError", "RateLimitError",
              "Timeout", "BadGatewayError", "AuthenticationError", "NotFoundError", "PermissionDeniedError")


class MiniTrace(AgentTrace):
    """The driver's JSON lines -> normalized trace events, final answer, usage, how the agent stopped."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.done = False  # the driver reported the end of the loop
        self.exit_status = ""
        self._pending: list[str] = []  # ids of the last reply's actions, for their outputs
        self._texts: list[str] = []
        self._calls = self._in = self._out = 0
        self._n = 0

    def feed(self, ev: dict[str, Any]) -> str | None:
        kind = ev.get("mini")
        if kind == "message":
            self._message(ev.get("message") or {})
        elif kind == "done":
            self._done(ev)
            return FINISHED  # no need to wait for the interpreter's own shutdown (seconds)
        return None

    def _message(self, m: dict[str, Any]) -> None:
        role, extra = m.get("role"), m.get("extra") or {}
        content = _text(m.get("content"))
        if role == "assistant":
            self._reply(content, extra)
        elif role in ("tool", "user") and "returncode" in extra:
            self._output(m, extra)
        elif role == "user" and extra.get("interrupt_type") == "FormatError":
            self._calls += 1
            self._count_call(extra)
            if str(extra.get("model_reply") or "").strip():  # what the model said instead of an action
                self.add(MessageEvent(t=self.t(), role="assistant", text=extra["model_reply"]))
            self.add(ErrorEvent(t=self.t(), message=f"format error (no valid action): {content.strip()[:300]}"))
        elif role == "exit":
            self.exit_status = str(extra.get("exit_status") or "")
            if self.exit_status == "Submitted":  # the command that submitted has no output of its own
                submission = str(extra.get("submission") or content or "").strip()
                for aid in self._pending:
                    self.add(ToolResultEvent(t=self.t(), id=aid, output=f"{SUBMIT}\n{submission}".strip()))
                self._pending = []
                if submission:
                    self.add(MessageEvent(t=self.t(), role="assistant", text=submission))
                self.answer = submission or (self._texts[-1] if self._texts else "") or "Submitted."
            elif self.exit_status == "LimitsExceeded":
                self.fail(f"stopped after {self._calls} model calls (max_turns)")
            elif self.exit_status == "TimeExceeded":
                self.fail("mini-swe-agent's own time limit was reached")
            elif self.exit_status == "RepeatedFormatError":
                self.fail("the model gave no valid action several times in a row (no tool call)")
            else:
                self.fail(_exception_message(self.exit_status, str(extra.get("exception_str") or content)))

    def _reply(self, content: str, extra: dict[str, Any]) -> None:
        self._calls += 1
        self._count_call(extra)
        if content.strip():
            self.add(MessageEvent(t=self.t(), role="assistant", text=content))
            self._texts.append(content)
        self._pending = []
        for action in extra.get("actions") or []:
            self._n += 1
            aid = str(action.get("tool_call_id") or f"action-{self._n}")
            command = str(action.get("command", ""))
            self._pending.append(aid)
            self.add(ToolCallEvent(t=self.t(), id=aid, name="bash", input={"command": command}))
            if mentions_skill_file(command, self.skill):
                self.add(SkillUsedEvent(t=self.t(), name=self.skill, how="read SKILL.md (bash)"))

    def _output(self, m: dict[str, Any], extra: dict[str, Any]) -> None:
        aid = str(m.get("tool_call_id") or (self._pending.pop(0) if self._pending else ""))
        if aid in self._pending:
            self._pending.remove(aid)
        code = extra.get("returncode")
        raw = str(extra.get("raw_output") or "")
        note = str(extra.get("exception_info") or "")
        failed = code not in (0, None) or bool(note)
        text = (f"[exit code {code}]\n" if code not in (0, None) else "") + (f"{note}\n" if note else "") + raw
        self.add(ToolResultEvent(t=self.t(), id=aid, output=text, is_error=failed))

    def _count_call(self, extra: dict[str, Any]) -> None:
        usage = extra.get("usage") or {}
        self._in += int(usage.get("prompt_tokens") or 0)
        self._out += int(usage.get("completion_tokens") or 0)

    def _done(self, ev: dict[str, Any]) -> None:
        self.done = True
        if ev.get("error") and not self.errors:
            self.fail(_exception_message(str(ev.get("exit_status") or ""), str(ev["error"])))

    def finish(self) -> None:
        """Once the agent has stopped (or was stopped): the usage of all its model calls, one event."""
        if self._calls:
            self.count(self._in, self._out, self._calls)


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) if isinstance(p, dict) else str(p) for p in content)
    return "" if content is None else str(content)


def _exception_message(status: str, detail: str) -> str:
    detail = detail.strip()[:600]
    if any(name in status or name in detail for name in _INFRA_EXC):
        return f"mini-swe-agent cannot reach the model ({status}): {detail}"
    return f"mini-swe-agent stopped with {status or 'an error'}: {detail}"


def site_dirs() -> list[str]:
    """The folders this interpreter imports packages from (a virtual environment, and any layered
    under it by a .pth file): the sandbox shows them read-only, so the child can import the package."""
    dirs = [*site.getsitepackages(), *[p for p in sys.path if p.endswith(("site-packages", "dist-packages"))]]
    return [d for d in dict.fromkeys(dirs) if os.path.isdir(d)]


def chat_endpoint(target: ModelSpec, models: Any) -> tuple[Endpoint, str, dict[str, str]]:
    """(the endpoint the relay leases, litellm's model name, litellm's extra arguments) of a chat target."""
    from skillopt.harness.agent_env import endpoint

    if target.provider == "azure":
        env = models.env
        root = (target.base_url or env.azure_openai_endpoint or "").rstrip("/")
        root = root[:-len("/openai")] if root.endswith("/openai") else root
        return (Endpoint(root, env.azure_openai_api_key or DUMMY_KEY), f"azure/{target.model}",
                {"api_version": env.azure_openai_api_version or "2024-10-21"})
    return endpoint(target, models.env, "responses"), f"openai/{target.model}", {}


# `format_error=plain`: mini-swe-agent's format error (Jinja, rendered by the package with `actions`,
# `error` and `finish_reason`) without an example block whose placeholder a small model runs as its command
PLAIN_FORMAT_ERROR = """\
{% if finish_reason is defined and finish_reason in ["length", "tool_calls"] -%}
Your reply was cut off before its command block was complete, so nothing ran. Reply again, shorter: one \
sentence, then the command block.
{%- else -%}
Your reply was not run: it held {{actions|length}} ```mswea_bash_command blocks, and a reply must hold exactly \
one. Reply again: one sentence, then one ```mswea_bash_command block, closed with ```, holding the one real \
shell command that does the next step of the task.
{%- endif %}"""


class MiniSweAgentHarness(AgentHarness):
    name = "mini-swe-agent"
    apis: frozenset[str] = frozenset({"chat"})
    skill_dir = ".agents/skills"
    sdk_module, extra, cli_name, install_hint = "minisweagent", "mini-swe-agent", "python", INSTALL_HINT
    submit_command = f"echo {SUBMIT}"

    def action(self, command: str) -> str:
        """mini_textbased.yaml reads one fenced `mswea_bash_command` block; mini.yaml a bash tool call."""
        fence = "mswea_bash_command" if self.opts.action_format == "text" else "bash"
        return f"```{fence}\n{command}\n```"

    def _resolve_mode(self) -> str:
        """One way to run it: the package's agent loop in a child process (`--harness-mode` is ignored)."""
        if not self.opts.binary and importlib.util.find_spec("minisweagent") is None:
            raise MissingExtra("the mini-swe-agent harness", self.extra, "minisweagent")
        return "cli"

    def binary(self) -> str | None:
        """The interpreter that runs the driver: option `binary` (a Python with the package), else this one."""
        return self.opts.binary or sys.executable

    def tool_dirs(self) -> list[str]:
        from skillopt.sandbox import interpreter_paths

        return [*interpreter_paths(self.binary() or sys.executable), *site_dirs(), str(DRIVER)]

    def new_trace(self, skill: str, t0: float, target: ModelSpec, limits: Limits) -> MiniTrace:
        return MiniTrace(skill, t0, target, self.models.prices)

    def endpoint(self, target: ModelSpec) -> Endpoint:
        return chat_endpoint(target, self.models)[0]

    def agent_env(self, ws: Path, target: ModelSpec, limits: Limits, ep: Endpoint) -> dict[str, str]:
        home = agent_home(ws)
        values = {"MSWEA_SILENT_STARTUP": "1", "MSWEA_GLOBAL_CONFIG_DIR": str(home / ".config" / "mini-swe-agent"),
                  "MSWEA_COST_TRACKING": "ignore_errors", "LITELLM_LOCAL_MODEL_COST_MAP": "True",
                  "MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT": str(self.opts.max_retries + 1),
                  "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1", KEY_VAR: ep.api_key,
                  URL_VAR: ep.base_url or ""}
        return child_env(home, dict(os.environ), **values, **self.opts.env)

    def spec(self, run: AgentRun, prompt: str, target: ModelSpec, limits: Limits, coding: bool) -> dict[str, Any]:
        """What the driver runs: the package's config, the skill paragraph, the model, the limits."""
        _, model_name, kwargs = chat_endpoint(target, self.models)
        # a reply is one thought and one command: the run's reply cap, not the 8192 of the other agents
        # (a small local model that rambles would spend minutes of a CPU on one reply)
        kwargs = {**kwargs, "max_tokens": self.opts.max_output_tokens or limits.max_tokens}
        if limits.temperature is not None:
            kwargs["temperature"] = limits.temperature
        if limits.seed is not None:
            kwargs["seed"] = limits.seed
        if target.provider == "local":  # a CPU may read a long prompt for minutes: LiteLLM's own limit is 600 s
            kwargs["timeout"] = self.opts.timeout(limits)
        skill_path = f"{self.skill_dir}/{run.trace.skill}/SKILL.md"
        skill_text = ""
        if (run.ws / skill_path).is_file():
            from skillopt.skill import Skill

            skill = Skill.parse((run.ws / skill_path).read_text(encoding="utf-8"))
            body = skill.strip_markers().body.strip() if self.opts.skill_in_prompt else ""
            skill_text = render("mini_swe_skill.md.j2", path=skill_path, folder=f"{self.skill_dir}/{skill.name}/",
                                description=skill.description.strip(), coding=coding, body=body)
        home = agent_home(run.ws) / "mini-swe-agent"
        text = self.opts.action_format == "text"
        plain = text and self.opts.format_error == "plain"
        return {"config": "mini_textbased.yaml" if text else "mini.yaml", "text_actions": text,
                **({"format_error_template": PLAIN_FORMAT_ERROR} if plain else {}),
                "example_response": self.opts.example_response,
                "task": prompt, "skill_text": skill_text, "skill_position": self.opts.skill_position,
                "model_name": self.opts.model and f"openai/{self.opts.model}" or model_name, "model_kwargs": {k: v for k, v in kwargs.items() if v is not None},
                "step_limit": self.opts.turns(limits), "cwd": run.cwd,
                "command_timeout_s": int(min(120, max(10, self.opts.timeout(limits) / 4))),
                "trajectory": str(home / "trajectory.json")}

    async def drive(self, run: AgentRun, prompt: str, target: ModelSpec, limits: Limits) -> None:
        trace = run.trace
        assert isinstance(trace, MiniTrace)  # this harness's own (`new_trace`)
        trace.start(prompt)
        if run.place is not None and not isinstance(run.place, HostPlace):
            return trace.fail("mini-swe-agent failed: SetupError: it runs on the host only, not in a task's container")
        spec = self.spec(run, prompt, target, limits, coding=(run.ws / ".git").exists())
        if spec["skill_text"]:
            trace.add(discovery_event(trace.skill, [trace.skill], t=trace.t()))
            if self.opts.skill_in_prompt:
                trace.add(SkillUsedEvent(t=trace.t(), name=trace.skill, how="in its instance template"))
        spec_file = agent_home(run.ws) / "mini-swe-agent" / "run.json"
        spec_file.parent.mkdir(parents=True, exist_ok=True)
        spec_file.write_text(json.dumps(spec, indent=1), encoding="utf-8")
        try:
            res = await run.stream([run.binary, "-I", str(DRIVER), str(spec_file)])
        finally:
            trace.finish()
        run.log_stderr(res.stderr)
        if res.timed_out:
            run.timed_out()
        elif not trace.done and not trace.errors:
            tail = res.stderr.strip()[-400:] or "no output"
            trace.fail(f"mini-swe-agent exited with code {res.returncode} before it finished: {tail}")


@harness("mini-swe-agent", description="mini-swe-agent (the bash-only SWE-bench agent, pip package "
         "mini-swe-agent); the skill in .agents/skills, named in its instance template",
         apis=frozenset({"chat"}), agent=True)
def _make_mini_swe_agent(ctx: HarnessContext) -> MiniSweAgentHarness:
    return MiniSweAgentHarness(ctx)
