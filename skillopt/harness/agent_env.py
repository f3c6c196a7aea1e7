"""What an agent harness hands its agent: `AgentOptions` (from `harness_options` or `--harness-mode`),
the target's wire `endpoint`, the rollout's own home (`agent_home`) and a minimal environment
(`child_env`: only `PASS_ENV` from the user's, plus what the harness chose).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from skillopt.errors import BadInput
from skillopt.harness.base import Limits
from skillopt.models.spec import ModelSpec
from skillopt.models.types import ProviderEnv

HOME_DIR = ".home"  # the rollout's own HOME, inside the workspace
IDLE_TIMEOUT_S = 120.0  # an agent's wait on a silent model stream (a remote model)
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
    # codex's own sandbox; auto: workspace-write inside skillopt's sandbox (a second layer), else
    # danger-full-access (Codex's sandbox cannot make helper binaries for a workspace under /tmp)
    sandbox: Literal["auto", "read-only", "workspace-write", "danger-full-access"] = "auto"
    max_turns: int | None = Field(None, ge=1)
    timeout_s: float | None = Field(None, gt=0)
    # per model reply; default max(limits.max_tokens, 8192) (mini-swe-agent: limits.max_tokens). Codex has no
    # such setting: it is applied
    # only to a local target (its server's cap for requests without one)
    max_output_tokens: int | None = Field(None, ge=1)
    reasoning_effort: str | None = None  # claude: --effort; codex: model_reasoning_effort
    max_processes: int = Field(4, ge=1)  # agent processes running at once in this Python process
    max_retries: int = Field(2, ge=0)  # the agent's own retries of a failed model request
    stream_idle_timeout_s: float | None = Field(None, gt=0)  # default: `idle_timeout`
    nudge_empty: bool = True  # retry once with a nudge when the final answer is empty
    env: dict[str, str] = {}  # extra environment variables for the agent process
    # mini-swe-agent: actions as bash tool calls (its mini.yaml) or fenced blocks (mini_textbased.yaml)
    action_format: Literal["toolcall", "text"] = "toolcall"
    # mini-swe-agent with text actions: what a reply without exactly one command block is told. `package`:
    # mini_textbased.yaml's message, whose example block holds the placeholder `<action>` (the 1.5B ran
    # it as its command); `plain`: the same rule in words, with nothing to copy
    format_error: Literal["package", "plain"] = "package"
    # mini-swe-agent: false leaves the instance template's example response (`ls -la`) out; the 1.5B ran
    # it as its first command, and echoed its closing tag
    example_response: bool = True
    # mini-swe-agent: the skill's whole text in its instance template, where the default names the
    # skill's file for the agent to read (a small model seldom reads a file it is only pointed to)
    skill_in_prompt: bool = False
    # mini-swe-agent: where in its instance template the skill's paragraph stands: `task`, right after the
    # task (the package's workflow and command examples follow it); `end`, after all of them, the last
    # thing the model reads before it replies (a small model follows what it read last)
    skill_position: Literal["task", "end"] = "task"
    sandbox_paths: tuple[str, ...] = ()  # more paths the sandbox shows the agent, read-only (a toolchain)

    @field_validator("allowed_tools", "disallowed_tools", "tools", "sandbox_paths", mode="before")
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

    def idle_timeout(self, limits: Limits, target: ModelSpec) -> float:
        """How long Codex waits on a model stream that sends nothing before it gives up and asks again:
        the option; else, for the embedded model, the rollout's own limit (its server reads Codex's
        first prompt for minutes before the first event on a small CPU, and each time Codex asks again
        counts against its retries); else 120 s."""
        if self.stream_idle_timeout_s is not None:
            return self.stream_idle_timeout_s
        return self.timeout(limits) if target.provider == "local" else IDLE_TIMEOUT_S


@dataclass(frozen=True)
class Endpoint:
    """Where the agent sends its model calls. `base_url` None: the agent's own default (the vendor)."""

    base_url: str | None
    api_key: str
    bearer: bool = False  # send the key as `Authorization: Bearer` (vLLM) rather than the vendor header
    query: tuple[tuple[str, str], ...] = ()  # extra URL parameters (Azure's api-version)
    key_header: str | None = None  # also send the key in this header (Azure's `api-key`)


DUMMY_KEY = "sk-skillopt-no-key"
ANTHROPIC_URL = "https://api.anthropic.com"  # Claude Code's own default, named when the relay needs it
AZURE_RESPONSES_VERSION = "2025-04-01-preview"


def endpoint(target: ModelSpec, env: ProviderEnv, api: Literal["messages", "responses"],
             reply_tokens: int | None = None) -> Endpoint:
    """The endpoint of a target for an agent that speaks `api`: direct, never through a translator.

    Anthropic Messages base URLs are given without `/v1` (Claude Code appends `/v1/messages`);
    Responses base URLs end in `/v1` (Codex appends `/responses`). `reply_tokens`: the reply cap a
    local target's server applies to requests that set none (an agent that cannot set its own).
    """
    base = target.base_url
    if target.provider == "local":
        from skillopt.models.local import ensure_server  # lazy: only for local targets

        # its own server, or (token capture) the recording proxy in front of it
        base = base or ensure_server(target.model, reply_tokens=reply_tokens).base_url
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
        return Endpoint(url, env.azure_openai_api_key or DUMMY_KEY, query=(("api-version", AZURE_RESPONSES_VERSION),), key_header="api-key")
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
