"""Provider clients. The seam is one method: `complete(spec, request) -> ChatResponse`.

A provider raises `TransientError` for what a retry may fix (429, 5xx, connection, timeout)
and `ModelCallError` for what it will not (bad request, auth). Retries live in the router.
"""

from __future__ import annotations

import time
from typing import Any, Protocol

from skillopt.errors import BadInput, ModelCallError
from skillopt.models.http import HttpTransientError, JsonPoster
from skillopt.models.spec import ModelSpec
from skillopt.models.types import ChatRequest, ChatResponse, ProviderEnv


class TransientError(Exception):
    def __init__(self, message: str, retry_after: float | None = None):
        super().__init__(message)
        self.retry_after = retry_after


class Provider(Protocol):
    async def complete(self, spec: ModelSpec, req: ChatRequest) -> ChatResponse: ...


def _retry_after(err: Any) -> float | None:
    try:
        value = err.response.headers.get("retry-after")
        return float(value) if value else None
    except (AttributeError, ValueError):
        return None


def _classify(err: Exception, status: int | None, spec: ModelSpec) -> Exception:
    if status is None or status == 429 or status >= 500 or status in (408, 409):
        return TransientError(f"{spec}: {type(err).__name__}: {_short(err)}", _retry_after(err))
    return ModelCallError(f"{spec}: HTTP {status}: {_short(err)}")


def _short(err: Exception) -> str:
    return str(err).splitlines()[0][:300] if str(err) else type(err).__name__


OPENAI_BASE_URL = "https://api.openai.com/v1"


class OpenAIProvider:
    """OpenAI chat completions: openai, azure, vllm, openai-compatible and local servers.

    Azure goes through the `openai` SDK (its credential flow); every other server through the lean
    client of `models.http` (the SDK's own cost per call is larger than skillopt's whole budget)."""

    def __init__(self, env: ProviderEnv, timeout_s: float, base_url_for: Any = None):
        self.env = env
        self.timeout_s = timeout_s
        self._base_url_for = base_url_for  # callable(spec) -> base url, for local servers
        self._clients: dict[str, Any] = {}
        self._http = JsonPoster(timeout_s)
        self._local_http = JsonPoster(None)  # the embedded model: limited by its progress, not the wall
        self._bases: dict[str, tuple[str, dict[str, str]]] = {}  # spec -> (chat url, headers)

    def _endpoint(self, spec: ModelSpec) -> tuple[str, dict[str, str]]:
        key = str(spec)
        if key not in self._bases or spec.provider == "local":  # a local server may have restarted
            base = spec.base_url
            if not base and spec.provider == "local" and self._base_url_for:
                base = self._base_url_for(spec)
            if spec.provider == "openai" and not base:
                base = self.env.openai_base_url or OPENAI_BASE_URL
            api_key = {"openai": self.env.openai_api_key, "vllm": self.env.vllm_api_key}.get(spec.provider)
            url, basic = _split_credentials((base or "").rstrip("/") + "/chat/completions")
            # credentials in the URL win over the key, as with the SDK's client (HTTP Basic auth)
            headers = {"Authorization": basic or f"Bearer {api_key or 'not-needed'}"}
            if len(self._bases) >= 64:  # per-rollout proxy URLs (token capture): keep the newest
                self._bases.pop(next(iter(self._bases)))
            self._bases[key] = (url, headers)
        return self._bases[key]

    def _client(self, spec: ModelSpec):
        """The SDK client, for Azure only."""
        import openai

        base = spec.base_url or self.env.azure_openai_endpoint or ""
        if base not in self._clients:
            self._clients[base] = openai.AsyncAzureOpenAI(
                azure_endpoint=base,
                api_key=self.env.azure_openai_api_key or None,
                azure_ad_token_provider=None if self.env.azure_openai_api_key else _azure_token_provider(),
                api_version=self.env.azure_openai_api_version,
                max_retries=0, timeout=self.timeout_s,
            )
        return self._clients[base]


    async def complete(self, spec: ModelSpec, req: ChatRequest) -> ChatResponse:
        kwargs: dict[str, Any] = {
            "model": spec.model,
            "messages": [{"role": m.role, "content": m.content} for m in req.messages],
        }
        if req.max_tokens:
            # OpenAI's own reasoning models take max_completion_tokens; servers take max_tokens.
            key = "max_completion_tokens" if spec.provider in ("openai", "azure") else "max_tokens"
            kwargs[key] = req.max_tokens
        if req.temperature is not None:
            kwargs["temperature"] = req.temperature
        if req.stop:
            kwargs["stop"] = list(req.stop)
        if req.seed is not None:
            kwargs["seed"] = req.seed
        if req.json_schema is not None:
            kwargs["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": req.schema_name, "schema": req.json_schema},
            }
        t0 = time.monotonic()
        if spec.provider != "azure":
            return await self._complete_http(spec, kwargs, t0)
        import openai  # Azure only: its import alone takes ~0.5 s

        try:
            r = await self._client(spec).chat.completions.create(**kwargs)
        except openai.APIStatusError as e:
            raise _classify(e, e.status_code, spec) from e
        except (openai.APIConnectionError, openai.APITimeoutError) as e:
            raise TransientError(f"{spec}: cannot reach the server: {_short(e)}") from e
        except (openai.APIResponseValidationError, ValueError) as e:  # a 200 whose body is not a reply
            raise TransientError(f"{spec}: malformed reply: {_short(e)}") from e
        try:
            choice = r.choices[0] if r.choices else None
            text = (choice.message.content or "") if choice else ""
            extra = {}
            for field in ("prompt_token_ids",):
                if getattr(r, field, None) is not None:
                    extra[field] = getattr(r, field)
            return ChatResponse(
                text=text,
                input_tokens=getattr(r.usage, "prompt_tokens", 0) or 0,
                output_tokens=getattr(r.usage, "completion_tokens", 0) or 0,
                latency_s=time.monotonic() - t0,
                finish_reason=choice.finish_reason if choice else None,
                extra=extra,
            )
        except (AttributeError, TypeError, IndexError, ValueError) as e:
            raise TransientError(f"{spec}: malformed reply: {type(e).__name__}: {_short(e)}") from e

    async def _complete_http(self, spec: ModelSpec, body: dict[str, Any], t0: float) -> ChatResponse:
        url, headers = self._endpoint(spec)
        try:
            if spec.provider == "local" and not spec.base_url:
                r = await self._local_post(spec, url, body, headers)
            else:
                r = await self._http.post(url, body, headers, str(spec))
        except HttpTransientError as e:
            raise TransientError(str(e), e.retry_after) from e
        try:
            choices = r.get("choices") or []
            choice = choices[0] if choices else {}
            usage = r.get("usage") or {}
            extra = {"prompt_token_ids": r["prompt_token_ids"]} if r.get("prompt_token_ids") is not None else {}
            return ChatResponse(
                text=(choice.get("message") or {}).get("content") or "",
                input_tokens=usage.get("prompt_tokens") or 0,
                output_tokens=usage.get("completion_tokens") or 0,
                latency_s=time.monotonic() - t0,
                finish_reason=choice.get("finish_reason"),
                extra=extra,
            )
        except (AttributeError, TypeError, IndexError, KeyError, ValueError) as e:  # a 200 whose body is not a reply
            raise TransientError(f"{spec}: malformed reply: {type(e).__name__}: {_short(e)}") from e

    async def _local_post(self, spec: ModelSpec, url: str, body: dict[str, Any], headers: dict[str, str]) -> dict:
        """A call to the embedded model: queued or generating is never a time-out; only a server that did
        no work for the whole `timeout_s` is (`models.local.progress`)."""
        from skillopt.models.local.progress import NoProgress, progress_of, within_progress

        progress = progress_of(url.rsplit("/v1/", 1)[0], self._local_http.get_json)
        try:
            return await within_progress(self._local_http.post(url, body, headers, str(spec)), progress,
                                         self.timeout_s)
        except NoProgress as e:
            raise HttpTransientError(f"{spec}: {e}") from e


