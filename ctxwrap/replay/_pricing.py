"""The one place replay and report call the cost model (`ctxwrap.engine.cost`, docs/accounting.md)."""

from __future__ import annotations

from collections.abc import Sequence

from ctxwrap.engine.cost import ONE_HOUR_TTL_S, CallCost, Prices, RequestShape
from ctxwrap.engine.cost import default_prices as _default_prices
from ctxwrap.engine.cost import price_requests as _price_requests

COST_MODEL = "ctxwrap.engine.cost"


def default_prices(model: str | None) -> Prices:
    return _default_prices(model)


def session_prices(
    model: str | None, ttl_s: float, *, cache_write_tokens: int = 0, cache_write_1h_tokens: int = 0
) -> tuple[Prices, float]:
    """Prices and cache TTL to replay a session with, from what its provider usage reported.

    A session whose cache writes were mostly to the 1-hour cache (Claude Code sets
    `cache_control.ttl = "1h"` on some accounts; the usage says so in
    `cache_creation.ephemeral_1h_input_tokens`) is billed 2x input per write, not 1.25x, and
    its prefix stays readable for an hour: both sides of the replay are priced that way.
    """
    prices = _default_prices(model)
    if cache_write_1h_tokens > 0 and 2 * cache_write_1h_tokens >= cache_write_tokens:
        return prices.with_1h_cache(), max(ttl_s, ONE_HOUR_TTL_S)
    return prices, ttl_s


def price_requests(
    shapes: Sequence[RequestShape], prices: Prices, *, ttl_s: float = 300.0
) -> list[CallCost]:
    """Price a session's requests in order; see the cost interface for the caching rules."""
    return list(_price_requests(shapes, prices, ttl_s=ttl_s))


def request_shape(
    ts: float, blocks: tuple[tuple[str, int], ...], output_tokens: int
) -> RequestShape:
    return RequestShape(ts=ts, blocks=blocks, output_tokens=output_tokens)
