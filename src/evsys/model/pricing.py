"""What a model call cost, from a maintained price table (the `genai-prices` package), for every provider.

A call to a hosted API is priced by the provider (the `openai` provider's calls at OpenAI's prices) or, for an
OpenAI-compatible endpoint, by its base URL (a provider's own URL is recognised). A model the table does not
have, or a server it does not know (a self-hosted vLLM or SGLang), has an unknown price: `None`, shown as
unknown, never as $0. The in-process local engine costs nothing (0.0).

Whether the table prices a (model, provider, base URL) at all is decided once and remembered: a base URL on
this machine or a private network (`localhost`, a loopback or private IP address) is a self-hosted server,
unknown without loading the table, and a model the table does not have is not looked up again on every call.
"""

from __future__ import annotations

import ipaddress
import warnings
from functools import lru_cache
from urllib.parse import urlsplit

from evsys.records import Usage

TABLE_PROVIDERS = {"openai": "openai"}
"""evsys provider name -> the price table's provider id, for providers that are one hosted API."""


def price_usd(
    model: str, usage: Usage, *, provider: str | None = None, base_url: str | None = None
) -> float | None:
    """The price of one call in US dollars, or None when the table has no price for it."""
    if not has_price(model, provider, base_url):
        return None
    return _table_price(model, usage, provider, base_url)


@lru_cache(maxsize=1024)
def has_price(model: str, provider: str | None = None, base_url: str | None = None) -> bool:
    """Whether the table prices calls to `model` by `provider` or at `base_url` (asked once per triple)."""
    if TABLE_PROVIDERS.get(provider or "") is None and (not base_url or is_self_hosted(base_url)):
        return False
    return _table_price(model, Usage(), provider, base_url) is not None


def is_self_hosted(base_url: str) -> bool:
    """True for a base URL on this machine or a private network (`localhost`, a loopback, private or
    link-local IP address): no hosted provider's price applies there."""
    host = (urlsplit(base_url).hostname or "").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return address.is_loopback or address.is_private or address.is_link_local


def _table_price(model: str, usage: Usage, provider: str | None, base_url: str | None) -> float | None:
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
