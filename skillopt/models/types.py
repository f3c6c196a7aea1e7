"""Typed values that cross the model layer's boundary."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Role = Literal["target", "optimizer", "judge"]  # judge: a model-graded scorer's calls


class Message(BaseModel):
    model_config = ConfigDict(frozen=True)

    role: Literal["system", "user", "assistant"]
    content: str


class ChatRequest(BaseModel):
    model_config = ConfigDict(frozen=True)

    messages: tuple[Message, ...]
    max_tokens: int | None = None
    temperature: float | None = None
    stop: tuple[str, ...] = ()
    json_schema: dict[str, Any] | None = None  # ask the server for JSON matching this schema
    schema_name: str = "reply"
    seed: int | None = None

    @property
    def system(self) -> str:
        return "\n\n".join(m.content for m in self.messages if m.role == "system")


class ChatResponse(BaseModel):
    text: str
    input_tokens: int = 0
    output_tokens: int = 0
    latency_s: float = 0.0
    finish_reason: str | None = None
    cached: bool = False  # served from the response cache: no call was paid
    extra: dict[str, Any] = Field(default_factory=dict)  # provider fields (token ids, logprobs)


class CallRecord(BaseModel):
    """One metered model call."""

    role: Role
    model: str
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = None  # None when the price is unknown
    latency_s: float = 0.0
    ok: bool = True
    cached: bool = False
    error: str | None = None


class ProviderEnv(BaseModel):
    """Credentials and endpoints, read from the environment once at the CLI edge."""

    model_config = ConfigDict(frozen=True)

    openai_api_key: str | None = None
    openai_base_url: str | None = None
    azure_openai_endpoint: str | None = None
    azure_openai_api_key: str | None = None
    azure_openai_api_version: str = "2024-10-21"
    anthropic_api_key: str | None = None
    anthropic_base_url: str | None = None
    vllm_api_key: str | None = None

    @classmethod
    def from_environ(cls, environ: dict[str, str]) -> "ProviderEnv":
        fields = {name: environ.get(name.upper()) for name in cls.model_fields}
        return cls(**{k: v for k, v in fields.items() if v})
