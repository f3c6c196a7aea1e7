"""Token capture: every LLM call of a rollout, with prompt / response token ids and logprobs.

When the target is served by vLLM (`vllm:<model>@<url>`), or on request (`--capture-tokens`) by
the embedded llama.cpp server (`local:<name>`, its ids made vLLM-shaped by `TokenShim`, see
skillopt.traces.llamacpp_tokens) or any OpenAI-compatible server that returns token ids, a run
starts one recording proxy: agentlightning's `LLMProxy`
(LiteLLM) in front of the target, writing OpenTelemetry spans into a `LightningStoreServer`.
Each rollout gets its own proxy URL (`<proxy>/rollout/<id>/attempt/<id>/v1`), which the harness
uses instead of the target's own base URL; after the rollout, `collect` reads that rollout's spans
and writes `tokens/stream_<instance_id>.jsonl` and `tokens/dataset-<instance_id>/` (see
`skillopt.traces.export`).

    with TokenCapture(target, run_root / "tokens") as capture:
        spec = target.model_copy(update={"base_url": capture.base_url_for(key)})
        rollout = await harness.run(task, skill, ws, spec, limits)
        result = await capture.collect(key, task.id, reward=score.soft, version=3, resolved=score.hard >= 1)

The store and the proxy run in one child process (`python -m skillopt.traces.capture_proxy serve`, see that module), so
this process never imports agentlightning / LiteLLM (about 20 s of imports) nor shares their
OpenTelemetry setup; it talks to the store over HTTP. The child binds 127.0.0.1 unless told
otherwise, and dies with this process (its stdin closes). Inside it: LiteLLM starts without a
master key (a local proxy), spans go to the store's OTLP endpoint, the proxy asks the server for
`return_token_ids` and `logprobs`, and streamed `/chat/completions`, `/messages` and
`/responses` calls reach the server unstreamed (LiteLLM drops token ids from streams) while the
client gets its stream back, replayed here with text and tool input unchanged (agentlightning's
own replay re-splits text on whitespace, which changes what the agent sees). `/responses` (Codex)
is bridged to chat completions, since vLLM's own Responses API returns no token ids. The store
keeps spans in memory and drops the oldest rollouts' spans past `SPAN_MEMORY_BYTES` (by then
collected).
"""

from __future__ import annotations

import asyncio
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

import httpx

from skillopt.errors import BadInput, MissingExtra, SkilloptError
from skillopt.models.spec import ModelSpec
from skillopt.models.types import ProviderEnv
from skillopt.io.files import append_lines, json_line
from skillopt.io.redact import redact
from skillopt.io.names import safe_name
from skillopt.traces import export
from skillopt.traces.capture_proxy import HOST, url_host
from skillopt.traces.dataset_append import append_dataset

KEY_VAR = "SKILLOPT_CAPTURE_API_KEY"  # the backend key reaches the child by environment, never a file
LOCAL_WAIT_S = 24 * 3600.0  # how long the proxy's LiteLLM waits for a local model (TokenShim decides)
_PREFIX = {"vllm": "hosted_vllm", "openai-compatible": "hosted_vllm", "local": "hosted_vllm",
           "openai": "openai", "azure": "azure", "anthropic": "anthropic"}


class CaptureError(SkilloptError):
    """The capture proxy did not start or stopped answering; the message names its log."""


@dataclass(frozen=True)
class CaptureResult:
    """What `collect` wrote for one rollout. `note` is one line for the user, given once per reason."""

    spans: int
    rows: int
    stream_path: Path | None
    dataset_path: Path | None
    skipped: str | None = None  # why no dataset rows were written for this rollout
    note: str | None = None


def check_capture(target: ModelSpec) -> None:
    """Fail before any rollout when token capture cannot run (extra missing, spec unusable)."""
    import importlib.util

    for module, pip in (("agentlightning", "agentlightning==0.3.0"), ("datasets", "datasets")):
        if importlib.util.find_spec(module) is None:
            raise MissingExtra("token capture", "vllm", pip)
    if target.provider in ("vllm", "openai-compatible") and not target.base_url:
        raise BadInput(f"token capture for {target} needs the server URL: write {target.provider}:MODEL@http://HOST:PORT/v1")


