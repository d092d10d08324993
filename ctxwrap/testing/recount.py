"""Recount a session's cost from what the scripted model server received (tests, bench).

The skeptic's side of docs/accounting.md: main requests priced with the same prefix-cache
model ctxwrap uses (`ctxwrap.engine.cost.price_requests`) over blocks built from the wire
(tools, then each message by its exact JSON), pi's summarisation requests and ctxwrap's aux
calls as one-off requests. Sizes are chars/4 of what the provider reads (message text,
tool-call names and arguments, tool specs), the basis the bridge measures on.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ctxwrap.engine.cost import Prices, RequestShape, one_off_cost, price_requests
from ctxwrap.testing.model_server import RecordedRequest, estimate_prompt_tokens

# The scripted model has no price and pi speaks openai-completions to it: automatic caching
# at the default weights, as ctxwrap prices it.
SCRIPTED_PRICES = Prices(None, None, None, None, "automatic")


def message_chars(m: Mapping[str, Any]) -> int:
    c = m.get("content")
    n = len(c) if isinstance(c, str) else sum(len(p.get("text", "")) for p in c or [])
    for call in m.get("tool_calls") or []:
        n += len(call["function"]["name"]) + len(call["function"]["arguments"])
    return n


def tools_chars(body: Mapping[str, Any]) -> int:
    return sum(
        len(t["function"]["name"])
        + len(t["function"].get("description", ""))
        + len(
            json.dumps(
                t["function"].get("parameters", {}), separators=(",", ":"), ensure_ascii=False
            )
        )
        for t in body.get("tools") or []
    )


def request_chars(body: Mapping[str, Any]) -> int:
    return sum(message_chars(m) for m in body.get("messages") or []) + tools_chars(body)


def shape(r: RecordedRequest) -> RequestShape:
    """A request as the cost model's blocks: tools, then each message, chars/4."""
    body = r.body
    blocks = [(json.dumps(body.get("tools"), sort_keys=True), math.ceil(tools_chars(body) / 4))]
    for m in body.get("messages") or []:
        blocks.append((json.dumps(m, sort_keys=True), math.ceil(message_chars(m) / 4)))
    return RequestShape(ts=r.timestamp, blocks=tuple(blocks))


@dataclass(frozen=True)
class Recount:
    main_chars: int  # chars of every main request, summed
    main: float  # weighted tokens of the main requests (input only)
    summaries: float  # pi's summarisation requests, input + output
    aux: float  # ctxwrap's aux calls, input (as the provider reported it) + output
    summary_requests: int
    aux_chars: int = 0  # chars of ctxwrap's aux requests (what the aux model read)

    @property
    def total(self) -> float:
        return self.main + self.summaries + self.aux

    @property
    def aux_share_pct(self) -> float:
        return 100.0 * self.aux / self.total if self.total else 0.0


def recount(
    requests: Sequence[RecordedRequest],
    *,
    summary_text: str,
    prices: Prices = SCRIPTED_PRICES,
    ttl_s: float = 300.0,
) -> Recount:
    main = [r for r in requests if r.kind == "main"]
    priced = price_requests([shape(r) for r in main], prices, ttl_s=ttl_s)
    summaries = [r for r in requests if r.kind == "summary"]
    summary_out = math.ceil(len(summary_text) / 4)
    summary_cost = sum(
        one_off_cost(
            math.ceil(sum(message_chars(m) for m in r.body["messages"]) / 4), summary_out, prices
        ).weighted_tokens
        for r in summaries
    )
    aux_cost = sum(
        one_off_cost(estimate_prompt_tokens(r.body), 0, prices).weighted_tokens
        for r in requests
        if r.kind == "aux"
    )
    return Recount(
        main_chars=sum(request_chars(r.body) for r in main),
        main=sum(c.weighted_tokens for c in priced),
        summaries=summary_cost,
        aux=aux_cost,
        summary_requests=len(summaries),
        aux_chars=sum(request_chars(r.body) for r in requests if r.kind == "aux"),
    )


def reduction_pct(plain: Recount, wrapped: Recount) -> float:
    """Cost reduction of the wrapped run against plain pi, everything included."""
    return 100.0 * (plain.total - wrapped.total) / plain.total if plain.total else 0.0
