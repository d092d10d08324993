"""`ctxwrap stats --by agent` over a real SQLite store (schema 2: sessions.agent)."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from ctxwrap.state.store import Store, agent_of, connect
from ctxwrap.stats.compute import compute_stats


def _call(store: Store, sid: str, sent: int, saved: int) -> None:
    store.insert(
        "llm_calls",
        {
            "session_id": sid,
            "call_index": 0,
            "ts": time.time(),
            "sent_system": 0,
            "sent_messages": sent,
            "sent_tools": 0,
            "saved_bash": saved,
            "saved_amnesia": 0,
            "saved_writes": 0,
            "saved_skills": 0,
            "saved_tools": 0,
        },
    )


def test_groups_by_agent(tmp_path: Path) -> None:
    store = Store(tmp_path / "db.sqlite")
    for sid, pkg in [
        ("p1", "@earendil-works/pi-coding-agent"),
        ("c1", "@anthropic-ai/claude-code"),
    ]:
        store.upsert_session(
            {
                "session_id": sid,
                "session_file": None,
                "cwd": "/",
                "pid": 0,
                "pi_version": "1",
                "pi_package": pkg,
                "model": None,
                "started_at": time.time(),
            }
        )
    _call(store, "p1", 4000, 400)
    _call(store, "c1", 8000, 4000)
    _call(store, "c1", 8000, 4000)
    report = compute_stats(connect(store.path, readonly=True), by="agent", is_alive=lambda _: False)
    groups = {g.key: g.figures for g in report.groups}
    assert set(groups) == {"pi", "claude"}
    assert groups["claude"].llm_calls == 2 and groups["pi"].llm_calls == 1
    assert groups["claude"].saved_tokens == 2000


def test_agent_of_prefers_the_explicit_field() -> None:
    assert agent_of({"agent": "claude"}) == "claude"
    assert agent_of({"pi_package": "@anthropic-ai/claude-code"}) == "claude"
    assert agent_of({"pi_package": "@mariozechner/pi-coding-agent"}) == "pi"
    assert agent_of({"agent": "evil", "pi_package": None}) == "pi"


def test_old_database_migrates_to_agent_pi(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    conn = sqlite3.connect(path)
    from ctxwrap.state.store import MIGRATIONS

    conn.executescript(MIGRATIONS[1])
    conn.execute(
        "INSERT INTO sessions (session_id, cwd, pid, started_at) VALUES ('old', '/', 1, 0)"
    )
    conn.execute("PRAGMA user_version = 1")
    conn.commit()
    conn.close()
    store = Store(path)
    assert [tuple(r) for r in store.query("SELECT session_id, agent FROM sessions")] == [
        ("old", "pi")
    ]
