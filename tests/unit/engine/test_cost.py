"""The cost model (ctxwrap/engine/cost.py) on hand-computed cases: warm prefix, TTL expiry, head
change, compaction, aux calls, unknown prices, automatic caching, price overrides."""

from __future__ import annotations

from dataclasses import replace
from typing import Literal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ctxwrap.engine.cost import (
    DEFAULT_WEIGHTS,
    CallSizes,
    CompactionPolicy,
    Prices,
    RequestShape,
    common_prefix_tokens,
    compaction_call_cost,
    default_prices,
    one_off_cost,
    parse_price_overrides,
    price_requests,
    price_session,
    price_tokens,
    recorded_hits,
    registry_prices,
    weights,
)

SONNET = Prices(3.0, 15.0, 0.3, 3.75)  # explicit caching: read 0.1x, write 1.25x
GPT = Prices(2.0, 8.0, 0.5, 2.0, "automatic")  # read 0.25x
SYS = ("sys", 1000)
TOOLS = ("tools", 500)


def shape(ts: float, *msgs: tuple[str, int], out: int = 0) -> RequestShape:
    return RequestShape(ts=ts, blocks=(SYS, TOOLS, *msgs), output_tokens=out)


def test_warm_prefix_reads_previous_request_and_writes_the_rest() -> None:
    a = shape(0, ("u1", 100), out=50)
    b = shape(10, ("u1", 100), ("a1", 50), ("t1", 200), out=20)
    first, second = price_requests([a, b], SONNET)
    # first call: all 1600 tokens written, 50 output
    assert (first.cache_read_tokens, first.cache_write_tokens, first.uncached_input_tokens) == (
        0,
        1600,
        0,
    )
    assert first.weighted_tokens == pytest.approx(1600 * 1.25)
    assert first.input_usd == pytest.approx(1600 * 3.75e-6)
    assert first.usd == pytest.approx(1600 * 3.75e-6 + 50 * 15e-6)
    # second: 1600 read (sys+tools+u1), 250 written
    assert (second.cache_read_tokens, second.cache_write_tokens) == (1600, 250)
    assert second.weighted_tokens == pytest.approx(1600 * 0.1 + 250 * 1.25)
    assert second.input_usd == pytest.approx(1600 * 0.3e-6 + 250 * 3.75e-6)
    assert second.usd == pytest.approx(1600 * 0.3e-6 + 250 * 3.75e-6 + 20 * 15e-6)
    assert second.input_tokens == 1850


def test_gap_over_ttl_makes_the_whole_request_a_write() -> None:
    a = shape(0, ("u1", 100))
    b = shape(301, ("u1", 100), ("a1", 50))
    c = shape(301 + 300, ("u1", 100), ("a1", 50), ("u2", 10))  # exactly at the TTL: still warm
    costs = price_requests([a, b, c], SONNET, ttl_s=300)
    assert costs[1].cache_read_tokens == 0 and costs[1].cache_write_tokens == 1650
    assert costs[2].cache_read_tokens == 1650 and costs[2].cache_write_tokens == 10
    # a shorter TTL cools the third call too
    assert price_requests([a, b, c], SONNET, ttl_s=299)[2].cache_read_tokens == 0


def test_head_change_reads_only_up_to_the_first_changed_block() -> None:
    a = shape(0, ("u1", 100), ("a1", 50), ("t1", 4000))
    # t1 tombstoned in place (a history rewrite): read sys+tools+u1+a1, write the rest
    b = shape(5, ("u1", 100), ("a1", 50), ("t1-tomb", 20), ("u2", 30))
    cost = price_requests([a, b], SONNET)[1]
    assert (cost.cache_read_tokens, cost.cache_write_tokens) == (1650, 50)
    # a changed system prompt (model switch, activation rewrite) rewrites everything
    c = RequestShape(ts=6, blocks=(("sys2", 1000), TOOLS, ("u1", 100)))
    assert price_requests([a, c], SONNET)[1].cache_read_tokens == 0
    # same fingerprint, different size is not the same block
    d = shape(7, ("u1", 101))
    assert price_requests([a, d], SONNET)[1].cache_read_tokens == 1500


