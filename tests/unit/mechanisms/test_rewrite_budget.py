"""What a warm cache rewrite may risk (mechanisms/budget.py): the session's account covers it,
or it is a bounded bet. The daemon's masking decision, the Claude Code proxy's old-thinking
clearing (tests/unit/mechanisms/test_thinking_clearing.py) and replay apply the one rule."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from ctxwrap.mechanisms.amnesia import TAG_OUTPUT_WEIGHT
from ctxwrap.mechanisms.budget import (
    REWRITE_HORIZON,
    REWRITE_RISK_SHARE,
    Savings,
    rewrite_within,
    take_totals,
)
from ctxwrap.replay import Thresholds, _pricing
from ctxwrap.replay._run import Account, price_session
from tests.replay_events import pi_rounds


def test_a_rewrite_the_account_covers_goes_whatever_its_payback() -> None:
    assert rewrite_within(10_000.0, 0.0, free=10_000.0, plain=0.0)
    assert not rewrite_within(10_000.0, 0.0, free=9_999.0, plain=1e9)  # no payback: no bet
    assert rewrite_within(0.0, 0.0, free=-5.0, plain=0.0)  # a cold boundary costs nothing


def test_a_bet_must_pay_back_within_the_horizon() -> None:
    cost, plain = 1_000.0, 1e9
    assert rewrite_within(cost, cost / REWRITE_HORIZON, free=0.0, plain=plain)
    assert not rewrite_within(cost, cost / REWRITE_HORIZON * 0.99, free=0.0, plain=plain)


def test_a_bet_risks_at_most_a_share_of_what_plain_has_cost() -> None:
    cost, gain = 1_000.0, 1_000.0  # pays back at the next request
    plain = cost / REWRITE_RISK_SHARE
    assert rewrite_within(cost, gain, free=0.0, plain=plain)
    assert not rewrite_within(cost, gain, free=0.0, plain=plain * 0.99)
    # what the account holds is not at risk: only the rest counts against the cap
    assert rewrite_within(cost, gain, free=cost / 2, plain=plain / 2)
    # a session behind plain (its own tools, a tag) risks the whole cost, no more
    assert not rewrite_within(cost, gain, free=-100.0, plain=plain * 0.99)


def test_the_account_starts_again_from_each_totals_with_aux_calls_in_flight() -> None:
    s = Savings()
    s.in_flight["tag-1"] = 300.0
    s.charged = 5_000.0  # a rewrite and the tag, since the last totals
    take_totals(s, plain=100_000.0, ours=80_000.0)
    assert (s.ahead, s.plain, s.charged, s.free) == (20_000.0, 100_000.0, 300.0, 19_700.0)


def test_a_rewrite_stays_charged_until_totals_hold_its_request() -> None:
    """The pi bridge does not wait for its turn_end, and a proxy records a response while the
    agent sends the next request: totals can arrive after a later request was decided. A
    rewrite that request carries is not in them: it stays charged until totals through its
    request, or for one totals more at most where none say so (a request never recorded)."""
    s = Savings()
    take_totals(s, plain=100_000.0, ours=80_000.0, through=3)
    s.spend(5_000.0, request=5)  # the rewrite rides on call 5
    take_totals(s, plain=101_000.0, ours=80_500.0, through=4)  # call 4's totals, late
    assert (s.charged, s.free) == (5_000.0, 15_500.0)
    take_totals(s, plain=102_000.0, ours=86_000.0, through=5)  # they hold it now
    assert (s.charged, s.free, s.rewrites) == (0.0, 16_000.0, {})
    # totals that say nothing of the requests they hold: held once, then let go
    s.spend(1_000.0, request=9)
    take_totals(s, plain=102_000.0, ours=86_000.0)
    assert s.charged == 1_000.0
    take_totals(s, plain=102_000.0, ours=86_000.0)
    assert s.charged == 0.0
    # a proxy says which request was recorded
    s.spend(2_000.0, request="req-a")
    s.recorded("req-a")
    take_totals(s, plain=102_000.0, ours=86_000.0)
    assert s.charged == 0.0


def _warm_session(rounds: int = 24, compact_at: int | None = None) -> list[Any]:
    """One large read, then small rounds that never touch its file again, a second apart: a
    warm cache, the read untouched for `mask_read_idle_rounds` from round 11 on (and pi's
    compaction before round `compact_at`)."""
    from ctxwrap.replay._events import ToolCall

    body = "".join(f"entry {i}: a line of a long design note\n" for i in range(900))
    calls = [ToolCall("c0", "read", {"path": "DESIGN.txt"}, 30)] + [
        ToolCall(f"c{i}", "bash", {"command": f"echo step {i}"}, 30) for i in range(1, rounds)
    ]
    return pi_rounds(calls, {0: body}, step_s=1.0, compact_before=compact_at)


@pytest.mark.parametrize("within", [True, False])
def test_replay_bets_on_a_warm_mask_only_within_the_account(within: bool) -> None:
    """The session saves nothing but by the mask: with the account (the default) the warm
    mask would risk more than a tenth of plain's bill so far and is not made; judged by its
    payback alone it is."""
    from ctxwrap.replay._sim import SessionSimulator

    th = Thresholds(rewrite_within_savings=within)
    sim = SessionSimulator("s", th)
    sim.account = Account(th)
    sim.feed(_warm_session())
    r = sim.finish()
    masks = [i for i in r.interventions if i.kind == "mask"]
    assert [(m.tool, m.reason) for m in masks] == ([] if within else [("read", "untouched")])


def test_the_account_prices_only_the_calls_since_it_last_did_and_agrees_with_the_whole() -> None:
    """`Account` keeps what it priced: the sum of its pieces is the session priced at once,
    a compaction's summarisation counted once (with the call it precedes)."""
    from ctxwrap.replay._sim import SessionSimulator

    th = Thresholds(rewrite_within_savings=False)
    sim = SessionSimulator("s", th)
    sim.feed(_warm_session(compact_at=16))  # the read masked at round 11, before it
    r = sim.finish()
    assert [at for at, side, *_ in r.summarisations if side == "plain"] == [16]
    assert any(i.kind == "mask" for i in r.interventions)  # the two sides differ
    prices = _pricing.default_prices("anthropic/claude-sonnet-4-5")
    whole = price_session(r, prices, th.ttl_s, prices)
    calls = r.calls
    account = Account(th)
    for n in (1, 5, 12, 16, 17, len(calls)):
        r.calls = calls[:n]
        plain, ours = account(r)
    r.calls = calls
    assert account.priced == len(calls)
    assert plain == pytest.approx(sum(c.weighted_tokens for c in whole.plain))
    # ctxwrap's side holds every aux call at its most (the tagger's budget comes after)
    aux = sum(inp + TAG_OUTPUT_WEIGHT * out for _, _, _, inp, out in r.aux_events)
    assert ours == pytest.approx(sum(c.weighted_tokens for c in whole.ctxwrap) + aux)
    assert sum(c.weighted_tokens for c in whole.ctxwrap) != sum(
        c.weighted_tokens for c in whole.plain
    )


