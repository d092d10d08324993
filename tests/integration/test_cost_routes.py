"""The cost model's routes on a real daemon: what the bridge posts at session start, per LLM
call, at compaction and at turn end lands in the store, and the totals the status line shows
carry the cache-priced saving and the compactions."""

from __future__ import annotations

import os
import sqlite3
import time
from typing import Any

from support import Xdg, client, daemon_process

SID = "dddd4444-cost-routes"
MODEL = {
    "provider": "anthropic",
    "id": "claude-sonnet-4-5",
    "api": "anthropic-messages",
    "cost": {"input": 3, "output": 15, "cacheRead": 0.3, "cacheWrite": 3.75},
    "context_window": 1000,
}
COMPACTION = {"enabled": True, "reserve_tokens": 200, "keep_recent_tokens": 200}


def llm_call(i: int, sent: int, plain: int, sp: int | None, pp: int | None) -> dict[str, Any]:
    return {
        "session_id": SID,
        "call_index": i,
        "message_count": 2 + i,
        "head_changed": False,
        "sent_chars": {"system": 240, "messages": (sent - 100) * 4, "tools": 160},
        "saved_chars": {"bash": (plain - sent) * 4},
        "sent_prefix_chars": None if sp is None else sp * 4,
        "plain_prefix_chars": None if pp is None else pp * 4,
        "plain_summary_chars": (plain - 100) * 4,
        "prompt_index": 0,
        "model": "anthropic/claude-sonnet-4-5",
    }


def test_cost_figures_reach_the_status_line_totals(xdg: Xdg) -> None:
    with daemon_process(xdg), client(xdg) as c:
        start = {
            "session_id": SID,
            "cwd": "/w",
            "pid": os.getpid(),
            "pi_version": "1.6.0",
            "model": MODEL,
            "compaction": COMPACTION,
        }
        r = c.post("/v1/sessions/start", json=start)
        assert r.status_code == 200, r.text
        assert r.json()["totals"]["compactions"] == 0
        rows = [(300, 300, None, None), (350, 600, 300, 300), (400, 900, 350, 600)]
        for i, row in enumerate(rows):
            assert c.post("/v1/llm_call", json=llm_call(i, *row)).status_code == 200
        r = c.post(
            "/v1/compaction",
            json={
                "session_id": SID,
                "tokens_before": 900,
                "summary_chars": 200,
                "summarized_chars": 2400,
            },
        )
        assert r.status_code == 200, r.text
        r = c.post("/v1/turn_end", json={"session_id": SID, "turn_index": 0, "input_tokens": 400})
        assert r.status_code == 200, r.text
        totals = r.json()["totals"]
        # plain pi crosses 1000-200 at call 2 (900 × the provider's 400/350 scale): it compacts
        assert totals["plain_compactions"] == 1 and totals["compactions"] == 1
        assert totals["cost_saved_pct"] is not None
        assert totals["saved_usd"] is not None and totals["cost_usd"] > 0
        assert totals["plain_cost_weighted"] > 0 and totals["cost_weighted"] > 0
        # an older bridge's frames (no cost fields) are still accepted
        old = llm_call(3, 450, 1200, 400, 900)
        for k in (
            "sent_prefix_chars",
            "plain_prefix_chars",
            "plain_summary_chars",
            "prompt_index",
            "model",
        ):
            del old[k]
        assert c.post("/v1/llm_call", json=old).status_code == 200
        time.sleep(0.1)
    conn = sqlite3.connect(xdg.db)
    got = conn.execute(
        "SELECT call_index, sent_prefix_chars, plain_prefix_chars, model FROM llm_calls ORDER BY id"
    ).fetchall()
    assert got[1] == (1, 1200, 1200, "anthropic/claude-sonnet-4-5")
    assert got[3] == (3, None, None, None)
    model_rows = conn.execute(
        "SELECT model, price_input, price_cache_write, context_window, reserve_tokens FROM session_models"
    ).fetchall()
    assert model_rows == [("anthropic/claude-sonnet-4-5", 3.0, 3.75, 1000, 200)]
    assert conn.execute("SELECT tokens_before, summarized_chars FROM compactions").fetchall() == [
        (900, 2400)
    ]


def test_a_record_sent_again_counts_once(xdg: Xdg) -> None:
    """The bridge sends a statistics record again when its answer was lost (a daemon killed
    after storing it): the same record_id is recorded once, on a restarted daemon too; records
    without one (the proxies, an older bridge) are all kept."""
    start = {"session_id": SID, "cwd": "/w", "pid": os.getpid(), "pi_version": "1.6.0"}
    call = {**llm_call(0, 300, 300, None, None), "record_id": "bridge-a:0"}
    turn = {"session_id": SID, "turn_index": 0, "input_tokens": 400, "record_id": "bridge-a:1"}
    for _ in range(2):  # the second daemon is the restarted one
        with daemon_process(xdg), client(xdg) as c:
            assert c.post("/v1/sessions/start", json=start).status_code == 200
            for _ in range(2):
                assert c.post("/v1/llm_call", json=call).status_code == 200
                r = c.post("/v1/turn_end", json=turn)
                assert r.status_code == 200 and r.json()["totals"]["llm_calls"] == 1
    with daemon_process(xdg), client(xdg) as c:
        assert c.post("/v1/sessions/start", json=start).status_code == 200
        other = {**llm_call(0, 300, 300, None, None), "record_id": "bridge-b:0"}  # a resume's
        assert c.post("/v1/llm_call", json=other).status_code == 200
        plain = llm_call(1, 300, 300, None, None)  # no record_id
        for _ in range(2):
            assert c.post("/v1/llm_call", json=plain).status_code == 200
        time.sleep(0.1)
    conn = sqlite3.connect(xdg.db)
    assert conn.execute("SELECT COUNT(*) FROM llm_calls").fetchone() == (4,)
    assert conn.execute("SELECT COUNT(*) FROM turns").fetchone() == (1,)
    conn.close()
