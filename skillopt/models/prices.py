"""Price table in USD per million tokens (input, output). Unknown models cost `None`, never $0.

Figures are list prices published by the providers; edit or extend through the
`prices:` section of a config file.
"""

from __future__ import annotations

from skillopt.models.spec import ModelSpec

PRICES_PER_MTOK: dict[str, tuple[float, float]] = {
    "openai:gpt-5": (1.25, 10.0),
    "openai:gpt-5-mini": (0.25, 2.0),
    "openai:gpt-5-nano": (0.05, 0.40),
    "openai:gpt-4.1": (2.0, 8.0),
    "openai:gpt-4.1-mini": (0.40, 1.60),
    "openai:gpt-4.1-nano": (0.10, 0.40),
    "openai:gpt-4o": (2.50, 10.0),
    "openai:gpt-4o-mini": (0.15, 0.60),
    "openai:o4-mini": (1.10, 4.40),
    "anthropic:claude-opus-4-1": (15.0, 75.0),
    "anthropic:claude-sonnet-4-5": (3.0, 15.0),
    "anthropic:claude-sonnet-4": (3.0, 15.0),
    "anthropic:claude-haiku-4-5": (1.0, 5.0),
    "anthropic:claude-3-5-haiku-latest": (0.80, 4.0),
}

FREE_PROVIDERS = {"local"}  # runs on this machine: cost is really zero


def cost_usd(spec: ModelSpec, input_tokens: int, output_tokens: int,
             extra: dict[str, tuple[float, float]] | None = None) -> float | None:
    """Cost of one call, or None when the price of this model is not known."""
    if spec.provider in FREE_PROVIDERS:
        return 0.0
    table = {**PRICES_PER_MTOK, **(extra or {})}
    key = f"{spec.provider}:{spec.model}"
    price = table.get(key)
    if price is None and spec.provider == "azure":
        price = table.get(f"openai:{spec.model}")
    if price is None:
        return None
    return (input_tokens * price[0] + output_tokens * price[1]) / 1_000_000
