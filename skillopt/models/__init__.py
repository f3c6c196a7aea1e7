"""Every LLM call: specs, providers, retries, structured output, metering, budget, cache."""

from skillopt.models.cache import ResponseCache
from skillopt.models.meter import Budget, Meter, MeterSnapshot
from skillopt.models.router import Models, RetryPolicy, StructuredFailure, check_credentials
from skillopt.models.spec import ModelSpec, parse_model_spec
from skillopt.models.types import CallRecord, ChatRequest, ChatResponse, Message, ProviderEnv

__all__ = [
    "Budget", "CallRecord", "ChatRequest", "ChatResponse", "Message", "Meter", "MeterSnapshot",
    "ModelSpec", "Models", "ProviderEnv", "ResponseCache", "RetryPolicy", "StructuredFailure",
    "check_credentials", "parse_model_spec",
]
