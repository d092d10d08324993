"""Mechanism 7, old thinking: earlier turns' thinking left out of later requests by the
provider's own context edit, where the cache rewrite it causes pays back (issue 41, item 3;
docs/accounting.md, "Old thinking").

Claude Code 2.1.x asks the API to keep every earlier turn's thinking (`clear_thinking_20251015`
with `keep: "all"`), so each request carries it, read from the cache, until the next compaction:
16-36 % of the bill on the corpus's long sessions that think. Leaving it out rewrites the cache
from the first block left out on, so clearing at every chance costs more than it saves on most
sessions; the payback rule clears only where the cache is cold anyway or where the tokens left
out, read on every later request, pay for that rewrite — and while the cache is warm, only as
far as the session's account allows (`mechanisms/budget.py`).

ctxwrap changes only the edit's `keep` — never `messages` (on a model that checks its thinking
prefix a block the client leaves out fails every later block's check) — and only where the agent
sent the edit with its beta header. A clearing point, once moved, is held: every later request
sends the `keep` that leaves out the same turns, so the cleared part and the cache after it stay
the same. The Claude Code proxy (`agents/claude/session.py`) and replay (`replay/_sim.py`) take
their decisions from this one rule.
"""

from __future__ import annotations

import json
import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ctxwrap.engine.thinking import Keep, thinking_blocks
from ctxwrap.mechanisms.base import Mechanism
from ctxwrap.mechanisms.budget import Savings, rewrite_within

# Prices relative to uncached input, the same for every Claude model: a cache read, a write
# to the 5-minute cache, a write to the 1-hour cache (Claude Code's subscription logins).
READ_WEIGHT = 0.1
WRITE_WEIGHT = 1.25
WRITE_WEIGHT_1H = 2.0
# The horizon the rewrite must pay back within: half as many later requests as the context has
# had (a context that has run long is taken to run on, but a clearing near a session's end is
# the one that loses: with the whole count, one corpus session cleared 6 requests before its
# end and cost 3.9 points more than without), at least this many, and no more than until the
# agent's compaction drops the thinking anyway (docs/accounting.md, "Old thinking").
PAYBACK_MIN_REQUESTS = 10
PAYBACK_SO_FAR_SHARE = 0.5


@dataclass(frozen=True)
class ClearingChoice:
    """What the rule is asked at a request that has earlier turns' thinking still to leave out
    (weighted tokens: uncached input = 1)."""

    per_request: float  # what leaving it out saves on each later request (its cache read)
    rewrite: float  # what the cache rewrite from its first block on costs (0 when cold)
    cold: bool  # the request reads no more than the fixed prefix anyway
    so_far: int  # requests of this context before this one
    to_compaction: float  # requests until the context, growing as it has, reaches the
    # agent's compaction threshold (inf: unknown)


class OldThinking(Mechanism):
    name = "thinking"
    switch = "clear_old_thinking"
    min_requests: ClassVar[int] = PAYBACK_MIN_REQUESTS
    so_far_share: ClassVar[float] = PAYBACK_SO_FAR_SHARE

    def pays(self, c: ClearingChoice) -> bool:
        """The payback rule: clear at a cold boundary, or where the saving per request over
        the expected horizon pays for the rewrite."""
        if c.cold:
            return True
        horizon = min(max(self.min_requests, c.so_far * self.so_far_share), c.to_compaction)
        return c.per_request * horizon >= c.rewrite

    def within(self, c: ClearingChoice, savings: Savings | None, request: Hashable = None) -> bool:
        """Whether the session's account allows the clearing's rewrite (`budget.
        rewrite_within`; None: no account kept, the payback rule alone decides); if so it is
        charged there until totals hold `request`, the request that carries it."""
        if c.cold or savings is None:
            return True
        if not rewrite_within(c.rewrite, c.per_request, free=savings.free, plain=savings.plain):
            return False
        savings.spend(c.rewrite, request=request)
        return True


@dataclass
class ClearingState:
    """One conversation's clearing (a compaction starts a new conversation, a new state)."""

    point: int | None = None  # turns before this one have their thinking left out
    requests: int = 0  # requests of the conversation so far
    first_tokens: int | None = None  # the first request's size (its growth rate)
    # The cache's view: the provider writes an entry only at a request's end, so after a
    # rewrite the entries inside what it rewrote hold the old content. `view_from`: the
    # message count of the request that began the current content (a cold boundary or a
    # clearing); `view_rewritten`: the first message it wrote anew (0: all of them).
    view_from: int = 0
    view_rewritten: int = 0
    sizes: list[int] = field(default_factory=list)  # each message's JSON length (message_sizes)


