"""Model spec strings: one string names a model everywhere (DESIGN.md section 5).

    openai:gpt-5-mini                      OPENAI_API_KEY, optional OPENAI_BASE_URL
    azure:<deployment>                     AZURE_OPENAI_ENDPOINT + AZURE_OPENAI_API_KEY (or Azure CLI)
    anthropic:claude-sonnet-4-5            ANTHROPIC_API_KEY
    vllm:<model>@http://host:8000/v1       a vLLM server; enables token capture
    openai-compatible:<model>@<base_url>   any other OpenAI-compatible server
    local:<name>                           the embedded local model

Any spec may end in `@<base_url>`. `parse_model_spec` is the one function that reads them.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict

from skillopt.errors import BadInput

Provider = Literal["openai", "azure", "anthropic", "vllm", "openai-compatible", "local"]
Api = Literal["chat", "messages", "responses"]

PROVIDERS: tuple[Provider, ...] = ("openai", "azure", "anthropic", "vllm", "openai-compatible", "local")
_NEEDS_URL = {"vllm", "openai-compatible"}

# Which wire APIs each provider speaks natively. The harnesses state what they need.
PROVIDER_APIS: dict[str, frozenset[str]] = {
    "openai": frozenset({"chat", "responses"}),
    "azure": frozenset({"chat", "responses"}),
    "anthropic": frozenset({"messages"}),
    "vllm": frozenset({"chat", "messages", "responses"}),
    "openai-compatible": frozenset({"chat"}),
    "local": frozenset({"chat", "messages", "responses"}),
}


class ModelSpec(BaseModel):
    model_config = ConfigDict(frozen=True)

    provider: Provider
    model: str
    base_url: str | None = None

    def __str__(self) -> str:
        s = f"{self.provider}:{self.model}"
        return f"{s}@{self.base_url}" if self.base_url else s

    @property
    def apis(self) -> frozenset[str]:
        return PROVIDER_APIS[self.provider]

    @property
    def captures_tokens(self) -> bool:
        return self.provider == "vllm"

    @property
    def accepts_temperature(self) -> bool:
        """False for OpenAI's reasoning models (o-series, gpt-5 but its chat variant), which refuse
        a temperature: their rollouts cannot be made deterministic."""
        if self.provider not in ("openai", "azure"):
            return True
        name = self.model.lower()
        return not (re.match(r"^o\d", name) or (name.startswith("gpt-5") and "chat" not in name))


def parse_model_spec(text: str) -> ModelSpec:
    """Parse a spec string; raise `BadInput` with the accepted forms when it is not one."""
    raw = (text or "").strip()
    if ":" not in raw:
        raise BadInput(
            f"unknown model spec {text!r}: write PROVIDER:MODEL[@BASE_URL] with PROVIDER one of "
            f"{', '.join(PROVIDERS)} (e.g. openai:gpt-5-mini, local:qwen2.5-coder-1.5b)"
        )
    provider, rest = raw.split(":", 1)
    provider = provider.strip().lower()
    known: Provider | None = next((p for p in PROVIDERS if p == provider), None)
    if known is None:
        raise BadInput(
            f"unknown model provider {provider!r} in {text!r}: use one of {', '.join(PROVIDERS)}"
        )
    model, base_url = rest, None
    if "@" in rest:
        model, base_url = rest.split("@", 1)
        base_url = base_url.strip().rstrip("/")
        if not base_url.startswith(("http://", "https://")):
            raise BadInput(f"bad base URL {base_url!r} in model spec {text!r}: it must start with http:// or https://")
    model = model.strip()
    if not model:
        raise BadInput(f"model spec {text!r} names no model: write {provider}:MODEL")
    if provider in _NEEDS_URL and not base_url:
        raise BadInput(f"model spec {text!r} needs a server URL: write {provider}:{model}@http://HOST:PORT/v1")
    return ModelSpec(provider=known, model=model, base_url=base_url)