def test_a_request_reads_the_entry_the_provider_says_it_read() -> None:
    a = shape(0, ("u1", 100))
    b = shape(5, ("u1", 100), ("a1", 50), ("t1", 400))
    c = shape(9, ("u1", 100), ("a1", 50), ("t1", 400), ("a2", 30), ("t2", 300))
    ideal = price_requests([a, b, c], SONNET)
    assert ideal[2].cache_read_tokens == 2050  # the previous request's whole prompt
    # the provider served the first request's entry (an entry b wrote elsewhere)
    older = price_requests([a, b, c], SONNET, read_from=[None, None, 0])
    assert (older[2].cache_read_tokens, older[2].cache_write_tokens) == (1600, 780)
    # a miss reads nothing, however warm
    miss = price_requests([a, b, c], SONNET, read_from=[None, "none", None])
    assert (miss[1].cache_read_tokens, miss[1].cache_write_tokens) == (0, 2050)
    # the system prompt and tools alone
    head = price_requests([a, b, c], SONNET, read_from=[None, None, "head"])
    assert head[2].cache_read_tokens == 1500
    # a named entry was alive (the provider read it), past the TTL of the ideal cache too
    late = shape(4000, ("u1", 100), ("a1", 50), ("t1", 400), ("a2", 30))
    assert price_requests([a, b, late], SONNET)[2].cache_read_tokens == 0
    assert price_requests([a, b, late], SONNET, read_from=[None, None, 1])[2].cache_read_tokens == (
        2050
    )


def test_compaction_rewrites_from_the_summary_on() -> None:
    long = shape(0, ("u1", 100), ("a1", 9000), ("t1", 9000), ("u2", 100))
    # pi compacts: summary message first, then the kept recent messages
    after = shape(20, ("summary", 800), ("u2", 100), ("a2", 60))
    cost = price_requests([long, after], SONNET)[1]
    assert cost.cache_read_tokens == 1500  # system + tools survive
    assert cost.cache_write_tokens == 960
    assert cost.weighted_tokens == pytest.approx(1500 * 0.1 + 960 * 1.25)


def test_automatic_caching_bills_the_unmatched_part_as_fresh_input() -> None:
    a = shape(0, ("u1", 100))
    b = shape(1, ("u1", 100), ("a1", 400))
    first, second = price_requests([a, b], GPT)
    assert (first.cache_write_tokens, first.uncached_input_tokens) == (0, 1600)
    assert first.weighted_tokens == pytest.approx(1600)
    assert (second.cache_read_tokens, second.uncached_input_tokens) == (1600, 400)
    assert second.weighted_tokens == pytest.approx(1600 * 0.25 + 400)
    assert second.input_usd == pytest.approx(1600 * 0.5e-6 + 400 * 2e-6)


def test_no_caching_prices_everything_fresh() -> None:
    p = Prices(1.0, 2.0, None, None, "none")
    b = price_requests([shape(0, ("u1", 100)), shape(1, ("u1", 100), ("x", 10))], p)[1]
    assert (b.cache_read_tokens, b.uncached_input_tokens) == (0, 1610)
    assert b.usd == pytest.approx(1610e-6)


def test_aux_call_priced_by_its_own_model() -> None:
    haiku = default_prices("anthropic/claude-haiku-4-5")
    assert haiku == Prices(1.0, 5.0, 0.1, 1.25)
    aux = price_tokens(haiku, uncached=2000, output=30)
    assert aux.usd == pytest.approx(2000 * 1e-6 + 30 * 5e-6)
    assert aux.input_usd == pytest.approx(2000e-6)
    assert aux.weighted_tokens == pytest.approx(2000)


def test_unknown_prices_leave_money_unknown_but_weighted_tokens_defined() -> None:
    unknown = default_prices("some-local-model")
    assert unknown.input is None
    costs = price_requests([shape(0, ("u1", 100)), shape(1, ("u1", 100), ("a", 100))], unknown)
    assert costs[1].usd is None and costs[1].input_usd is None
    assert costs[1].weighted_tokens == pytest.approx(1600 * 0.1 + 100 * 1.25)
    assert default_prices(None).input is None
    # a price needed only for a category with zero tokens does not make the total unknown
    partial = Prices(1.0, None, None, None, "automatic")
    assert price_tokens(partial, uncached=100).usd == pytest.approx(100e-6)
    assert price_tokens(partial, uncached=100, output=1).usd is None
    assert price_tokens(partial, uncached=100, output=1).input_usd == pytest.approx(100e-6)