def clearing_choice(
    state: ClearingState,
    *,
    gone: float,
    span: float,
    cold: bool,
    prompt: float,
    threshold: float | None,
    one_hour: bool,
) -> ClearingChoice:
    """The rule's question at a request of `prompt` tokens (the state's `requests` already
    counts it): `gone` tokens of earlier thinking to leave out, `span` tokens the provider would
    write anew, the agent compacting at `threshold` (None: not known)."""
    so_far = state.requests - 1
    first = state.first_tokens if state.first_tokens is not None else prompt
    growth = max(1.0, (prompt - first) / max(1, so_far))
    write = WRITE_WEIGHT_1H if one_hour else WRITE_WEIGHT
    return ClearingChoice(
        per_request=gone * READ_WEIGHT,
        rewrite=0.0 if cold else span * (write - READ_WEIGHT),
        cold=cold,
        so_far=so_far,
        to_compaction=max(0.0, (threshold - prompt) / growth)
        if threshold is not None
        else math.inf,
    )


def rewrite_start(first: int, view_from: int, view_rewritten: int) -> int:
    """Where a change at `first` (a message, or a call) makes the provider write anew: from
    there if a request of the current content ended before it (`first` >= `view_from`) or if
    it lies before what the current content's own write began with (`first` <
    `view_rewritten`: the entries of earlier requests end before it); else from where the
    current content was itself written (no entry of it ends before `first`)."""
    if first >= view_from or first < view_rewritten:
        return first
    return view_rewritten


def message_sizes(state: ClearingState, messages: Sequence[Any]) -> list[int]:
    """Each message's JSON length, measured once: a conversation only grows between requests,
    but Claude Code moves its cache markers on the newest messages, so the last two known are
    measured again (a 100k-token request in ~0.3 ms instead of ~7)."""
    start = max(0, min(len(state.sizes), len(messages)) - 2)
    fresh = [len(json.dumps(m, ensure_ascii=False)) for m in messages[start:]]
    state.sizes = state.sizes[:start] + fresh
    return state.sizes


def plan(
    mech: OldThinking,
    state: ClearingState,
    messages: Sequence[Any],
    *,
    cold: bool,
    tokens_per_char: float,
    threshold: int | None,
    one_hour: bool = False,
    savings: Savings | None = None,
    request: Hashable = None,
) -> Keep | None:
    """The `keep` this request is to send (None: leave the agent's edit as it is), moving the
    state's clearing point where the rule says and, while warm, the session's account
    (`savings`) allows. Call once per request of the conversation."""
    sizes = message_sizes(state, messages)
    prompt = sum(sizes) * tokens_per_char
    state.requests += 1
    if state.first_tokens is None:
        state.first_tokens = round(prompt)
    if cold:
        state.view_from, state.view_rewritten = len(messages), 0
    blocks = thinking_blocks(messages)
    thought = sorted({b.turn for b in blocks})
    if len(thought) >= 2:
        # `keep` counts turns that thought and is at least 1: the latest one that thought
        # keeps its thinking (docs/accounting.md)
        latest = thought[-1]
        start = state.point if state.point is not None else -1
        pending = {t for t in thought if start <= t < latest}
        gone_blocks = [b for b in blocks if b.turn in pending]
        if gone_blocks:
            gone = sum(b.tokens for b in gone_blocks)
            first = rewrite_start(
                min(b.message for b in gone_blocks), state.view_from, state.view_rewritten
            )
            span = max(0.0, sum(sizes[first:]) * tokens_per_char - gone)
            choice = clearing_choice(
                state,
                gone=gone,
                span=span,
                cold=cold,
                prompt=prompt,
                threshold=threshold,
                one_hour=one_hour,
            )
            if mech.pays(choice) and mech.within(choice, savings, request):
                state.point = latest
                if not cold:
                    state.view_from, state.view_rewritten = len(messages), first
    if state.point is None:
        return None
    # the turns from the point on that thought (`keep_for_clearing`, from the blocks at hand)
    point = state.point
    if not any(t < point for t in thought):
        return None
    return sum(1 for t in thought if t >= point)
