"""The default price table: one test per model family, newest patterns before old ones, and
1-hour cache writes priced at 2x input (docs/accounting.md, "Prices")."""

from __future__ import annotations

import pytest

from ctxwrap.engine.cost import (
    DEFAULT_PRICE_TABLE,
    ONE_HOUR_TTL_S,
    PRICE_SOURCES,
    PRICES_AS_OF,
    Prices,
    default_prices,
    price_tokens,
)
from ctxwrap.replay._pricing import session_prices


def rates(model: str) -> tuple[float | None, float | None, float | None, float | None]:
    p = default_prices(model)
    return p.input, p.output, p.cache_read, p.cache_write


def test_table_is_dated_with_sources() -> None:
    assert PRICES_AS_OF >= "2026-12-01"
    assert any("anthropic" in s or "claude.com" in s for s in PRICE_SOURCES)
    assert any("openai.com" in s for s in PRICE_SOURCES)


@pytest.mark.parametrize(
    "model",
    [
        "claude-opus-4-5-20251101",
        "claude-opus-4-5",
        "claude-opus-4-6",
        "anthropic/claude-opus-4-6",
        "claude-opus-4-6[1m]",
        "claude-opus-4-7",
        "claude-opus-4-8",
        "claude-opus-4-9",  # a later 4.N: never the old Opus rate
        "claude-opus-4-10",
        "claude-opus-5",
    ],
)
def test_opus_45_and_later_at_5_dollars(model: str) -> None:
    assert rates(model) == (5.0, 25.0, 0.5, 6.25)


@pytest.mark.parametrize(
    "model",
    [
        "claude-opus-4-20250514",
        "claude-opus-4-0",
        "claude-opus-4-1",
        "claude-opus-4-1-20250805",
        "anthropic/claude-opus-4-1-20250805",
        "claude-3-opus-20240229",
    ],
)
def test_opus_4_and_41_at_15_dollars(model: str) -> None:
    assert rates(model) == (15.0, 75.0, 1.5, 18.75)


def test_opus_55() -> None:
    assert rates("claude-opus-5-5") == (4.0, 20.0, 0.2, 5.0)


@pytest.mark.parametrize(
    "model", ["claude-sonnet-4-20250514", "claude-sonnet-4-5-20250929", "claude-sonnet-4-6"]
)
def test_sonnet_4x(model: str) -> None:
    assert rates(model) == (3.0, 15.0, 0.3, 3.75)


def test_sonnet_5() -> None:
    assert rates("claude-sonnet-5") == (2.0, 10.0, 0.2, 2.5)
    assert rates("claude-sonnet-5-5") == (2.0, 10.0, 0.1, 2.5)


def test_haiku() -> None:
    assert rates("claude-haiku-4-5-20251001") == (1.0, 5.0, 0.1, 1.25)
    assert rates("claude-3-5-haiku-20241022") == (0.8, 4.0, 0.08, 1.0)
    assert rates("claude-haiku-5-5") == (0.1, 0.5, 0.01, 0.125)


def test_fable() -> None:
    assert rates("claude-fable-5-1") == (10.0, 50.0, 0.25, 12.5)
    assert rates("claude-fable-5") == (10.0, 50.0, 1.0, 12.5)


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        ("gpt-5", (1.25, 10.0, 0.125)),
        ("openai/gpt-5-2025-08-07", (1.25, 10.0, 0.125)),
        ("gpt-5-codex", (1.25, 10.0, 0.125)),
        ("gpt-5-mini", (0.25, 2.0, 0.025)),
        ("gpt-5-nano", (0.05, 0.4, 0.005)),
        ("gpt-5.1", (1.25, 10.0, 0.125)),
        ("gpt-5.1-codex", (1.25, 10.0, 0.125)),
        ("gpt-5.2", (1.75, 14.0, 0.175)),
        ("gpt-5.2-codex", (1.75, 14.0, 0.175)),
        ("gpt-5.3-codex", (1.75, 14.0, 0.175)),
        ("gpt-5.4", (2.5, 15.0, 0.25)),
        ("gpt-5.4-mini", (0.75, 4.5, 0.075)),
        ("gpt-5.4-nano", (0.2, 1.25, 0.02)),
        ("gpt-5.9", (2.5, 15.0, 0.25)),  # a later 5.N: the newest known rate, not gpt-5's
    ],
)
def test_openai_gpt5_family_cached_input(model: str, expected: tuple[float, float, float]) -> None:
    p = default_prices(model)
    assert (p.input, p.output, p.cache_read) == expected
    assert p.caching == "automatic"
    assert p.cache_write == p.input  # no write surcharge


def test_newest_patterns_come_first() -> None:
    """No pattern is shadowed by an earlier, broader one (each entry is reachable)."""
    import fnmatch

    pats = [p for p, _ in DEFAULT_PRICE_TABLE]
    for i, pat in enumerate(pats):
        probe = pat.replace("[[]", "[").replace("*", "x9").replace("?", "x")
        first = next(j for j, q in enumerate(pats) if fnmatch.fnmatchcase(probe, q))
        assert first == i, f"{pat!r} is shadowed by {pats[first]!r}"


def test_one_hour_cache_writes_cost_twice_input() -> None:
    opus = default_prices("claude-opus-4-6")
    assert opus.cache_write_1h == pytest.approx(10.0)
    assert default_prices("claude-3-5-haiku").cache_write_1h == pytest.approx(1.6)
    five = price_tokens(opus, cache_write=1_000_000)
    hour = price_tokens(opus, cache_write_1h=1_000_000)
    mixed = price_tokens(opus, cache_write=1_000_000, cache_write_1h=1_000_000)
    assert five.input_usd == pytest.approx(6.25)
    assert hour.input_usd == pytest.approx(10.0)
    assert mixed.input_usd == pytest.approx(16.25)
    assert mixed.cache_write_tokens == 2_000_000
    assert hour.weighted_tokens == pytest.approx(2_000_000)
    # automatic caching has no 1-hour write price
    assert default_prices("gpt-5").cache_write_1h is None
    assert price_tokens(Prices(None, None, None, None), cache_write_1h=10).input_usd is None


def test_replay_prices_a_one_hour_session_as_such() -> None:
    p, ttl = session_prices(
        "claude-sonnet-4-5", 300.0, cache_write_tokens=1000, cache_write_1h_tokens=900
    )
    assert p.cache_write == pytest.approx(6.0)
    assert ttl == ONE_HOUR_TTL_S
    p, ttl = session_prices("claude-sonnet-4-5", 300.0, cache_write_tokens=1000)
    assert p.cache_write == pytest.approx(3.75)
    assert ttl == 300.0