def test_weights_follow_known_prices_else_defaults() -> None:
    assert weights(SONNET).read == pytest.approx(0.1)
    assert weights(SONNET).write == pytest.approx(1.25)
    assert weights(Prices(5.0, None, 0.5, 10.0)).write == pytest.approx(2.0)
    assert weights(Prices(None, None, None, None, "automatic")) == DEFAULT_WEIGHTS["automatic"]
    assert weights(Prices(0.0, 0.0, 0.0, 0.0)) == DEFAULT_WEIGHTS["explicit"]


def test_default_table_and_overrides() -> None:
    assert default_prices("claude-sonnet-4-5-20250929") == SONNET
    assert default_prices("openai/gpt-4o-mini").caching == "automatic"
    assert default_prices("gpt-4o-mini").input == pytest.approx(0.15)
    over = parse_price_overrides("my-*=1,2,0.1,1.25; claude-sonnet*=-,-,-,-,automatic")
    assert default_prices("my-model", overrides=over) == Prices(1, 2, 0.1, 1.25)
    assert default_prices("claude-sonnet-4", overrides=over) == Prices(
        None, None, None, None, "automatic"
    )
    assert default_prices("claude-haiku-4-5", overrides=over).input == pytest.approx(1.0)
    for bad in ("nope", "x=1,2,3", "x=1,2,3,a", "x=1,2,3,4,sometimes", "x=-1,2,3,4", "=1,2,3,4"):
        with pytest.raises(ValueError):
            parse_price_overrides(bad)


