"""What a model call cost, from a maintained price table (the `genai-prices` package), for every provider.

A call to a hosted API is priced by the provider (the `openai` provider's calls at OpenAI's prices) or, for an
OpenAI-compatible endpoint, by its base URL (a provider's own URL is recognised). A model the table does not
have, or a server it does not know (a self-hosted vLLM or SGLang), has an unknown price: `None`, shown as
unknown, never as $0. The in-process local engine costs nothing (0.0).
"""

from __future__ import annotations

import warnings

from evsys.records import Usage

TABLE_PROVIDERS = {"openai": "openai"}
"""evsys provider name -> the price table's provider id, for providers that are one hosted API."""


def price_usd(
    model: str, usage: Usage, *, provider: str | None = None, base_url: str | None = None
) -> float | None:
    """The price of one call in US dollars, or None when the table has no price for it."""
    try:
        from genai_prices import Usage as PricedUsage
        from genai_prices import calc_price
    except ImportError:  # the table is a dependency; a stripped install prices nothing rather than failing
        return None
    priced = PricedUsage(
        input_tokens=usage.prompt_tokens,
        output_tokens=usage.completion_tokens,
        cache_read_tokens=usage.cached_tokens or None,
    )
    table_provider = TABLE_PROVIDERS.get(provider or "")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if table_provider is not None:
                result = calc_price(priced, model, provider_id=table_provider)
            elif base_url:
                result = calc_price(priced, model, provider_api_url=base_url)
            else:
                return None
    except LookupError:
        return None
    return float(result.total_price)
