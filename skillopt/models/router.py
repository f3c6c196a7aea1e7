"""`Models`: the one place every LLM call goes through.

Retries with backoff on transient errors, a per-call timeout, metering (tokens, cost, latency,
role), the persistent response cache, and structured JSON output validated by pydantic.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
from typing import TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from skillopt.errors import BadInput, ModelCallError
from skillopt.models.cache import ResponseCache, request_key
from skillopt.models.replay import ReplayCache
from skillopt.models.meter import Meter
from skillopt.models.prices import cost_usd
from skillopt.models.providers import AnthropicProvider, OpenAIProvider, TransientError
from skillopt.models.spec import ModelSpec
from skillopt.models.types import CallRecord, ChatRequest, ChatResponse, Message, ProviderEnv, Role

T = TypeVar("T", bound=BaseModel)


class RetryPolicy(BaseModel):
    model_config = ConfigDict(frozen=True)

    attempts: int = 4
    base_delay_s: float = 1.0
    max_delay_s: float = 30.0

    def delay(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(retry_after, self.max_delay_s)
        d = self.base_delay_s * (2 ** attempt)
        return min(self.max_delay_s, d * (0.5 + random.random() / 2))


class StructuredFailure(BaseModel):
    """The optimizer's reply could not be read as the schema, even after one repair."""

    error: str
    raw: str = ""
    transient: bool = False  # the call itself failed after its retries (a later try may succeed)


def _local_default() -> str:
    from skillopt.models.defaults import LOCAL_TARGET

    return LOCAL_TARGET


def check_credentials(spec: ModelSpec, env: ProviderEnv) -> None:
    """Fail before any call when the key a spec needs is missing (names the variable)."""
    if spec.provider == "openai" and not env.openai_api_key and not spec.base_url:
        raise BadInput(f"{spec} needs an OpenAI key: set OPENAI_API_KEY (or leave the model out for the embedded "
                       f"{_local_default()})")
    if spec.provider == "anthropic" and not env.anthropic_api_key and not spec.base_url:
        raise BadInput(f"{spec} needs an Anthropic key: set ANTHROPIC_API_KEY (or leave the model out for the "
                       f"embedded {_local_default()})")
    if spec.provider == "azure" and not (spec.base_url or env.azure_openai_endpoint):
        raise BadInput(f"{spec} needs an Azure endpoint: set AZURE_OPENAI_ENDPOINT (and AZURE_OPENAI_API_KEY)")
    if spec.provider == "local":
        from skillopt.models.local import check_local_model  # lazy: only for local specs

        check_local_model(spec.model)


def _local_base_url(spec: ModelSpec) -> str:
    from skillopt.models.local import ensure_server

    return ensure_server(spec.model).base_url + "/v1"


