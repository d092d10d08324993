"""The one place replay and report call the cost model (docs/accounting.md, cost interface).

`ctxwrap.engine.cost` is the shared model (branch `accounting`). Until it is on this branch,
a local implementation of the same contract stands in; when it lands, the import below picks
it up and nothing else changes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

try:  # pragma: no cover - depends on which branch this runs on
    from ctxwrap.engine import cost as _cost  # type: ignore[attr-defined,unused-ignore]

    Prices: Any = _cost.Prices
    RequestShape: Any = _cost.RequestShape
    CallCost: Any = _cost.CallCost
    _price_requests: Any = _cost.price_requests
    _default_prices: Any = _cost.default_prices
    COST_MODEL = "ctxwrap.engine.cost"
except ImportError:
    COST_MODEL = "replay fallback (engine/cost.py not present)"

    @dataclass(frozen=True)
    class _Prices:
        input: float | None
        output: float | None
        cache_read: float | None
        cache_write: float | None
        caching: Literal["explicit", "automatic", "none"] = "explicit"

    @dataclass(frozen=True)
    class _RequestShape:
        ts: float
        blocks: tuple[tuple[str, int], ...]
        output_tokens: int = 0

    @dataclass(frozen=True)
    class _CallCost:
        cache_read_tokens: int
        cache_write_tokens: int
        uncached_input_tokens: int
        output_tokens: int
        weighted_tokens: float
        usd: float | None

    def _fallback_price(
        shapes: Sequence[_RequestShape], prices: _Prices, *, ttl_s: float = 300.0
    ) -> list[_CallCost]:
        out: list[_CallCost] = []
        prev: _RequestShape | None = None
        for shape in shapes:
            total = sum(t for _, t in shape.blocks)
            read = 0
            if prev is not None and shape.ts - prev.ts <= ttl_s and prices.caching != "none":
                for (fa, ta), (fb, _) in zip(shape.blocks, prev.blocks, strict=False):
                    if fa != fb:
                        break
                    read += ta
            rest = total - read
            explicit = prices.caching == "explicit"
            write = rest if explicit else 0
            uncached = 0 if explicit else rest
            w_write = 1.25 if explicit else 1.0
            weighted = read * 0.1 + write * w_write + uncached
            usd: float | None = None
            needed = [prices.input, prices.output, prices.cache_read, prices.cache_write]
            if all(p is not None for p in needed):
                assert prices.input is not None and prices.output is not None
                assert prices.cache_read is not None and prices.cache_write is not None
                usd = (
                    read * prices.cache_read
                    + write * prices.cache_write
                    + uncached * prices.input
                    + shape.output_tokens * prices.output
                ) / 1e6
            out.append(_CallCost(read, write, uncached, shape.output_tokens, weighted, usd))
            prev = shape
        return out

    def _fallback_defaults(model: str | None) -> _Prices:
        # A mid-range Anthropic-style price list (USD per million tokens).
        return _Prices(input=3.0, output=15.0, cache_read=0.3, cache_write=3.75)

    Prices = _Prices
    RequestShape = _RequestShape
    CallCost = _CallCost
    _price_requests = _fallback_price
    _default_prices = _fallback_defaults


def default_prices(model: str | None) -> Any:
    return _default_prices(model)


def price_requests(shapes: Sequence[Any], prices: Any, *, ttl_s: float = 300.0) -> list[Any]:
    """Price a session's requests in order; see the cost interface for the caching rules."""
    return list(_price_requests(shapes, prices, ttl_s=ttl_s))


def request_shape(ts: float, blocks: tuple[tuple[str, int], ...], output_tokens: int) -> Any:
    return RequestShape(ts=ts, blocks=blocks, output_tokens=output_tokens)
