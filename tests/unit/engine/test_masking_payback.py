"""When a warm-cache rewrite pays back: judged at the cache's real write price and on the
tokens the provider counted (on real Claude Code sessions, judged at 1.25x and chars/4, warm
masking cost more than it saved: docs/accounting.md, "Warm masking")."""

from __future__ import annotations

from ctxwrap.engine.masking import (
    ONE_HOUR_WRITE_WEIGHT,
    WRITE_WEIGHT,
    suffix_tokens,
    warm_rewrite_pays,
    write_weight,
)


def test_a_one_hour_cache_rewrite_is_judged_at_twice_input() -> None:
    assert write_weight(None) == write_weight(300) == WRITE_WEIGHT
    assert write_weight(3600) == ONE_HOUR_WRITE_WEIGHT == 2.0
    # pays at 1.25x, not at 2x: 2,000 removed × 0.1 × 60 calls = 12,000 against a 10,000-token
    # suffix rewritten at 1.15 (11,500) or 1.9 (19,000)
    assert warm_rewrite_pays(2_000, 10_000, 60)
    assert not warm_rewrite_pays(2_000, 10_000, 60, write_weight=write_weight(3600))


def test_the_suffix_is_sized_at_the_rate_the_provider_counted() -> None:
    assert suffix_tokens(40_000, None) == 10_000  # nothing counted: chars/4
    assert suffix_tokens(40_000, 0.1) == 10_000  # never below chars/4
    # a thinking session: the provider counted 0.7 tokens per visible character
    assert suffix_tokens(40_000, 0.7) == 28_000
    assert warm_rewrite_pays(2_000, suffix_tokens(40_000, None), 60)
    assert not warm_rewrite_pays(2_000, suffix_tokens(40_000, 0.7), 60)