def _split_credentials(url: str) -> tuple[str, str | None]:
    """`http://user:pass@host/...` -> (`http://host/...`, its HTTP Basic `Authorization` value)."""
    from base64 import b64encode
    from urllib.parse import unquote, urlsplit, urlunsplit

    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url, None
    host = parts.hostname or ""
    netloc = (f"[{host}]" if ":" in host else host) + (f":{parts.port}" if parts.port else "")
    pair = f"{unquote(parts.username or '')}:{unquote(parts.password or '')}"
    return urlunsplit(parts._replace(netloc=netloc)), "Basic " + b64encode(pair.encode()).decode()


def _azure_token_provider():
    try:
        # optional and in no extra (`pip install azure-identity`), so mypy may not find it
        from azure.identity import AzureCliCredential, get_bearer_token_provider  # type: ignore[import-not-found]
    except ImportError as e:
        raise BadInput(
            "azure: set AZURE_OPENAI_API_KEY, or pip install azure-identity to use the Azure CLI credential"
        ) from e
    return get_bearer_token_provider(AzureCliCredential(), "https://cognitiveservices.azure.com/.default")


class AnthropicProvider:
    """Anthropic Messages (also any server that speaks it, through `@base_url`)."""

    def __init__(self, env: ProviderEnv, timeout_s: float):
        self.env = env
        self.timeout_s = timeout_s
        self._clients: dict[str, Any] = {}

    def _client(self, spec: ModelSpec):
        import anthropic

        base = spec.base_url or self.env.anthropic_base_url or ""
        if base not in self._clients:  # one client per server, reused (also when no base URL is set)
            self._clients[base] = anthropic.AsyncAnthropic(
                api_key=self.env.anthropic_api_key or "not-needed", base_url=base or None,
                max_retries=0, timeout=self.timeout_s,
            )
        return self._clients[base]

    async def complete(self, spec: ModelSpec, req: ChatRequest) -> ChatResponse:
        import anthropic

        system = req.system
        messages = [{"role": m.role, "content": m.content} for m in req.messages if m.role != "system"]
        kwargs: dict[str, Any] = {"model": spec.model, "messages": messages, "max_tokens": req.max_tokens or 4096}
        if system:
            kwargs["system"] = system
        if req.temperature is not None:
            kwargs["temperature"] = req.temperature
        if req.stop:
            kwargs["stop_sequences"] = list(req.stop)
        t0 = time.monotonic()
        try:
            r = await self._client(spec).messages.create(**kwargs)
        except anthropic.APIStatusError as e:
            raise _classify(e, e.status_code, spec) from e
        except (anthropic.APIConnectionError, anthropic.APITimeoutError) as e:
            raise TransientError(f"{spec}: cannot reach the server: {_short(e)}") from e
        except (anthropic.APIResponseValidationError, ValueError) as e:
            raise TransientError(f"{spec}: malformed reply: {_short(e)}") from e
        try:
            text = "".join(getattr(b, "text", "") for b in r.content if getattr(b, "type", "") == "text")
            return ChatResponse(
                text=text,
                input_tokens=r.usage.input_tokens or 0,
                output_tokens=r.usage.output_tokens or 0,
                latency_s=time.monotonic() - t0,
                finish_reason=r.stop_reason,
            )
        except (AttributeError, TypeError, ValueError) as e:
            raise TransientError(f"{spec}: malformed reply: {type(e).__name__}: {_short(e)}") from e
