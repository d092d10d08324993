"""The one place replay and report call the cost model (`ctxwrap.engine.cost`, docs/accounting.md)."""

from __future__ import annotations

from collections.abc import Sequence

from ctxwrap.engine.cost import CallCost, Prices, RequestShape
from ctxwrap.engine.cost import default_prices as _default_prices
from ctxwrap.engine.cost import price_requests as _price_requests

COST_MODEL = "ctxwrap.engine.cost"


def default_prices(model: str | None) -> Prices:
    return _default_prices(model)


def price_requests(
    shapes: Sequence[RequestShape], prices: Prices, *, ttl_s: float = 300.0
) -> list[CallCost]:
    """Price a session's requests in order; see the cost interface for the caching rules."""
    return list(_price_requests(shapes, prices, ttl_s=ttl_s))


def request_shape(
    ts: float, blocks: tuple[tuple[str, int], ...], output_tokens: int
) -> RequestShape:
    return RequestShape(ts=ts, blocks=blocks, output_tokens=output_tokens)