def test_a_result_of_500_chars_is_worth_a_mask_by_default() -> None:
    """`mask_min_chars` 500 (docs/accounting.md, "The smallest result worth a mask"): a listing
    of ~700 chars, a round old at a cold boundary (an idle gap), becomes a tombstone under the
    defaults; under the old 1,000 it stayed whole to the end."""
    from ctxwrap.replay._events import ToolCall
    from ctxwrap.replay._sim import SessionSimulator

    listing = "".join(f"module_{i:03d}  ok\n" for i in range(50))  # 700 chars
    calls = [ToolCall("c0", "bash", {"command": "make modules"}, 30)] + [
        ToolCall(f"c{i}", "bash", {"command": f"echo step {i}"}, 30) for i in range(1, 5)
    ]
    masked = {}
    for min_chars in (500, 1000):
        sim = SessionSimulator("s", replace(Thresholds(), mask_min_chars=min_chars))
        sim.feed(pi_rounds(calls, {0: listing}, step_s=800.0))  # each request past the TTL
        masked[min_chars] = [i.reason for i in sim.finish().interventions if i.kind == "mask"]
    assert Thresholds().mask_min_chars == 500
    assert masked == {500: ["older"], 1000: []}


def test_the_account_prices_as_replay_model_will_bill() -> None:
    """`ctxwrap replay --model`: the account the session's rewrites draw on is priced as the
    bill will be (an automatic cache: no write premium), not as the transcript's model."""
    from ctxwrap.replay._run import session_pricing
    from ctxwrap.replay._sim import SessionSimulator

    th = Thresholds(rewrite_within_savings=False)
    sim = SessionSimulator("s", th)
    sim.feed(_warm_session(compact_at=16))
    r = sim.finish()
    model = "openai/gpt-5"
    bill = price_session(r, *session_pricing(r, th, model))
    aux = sum(inp + TAG_OUTPUT_WEIGHT * out for _, _, _, inp, out in r.aux_events)
    plain, ours = Account(th, model)(r)
    assert plain == pytest.approx(sum(c.weighted_tokens for c in bill.plain))
    assert ours == pytest.approx(sum(c.weighted_tokens for c in bill.ctxwrap) + aux)
    assert (plain, ours) != pytest.approx(Account(th)(r))  # the transcript's model differs