def test_registry_prices_from_pi_model_cost() -> None:
    p = registry_prices(
        {"input": 3, "output": 15, "cacheRead": 0.3, "cacheWrite": 3.75}, "anthropic-messages"
    )
    assert p == SONNET
    q = registry_prices(
        {"input": 2, "output": 8, "cacheRead": 0.5, "cacheWrite": 0}, "openai-completions"
    )
    assert q is not None and q.caching == "automatic"
    # all zeros: pi has no price for this model
    assert registry_prices({"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0}) is None
    assert registry_prices(None) is None
    assert registry_prices({"input": "3", "output": True}) is None


blocks = st.lists(
    st.tuples(st.sampled_from(["a", "b", "c", "d"]), st.integers(0, 1000)), max_size=8
).map(tuple)


@given(
    st.lists(st.tuples(st.floats(0, 1000), blocks), min_size=1, max_size=6),
    st.sampled_from([SONNET, GPT, Prices(None, None, None, None)]),
)
def test_input_tokens_always_add_up(
    raw: list[tuple[float, tuple[tuple[str, int], ...]]], p: Prices
) -> None:
    ts = 0.0
    shapes = []
    for gap, bl in raw:
        ts += gap
        shapes.append(RequestShape(ts=ts, blocks=bl))
    costs = price_requests(shapes, p)
    for s, c in zip(shapes, costs, strict=True):
        assert c.input_tokens == sum(n for _, n in s.blocks)
        assert c.weighted_tokens <= c.input_tokens * max(1.0, weights(p).write) + 1e-9
    assert costs[0].cache_read_tokens == 0


def test_common_prefix_tokens() -> None:
    assert common_prefix_tokens([("a", 1), ("b", 2)], [("a", 1), ("b", 2), ("c", 3)]) == 3
    assert common_prefix_tokens([], [("a", 1)]) == 0
    assert common_prefix_tokens([("a", 1), ("b", 2)], [("a", 1)]) == 1


# -- sessions: the compaction-aware plain counterfactual -------------------------------------


def _calls(new_prompt_at: int | None = None) -> list[CallSizes]:
    # sent grows 50 per call (ctxwrap keeps most out), plain grows 300; base (system+tools) 100
    rows = [
        (300, 300, None, None),
        (350, 600, 300, 300),
        (400, 900, 350, 600),
        (450, 1200, 400, 900),
    ]
    return [
        CallSizes(
            ts=float(i),
            sent_tokens=s,
            plain_tokens=p,
            sent_prefix_tokens=sp,
            plain_prefix_tokens=pp,
            plain_base_tokens=100,
            new_prompt=i == new_prompt_at,
            model="m",
        )
        for i, (s, p, sp, pp) in enumerate(rows)
    ]


POLICY = CompactionPolicy(
    context_window=1000, reserve_tokens=200, keep_recent_tokens=200, summary_tokens=50
)


def test_session_without_compaction_prices_both_series_by_their_prefixes() -> None:
    priced = price_session(_calls(), lambda _m: SONNET, CompactionPolicy(context_window=None))
    actual, plain = priced.totals()
    assert actual.weighted_tokens == pytest.approx(375 + (30 + 62.5) + (35 + 62.5) + (40 + 62.5))
    assert plain.weighted_tokens == pytest.approx(375 + (30 + 375) + (60 + 375) + (90 + 375))
    assert plain.compactions == 0 and priced.plain_tokens == (300, 600, 900, 1200)
    assert actual.cache_read_tokens == 1050 and actual.cache_write_tokens == 450
    assert actual.usd == pytest.approx((1050 * 0.3 + 450 * 3.75) / 1e6)


def test_live_pricing_reads_the_entry_the_provider_says_each_request_read() -> None:
    """Live stats follow the provider's record of the cache (`CallSizes.read_from`), as replay
    does: the request as sent reads the named entry, and plain's reads it too where ctxwrap's
    own content does not explain the read."""
    none = CompactionPolicy(context_window=None)

    def priced(calls: list[CallSizes]) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
        p = price_session(calls, lambda _m: SONNET, none)
        return (
            [(a.cache_read_tokens, a.cache_write_tokens) for a in p.actual],
            [(q.cache_read_tokens, q.cache_write_tokens) for q in p.plain],
        )

    ideal_a, ideal_p = priced(_calls())
    assert ideal_a[2] == (350, 50) and ideal_p[2] == (600, 300)
    # a miss: nothing read on either side, however warm
    calls = _calls()
    calls[2] = calls[2]._replace(read_from="none")
    a, p = priced(calls)
    assert a[2] == (0, 400) and p[2] == (0, 900)
    assert a[3] == ideal_a[3] and p[3] == ideal_p[3]  # the next request reads the new entry
    # an older entry (request 0's): what both share with it
    calls = _calls()
    calls[3] = calls[3]._replace(read_from=0)
    a, p = priced(calls)
    assert a[3] == (300, 150) and p[3] == (300, 900)
    # the system prompt and tools alone
    calls = _calls()
    calls[3] = calls[3]._replace(read_from="head")
    a, p = priced(calls)
    assert a[3] == (100, 350) and p[3] == (100, 1100)
    # the previous entry named: what the ideal cache reads anyway
    calls = _calls()
    calls[3] = calls[3]._replace(read_from=2)
    assert priced(calls) == (ideal_a, ideal_p)
    # ctxwrap rewrote its history after request 0's end (a mask): the provider read request
    # 0's entry because of ctxwrap's content, and plain, which rewrote nothing, reads its own
    # previous entry
    calls = _calls()
    calls[3] = calls[3]._replace(sent_prefix_tokens=300, read_from=0)
    a, p = priced(calls)
    assert a[3] == (300, 150) and p[3] == ideal_p[3] == (900, 300)
    # ... and found that entry lost (only the system prompt and tools read): a loss of
    # ctxwrap's own older entry, which says nothing of plain's previous one
    calls[3] = calls[3]._replace(read_from="head")
    a, p = priced(calls)
    assert a[3] == (100, 350) and p[3] == (900, 300)
    # ... or found nothing at all: every entry was lost, plain's too
    calls[3] = calls[3]._replace(read_from="none")
    a, p = priced(calls)
    assert a[3] == (0, 450) and p[3] == (0, 1200)
    # a named entry was alive (the provider read it), past the TTL of the ideal cache too
    calls = _calls()
    calls[3] = calls[3]._replace(ts=4000.0)
    assert priced(calls)[0][3] == (0, 450)
    calls[3] = calls[3]._replace(read_from=2)
    a, p = priced(calls)
    assert a[3] == (400, 50) and p[3] == (900, 300)
    # a miss is one where the provider read less than the content had it read: the views count
    # those (`PricedInput.served`); a read past the ideal cache's lifetime is no miss
    assert price_session(calls, lambda _m: SONNET, none).actual[3].served is None
    lost = _calls()
    lost[2] = lost[2]._replace(read_from="none")
    assert [c.served for c in price_session(lost, lambda _m: SONNET, none).actual] == [
        None,
        None,
        "none",
        None,
    ]


def test_a_request_after_a_sub_agents_reads_its_own_conversations_entry() -> None:
    """Claude Code's sub-agent sends its requests between two of the main conversation's: the
    proxy measures the main one's prefix against the main conversation's previous request
    (`prefix_of`), which is the entry the provider reads."""

    def call(ts: float, size: int, prefix: int | None, of: int | None = None) -> CallSizes:
        return CallSizes(ts, size, size, prefix, prefix, 100, model="m", prefix_of=of)

    calls = [
        call(0.0, 1000, None),
        call(1.0, 300, 100),  # the sub-agent's first request: tools and system differ
        call(2.0, 400, 300),
        call(3.0, 1100, 1000, of=0),  # the main conversation again
    ]
    none = CompactionPolicy(context_window=None)

    def read_write(cs: list[CallSizes]) -> tuple[int, int]:
        a = price_session(cs, lambda _m: SONNET, none).actual[3]
        return a.cache_read_tokens, a.cache_write_tokens

    assert read_write(calls) == (1000, 100)
    # the provider's usage names that entry: the same, on both sides
    named = [*calls[:3], calls[3]._replace(read_from=0)]
    p = price_session(named, lambda _m: SONNET, none)
    assert (p.actual[3].cache_read_tokens, p.plain[3].cache_read_tokens) == (1000, 1000)
    # without knowing which request it was measured against, the way back through the
    # sub-agent's requests loses what the main conversation shared
    lost = [*calls[:3], named[3]._replace(prefix_of=None)]
    assert price_session(lost, lambda _m: SONNET, none).actual[3].cache_read_tokens == 100
    # the main conversation's entry expired while the sub-agent ran
    late = [*calls[:3], calls[3]._replace(ts=400.0)]
    late[1], late[2] = late[1]._replace(ts=350.0), late[2]._replace(ts=390.0)
    assert read_write(late) == (0, 1100)


def test_recorded_hits_name_the_entry_each_read_ends_at() -> None:
    # entries end at read + written; 0 reads nothing; a read short of the first entry is the
    # system prompt and tools; anything else is not named
    reads = [0, 1000, 0, 1000, 1500, 700, 1234]
    entries = [1000, 1500, 1600, None, 1800, None, None]
    assert recorded_hits(reads, entries) == [None, 0, "none", 0, 1, "head", None]
    # a provider that never reports its cache names nothing (its 0 is no miss)
    assert recorded_hits([0, 0, 0], [None, None, None]) == [None, None, None]
    assert recorded_hits([None, None], [None, None]) == [None, None]


def test_plain_pi_compacts_at_its_own_threshold_and_the_saving_is_capped_there() -> None:
    priced = price_session(_calls(), lambda _m: SONNET, POLICY)
    # call 2: plain would send 900 > 1000-200: compacts to base 100 + summary 50 + the kept
    # tail; the newest 300 alone is over keepRecentTokens (200), so pi 1.x keeps just that
    assert priced.plain_tokens == (300, 600, 450, 750)
    _, plain = priced.totals()
    assert plain.compactions == 1
    assert plain.weighted_tokens == pytest.approx(375 + 405 + (10 + 437.5) + (45 + 375))
    comp = priced.plain_compactions[2]
    # summarisation: 900-100-300 summarised + 400 of pi's prompt fresh, 50 output at 5x (15/3)
    assert comp is not None and (comp.input_tokens, comp.output_tokens) == (900, 50)
    assert plain.compaction_weighted_tokens == pytest.approx(900 + 250)
    assert plain.compaction_usd == pytest.approx(900 * 3e-6 + 50 * 15e-6)


def test_pi_073_compacts_only_before_a_new_prompt() -> None:
    policy = CompactionPolicy(
        context_window=1000,
        reserve_tokens=200,
        keep_recent_tokens=200,
        summary_tokens=50,
        check="prompt",
    )
    priced = price_session(_calls(new_prompt_at=3), lambda _m: SONNET, policy)
    # no check inside the run: 900 stays; before prompt 2 the last request (900) is over.
    # pi 0.73 cuts at the run's final reply: the 300 before it is over keepRecentTokens, so
    # it keeps nothing older; the new prompt's 300 follows the summary
    assert priced.plain_tokens == (300, 600, 900, 100 + 50 + 0 + 300)
    comp = priced.plain_compactions[3]
    assert comp is not None and comp.input_tokens == 800 + 400
    assert [c is not None for c in priced.plain_compactions] == [False, False, False, True]


def test_idle_gap_and_model_switch_make_both_series_cold() -> None:
    calls = _calls()
    calls[2] = CallSizes(1000.0, 400, 900, 350, 600, 100, model="m")
    calls[3] = CallSizes(1001.0, 450, 1200, 400, 900, 100, model="other")
    priced = price_session(calls, lambda _m: SONNET, CompactionPolicy(None), ttl_s=300)
    assert priced.actual[2].cache_read_tokens == 0 and priced.plain[2].cache_read_tokens == 0
    assert priced.actual[3].cache_read_tokens == 0 and priced.plain[3].cache_write_tokens == 1200


def test_a_request_on_the_one_hour_cache_is_warm_after_a_pause_and_writes_at_2x() -> None:
    calls = _calls()
    # a 20-minute pause before call 2: past the 5-minute TTL, inside Claude Code's hour
    calls[2] = calls[2]._replace(ts=1200.0)
    calls[3] = calls[3]._replace(ts=1201.0)
    five = price_session(calls, lambda _m: SONNET, CompactionPolicy(None), ttl_s=300)
    assert five.actual[2].cache_read_tokens == 0 and five.plain[2].cache_read_tokens == 0
    hour = [c._replace(ttl_s=3600.0) for c in calls]
    priced = price_session(hour, lambda _m: SONNET, CompactionPolicy(None), ttl_s=300)
    assert priced.actual[2].cache_read_tokens == 350 and priced.plain[2].cache_read_tokens == 600
    # what is written goes to the 1-hour cache: 2x input (6.0/M), not 1.25x
    assert priced.actual[2].cache_write_tokens == 50
    assert priced.actual[2].input_usd == pytest.approx((350 * 0.3 + 50 * 6.0) / 1e6)
    assert priced.actual[2].weighted_tokens == pytest.approx(35 + 100)
    # a ttl_s the pricer is already past changes nothing
    same = [c._replace(ttl_s=60.0) for c in calls]
    assert price_session(same, lambda _m: SONNET, CompactionPolicy(None), ttl_s=300) == five


def test_a_real_compaction_does_not_shrink_the_plain_counterfactual() -> None:
    calls = _calls()
    # ctxwrap's session compacted before call 3: its own sizes restart (sent 200, plain 250)
    calls[3] = CallSizes(3.0, 200, 250, 100, 100, 100, compacted_before=True, model="m")
    priced = price_session(calls, lambda _m: SONNET, CompactionPolicy(None))
    assert priced.plain_tokens[3] == 900  # plain pi carried on with what it had
    assert priced.plain[3].cache_read_tokens == 900
    # what the conversation grew by meanwhile (known from pi's tokensBefore) is added
    calls[3] = calls[3]._replace(growth_tokens=300)
    priced = price_session(calls, lambda _m: SONNET, CompactionPolicy(None))
    assert priced.plain_tokens[3] == 1200
    assert priced.plain[3].cache_read_tokens == 900
    # an older bridge sent no prefixes: append-only assumed, nothing read after a compaction
    legacy = [CallSizes(0, 100, 100, None, None), CallSizes(1, 150, 150, None, None)]
    assert (
        price_session(legacy, lambda _m: SONNET, CompactionPolicy(None)).actual[1].cache_read_tokens
        == 100
    )


def test_after_a_compaction_the_real_request_reads_its_unchanged_base() -> None:
    """Claude Code and Codex report no prefix: after their compaction the request still
    starts with the system prompt and tools the previous one had, as plain's does."""
    calls = _calls()
    calls[3] = CallSizes(3.0, 200, 250, None, None, 100, compacted_before=True, model="m")
    priced = price_session(calls, lambda _m: SONNET, CompactionPolicy(None))
    assert priced.actual[3].cache_read_tokens == 100  # before: 0, all written
    assert priced.actual[3].cache_write_tokens == 100


def test_a_users_compact_while_plain_is_ahead_catches_up() -> None:
    """Claude Code and Codex: the plain model compacted at its threshold where the smaller real
    session did not; the user's `/compact` after it (the status line's hint) is that
    compaction caught up, not one plain runs again. Plain not ahead: it runs the user's too."""
    policy = CompactionPolicy(
        context_window=1000, reserve_tokens=200, summary_tokens=50, keeps_tail=False
    )
    calls = _calls()
    calls[3] = CallSizes(
        3.0, 200, 250, None, None, 100, compacted_before=True, model="m", growth_tokens=50,
        plain_compacts_too="call",
    )  # fmt: skip
    ahead = price_session(calls, lambda _m: SONNET, policy)
    assert [c is not None for c in ahead.plain_compactions] == [False, False, True, False]
    assert ahead.plain_tokens[3] == 100 + 50 + 50  # plain's own summary, grown since
    alone = price_session(calls, lambda _m: SONNET, CompactionPolicy(None))
    assert [c is not None for c in alone.plain_compactions] == [False, False, False, True]


def test_compaction_and_aux_one_off_costs() -> None:
    c = compaction_call_cost(10_000, 1000, SONNET, previous_summary=600)
    assert (c.input_tokens, c.output_tokens) == (10_000 + 600 + 400, 1000)
    assert c.weighted_tokens == pytest.approx(11_000 + 5 * 1000)
    assert compaction_call_cost(-5, 10, SONNET).input_tokens == 400
    unknown = one_off_cost(100, 10, Prices(None, None, None, None))
    assert unknown.usd is None and unknown.weighted_tokens == pytest.approx(110)


def test_plain_summarisation_input_follows_pis_tool_result_cut() -> None:
    calls = [
        CallSizes(
            c.ts,
            c.sent_tokens,
            c.plain_tokens,
            c.sent_prefix_tokens,
            c.plain_prefix_tokens,
            100,
            plain_summary_ratio=0.5,
            model="m",
        )
        for c in _calls()
    ]
    comp = price_session(calls, lambda _m: SONNET, POLICY).plain_compactions[2]
    assert comp is not None and comp.input_tokens == 250 + 400  # half of 500 survives the cut


@pytest.mark.parametrize(
    ("check", "chunks", "kept"),
    [
        # pi walks back until keepRecentTokens (1000) is reached and cuts after that message
        ("turn", [500, 400, 300, 200], (900, 3)),
        ("turn", [950, 99], (99, 1)),
        ("turn", [100, 200], (300, 2)),  # all fits: nothing older to cut
        # the newest alone is too big: 1.x keeps it, 0.73 only the final reply after it
        ("turn", [200, 1500], (1500, 1)),
        ("prompt", [200, 1500], (0, 0)),
        ("prompt", [990, 50], (50, 1)),
    ],
)
def test_pi_keeps_the_newest_whole_requests_that_fit(
    check: Literal["turn", "prompt"], chunks: list[int], kept: tuple[int, int]
) -> None:
    policy = CompactionPolicy(context_window=10_000, keep_recent_tokens=1000, check=check)
    assert policy.kept(chunks) == kept


def test_pi_073_repeated_compactions_cost_twice_and_count_once() -> None:
    policy = CompactionPolicy(
        context_window=1000,
        reserve_tokens=200,
        keep_recent_tokens=200,
        summary_tokens=50,
        check="prompt",
    )
    once = price_session(_calls(new_prompt_at=3), lambda _m: SONNET, policy)
    twice = price_session(
        _calls(new_prompt_at=3), lambda _m: SONNET, replace(policy, repeat_at_prompt=True)
    )
    a, b = once.totals()[1], twice.totals()[1]
    assert a.compactions == b.compactions == 1
    assert b.compaction_weighted_tokens == pytest.approx(2 * a.compaction_weighted_tokens)
    assert once.plain_tokens == twice.plain_tokens
