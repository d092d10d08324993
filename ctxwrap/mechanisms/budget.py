"""The session's savings as what ctxwrap may spend (invariant 10: never worse than plain).

Two things ctxwrap does cost money before they save any: an aux call (the tagger's) and a
cache rewrite while the cache is warm (masking a result the model has seen, leaving earlier
turns' thinking out). Each mechanism judges its own payback; this module keeps the one account
they all draw on and the rules that bound what they may put at risk.

- The account: what the session is ahead of plain by and what plain has cost, as the latest
  turn_end's totals say (input-equivalent tokens, aux calls counted), less what was spent since
  that the totals do not hold yet (`charged`: tag calls in flight, a rewrite whose request is
  not recorded yet). Totals can arrive after a later request was decided (the pi bridge does
  not wait for its turn_end; a proxy records a response while the agent sends the next
  request), so a rewrite stays charged until the totals hold its request.
- An aux call goes out only while the account covers it (`aux_within`).
- A warm rewrite goes out when the account covers it, or as a bounded bet (`rewrite_within`):
  it pays back within `REWRITE_HORIZON` requests, and what it puts at risk beyond the account
  is at most `REWRITE_RISK_SHARE` of what plain has cost so far. Each mechanism's own payback
  rule expects a session to run on about as long as it has; a session that ends soon after
  its rewrite is the one that loses. Replayed on the corpus's sessions cut short at every 10th
  request, payback alone cost more than plain at 29 of 318 cut points, up to 12.5 %; bounded,
  at 13 (docs/accounting.md, "What a rewrite may risk"). With pi's own tools left out where
  they serve nothing, 3 of 315 remain, each a bounded bet (`bench/cut_sessions.py`).

Replay applies the same rules (`replay/_sim.py`) to its priced requests so far.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the proxies import this module: no pydantic on their start-up path
    from ctxwrap import protocol as P
    from ctxwrap.state.session import SessionRuntime

# A bet on a warm rewrite must pay back within this many later requests ...
REWRITE_HORIZON = 30
# ... and may put at risk, beyond what the session has saved, at most this share of what plain
# has cost so far (the corpus's Codex session cut 4 requests after a warm mask its length
# justified cost 11 % more than plain; a young session must not bet more than it can lose).
REWRITE_RISK_SHARE = 0.1
# A rewrite's charge outlives at most this many totals that do not say they hold its request
# (a request never recorded: it failed, its adapter went away)
REWRITE_HELD_TOTALS = 1


@dataclass
class Savings:
    """A session's account (`rt.part(Savings)`)."""

    ahead: float = 0.0  # plain's cost less ctxwrap's, at the latest totals
    plain: float = 0.0  # plain's cost so far, at the latest totals
    charged: float = 0.0  # spent since those totals (tag calls in flight, rewrites)
    in_flight: dict[str, float] = field(default_factory=dict)  # aux calls not yet recorded
    # warm rewrites by the request that carries them (the daemon: its call_index; a proxy: a
    # key of its own): (cost, totals outlived)
    rewrites: dict[Hashable, tuple[float, int]] = field(default_factory=dict)

    @property
    def free(self) -> float:
        return self.ahead - self.charged

    def spend(self, cost: float, key: str | None = None, *, request: Hashable = None) -> None:
        """Spend `cost` until the next totals hold it; `key`: an aux call, held until
        `settle(key)` says it was recorded; `request`: the request a rewrite rides on, held
        until totals hold that request (`take_totals`' `through`, or `recorded`)."""
        self.charged += cost
        if key is not None:
            self.in_flight[key] = cost
        elif request is not None:
            self.rewrites[request] = (self.rewrites.get(request, (0.0, 0))[0] + cost, 0)

    def recorded(self, request: Hashable) -> None:
        """The request was recorded: the next totals hold its rewrite."""
        self.rewrites.pop(request, None)


def aux_within(free: float, cost: float) -> bool:
    """Whether an aux call of `cost` fits what the session has saved so far: a session in
    which nothing else saves never pays for one."""
    return free >= cost


def rewrite_within(cost: float, gain_per_request: float, *, free: float, plain: float) -> bool:
    """Whether a warm rewrite of `cost` (input-equivalent tokens) that keeps
    `gain_per_request` out of every later request may go out: the savings so far cover it, or
    it is a bounded bet (pays back within `REWRITE_HORIZON` requests, risks at most
    `REWRITE_RISK_SHARE` of plain's cost so far beyond them)."""
    if cost <= 0 or free >= cost:
        return True
    at_risk = cost - max(free, 0.0)
    return gain_per_request * REWRITE_HORIZON >= cost and at_risk <= REWRITE_RISK_SHARE * plain


def on_totals(rt: SessionRuntime, totals: P.SessionTotals, through: int | None = None) -> None:
    """A turn_end's totals hold every call and aux call recorded so far: the account starts
    again from them, charged with the aux calls still in flight and the rewrites of requests
    after `through` (the call_index the turn_end's usage is of: the adapter records calls in
    order, so every call up to it is in the totals)."""
    take_totals(rt.part(Savings), totals.plain_cost_weighted, totals.cost_weighted, through)


def take_totals(s: Savings, plain: float, ours: float, through: int | None = None) -> None:
    s.ahead = plain - ours
    s.plain = plain
    held: dict[Hashable, tuple[float, int]] = {}
    for request, (cost, outlived) in s.rewrites.items():
        if isinstance(request, int) and through is not None and request <= through:
            continue  # its request is in these totals
        if outlived < REWRITE_HELD_TOTALS:
            held[request] = (cost, outlived + 1)
    s.rewrites = held
    s.charged = sum(s.in_flight.values()) + sum(cost for cost, _ in held.values())


def charge(
    rt: SessionRuntime, cost: float, key: str | None = None, *, request: Hashable = None
) -> None:
    """Spend `cost` from the session's account (`Savings.spend`)."""
    rt.part(Savings).spend(cost, key, request=request)


def settle(rt: SessionRuntime, key: str) -> None:
    """An aux call was recorded: the next totals hold it."""
    rt.part(Savings).in_flight.pop(key, None)