def model_list(target: ModelSpec, env: ProviderEnv,
               reply_tokens: int | None = None) -> tuple[list[dict[str, Any]], str | None]:
    """LiteLLM's model list for the proxy (every model name routes to the target) and the backend key.
    `reply_tokens`: a local target's server, started here, caps replies of requests that set none."""
    base, key = target.base_url, None
    if target.provider == "local":
        from skillopt.models.local import ensure_server  # lazy: only for local targets

        base = ensure_server(target.model, reply_tokens=reply_tokens).base_url + "/v1"
    params: dict[str, Any] = {"model": f"{_PREFIX[target.provider]}/{target.model}"}
    if target.provider in ("vllm", "openai-compatible", "local"):
        key = env.vllm_api_key if target.provider == "vllm" else None
        # Codex's /responses: through chat completions, where vLLM returns token ids.
        params["use_chat_completions_api"] = True
        params["allowed_openai_params"] = ["return_token_ids"]  # else the bridge drops it
        if target.provider == "local":  # not LiteLLM's 600 s: the shim limits a call by the server's progress
            params["timeout"] = LOCAL_WAIT_S
    elif target.provider == "openai":
        key, base = env.openai_api_key, base or env.openai_base_url
    elif target.provider == "azure":
        key, base = env.azure_openai_api_key, base or env.azure_openai_endpoint
        params["api_version"] = env.azure_openai_api_version
    elif target.provider == "anthropic":
        key, base = env.anthropic_api_key, base or env.anthropic_base_url
    if base:
        params["api_base"] = base
    params["api_key"] = f"os.environ/{KEY_VAR}" if key else "not-needed"
    return [{"model_name": name, "litellm_params": params} for name in (target.model, "*")], key


def llamacpp_upstream(target: ModelSpec, models: list[dict[str, Any]]) -> str | None:
    """The llama.cpp server (http://HOST:PORT) behind a `local:` target's model list; None for others."""
    if target.provider != "local" or not models:
        return None
    return str(models[0]["litellm_params"]["api_base"]).removesuffix("/v1")


