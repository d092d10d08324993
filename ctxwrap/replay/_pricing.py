"""The one place replay and report call the cost model (`ctxwrap.engine.cost`, docs/accounting.md)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from ctxwrap.engine.cost import ONE_HOUR_TTL_S, CallCost, Prices, ReadFrom, RequestShape
from ctxwrap.engine.cost import default_prices as _default_prices
from ctxwrap.engine.cost import price_requests as _price_requests
from ctxwrap.engine.cost import price_tokens as _price_tokens

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
    shapes: Sequence[RequestShape],
    prices: Prices,
    *,
    ttl_s: float = 300.0,
    read_from: Sequence[ReadFrom] | None = None,
    first: int = 0,
) -> list[CallCost]:
    """Price a session's requests in order, from `first` on; see the cost interface for the
    caching rules."""
    return list(_price_requests(shapes, prices, ttl_s=ttl_s, read_from=read_from, first=first))


def request_shape(
    ts: float, blocks: tuple[tuple[str, int], ...], output_tokens: int
) -> RequestShape:
    return RequestShape(ts=ts, blocks=blocks, output_tokens=output_tokens)


def price_recorded(
    prices: Prices, *, uncached: int, read: int, write: int, write_1h: int, output: int
) -> CallCost:
    """One request priced from the provider's own counts: what its bill says (`write`
    includes the 1-hour writes, billed at their own price)."""
    return _price_tokens(
        prices,
        cache_read=read,
        cache_write=write - write_1h,
        uncached=uncached,
        output=output,
        cache_write_1h=write_1h,
    )


def shifted(ours: CallCost, recorded: CallCost, simulated: CallCost) -> CallCost:
    """ctxwrap's simulated request carrying the cache model's residual on plain's side
    (`recorded` - `simulated`): what ctxwrap keeps out is modelled, what both sides share is
    the bill. No part goes below zero."""

    def money(o: float | None, r: float | None, s: float | None) -> float | None:
        if o is None or r is None or s is None:
            return None
        return max(0.0, o + r - s)

    return dataclasses.replace(
        ours,
        cache_read_tokens=max(
            0, ours.cache_read_tokens + recorded.cache_read_tokens - simulated.cache_read_tokens
        ),
        cache_write_tokens=max(
            0, ours.cache_write_tokens + recorded.cache_write_tokens - simulated.cache_write_tokens
        ),
        uncached_input_tokens=max(
            0,
            ours.uncached_input_tokens
            + recorded.uncached_input_tokens
            - simulated.uncached_input_tokens,
        ),
        weighted_tokens=max(
            0.0, ours.weighted_tokens + recorded.weighted_tokens - simulated.weighted_tokens
        ),
        usd=money(ours.usd, recorded.usd, simulated.usd),
        input_usd=money(ours.input_usd, recorded.input_usd, simulated.input_usd),
    )


def with_one_off(
    call: CallCost,
    input_tokens: int,
    output_tokens: int,
    prices: Prices,
    *,
    read_tokens: int = 0,
) -> CallCost:
    """`call` plus a one-off request priced with it (a compaction's summarisation): weighted
    input, tokens and money added. `input_tokens` are new — all fresh as pi sends it (caching
    off), written to the cache where the provider bills writes when the request also reads
    `read_tokens` of its prefix from the cache (Claude Code's and Codex's, sent on the
    conversation's own prefix)."""
    if read_tokens and prices.caching == "explicit":
        read, write, fresh = read_tokens, input_tokens, 0
    elif read_tokens and prices.caching != "none":
        read, write, fresh = read_tokens, 0, input_tokens
    else:
        read, write, fresh = 0, 0, input_tokens + read_tokens
    extra = _price_tokens(
        prices, cache_read=read, cache_write=write, uncached=fresh, output=output_tokens
    )
    usd = None if call.usd is None or extra.usd is None else call.usd + extra.usd
    in_usd = (
        None
        if call.input_usd is None or extra.input_usd is None
        else call.input_usd + extra.input_usd
    )
    return dataclasses.replace(
        call,
        cache_read_tokens=call.cache_read_tokens + read,
        cache_write_tokens=call.cache_write_tokens + write,
        uncached_input_tokens=call.uncached_input_tokens + fresh,
        output_tokens=call.output_tokens + output_tokens,
        weighted_tokens=call.weighted_tokens + extra.weighted_tokens,
        usd=usd,
        input_usd=in_usd,
    )
