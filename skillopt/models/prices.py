"""What a model call costs, in USD. Unknown prices are `None` ("unknown"), never $0.

Prices come from `genai-prices` (pydantic/genai-prices: a maintained data package, ~2,300 models of
~50 providers, with tiers and dated price changes; no network at run time). Your own prices win:
`models.prices` in a config file, `"PROVIDER:MODEL": [USD per million input tokens, output tokens]`
(an Azure deployment also finds `openai:<deployment>`). Local models cost nothing. A model served by
vLLM or another OpenAI-compatible server has no list price: give it one to use `--max-cost-usd`.
"""

from __future__ import annotations

from functools import lru_cache

from skillopt.models.spec import ModelSpec

FREE_PROVIDERS = {"local"}  # runs on this machine: cost is really zero
# skillopt provider -> genai-prices provider id (providers absent here have no list price)
LIST_PRICED = {"openai": "openai", "azure": "azure", "anthropic": "anthropic"}


def _override(spec: ModelSpec, extra: dict[str, tuple[float, float]]) -> tuple[float, float] | None:
    price = extra.get(f"{spec.provider}:{spec.model}")
    if price is None and spec.provider == "azure":
        price = extra.get(f"openai:{spec.model}")
    return price


@lru_cache(maxsize=4096)
def list_price(provider: str, model: str, input_tokens: int, output_tokens: int) -> float | None:
    """The provider's list price of one call from genai-prices, or None when it does not know the model."""
    provider_id = LIST_PRICED.get(provider)
    if provider_id is None:
        return None
    import genai_prices  # a data package; imported on the first priced call

    usage = genai_prices.Usage(input_tokens=input_tokens, output_tokens=output_tokens)
    for pid in (provider_id, "openai") if provider == "azure" else (provider_id,):
        try:
            return float(genai_prices.calc_price(usage, model, provider_id=pid).total_price)
        except LookupError:
            continue
    return None


def cost_usd(spec: ModelSpec, input_tokens: int, output_tokens: int,
             extra: dict[str, tuple[float, float]] | None = None) -> float | None:
    """Cost of one call, or None when the price of this model is not known."""
    if spec.provider in FREE_PROVIDERS:
        return 0.0
    price = _override(spec, extra or {})
    if price is not None:
        return (input_tokens * price[0] + output_tokens * price[1]) / 1_000_000
    return list_price(spec.provider, spec.model, int(input_tokens), int(output_tokens))


def has_price(spec: ModelSpec, extra: dict[str, tuple[float, float]] | None = None) -> bool:
    return cost_usd(spec, 1000, 1000, extra) is not None
