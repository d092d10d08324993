"""One headline for every view of a session (issue 22): `ctxwrap stats` text and JSON, the
daemon's totals (pi's footer, /ctx-stats, the shell prompt) all print `Headline.short()` of the
same compute path, rounded the same way."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from ctxwrap import protocol as P
from ctxwrap.headline import headline_of, pct_text, round_half_away, usd_text
from ctxwrap.state.store import Store, connect
from ctxwrap.stats.compute import MECHANISMS, compute_stats, session_headline, session_totals
from ctxwrap.stats.render import render_json, render_text
from ctxwrap.statusline import prompt_segment_text

T0 = 1_796_000_000.0
SID = "cccc3333-claude"


def _call(idx: int, ts: float, sent: int, **saved: int) -> dict[str, Any]:
    row: dict[str, Any] = {
        "session_id": SID,
        "call_index": idx,
        "ts": ts,
        "sent_system": 4000,
        "sent_messages": sent,
        "sent_tools": 2000,
        "head_changed": 0,
        "message_count": idx + 2,
        "model": "claude-opus-4-6",
    }
    for m in MECHANISMS:
        row[f"saved_{m}"] = saved.get(m, 0)
    return row


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "ctxwrap.db"
    store = Store(path)
    store.upsert_session(
        {
            "session_id": SID,
            "session_file": None,
            "cwd": "/work/proj",
            "pid": os.getpid(),
            "pi_version": "2.1.197",
            "pi_package": "@anthropic-ai/claude-code",
            "model": "claude-opus-4-6",
            "started_at": T0,
            "agent": "claude",
        }
    )
    for i in range(6):
        store.insert("llm_calls", _call(i, T0 + 10 * i, 8000 * (i + 1), bash=40_000 * min(i, 3)))
    store.insert(
        "aux_calls",
        {
            "session_id": SID,
            "ts": T0 + 5,
            "task": "digest",
            "mechanism": "bash",
            "backend": "upstream",
            "input_tokens": 3000,
            "output_tokens": 200,
            "ok": 1,
            "elapsed_ms": 5.0,
        },
    )
    store.close()
    return path


def test_rounding_is_one_rule() -> None:
    assert [round_half_away(v) for v in (59.5, 60.49, -0.5, 0.49, -59.5)] == [60, 60, -1, 0, -60]
    assert pct_text(59.5) == "−60%"
    assert pct_text(-3.2) == "+3%"
    assert pct_text(0.2) == "±0%"
    assert usd_text(0.004) == "$0.004"
    assert usd_text(1204.5) == "$1,204.50"
    # half away from zero everywhere, money included (f"{x:.2f}" gives $0.12 and 22 %)
    assert usd_text(0.125) == "$0.13" and usd_text(2.675) == "$2.68"
    assert pct_text(22.5) == "−23%" and pct_text(-22.5) == "+23%"
    assert usd_text(-0.001) == "-$0.001" and usd_text(-0.0001) == "$0.000"


def test_shown_dollars_add_up() -> None:
    """Issue 44 item 10: `$0.52 → $0.37 … $0.16 saved` came from rounding the saving on its
    own; the saving shown is the difference of the two amounts shown."""
    from ctxwrap.headline import Headline, saved_usd_shown

    h = Headline(
        agent="claude",
        llm_calls=3,
        cost=37.0,
        plain_cost=52.0,
        saved_pct=29.4,
        usd=0.3651,
        plain_usd=0.5249,
        saved_usd=0.1598,
        kept_out_tokens=0,
        aux_tokens=0,
        net_tokens=0,
        sent_tokens=0,
        provider_input_tokens=0,
        compactions=0,
        plain_compactions=0,
    )
    assert "$0.52; with ctxwrap $0.37" in h.sentence()
    assert h.money() == "$0.15 saved" and h.short() == "cost −29% · $0.15 saved"
    assert saved_usd_shown(0.5249, 0.3651) == 0.15
    assert saved_usd_shown(0.3651, 0.5249) == -0.15


def test_every_view_shows_the_same_headline(db: Path) -> None:
    conn = connect(db, readonly=True)
    h = session_headline(conn, SID[:8], ttl_s=300.0, prices={})
    assert h.agent == "claude"
    assert h.plain_name == "plain Claude Code"
    head = h.short()
    assert head.startswith("cost −") and "saved" in head, head  # priced: Opus 4.6 is known

    report = compute_stats(conn, session=SID, ttl_s=300.0, prices={})
    text = render_text(report, color=False, width=100)
    assert head in text
    assert "plain Claude Code" in text and "plain pi" not in text
    assert "estimated" in text  # chars/4 figures say so

    import json

    doc = json.loads(render_json(report))
    assert doc["totals"]["headline"]["text"] == head
    assert doc["totals"]["headline"]["saved_pct"] == h.pct

    rw = Store(db).conn  # the daemon's connection
    totals = session_totals(rw, SID, ttl_s=300.0, prices={})
    assert totals.headline == head
    assert totals.headline_pct == h.pct
    assert prompt_segment_text(totals).endswith(f"cost {pct_text(h.pct)}")
    # the pi footer shows totals.headline verbatim (ctxwrap-bridge.ts statusText)


def test_unknown_price_headline_has_no_dollars(db: Path) -> None:
    rw = sqlite3.connect(db)
    rw.execute("UPDATE llm_calls SET model='local/mystery'")
    rw.execute("UPDATE sessions SET model='local/mystery'")
    rw.commit()
    h = session_headline(rw, SID, ttl_s=300.0, prices={})
    assert h.saved_usd is None
    assert h.short().startswith("cost −") and "$" not in h.short()
    assert "cost units" in h.sentence()


def test_nothing_sent_means_no_claim() -> None:
    totals = P.SessionTotals()
    assert prompt_segment_text(totals) == ""


def test_headline_of_a_mixed_set_names_no_agent(db: Path) -> None:
    conn = connect(db, readonly=True)
    report = compute_stats(conn, ttl_s=300.0, prices={})
    assert headline_of(report.totals, None).plain_name == "without ctxwrap"


def test_headline_names_what_did_most(db: Path) -> None:
    conn = connect(db, readonly=True)
    h = session_headline(conn, SID, ttl_s=300.0, prices={})
    assert h.top_mechanisms == ("bash",)
    assert h.mostly() == "mostly by big outputs summarised"
    text = render_text(
        compute_stats(conn, session=SID, ttl_s=300.0, prices={}), color=False, width=200
    )
    assert "mostly by big outputs summarised" in text.splitlines()[1]