class Models:
    """Routes calls to providers and meters them. One instance per run."""

    def __init__(self, env: ProviderEnv | None = None, meter: Meter | None = None,
                 cache: ResponseCache | None = None, retry: RetryPolicy | None = None,
                 timeout_s: float = 180.0, prices: dict[str, tuple[float, float]] | None = None,
                 replay: ReplayCache | None = None):
        self.env = env or ProviderEnv()
        self.meter = meter or Meter()
        self.cache = cache  # this run's replies (a resumed run asks nothing twice)
        self.replay = replay  # the embedded models' replies, kept across runs (models.replay)
        self.retry = retry or RetryPolicy()
        self.prices = prices or {}
        self._openai = OpenAIProvider(self.env, timeout_s, base_url_for=_local_base_url)
        self._anthropic = AnthropicProvider(self.env, timeout_s)

    def _provider(self, spec: ModelSpec):
        return self._anthropic if spec.provider == "anthropic" else self._openai

    async def chat(self, spec: ModelSpec, req: ChatRequest, role: Role, cache: bool = True) -> ChatResponse:
        """One metered call with retries. Raises `ModelCallError` after the last try."""
        key = request_key(spec, req) if (cache and self.cache) else None
        kept = self.replay.key(spec, req) if (cache and self.replay) else None
        if key and (hit := self.cache.get(key)) is not None:
            return self._replayed(spec, role, hit)
        if kept and (hit := await asyncio.to_thread(self.replay.get, kept)) is not None:
            if key:  # kept by an earlier run: this run's own cache keeps it for a resume
                self.cache.put(key, hit)
            return self._replayed(spec, role, hit)
        last: Exception | None = None
        for attempt in range(max(1, self.retry.attempts)):
            try:
                resp = await self._provider(spec).complete(spec, req)
            except TransientError as e:
                last = e
                if e.retry_after is not None and e.retry_after > self.retry.max_delay_s:
                    # the server asks for a longer wait than we allow: waiting the cap again and again would
                    # only run out the rollout's own time limit (and blame the agent); give up now
                    msg = (f"{spec}: the server asks to wait {e.retry_after:.0f} s (Retry-After), over the "
                           f"{self.retry.max_delay_s:.0f} s cap: {e}")
                    self.meter.record(CallRecord(role=role, model=str(spec), ok=False, error=msg))
                    raise ModelCallError(msg, transient=True) from e
                if attempt + 1 < max(1, self.retry.attempts):
                    await asyncio.sleep(self.retry.delay(attempt, e.retry_after))
                continue
            except ModelCallError as e:
                self.meter.record(CallRecord(role=role, model=str(spec), ok=False, error=str(e)))
                raise
            self._record(spec, role, resp)
            if key:
                self.cache.put(key, resp)
            if kept:
                await asyncio.to_thread(self.replay.put, kept, resp)
            return resp
        tries = max(1, self.retry.attempts)
        msg = f"{spec}: gave up after {tries} {'try' if tries == 1 else 'tries'}: {last}"
        self.meter.record(CallRecord(role=role, model=str(spec), ok=False, error=msg))
        raise ModelCallError(msg, transient=True)

    def _replayed(self, spec: ModelSpec, role: Role, hit: ChatResponse) -> ChatResponse:
        self.meter.record(CallRecord(role=role, model=str(spec), cached=True))
        return hit.model_copy(update={"cached": True})

    def _record(self, spec: ModelSpec, role: Role, resp: ChatResponse) -> None:
        self.meter.record(CallRecord(
            role=role, model=str(spec), input_tokens=resp.input_tokens, output_tokens=resp.output_tokens,
            cost_usd=cost_usd(spec, resp.input_tokens, resp.output_tokens, self.prices),
            latency_s=resp.latency_s,
        ))

    async def chat_json(self, spec: ModelSpec, messages: list[Message], schema: type[T], role: Role,
                        max_tokens: int | None = None, temperature: float | None = None,
                        json_schema: dict | None = None, seed: int | None = None) -> T | StructuredFailure:
        """Ask for JSON matching `schema`; one repair retry on invalid JSON, then a recorded failure.

        `json_schema` (default: the model's own) is what the server constrains decoding to; it may be
        narrower than `schema`, e.g. an enum of the anchors that exist in the skill.
        """
        json_schema = json_schema or schema.model_json_schema()
        use_schema = spec.provider != "anthropic"  # Anthropic: schema in the prompt only
        req = ChatRequest(messages=tuple(messages), max_tokens=max_tokens, temperature=temperature,
                          json_schema=json_schema if use_schema else None, schema_name=schema.__name__, seed=seed)
        try:
            resp = await self.chat(spec, req, role)
            parsed = _parse(resp.text, schema)
            if not isinstance(parsed, StructuredFailure):
                return parsed
            repair = list(messages) + [
                Message(role="assistant", content=resp.text[:4000]),
                Message(role="user", content=(
                    f"That reply was not valid: {parsed.error}. Reply again with only a JSON object "
                    f"matching this JSON schema, no prose:\n{json.dumps(json_schema)}")),
            ]
            resp2 = await self.chat(spec, req.model_copy(update={"messages": tuple(repair)}), role)
            parsed2 = _parse(resp2.text, schema)
            return parsed2
        except ModelCallError as e:
            return StructuredFailure(error=str(e), transient=e.transient)


_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.S)


def _parse(text: str, schema: type[T]) -> T | StructuredFailure:
    candidates = [text.strip()]
    candidates += [m.strip() for m in _FENCE.findall(text)]
    start, end = text.find("{"), text.rfind("}")
    if 0 <= start < end:
        candidates.append(text[start : end + 1])
    error = "no JSON object found in the reply"
    for c in candidates:
        try:
            return schema.model_validate_json(c)
        except ValidationError as e:
            first = e.errors()[0]
            if first.get("type") != "json_invalid":
                error = f"JSON does not match the schema: {first.get('msg', '')} at {first.get('loc')}"
    return StructuredFailure(error=error[:300], raw=text[:2000])