class TokenCapture:
    """The recording proxy of one run; a context manager. See the module docstring.

    `start()` raises `MissingExtra` without the `vllm` extra and `CaptureError` when the child does
    not come up. `base_url_for(key)` opens a rollout in the store (a local HTTP call, milliseconds)
    and returns its proxy URL, ending in `/v1`; calling it again for the same key starts over.
    `collect(...)` never raises for a rollout's missing data: it returns a `CaptureResult`.
    `tokenizer` (anything with `decode(ids)`, or a name / path that transformers finds locally)
    adds a decoded `prompt` column; without one the column is absent. A `local:` target's ids come
    from its llama.cpp server through `TokenShim` (skillopt.traces.llamacpp_tokens), whose
    tokenizer also decodes the `prompt` column; `reply_tokens` is the reply cap that server applies
    to requests that set none (Codex's), as the harness would have started it.
    """

    def __init__(self, target: ModelSpec, out_dir: Path, *, env: ProviderEnv | None = None,
                 host: str = HOST, repo: str = "", tokenizer: Any = None, log_path: Path | None = None,
                 startup_timeout_s: float = 180.0, settle_timeout_s: float = 20.0, reply_tokens: int | None = None):
        self.target, self.out_dir, self.env, self.host = target, out_dir, env or ProviderEnv(), host
        self.reply_tokens = reply_tokens
        self.repo = repo
        self.log_path = log_path or out_dir / "proxy.log"
        self.startup_timeout_s, self.settle_timeout_s = startup_timeout_s, settle_timeout_s
        self._tokenizer_arg = tokenizer
        self._tokenizer: Any = None
        self._proc: subprocess.Popen | None = None
        self.store_url = self.proxy_url = ""
        self._open: dict[str, tuple[str, str]] = {}  # rollout key -> (rollout id, attempt id)
        self._locks: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()
        self._noted: set[str] = set()

    # lifecycle -----------------------------------------------------------------------------------
    def start(self) -> Self:
        if self._proc is not None:
            return self
        check_capture(self.target)
        models, key = model_list(self.target, self.env, self.reply_tokens)
        config: dict[str, Any] = {"host": self.host, "model_list": models}
        upstream = llamacpp_upstream(self.target, models)
        if upstream:  # the embedded llama.cpp server: token ids through the child's TokenShim
            config["llamacpp"] = upstream
        env = {k: v for k, v in os.environ.items() if k != KEY_VAR}
        if key:
            env[KEY_VAR] = key
        self.out_dir.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "skillopt.traces.capture_proxy", "serve", json.dumps(config)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, env=env, start_new_session=True)
        ready = self._read_ready()
        self.store_url = f"http://{url_host(self.host)}:{ready['store_port']}"
        self.proxy_url = f"http://{url_host(self.host)}:{ready['proxy_port']}"
        tokenizer = self._tokenizer_arg
        if tokenizer is None and upstream:
            from skillopt.traces.llamacpp_tokens import LlamaCppTokens

            tokenizer = LlamaCppTokens(upstream)  # the served model's own tokenizer
        self._tokenizer = export.load_tokenizer(tokenizer, self.target.model)
        return self

    def _read_ready(self) -> dict[str, Any]:
        assert self._proc is not None and self._proc.stdout is not None
        deadline, buf = time.monotonic() + self.startup_timeout_s, b""
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                break
            ready, _, _ = select.select([self._proc.stdout], [], [], 0.5)
            if ready:
                buf += os.read(self._proc.stdout.fileno(), 65536)
                for line in buf.splitlines():
                    if line.startswith(b"{") and b'"ready"' in line:
                        return json.loads(line)
        code = self._proc.poll()
        self.stop()
        why = f"exited with code {code}" if code is not None else f"not ready after {self.startup_timeout_s:.0f}s"
        raise CaptureError(f"the token-capture proxy {why}: see {self.log_path}")

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(5)
        for pipe in (proc.stdin, proc.stdout):
            if pipe:
                pipe.close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # per rollout ------------------------------------------------------------------------------------
    def base_url_for(self, rollout_key: str) -> str:
        """The rollout-scoped proxy URL (`.../v1`) the harness uses instead of the target's base URL."""
        if self._proc is None:
            raise CaptureError("the token-capture proxy is not running: call start()")
        try:
            r = httpx.post(f"{self.store_url}/v1/agl/rollouts", json={"input": {"rollout_key": rollout_key}},
                           timeout=30)
            r.raise_for_status()
        except httpx.HTTPError as e:
            raise CaptureError(f"the token-capture store does not answer ({e}): see {self.log_path}") from e
        data = r.json()
        ids = (data["rollout_id"], data["attempt"]["attempt_id"])
        with self._lock:
            self._open[rollout_key] = ids
        return f"{self.proxy_url}/rollout/{ids[0]}/attempt/{ids[1]}/v1"

    def target_for(self, target: ModelSpec, rollout_key: str) -> ModelSpec:
        """`target` with its base URL replaced by the rollout's proxy URL."""
        return target.model_copy(update={"base_url": self.base_url_for(rollout_key)})

    async def collect(self, rollout_key: str, instance_id: str, *, reward: float, version: int,
                      resolved: bool | None = None, trial: int = 0, repo: str | None = None,
                      split: str | None = None) -> CaptureResult:
        """Wait for the rollout's spans, then append them to the stream and its rows to the dataset."""
        with self._lock:
            ids = self._open.pop(rollout_key, None)
        if ids is None:
            return CaptureResult(0, 0, None, None, skipped="no proxy URL was handed out for this rollout")
        spans = await self._spans(*ids)
        name = safe_name(instance_id)
        stream = self.out_dir / f"stream_{name}.jsonl"
        meta = export.RowMeta(repo=repo if repo is not None else self.repo, instance_id=instance_id, reward=reward,
                              version=version, resolved=resolved if resolved is not None else reward >= 1.0,
                              trial=trial, rollout_key=rollout_key, split=split, model=self.target.model)
        rows, skipped = export.rows_from_spans(spans, meta, self._tokenizer)
        dataset = self.out_dir / f"dataset-{name}"
        lock = self._instance_lock(name)
        await asyncio.to_thread(self._write, lock, stream, spans, rollout_key, dataset, rows)
        note = None
        if skipped and skipped not in self._noted:
            self._noted.add(skipped)
            note = f"token capture: no dataset for {instance_id}: {skipped}"
        return CaptureResult(len(spans), len(rows), stream if spans else None, dataset if rows else None,
                             skipped, note)

    def _instance_lock(self, name: str) -> threading.Lock:
        with self._lock:
            return self._locks.setdefault(name, threading.Lock())

    @staticmethod
    def _write(lock: threading.Lock, stream: Path, spans: list[dict], key: str, dataset: Path,
               rows: list[dict]) -> None:
        with lock:  # one write and one fsync per rollout; its rows appended, never the dataset rewritten
            if spans:
                append_lines(stream, [json_line({"rollout_key": key, **export.redact_span(span)}) for span in spans])
            if rows:
                append_dataset(dataset, [redact(r) for r in rows], key)  # no secret on disk

    async def _spans(self, rollout_id: str, attempt_id: str) -> list[dict[str, Any]]:
        """The rollout's spans, once every model call the proxy answered has its trace in the store."""
        start = changed = time.monotonic()
        spans: list[dict[str, Any]] = []
        async with httpx.AsyncClient(timeout=30) as client:
            while True:
                try:
                    calls = (await client.get(f"{self.proxy_url}/skillopt/calls/{rollout_id}")).json()
                    r = await client.get(f"{self.store_url}/v1/agl/spans",
                                         params={"rollout_id": rollout_id, "attempt_id": attempt_id})
                    fresh = r.json().get("items", [])
                except (httpx.HTTPError, ValueError, AttributeError):
                    calls, fresh = {"started": 1, "done": 0}, spans
                now = time.monotonic()
                if len(fresh) != len(spans):
                    spans, changed = fresh, now
                answered = calls["started"] == calls["done"]
                recorded = len({s.get("trace_id") for s in spans if s.get("name") == "raw_gen_ai_request"})
                # Every answered call has its LLM span; or (failed calls have none) nothing came for 2 s.
                if answered and (recorded >= calls["done"] or now - changed > 2.0):
                    break
                if now - start > self.settle_timeout_s:
                    break
                await asyncio.sleep(0.1)
        return sorted(spans, key=lambda s: (s.get("sequence_id", 0), s.get("start_time") or 0))
