"""Where plain Codex 0.171 compacts (agents/codex/auto_compact.py), and what the Codex
session tells the daemon of it. The 90 % rule and the cap were seen on the real binary
(docs/research/codex-0.171.md)."""

from __future__ import annotations

from typing import Any

import pytest
from support import RecordingDaemon, codex_session

from ctxwrap.agents.codex import auto_compact as AC
from ctxwrap.agents.codex.session import CodexSession


def test_the_catalog_window_and_ninety_percent() -> None:
    assert AC.context_window("gpt-5.5", {}) == 272_000
    assert AC.context_window("gpt-6.1-sol", {}) == 500_000
    assert AC.compaction_limit(272_000, {}) == 244_800
    assert AC.compaction_settings(272_000, {}) == {
        "enabled": True,
        "reserve_tokens": 27_200,
        "keep_recent_tokens": 0,
    }


def test_the_config_sets_the_window_and_a_lower_limit_only() -> None:
    cfg = {"model_context_window": 30_000}
    assert AC.context_window("gpt-5.5", cfg) == 30_000
    assert AC.context_window("a-model-codex-does-not-list", cfg) == 30_000
    assert AC.compaction_limit(30_000, cfg) == 27_000
    # a lower limit is taken; a higher one stays at 90 % of the window (seen: 29,500 → 27k)
    assert AC.compaction_limit(30_000, {"model_auto_compact_token_limit": 4000}) == 4000
    assert AC.compaction_limit(30_000, {"model_auto_compact_token_limit": 29_500}) == 27_000


@pytest.mark.parametrize("bad", [0, -5, True, "30000", 1.5, None])
def test_odd_config_values_are_ignored(bad: Any) -> None:
    assert AC.context_window("gpt-5.5", {"model_context_window": bad}) == 272_000
    assert AC.compaction_limit(100_000, {"model_auto_compact_token_limit": bad}) == 90_000


def test_an_unknown_model_has_no_threshold() -> None:
    assert AC.context_window("gpt-4.1", {}) is None


def _session(model: str, cfg: dict[str, Any]) -> tuple[CodexSession, RecordingDaemon]:
    return codex_session(
        {"model": {"provider": "openai", "id": model}}, provider="openai", compact_config=cfg
    )


def test_the_session_tells_the_daemon_where_plain_codex_compacts() -> None:
    sess, daemon = _session("gpt-5.5", {"model_context_window": 20_000})
    sess.ensure_registered()
    path, start = daemon.posts[0]
    assert path == "/v1/sessions/start"
    assert start["model"] == {"provider": "openai", "id": "gpt-5.5", "context_window": 20_000}
    assert start["compaction"]["reserve_tokens"] == 2000
    assert start["compaction"]["keep_recent_tokens"] == 0
    # the same model again: nothing more; a switch (`/model`): the new one, once
    body = {"model": "gpt-5.5", "input": []}
    sess.record_call(body, [], None)
    assert [p for p, _ in daemon.posts].count("/v1/sessions/model") == 0
    for _ in range(2):
        sess.record_call({"model": "gpt-6.1-sol", "input": []}, [], None)
    switched = [b for p, b in daemon.posts if p == "/v1/sessions/model"]
    assert len(switched) == 1
    assert switched[0]["model"]["context_window"] == 20_000  # the config's window still
    assert switched[0]["compaction"]["reserve_tokens"] == 2000


def test_an_unknown_model_is_told_without_a_window() -> None:
    sess, daemon = _session("gpt-4.1", {})
    sess.ensure_registered()
    _, start = daemon.posts[0]
    assert start["model"] == {"provider": "openai", "id": "gpt-4.1"}
    assert "compaction" not in start


def test_a_daemon_that_registered_the_session_again_is_told_the_switched_model() -> None:
    """Issue 42: the daemon forgot the session (it restarted) and registers it again with the
    start's model; a model switched since is told again with the next call (as under Claude
    Code), else the daemon prices the rest of the thread by the old one."""
    sess, daemon = _session("gpt-5.5", {"model_context_window": 20_000})
    sess.ensure_registered()
    sess.record_call({"model": "gpt-6.1-sol", "input": []}, [], None)
    assert [p for p, _ in daemon.posts].count("/v1/sessions/model") == 1
    assert sess._register_again()
    sess.record_call({"model": "gpt-6.1-sol", "input": []}, [], None)
    switched = [b for p, b in daemon.posts if p == "/v1/sessions/model"]
    assert len(switched) == 2 and switched[-1]["model"]["id"] == "gpt-6.1-sol"
