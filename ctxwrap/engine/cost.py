"""Cache-priced cost of LLM requests (DESIGN invariant 6). Pure functions, no I/O.

Providers bill input under prompt caching: the part of a request that repeats a prefix the
provider still holds is a *cache read* (about a tenth of a fresh token); the rest is a *cache
write* (explicit caching, Anthropic-style: more than a fresh token) or fresh input (automatic
caching, OpenAI-style). `price_requests` prices a sequence of requests of one conversation that
way, under an ideal prefix cache: the longest common prefix of blocks with the previous request
is read while the gap is within the TTL; everything else is written. A head change (compaction,
model switch, an edit reaching old history) therefore prices as what it is: a rewrite.

`weighted_tokens` is the same cost in input-equivalent tokens, so a figure exists where no price
is known; `usd` is money, `None` when a price the call needs is unknown.

The shared contract other modules code against is docs/accounting.md and
/work/wt/tasks/cost-interface.md: `Prices`, `RequestShape`, `CallCost`, `price_requests`,
`default_prices`, `DEFAULT_WEIGHTS`. Everything else here is additive.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, NamedTuple

Caching = Literal["explicit", "automatic", "none"]
CACHINGS: tuple[Caching, ...] = ("explicit", "automatic", "none")


# A provider that has counted this many requests' input and never a cached token does not
# cache (a local model, some gateways): every input token is fresh (live stats and replay
# price it so), and a rewrite there costs nothing, warm or not (masking).
UNCACHED_MIN_CALLS = 10


@dataclass(frozen=True)
class Prices:
    """USD per million tokens; None = unknown."""

    input: float | None
    output: float | None
    cache_read: float | None
    cache_write: float | None
    # explicit: the uncached part is written with cache_control (billed as a cache write);
    # automatic: the uncached part is fresh input, the matched prefix is read at cache_read;
    # none: no caching, every input token is fresh.
    caching: Caching = "explicit"

    @property
    def cache_write_1h(self) -> float | None:
        """A 1-hour cache write: 2x the input price at Anthropic, for every model (a 5-minute
        write, `cache_write`, is 1.25x). None where writes are not explicit or input unknown."""
        if self.caching != "explicit" or self.input is None:
            return None
        return self.input * 2.0

    def with_1h_cache(self) -> Prices:
        """These prices for a conversation cached with the 1-hour TTL: every write at the
        1-hour rate (price it with `ttl_s=ONE_HOUR_TTL_S`)."""
        if self.cache_write_1h is None:
            return self
        return dataclasses.replace(self, cache_write=self.cache_write_1h)


ONE_HOUR_TTL_S = 3600.0


@dataclass(frozen=True)
class RequestShape:
    """One request as sent, as ordered (fingerprint, tokens) blocks in wire order.

    Blocks: system, tools, then one entry per message; a fingerprint is a hash of the block's
    exact serialisation, so equal fingerprints mean equal bytes.
    """

    ts: float  # seconds; only differences matter
    blocks: tuple[tuple[str, int], ...]
    output_tokens: int = 0


@dataclass(frozen=True)
class CallCost:
    cache_read_tokens: int
    cache_write_tokens: int
    uncached_input_tokens: int
    output_tokens: int
    weighted_tokens: float  # input-equivalent: read*r + write*w + uncached*1 (output excluded)
    usd: float | None  # whole call incl. output; None when a needed price is unknown
    input_usd: float | None = None  # input side only (what ctxwrap can change); None if unknown

    @property
    def input_tokens(self) -> int:
        return self.cache_read_tokens + self.cache_write_tokens + self.uncached_input_tokens


@dataclass(frozen=True)
class Weights:
    """Cost of one token of each input kind, in fresh-input tokens."""

    read: float
    write: float
    uncached: float = 1.0


DEFAULT_WEIGHTS: dict[Caching, Weights] = {
    "explicit": Weights(read=0.1, write=1.25),
    "automatic": Weights(read=0.1, write=1.0),
    "none": Weights(read=1.0, write=1.0),
}

UNKNOWN_PRICES = Prices(None, None, None, None, "explicit")

# Published list prices, USD per million tokens, as of PRICES_AS_OF, from PRICE_SOURCES.
# Matched against the model id (with or without a `provider/` prefix) by glob, first match wins,
# so the newest models come first and every family ends in a catch-all at the *newest* rate of
# that family: a model released after this table (say claude-opus-4-9) is priced like its latest
# sibling, never like the 3x dearer Opus 4/4.1. A model not here has unknown prices: figures stay
# in weighted tokens and money shows as unknown. pi's own model registry (sent by the bridge)
# and the `prices` setting take precedence over this table.
#
# Anthropic: cache reads 0.1x input (0.05x on Opus/Sonnet 5.5, 0.025x on Fable 5.1), 5-minute
# cache writes 1.25x, 1-hour cache writes 2x (`Prices.cache_write_1h`). Haiku 5.5 is priced in
# two bands by prompt length; the table has the band up to 100k tokens. OpenAI caches
# automatically: cached input at the "cached input" price, no write surcharge.
PRICES_AS_OF = "2026-12-01"
PRICE_SOURCES = (
    "https://platform.claude.com/docs/en/about-claude/pricing",
    "https://developers.openai.com/api/docs/pricing",
)


def _claude(inp: float, out: float, read: float | None = None) -> Prices:
    return Prices(inp, out, round(inp * 0.1, 6) if read is None else read, round(inp * 1.25, 6))


def _openai(inp: float, out: float, cached: float | None) -> Prices:
    return Prices(inp, out, cached, inp, "automatic")


_OPUS_4 = _claude(15.0, 75.0)  # Opus 4 and 4.1 (and Opus 3)
_OPUS_45 = _claude(5.0, 25.0)  # Opus 4.5 to 5
_SONNET_4 = _claude(3.0, 15.0)
_GPT_54 = _openai(2.5, 15.0, 0.25)

DEFAULT_PRICE_TABLE: tuple[tuple[str, Prices], ...] = (
    # -- Anthropic, newest first
    ("claude-fable-5-1*", _claude(10.0, 50.0, 0.25)),
    ("claude-mythos-5-1*", _claude(10.0, 50.0, 0.25)),
    ("claude-fable*", _claude(10.0, 50.0, 1.0)),
    ("claude-mythos*", _claude(10.0, 50.0, 1.0)),
    ("claude-opus-5-5*", _claude(4.0, 20.0, 0.2)),
    ("claude-opus-5*", _OPUS_45),
    # Opus 4 is `claude-opus-4-20250514`, Opus 4.1 `claude-opus-4-1-20250805`: the old rate
    # only for those; every other claude-opus-4-N (4.5, 4.6, ... and later) is $5.
    ("claude-opus-4", _OPUS_4),
    ("claude-opus-4-0*", _OPUS_4),
    ("claude-opus-4-1", _OPUS_4),
    ("claude-opus-4-1-*", _OPUS_4),
    ("claude-opus-4-1@*", _OPUS_4),
    ("claude-opus-4-1[[]*", _OPUS_4),
    ("claude-opus-4-2025*", _OPUS_4),
    ("claude-opus-4@*", _OPUS_4),
    ("claude-opus-4*", _OPUS_45),
    ("claude-3-opus*", _OPUS_4),
    ("claude-sonnet-5-5*", _claude(2.0, 10.0, 0.1)),
    ("claude-sonnet-5*", _claude(2.0, 10.0, 0.2)),
    ("claude-sonnet-4*", _SONNET_4),
    ("claude-3-7-sonnet*", _SONNET_4),
    ("claude-3-5-sonnet*", _SONNET_4),
    ("claude-haiku-5-5*", Prices(0.1, 0.5, 0.01, 0.125)),
    ("claude-haiku-4*", _claude(1.0, 5.0)),
    ("claude-3-5-haiku*", _claude(0.8, 4.0)),
    ("claude-3-haiku*", Prices(0.25, 1.25, 0.03, 0.3)),
    # -- OpenAI, newest first; mini/nano/pro before their family
    ("gpt-5.4-mini*", _openai(0.75, 4.5, 0.075)),
    ("gpt-5.4-nano*", _openai(0.2, 1.25, 0.02)),
    ("gpt-5.4*", _GPT_54),
    ("gpt-5.3*", _openai(1.75, 14.0, 0.175)),
    ("gpt-5.2-pro*", _openai(21.0, 168.0, None)),
    ("gpt-5.2*", _openai(1.75, 14.0, 0.175)),
    ("gpt-5.1-codex-mini*", _openai(0.25, 2.0, 0.025)),
    ("gpt-5.1*", _openai(1.25, 10.0, 0.125)),
    ("gpt-5.*", _GPT_54),  # a later gpt-5.N: its newest known sibling's rate
    ("gpt-5-mini*", _openai(0.25, 2.0, 0.025)),
    ("gpt-5-nano*", _openai(0.05, 0.4, 0.005)),
    ("gpt-5-pro*", _openai(15.0, 120.0, None)),
    ("gpt-5*", _openai(1.25, 10.0, 0.125)),
    ("gpt-4.1-mini*", _openai(0.4, 1.6, 0.1)),
    ("gpt-4.1-nano*", _openai(0.1, 0.4, 0.025)),
    ("gpt-4.1*", _openai(2.0, 8.0, 0.5)),
    ("gpt-4o-mini*", _openai(0.15, 0.6, 0.075)),
    ("gpt-4o*", _openai(2.5, 10.0, 1.25)),
    ("o3-mini*", _openai(1.1, 4.4, 0.55)),
    ("o4-mini*", _openai(1.1, 4.4, 0.275)),
    ("o3*", _openai(2.0, 8.0, 0.5)),
    # -- Google
    ("gemini-2.5-pro*", Prices(1.25, 10.0, 0.31, 1.25, "automatic")),
    ("gemini-2.5-flash*", Prices(0.3, 2.5, 0.075, 0.3, "automatic")),
)


@functools.lru_cache(maxsize=256)
def weights(prices: Prices) -> Weights:
    """Relative weights from the prices where input and the rate are known, else the defaults."""
    default = DEFAULT_WEIGHTS[prices.caching]
    if prices.caching == "none":
        return default
    base = prices.input
    if base is None or base <= 0:
        return default
    read = prices.cache_read / base if prices.cache_read is not None else default.read
    if prices.caching == "automatic":
        return Weights(read=read, write=1.0)
    write = prices.cache_write / base if prices.cache_write is not None else default.write
    return Weights(read=read, write=write)


def _money(tokens: int, per_million: float | None) -> float | None:
    if tokens == 0:
        return 0.0
    if per_million is None:
        return None
    return tokens * per_million / 1_000_000


def _sum(parts: Sequence[float | None]) -> float | None:
    if any(p is None for p in parts):
        return None
    return sum(p for p in parts if p is not None)


def price_tokens(
    prices: Prices,
    *,
    cache_read: int = 0,
    cache_write: int = 0,
    uncached: int = 0,
    output: int = 0,
    cache_write_1h: int = 0,
) -> CallCost:
    """Price one call whose input split is already known (an aux call, a provider report).

    `cache_write_1h`: writes to the 1-hour cache (Anthropic's
    `usage.cache_creation.ephemeral_1h_input_tokens`), billed at 2x input instead of 1.25x;
    counted in `cache_write_tokens` of the result with the rest of the writes."""
    # Hot: `ctxwrap stats` prices every call of every session shown, so no lists here.
    w = weights(prices)
    weighted = cache_read * w.read + cache_write * w.write + uncached * w.uncached
    money, known = 0.0, True
    if cache_write_1h:
        p1h = prices.cache_write_1h
        base = prices.input
        weighted += cache_write_1h * (p1h / base if p1h is not None and base else 2.0)
        if p1h is None:
            known = False
        else:
            money += cache_write_1h * p1h / 1_000_000
        cache_write += cache_write_1h
    for tokens, price in (
        (cache_read, prices.cache_read),
        (cache_write - cache_write_1h, prices.cache_write),
        (uncached, prices.input),
    ):
        if tokens:
            if price is None:
                known = False
                break
            money += tokens * price / 1_000_000
    input_usd = money if known else None
    usd = input_usd
    if output and usd is not None:
        usd = None if prices.output is None else usd + output * prices.output / 1_000_000
    return CallCost(
        cache_read_tokens=cache_read,
        cache_write_tokens=cache_write,
        uncached_input_tokens=uncached,
        output_tokens=output,
        weighted_tokens=weighted,
        usd=usd,
        input_usd=input_usd,
    )


def common_prefix_tokens(
    previous: Sequence[tuple[str, int]], current: Sequence[tuple[str, int]]
) -> int:
    """Tokens of `current`'s leading blocks equal (fingerprint and size) to `previous`'s."""
    total = 0
    for (fp_a, n_a), (fp_b, n_b) in zip(previous, current, strict=False):
        if fp_a != fp_b or n_a != n_b:
            break
        total += n_b
    return total


def split_input(total: int, read: int, caching: Caching) -> tuple[int, int, int]:
    """(cache_read, cache_write, uncached) of a request of `total` tokens with `read` cached."""
    if caching == "none":
        return 0, 0, total
    read = max(0, min(read, total))
    rest = total - read
    if caching == "explicit":
        return read, rest, 0
    return read, 0, rest


# `price_requests(read_from=…)`: what cache entry a request read, where the provider said so.
ReadFrom = int | Literal["head", "none"] | None
HEAD_BLOCKS = 2  # system prompt and tools: the leading blocks an agent caches on their own


class RecordedHits:
    """Which cache entry each request read, by the provider's own usage, one request at a
    time (`add`): live stats feed it as calls arrive, replay a whole transcript
    (`recorded_hits`).

    Real caches do not behave as an ideal one: a request seconds after the previous one reads
    the entry of the request two or four back, or nothing (docs/accounting.md, "The cache as
    recorded"). An entry ends where its request's writes end, so a read equal to an earlier
    entry's end names that entry (the latest request that wrote it); a read of 0 names none; a
    read shorter than the first entry is of the system prompt and tools alone. Anything else
    (an automatic cache's rounded reads, an entry a sub-agent or a summary wrote) is left to
    the ideal cache (None). Until some request has read or written the cache, nothing is
    named: a provider that never reports its cache has no entry to miss."""

    def __init__(self) -> None:
        self.seen: dict[int, int] = {}  # an entry's end → the latest request that wrote it
        self.first: int | None = None
        self.active = False  # some earlier request read or wrote the cache
        self.count = 0

    def add(self, read: int | None, entry: int | None) -> ReadFrom:
        """The next request: `read` the tokens it read from the cache (None: not recorded),
        `entry` the end of the entry it wrote (read + written, where it wrote; else None)."""
        i, self.count = self.count, self.count + 1
        how: ReadFrom = None
        if i > 0 and read is not None and self.active:
            if read == 0:
                how = "none"
            elif read in self.seen:
                how = self.seen[read]
            elif self.first is not None and read < self.first:
                how = "head"
        if read:
            self.active = True
        if entry:
            self.active = True
            self.seen[entry] = i
            self.first = entry if self.first is None else self.first
        return how


def recorded_hits(reads: Sequence[int | None], entries: Sequence[int | None]) -> list[ReadFrom]:
    """`RecordedHits` over a whole session: `reads[i]`, `entries[i]` of request `i`."""
    hits = RecordedHits()
    return [
        hits.add(read, entries[i] if i < len(entries) else None) for i, read in enumerate(reads)
    ]


def cached_prefix_tokens(
    shapes: Sequence[RequestShape], i: int, read_from: ReadFrom, ttl_s: float
) -> int:
    """Tokens of request `i` read from the cache. `read_from` None: the entry of the previous
    request, while the gap is at most `ttl_s` (an ideal prefix cache); an index: the entry
    request `read_from` wrote (the provider read it, so it was alive); "head": the leading
    system and tools blocks only (their own entry); "none": nothing."""
    shape = shapes[i]
    if read_from == "none" or i == 0:
        return 0
    if isinstance(read_from, int) and 0 <= read_from < i:
        return common_prefix_tokens(shapes[read_from].blocks, shape.blocks)
    prev = shapes[i - 1]
    read = common_prefix_tokens(prev.blocks, shape.blocks) if shape.ts - prev.ts <= ttl_s else 0
    if read_from == "head":
        read = min(read, sum(n for _, n in shape.blocks[:HEAD_BLOCKS]))
    return read


def price_requests(
    shapes: Sequence[RequestShape],
    prices: Prices,
    *,
    ttl_s: float = 300.0,
    read_from: Sequence[ReadFrom] | None = None,
    first: int = 0,
) -> list[CallCost]:
    """Price each request of one conversation under a prefix cache (from request `first` on:
    a request's price depends on it and the ones before only).

    The longest common block prefix with the previous request is a cache read when the gap
    since that request is at most `ttl_s` (an ideal cache); the rest is a write (explicit
    caching) or uncached input (automatic). The first request and any request after a longer
    gap read nothing. `read_from[i]`, where given, says which entry request `i` read instead
    (`cached_prefix_tokens`): a real provider misses and serves older entries too.
    """
    out: list[CallCost] = []
    for i in range(first, len(shapes)):
        shape = shapes[i]
        total = sum(n for _, n in shape.blocks)
        how = read_from[i] if read_from is not None and i < len(read_from) else None
        read = cached_prefix_tokens(shapes, i, how, ttl_s)
        r, w, u = split_input(total, read, prices.caching)
        out.append(
            price_tokens(
                prices, cache_read=r, cache_write=w, uncached=u, output=shape.output_tokens
            )
        )
    return out


def parse_price_overrides(text: str) -> dict[str, Prices]:
    """Parse the `prices` setting: `glob=input,output,cache_read,cache_write[,caching]; ...`.

    Each number is USD per million tokens; `-` or empty means unknown. Raises ValueError with
    the offending entry.
    """
    table: dict[str, Prices] = {}
    for raw_entry in text.split(";"):
        entry = raw_entry.strip()
        if not entry:
            continue
        pattern, sep, values = entry.partition("=")
        pattern = pattern.strip()
        if not sep or not pattern:
            raise ValueError(f"price entry {entry!r}: expected glob=input,output,read,write")
        parts = [p.strip() for p in values.split(",")]
        caching: Caching = "explicit"
        if len(parts) == 5:
            mode = parts.pop()
            if mode not in CACHINGS:
                raise ValueError(f"price entry {entry!r}: caching must be one of {CACHINGS}")
            caching = mode
        if len(parts) != 4:
            raise ValueError(f"price entry {entry!r}: expected four prices")
        nums: list[float | None] = []
        for p in parts:
            if p in ("", "-"):
                nums.append(None)
                continue
            try:
                value = float(p)
            except ValueError:
                raise ValueError(f"price entry {entry!r}: {p!r} is not a number") from None
            if not value >= 0 or value == float("inf"):
                raise ValueError(f"price entry {entry!r}: {p!r} must be a finite number >= 0")
            nums.append(value)
        table[pattern] = Prices(nums[0], nums[1], nums[2], nums[3], caching)
    return table


def match_prices(model: str, table: Sequence[tuple[str, Prices]]) -> Prices | None:
    """The first entry of `table` whose glob matches `model` (with or without provider/)."""
    name = model.strip().lower()
    bare = name.rsplit("/", 1)[-1]
    for pattern, prices in table:
        pat = pattern.lower()
        if fnmatch.fnmatchcase(name, pat) or fnmatch.fnmatchcase(bare, pat):
            return prices
    return None


def default_prices(model: str | None, *, overrides: Mapping[str, Prices] | None = None) -> Prices:
    """Prices of `model` from the config overrides, else the documented default table.

    Unknown model (or None) → all prices None, explicit caching (weights fall back to
    DEFAULT_WEIGHTS, so weighted tokens stay meaningful).
    """
    if not model:
        return UNKNOWN_PRICES
    if overrides:
        found = match_prices(model, list(overrides.items()))
        if found is not None:
            return found
    return match_prices(model, DEFAULT_PRICE_TABLE) or UNKNOWN_PRICES


def caching_for_api(api: str | None) -> Caching:
    """How a pi API family caches: Anthropic Messages and Bedrock write explicitly; OpenAI-
    style and Google APIs cache automatically."""
    if not api:
        return "explicit"
    a = api.lower()
    if "anthropic" in a or "bedrock" in a:
        return "explicit"
    return "automatic"


def registry_prices(cost: Mapping[str, object] | None, api: str | None = None) -> Prices | None:
    """Prices from pi's model registry entry `model.cost` ({input, output, cacheRead,
    cacheWrite} per million). None when the entry carries no usable price at all (pi puts
    zeros on models it has no price for, so an all-zero table means unknown)."""
    if not cost:
        return None

    def num(key: str) -> float | None:
        v = cost.get(key)
        if isinstance(v, bool) or not isinstance(v, int | float):
            return None
        f = float(v)
        return f if f >= 0 and f != float("inf") else None

    vals = [num("input"), num("output"), num("cacheRead"), num("cacheWrite")]
    if all(v is None or v == 0 for v in vals):
        return None
    caching = caching_for_api(api)
    return Prices(vals[0], vals[1], vals[2], vals[3], caching)


# -- sessions: what was sent vs. the compaction-aware plain counterfactual -------------------

# Summary size assumed for a plain-pi compaction when the session never compacted for real
# (tokens; pi's structured summaries of coding sessions are typically one to two thousand).
DEFAULT_SUMMARY_TOKENS = 1200
# pi's summarisation instructions and system prompt around the conversation (pi 1.6/0.73
# compaction.js: about 1,200 chars of prompt + 300 of system), in tokens.
SUMMARY_PROMPT_TOKENS = 400


class CallSizes(NamedTuple):
    """One LLM request as the bridge measured it, in tokens (chars/4)."""

    ts: float
    sent_tokens: int
    plain_tokens: int  # what plain pi would have sent for the same conversation
    sent_prefix_tokens: int | None  # leading part identical to the previous request; None = unknown
    plain_prefix_tokens: int | None
    plain_base_tokens: int = 0  # system prompt + tool specs of the plain request
    # plain messages as pi's summariser sees them (tool results cut) over their full size;
    # None = unknown (1.0: nothing cut)
    plain_summary_ratio: float | None = None
    compacted_before: bool = False  # the session compacted between the previous call and this
    new_prompt: bool = False  # first request of a user prompt
    model: str | None = None
    # compacted_before only: what the conversation grew by since the previous request (the
    # messages the compaction kept are no measure of it), in plain tokens; None = unknown (0)
    growth_tokens: int | None = None
    # the cache lifetime the request asked for, where longer than the pricer's ttl_s (Claude
    # Code's 1-hour cache): pauses within it are warm, and its writes cost the 1-hour rate
    ttl_s: float | None = None
    # compacted_before only: whether plain compacts here too. "priced": the user's own
    # `/compact` (pi), its summarisation priced as plain's compaction; "call": the same where the
    # summarisation request was one of the recorded calls (Claude Code's `/compact`, Codex's
    # compactions), priced on both sides — unless plain has compacted as often already: then
    # it catches up, as "behind" does; "behind": Claude Code's or Codex's own compaction,
    # at a threshold the model may not see — plain compacts with it if it has compacted fewer
    # times so far (its context is never the smaller one)
    plain_compacts_too: Literal["", "priced", "call", "behind"] = ""
    # this request is the agent's own summarisation (a compaction priced as a call follows it,
    # before the next request): plain's compaction here is this request, at its full size — the
    # plain model does not add one of its own at this request (it compacts with the recorded
    # one, "behind")
    summarises: bool = False
    # the cache entry the provider says this request read (`recorded_hits` on the usage the
    # agent reported for it); None: the previous request's while warm (an ideal cache)
    read_from: ReadFrom = None
    # the place of the request the prefixes above were measured against, where not the one
    # before: the previous request of this one's conversation (a sub-agent's came between)
    prefix_of: int | None = None


@dataclass(frozen=True)
class CompactionPolicy:
    """When pi compacts: context > context_window - reserve_tokens (pi's `shouldCompact`)."""

    context_window: int | None  # None = unknown: no compaction is simulated
    reserve_tokens: int = 16384
    keep_recent_tokens: int = 20000
    enabled: bool = True
    # pi 1.x checks between turns (after tool results, before the next request); pi 0.73
    # only when an agent run ends, i.e. before the next user prompt.
    check: Literal["turn", "prompt"] = "turn"
    summary_tokens: int = DEFAULT_SUMMARY_TOKENS
    # pi compares the provider's own token count (the last request's input + its output) to
    # the threshold; our sizes are chars/4. `scale` converts (provider input per estimated
    # token, measured on the session) and `output_tokens` is the typical reply added on top.
    scale: float = 1.0
    output_tokens: int = 0
    # pi 0.73 can run a compaction at a prompt twice back to back (its end-of-run check and
    # the next prompt's race); when the session's own compactions did, plain pi's summarised
    # twice too (its session file keeps one entry, as seen under `pi -p`)
    repeat_at_prompt: bool = False
    # Claude Code 2.1.197 and Codex 0.171 send their summarisation as one more request on the
    # conversation's own prefix (its system prompt, tools and messages), so it reads that
    # prefix from the cache; pi's runs with caching off (all fresh)
    summarise_cached: bool = False
    # pi keeps the newest messages (up to keep_recent_tokens, at least the last turn's);
    # Claude Code and Codex keep none of the conversation: the summary replaces it
    keeps_tail: bool = True

    def kept(self, chunks: Sequence[int]) -> tuple[int, int]:
        """What pi keeps of the conversation since its last compaction, given what each request
        added to it (`chunks`, oldest first: an assistant reply and the tool results or user
        prompt after it): (tokens, number of chunks kept).

        pi (`findCutPoint`) walks back from the newest message summing chars/4 until the sum
        reaches keep_recent_tokens, then cuts at the first user or assistant message at or after
        that one: the message that crossed (a tool result, mostly) goes with everything older.
        So it keeps the newest chunks that fit, which may be far less than keep_recent_tokens.
        When the newest chunk alone is too big, pi 1.x keeps it (the cut falls back to its
        assistant tool call); pi 0.73 checks only after a run's final reply, which is a cut point
        after the crossing results, so it keeps only that reply (part of the next request).
        """
        if not self.keeps_tail:
            return 0, 0
        total = n = 0
        for size in reversed(chunks):
            if total + size >= self.keep_recent_tokens:
                if n == 0 and self.check == "turn":
                    return size, 1
                break
            total += size
            n += 1
        return total, n

    def crosses(self, tokens: int) -> bool:
        t = self.threshold
        return t is not None and tokens * self.scale + self.output_tokens > t

    @property
    def threshold(self) -> int | None:
        if not self.enabled or not self.context_window:
            return None
        return self.context_window - self.reserve_tokens


@dataclass
class SeriesCost:
    """A session's main-model input cost (output excluded) and its compactions."""

    calls: int = 0
    input_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    uncached_input_tokens: int = 0
    weighted_tokens: float = 0.0
    usd: float | None = 0.0
    compactions: int = 0
    compaction_weighted_tokens: float = 0.0
    compaction_usd: float | None = 0.0

    def add_call(self, c: CallCost | PricedInput) -> None:
        self.calls += 1
        self.input_tokens += c.input_tokens
        self.cache_read_tokens += c.cache_read_tokens
        self.cache_write_tokens += c.cache_write_tokens
        self.uncached_input_tokens += c.uncached_input_tokens
        self.weighted_tokens += c.weighted_tokens
        self.usd = _sum([self.usd, c.input_usd])

    def add_compaction(self, c: CompactionCost) -> None:
        self.compactions += 1
        self.compaction_weighted_tokens += c.weighted_tokens
        self.compaction_usd = _sum([self.compaction_usd, c.usd])


def output_weight(prices: Prices) -> float:
    """An output token in input-equivalent tokens: the price ratio where known, else 1
    (as the aux-share measurements in docs/accounting.md count it)."""
    if prices.input and prices.output is not None and prices.input > 0:
        return prices.output / prices.input
    return 1.0


@dataclass(frozen=True)
class CompactionCost:
    """One one-off request (a compaction's summarisation, an aux call): input all fresh."""

    input_tokens: int
    output_tokens: int
    weighted_tokens: float  # input + output × output_weight, in input-equivalent tokens
    usd: float | None


def one_off_cost(input_tokens: int, output_tokens: int, prices: Prices) -> CompactionCost:
    """A request with no reusable prefix (aux calls; pi's summarisation runs with caching
    off): input at the fresh price, output at the output price."""
    c = price_tokens(prices, uncached=input_tokens, output=output_tokens)
    weighted = c.weighted_tokens + output_weight(prices) * output_tokens
    return CompactionCost(input_tokens, output_tokens, weighted, c.usd)


def cached_call_cost(
    read_tokens: int, fresh_tokens: int, output_tokens: int, prices: Prices
) -> CompactionCost:
    """A request on a warm prefix: `read_tokens` from the cache, `fresh_tokens` new (written
    to the cache where the provider bills writes), the output at the output price."""
    p = _prefixed_cost(read_tokens + fresh_tokens, read_tokens, prices, weights(prices), True)
    out_usd = _money(output_tokens, prices.output)
    usd = None if p.input_usd is None or out_usd is None else p.input_usd + out_usd
    weighted = p.weighted_tokens + output_weight(prices) * output_tokens
    return CompactionCost(read_tokens + fresh_tokens, output_tokens, weighted, usd)


def _predicted_compaction(
    call: CallSizes,
    size: int,
    chunks: list[int],
    policy: CompactionPolicy,
    summary: int,
    compacted: bool,
    prices: Prices,
    cached: int = 0,
) -> tuple[CompactionCost, int, int]:
    """A compaction plain pi would run at `size` tokens, `call` being the request whose
    messages it summarises: its summarisation cost, and the base (system + tools) and kept
    tail that survive it. `chunks` (what each request added since the last compaction) is cut
    down to the kept ones."""
    base = min(call.plain_base_tokens, size)
    kept, n = policy.kept(chunks)
    kept = min(kept, size - base)
    del chunks[: len(chunks) - n]
    if policy.summarise_cached:
        # the request as it stands: what the previous request had (`cached`) read from the
        # cache, what was added since and the instruction new
        read = min(cached, size)
        cost = cached_call_cost(read, size - read + SUMMARY_PROMPT_TOKENS, summary, prices)
        return cost, base, kept
    ratio = call.plain_summary_ratio if call.plain_summary_ratio is not None else 1.0
    # the messages summarised: not the kept tail, not the previous summary (it goes in as the
    # summary to update)
    old = summary if compacted else 0
    cost = compaction_call_cost(
        round(max(0, size - base - kept - old) * ratio), summary, prices, previous_summary=old
    )
    return cost, base, kept


def _twice(c: CompactionCost) -> CompactionCost:
    """One compaction whose summarisation ran twice."""
    usd = None if c.usd is None else 2 * c.usd
    return CompactionCost(2 * c.input_tokens, 2 * c.output_tokens, 2 * c.weighted_tokens, usd)


def compaction_call_cost(
    summarised_tokens: int, summary_tokens: int, prices: Prices, *, previous_summary: int = 0
) -> CompactionCost:
    """The summarisation request of one compaction: what is summarised (and the previous
    summary it updates) plus pi's instructions as input, the new summary as output."""
    input_tokens = max(0, summarised_tokens) + previous_summary + SUMMARY_PROMPT_TOKENS
    return one_off_cost(input_tokens, summary_tokens, prices)


class PricedInput(NamedTuple):
    """The input side of one priced request (what `price_session` returns per call: a tuple,
    because `ctxwrap stats` prices every call of every session it shows)."""

    cache_read_tokens: int
    cache_write_tokens: int
    uncached_input_tokens: int
    weighted_tokens: float
    input_usd: float | None
    # where the provider's cache served less than the request's content had it read (a miss,
    # by its usage: `RecordedHits`): the older request's entry it read, "head" or "none"
    served: ReadFrom = None

    @property
    def input_tokens(self) -> int:
        return self.cache_read_tokens + self.cache_write_tokens + self.uncached_input_tokens


def _prefixed_cost(total: int, read: int, prices: Prices, wt: Weights, warm: bool) -> PricedInput:
    r, w, u = split_input(total, read if warm else 0, prices.caching)
    if (
        (r and prices.cache_read is None)
        or (w and prices.cache_write is None)
        or (u and prices.input is None)
    ):
        usd = None
    else:
        usd = (
            r * (prices.cache_read or 0.0)
            + w * (prices.cache_write or 0.0)
            + u * (prices.input or 0.0)
        ) / 1_000_000
    return PricedInput(r, w, u, r * wt.read + w * wt.write + u * wt.uncached, usd)


# Sizes measured from the agent's side differ from the provider's by a few tokens per entry
# (the cache markers an agent moves, JSON framing): within this, two reads are the same entry.
ENTRY_SLACK_TOKENS = 64


# One earlier request of a conversation chain: its size, the prefix it shared with the request
# it was measured against, and that request's place (-1: none)
Link = tuple[int, int, int]


def _natural_read(
    chain: Sequence[Link], parent: int, link: int, warm: bool, base: int
) -> tuple[int, int]:
    """What a prefix cache reads of the next request by its content alone, and from which
    request's entry (-1: the system prompt and tools, `base`, which agents cache on their own):
    the latest entry it shares whole, walking back from `parent` (the request it shares `link`
    with) — an entry ends where its request ended; after a rewrite that is an older request's.
    A read the provider recorded other than this was its own doing. Past the cache's lifetime
    (`warm` False) it reads nothing, but names the entry all the same."""
    shared, k = link, parent
    while 0 <= k < len(chain):
        size, prev_shared, up = chain[k]
        if size <= shared + ENTRY_SLACK_TOKENS:
            return (min(size, shared) if warm else 0), k
        shared, k = min(shared, prev_shared), (up if up < k else -1)
    return (min(link, base) if warm else 0), -1


def _entry_read(
    chain: Sequence[Link], parent: int, link: int, how: ReadFrom, warm: bool, base: int
) -> tuple[int, bool]:
    """(tokens read, warm) of the next request, which shares `link` with request `parent`:
    from the entry `how` names (`recorded_hits`), or the parent's (None). An older entry is
    the prefix the two requests share: no longer than it, nor than any request on the way back
    from `parent` shared with the one it was measured against (the provider read it, so it
    was alive). "head": the system prompt and tools (`base`) at most."""
    if how is None:
        return link, warm
    if how == "none":
        return 0, warm
    if how == "head":
        return min(link, base), warm
    if not 0 <= how < len(chain):
        return link, warm
    read, k = link, parent
    while k > how:
        _size, shared, up = chain[k]
        read, k = min(read, shared), (up if up < k else -1)
    return min(read, chain[how][0]), True


@dataclass(frozen=True)
class SessionPricing:
    """Per call of a session: what was sent, what plain pi would have sent, and the plain
    compaction (its summarisation request) simulated just before that call, if any."""

    actual: tuple[PricedInput, ...]
    plain: tuple[PricedInput, ...]
    plain_compactions: tuple[CompactionCost | None, ...]
    plain_tokens: tuple[int, ...]  # simulated plain request sizes
    # pi 0.73 also checks when the last run ends: a compaction after the last request
    plain_trailing_compaction: CompactionCost | None = None

    def totals(self) -> tuple[SeriesCost, SeriesCost]:
        """(actual, plain) summed over every call. Compactions of the actual session are the
        caller's to add: they are pi's events, not requests the bridge saw."""
        a, p = SeriesCost(), SeriesCost()
        for ca, cp, comp in zip(self.actual, self.plain, self.plain_compactions, strict=True):
            a.add_call(ca)
            p.add_call(cp)
            if comp is not None:
                p.add_compaction(comp)
        if self.plain_trailing_compaction is not None:
            p.add_compaction(self.plain_trailing_compaction)
        return a, p


class SessionPricer:
    """`price_session` one request at a time, so a live session is priced incrementally: the
    daemon keeps one per session and feeds it the new calls at each turn_end.

    The plain simulation depends on the policy's calibration (`scale`, `output_tokens`, which
    move with every turn the provider reports) only through the compaction checks made so far;
    `holds_for` tells whether a recalibrated policy takes each of them the same way, in which
    case the state is what pricing afresh with that policy would reach, and pricing goes on.
    """

    def __init__(
        self,
        prices_of: Callable[[str | None], Prices],
        policy: CompactionPolicy,
        *,
        ttl_s: float = 300.0,
    ) -> None:
        self.prices_of = prices_of
        self.policy = policy
        self.ttl_s = ttl_s
        self.compacted = False  # plain pi has a summary to update
        self.real_compactions = 0  # the session's own, so far
        self.plain_compactions = 0  # the plain session's, so far
        self.prev: CallSizes | None = None
        self.plain_size = 0  # simulated plain request size of the previous call
        self.chunks: list[int] = []  # what each plain request added since its last compaction
        # the checks so far: the smallest size plain pi compacted at, the largest it did not
        self.crossed_min: int | None = None
        self.held_max: int | None = None
        # per request so far, as sent and as plain (`Link`), so a read of an older entry is
        # priced (`_entry_read`)
        self.sent_chain: list[Link] = []
        self.plain_chain: list[Link] = []
        self.seen: list[CallSizes] = []  # the requests so far (a parent's time and model)

    def holds_for(self, policy: CompactionPolicy) -> bool:
        """Would `policy` have decided every compaction check so far the same way? (Only its
        calibration may differ: the caller compares the rest.)"""
        crossed = self.crossed_min is None or policy.crosses(self.crossed_min)
        held = self.held_max is None or not policy.crosses(self.held_max)
        return crossed and held

    def _crosses(self, size: int) -> bool:
        if self.policy.crosses(size):
            self.crossed_min = size if self.crossed_min is None else min(self.crossed_min, size)
            return True
        self.held_max = size if self.held_max is None else max(self.held_max, size)
        return False

    def add(self, call: CallSizes) -> tuple[PricedInput, PricedInput, CompactionCost | None, int]:
        """The next request: (as sent, as plain pi would have sent it, the compaction plain pi
        ran just before it or None, the simulated plain request size)."""
        policy, prev = self.policy, self.prev
        prices = self.prices_of(call.model)
        ttl_s = self.ttl_s
        if call.ttl_s is not None and call.ttl_s > ttl_s:
            ttl_s = call.ttl_s
            if call.ttl_s >= ONE_HOUR_TTL_S:
                prices = prices.with_1h_cache()
        wt = weights(prices)
        # the request this one's prefixes were measured against: the one before, or the
        # previous request of its own conversation (a sub-agent's requests came in between)
        i = len(self.seen)
        parent = call.prefix_of if call.prefix_of is not None and 0 <= call.prefix_of < i else i - 1
        up = self.seen[parent] if parent >= 0 else None
        warm = up is not None and call.ts - up.ts <= ttl_s and call.model == up.model
        # -- actual
        if call.sent_prefix_tokens is not None:
            sent_read = call.sent_prefix_tokens
        elif prev is not None and not call.compacted_before:
            sent_read = prev.sent_tokens  # older bridge: assume an append-only list
        else:
            sent_read = 0
        if prev is not None and call.compacted_before:
            # after a compaction the system prompt and tools are unchanged: read from the
            # cache, as the plain side's are below (the previous request, a summarisation of
            # another shape — Codex's remote one — may share nothing with this one)
            sent_read = max(sent_read, min(call.plain_base_tokens, call.sent_tokens))
        # The provider's own record of which entry it read (`call.read_from`): the request as
        # sent reads that entry; plain's reads it too where that is not what ctxwrap's own
        # content explains (a miss, an older entry served: the provider's doing, not a rewrite)
        how = call.read_from if prev is not None else None
        base = call.plain_base_tokens
        a_read, a_warm = _entry_read(self.sent_chain, parent, sent_read, how, warm, base)
        follow = missed = False
        if how is not None:
            natural, entry = _natural_read(self.sent_chain, parent, sent_read, warm, base)
            short = natural - (a_read if a_warm else 0)  # > 0: read less than its content allowed
            # after ctxwrap rewrote its history the provider read an older entry of ctxwrap's
            # own; which of plain's it would have read is not known, unless it lost them all
            follow = abs(short) > ENTRY_SLACK_TOKENS and (how == "none" or entry == parent)
            missed = short > ENTRY_SLACK_TOKENS
        actual = _prefixed_cost(call.sent_tokens, a_read, prices, wt, a_warm)
        if missed:
            actual = actual._replace(served=how)
        self.sent_chain.append((call.sent_tokens, sent_read, parent))
        self.seen.append(call)
        # -- plain counterfactual
        comp: CompactionCost | None = None
        if prev is None:
            size = call.plain_tokens
            rewritten = size
            self.chunks.append(max(0, size - call.plain_base_tokens))
        else:
            if call.compacted_before:
                # the real session's sizes restart here; plain pi's did not: it grew by what
                # was added since the previous request
                growth = call.growth_tokens or 0
                rewritten = growth
                self.real_compactions += 1
                too = call.plain_compacts_too
                if too in ("behind", "call") and self.plain_compactions >= self.real_compactions:
                    # plain has compacted as often already (its context is the bigger one):
                    # this one catches up with it — the agent's own, or the user's `/compact`
                    # under Claude Code or Codex, which no proxy can ask to compact and whose
                    # status line says when plain would have (statusline.compaction_hint)
                    too = ""
                if too in ("call", "behind") and self.plain_size > 0:
                    # plain runs the same summarisation (one of the recorded calls) at the same
                    # point: it goes on from the same summary as the real session, which is
                    # this request as plain would send it
                    comp = CompactionCost(0, 0, 0.0, 0.0)
                    self.compacted = True
                    self.chunks.clear()
                    self.plain_size, growth = call.plain_tokens, 0
                    rewritten = call.plain_tokens - min(call.plain_base_tokens, call.plain_tokens)
                elif too == "priced" and self.plain_size > 0:
                    # the user's /compact under pi: plain runs it too, its own summarisation
                    comp, base, kept = _predicted_compaction(
                        prev,
                        self.plain_size,
                        self.chunks,
                        policy,
                        policy.summary_tokens,
                        self.compacted,
                        prices,
                    )
                    self.compacted = True
                    self.plain_size = base + policy.summary_tokens + kept
                    rewritten = policy.summary_tokens + kept + growth
            else:
                growth = call.plain_tokens - prev.plain_tokens
                if call.plain_prefix_tokens is not None:
                    rewritten = call.plain_tokens - call.plain_prefix_tokens
                else:
                    rewritten = max(0, growth)
            size = max(0, self.plain_size + growth)
            # pi 1.x checks with this request's new messages in; pi 0.73 before the prompt,
            # on the previous request's messages (whose summariser view that request measured)
            turn = policy.check == "turn"
            pre = size if turn else self.plain_size
            if turn and growth > 0:
                self.chunks.append(growth)
            if (
                comp is None
                and not call.summarises
                and (turn or call.new_prompt)
                and self._crosses(pre)
            ):
                comp, base, kept = _predicted_compaction(
                    call if turn else prev,
                    pre,
                    self.chunks,
                    policy,
                    policy.summary_tokens,
                    self.compacted,
                    prices,
                    cached=self.plain_size if warm else 0,
                )
                if not turn and policy.repeat_at_prompt:
                    comp = _twice(comp)
                self.compacted = True
                size = base + policy.summary_tokens + kept + (size - pre)
                rewritten = size - base
            if not turn and growth > 0:
                self.chunks.append(growth)
        rewritten = max(0, min(rewritten, size))
        p_read, p_warm = _entry_read(
            self.plain_chain, parent, size - rewritten, how if follow else None, warm, base
        )
        plain = _prefixed_cost(size, p_read, prices, wt, p_warm)
        self.plain_chain.append((size, size - rewritten, parent))
        self.plain_size = size
        self.prev = call
        if comp is not None:
            self.plain_compactions += 1
        return actual, plain, comp, size

    def trailing(self) -> CompactionCost | None:
        """pi 0.73 also checks when the last run ends: the compaction plain pi would run after
        the last request so far (not a check the pricing goes on from)."""
        prev, policy = self.prev, self.policy
        if prev is None or policy.check != "prompt" or not policy.crosses(self.plain_size):
            return None
        comp, _, _ = _predicted_compaction(
            prev,
            self.plain_size,
            list(self.chunks),
            policy,
            policy.summary_tokens,
            self.compacted,
            self.prices_of(prev.model),
        )
        return comp


def price_session(
    calls: Sequence[CallSizes],
    prices_of: Callable[[str | None], Prices],
    policy: CompactionPolicy,
    *,
    ttl_s: float = 300.0,
) -> SessionPricing:
    """Price one session's main-model requests as sent and as plain pi would have sent them.

    actual: each request as sent, its prefix shared with the previous request read from the
    cache while warm (same model, gap ≤ ttl_s), the rest written.

    plain: the conversation as plain pi would have sent it, grown by the same new content
    call by call, and compacted where plain pi would have compacted on its own (`policy`):
    after a simulated compaction it carries base + summary + the kept recent tokens, so no
    saving is claimed past that point. Where the real session compacted, the plain one only
    compacts if its own threshold says so.
    """
    pricer = SessionPricer(prices_of, policy, ttl_s=ttl_s)
    priced = [pricer.add(call) for call in calls]
    return SessionPricing(
        tuple(p[0] for p in priced),
        tuple(p[1] for p in priced),
        tuple(p[2] for p in priced),
        tuple(p[3] for p in priced),
        pricer.trailing(),
    )
