"""Plain Claude Code's auto-compaction threshold, as the cost model's plain session uses it."""

from __future__ import annotations

from ctxwrap.agents.claude.auto_compact import compaction_settings, context_window


def threshold(window: int, env: dict[str, str]) -> int:
    return window - int(compaction_settings(window, env)["reserve_tokens"])


def test_the_window_follows_the_1m_beta_or_model_suffix() -> None:
    # Claude Code 2.1.197 with an API key sends the context-1m beta; a subscription login not
    betas = "claude-code-20250219,context-1m-2025-08-07,interleaved-thinking-2025-05-14"
    assert context_window("claude-opus-4-8", betas) == 1_000_000
    assert context_window("claude-sonnet-4-5[1m]", "") == 1_000_000
    assert context_window("claude-opus-4-8", "claude-code-20250219,oauth-2025-04-20") == 200_000


def test_threshold_is_the_window_less_output_reserve_and_buffer() -> None:
    assert threshold(200_000, {}) == 200_000 - 20_000 - 13_000
    assert threshold(1_000_000, {}) == 967_000  # as Claude Code's own table for this window
    # a smaller max output reserves less
    assert threshold(200_000, {"CLAUDE_CODE_MAX_OUTPUT_TOKENS": "8000"}) == 200_000 - 8_000 - 13_000
    # the percentage override only lowers it
    assert threshold(200_000, {"CLAUDE_AUTOCOMPACT_PCT_OVERRIDE": "50"}) == 90_000
    assert threshold(200_000, {"CLAUDE_AUTOCOMPACT_PCT_OVERRIDE": "99"}) == 167_000
    for bad in ("0", "-5", "150", "half", ""):
        assert threshold(200_000, {"CLAUDE_AUTOCOMPACT_PCT_OVERRIDE": bad}) == 167_000
    s = compaction_settings(200_000, {})
    assert s["enabled"] is True and s["keep_recent_tokens"] == 0


def test_compaction_turned_off() -> None:
    for var in ("DISABLE_COMPACT", "DISABLE_AUTO_COMPACT"):
        assert compaction_settings(200_000, {var: "1"})["enabled"] is False
        assert compaction_settings(200_000, {var: "0"})["enabled"] is True
