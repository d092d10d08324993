"""The cost cache: `ctxwrap stats` reuses the figures the daemon priced per session and bucket
while the session has not changed, and its report is identical to pricing every call afresh
(a generated multi-session store with compactions, model switches, aux calls, several days)."""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from ctxwrap.config import Settings
from ctxwrap.mechanisms import cost_accounting as CA
from ctxwrap.state.store import Store, connect
from ctxwrap.stats.compute import GroupBy, compute_stats

NOW = 1_796_000_000.0
DAY = 86_400.0
MODELS = [
    ("anthropic/claude-sonnet-4-5", "anthropic-messages", {"input": 3.0, "output": 15.0}),
    ("openai/gpt-5", "openai-completions", {"input": 1.25, "output": 10.0, "cacheRead": 0.125}),
    ("local/llama", "openai-completions", {}),
]


def generate(db: Path, sessions: int = 12, seed: int = 3) -> list[str]:
    """Sessions of pi 1.6 and 0.73 over a week: small windows (plain pi compacts), real
    compactions (some repeated), model switches, idle gaps past the TTL, aux calls."""
    rng = random.Random(seed)
    store = Store(db)
    sids = []
    for s in range(sessions):
        sid = f"{s:04x}-cache-{rng.getrandbits(24):06x}"
        sids.append(sid)
        t = NOW - 7 * DAY + s * 0.5 * DAY + rng.random() * 3600
        store.upsert_session(
            {
                "session_id": sid,
                "session_file": None,
                "cwd": "/w",
                "pid": 1,
                "pi_version": rng.choice(["1.6.0", "0.73.1"]),
                "pi_package": rng.choice(["pi", "@anthropic-ai/claude-code"]),
                "model": MODELS[0][0],
                "started_at": t,
            }
        )
        model = None
        sent = plain = 0
        prompt = 0
        for i in range(rng.randint(20, 90)):
            if model is None or rng.random() < 0.05:
                model, api, cost = rng.choice(MODELS)
                store.insert(
                    "session_models",
                    {
                        "session_id": sid,
                        "ts": t,
                        "model": model,
                        "api": api,
                        "context_window": rng.choice([None, 40_000, 200_000]),
                        "price_input": cost.get("input"),
                        "price_output": cost.get("output"),
                        "price_cache_read": cost.get("cacheRead"),
                        "price_cache_write": cost.get("cacheWrite"),
                        "compaction_enabled": 1,
                        "reserve_tokens": 16384,
                        "keep_recent_tokens": rng.choice([4000, 20000]),
                    },
                )
            t += rng.choice([2.0, 15.0, 60.0, 400.0, 1000.0])
            if rng.random() < 0.06 and sent > 30_000:  # pi compacts
                before = sent + rng.randint(0, 3000)
                for _ in range(2 if rng.random() < 0.3 else 1):
                    store.insert(
                        "compactions",
                        {
                            "session_id": sid,
                            "ts": t,
                            "reason": "threshold",
                            "tokens_before": before,
                            "summary_chars": rng.randint(2000, 8000),
                            "summarized_chars": rng.choice([None, rng.randint(10_000, 90_000)]),
                            "from_extension": 0,
                        },
                    )
                    t += 0.01
                sent, plain = sent // 8, plain // 8
                head = 1
            else:
                head = 0
            if rng.random() < 0.2:
                prompt += 1
            grow = rng.randint(200, 12_000)
            saved = rng.randint(0, grow * 3)
            prev_sent, prev_plain = sent, plain
            sent, plain = sent + grow, plain + grow + saved
            store.insert(
                "llm_calls",
                {
                    "session_id": sid,
                    "call_index": i,
                    "ts": t,
                    "sent_system": 4000,
                    "sent_messages": sent,
                    "sent_tools": 6000,
                    "saved_bash": saved // 2,
                    "saved_amnesia": plain - sent - saved // 2 - 1000,
                    "saved_writes": 0,
                    "saved_skills": 1500,
                    "saved_tools": -500,
                    "head_changed": head,
                    "message_count": 2 + i,
                    "sent_prefix_chars": None if head else 10_000 + prev_sent,
                    "plain_prefix_chars": None if head else 11_000 + prev_plain,
                    "plain_summary_chars": plain // 3,
                    "prompt_index": prompt,
                    "model": model,
                },
            )
            store.insert(
                "turns",
                {
                    "session_id": sid,
                    "ts": t + 1,
                    "turn_index": i,
                    # the provider counts about 8 % more than chars/4, as real sessions show
                    "input_tokens": rng.randint(0, 50),
                    "output_tokens": rng.randint(100, 120),
                    "cache_read_tokens": (sent + 10_000) * 27 // 100,
                    "cache_write_tokens": 0,
                    "model": model,
                },
            )
            if rng.random() < 0.3:
                store.insert(
                    "aux_calls",
                    {
                        "session_id": sid,
                        "ts": t + 0.5,
                        "task": "digest",
                        "mechanism": rng.choice(["bash", "amnesia", "writes"]),
                        "backend": "pi",
                        "input_tokens": rng.randint(100, 3000),
                        "output_tokens": rng.randint(10, 200),
                        "ok": 1,
                        "elapsed_ms": 1.0,
                        "model": rng.choice([None, "anthropic/claude-haiku-4-5"]),
                    },
                )
        store.end_session(sid, "quit", at=t + 10)
    store.close()
    return sids


def report(conn: sqlite3.Connection, by: GroupBy, since: float | None, **kw: Any) -> Any:
    return compute_stats(conn, by=by, since=since, now=NOW, is_alive=lambda _pid: False, **kw)


GROUPINGS: list[GroupBy] = ["mechanism", "session", "day", "agent"]


def sinces(conn: sqlite3.Connection) -> list[float | None]:
    """None, an aligned --since (local midnight is a 15-minute boundary) and one inside a
    bucket where a session has calls before and after it."""
    mid = conn.execute(
        "SELECT ts FROM llm_calls ORDER BY ts LIMIT 1 OFFSET (SELECT COUNT(*) / 2 FROM llm_calls)"
    ).fetchone()[0]
    aligned = NOW - 4 * DAY - (NOW - 4 * DAY) % 900
    return [None, aligned, mid - 0.5 if mid % 900 >= 1 else mid + 0.5]


def test_cached_figures_are_the_fresh_ones(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "ctxwrap.db"
    sids = generate(db)
    ro = connect(db, readonly=True)
    SINCES = sinces(ro)
    fresh = {(by, since): report(ro, by, since) for by in GROUPINGS for since in SINCES}
    assert fresh["mechanism", None].totals.cost.plain_compactions > 0  # the simulation ran
    assert fresh["mechanism", None].totals.cost.compactions > 0

    # the daemon prices each session into the cache when it ends
    rw = connect(db)
    for sid in sids:
        CA.refresh_cost_cache(rw, sid, Settings())
    assert rw.execute("SELECT COUNT(*) FROM cost_cache").fetchone()[0] == len(sids)

    priced: list[str] = []
    real = CA.PricedSession.refresh

    def spy(self: CA.PricedSession, conn: sqlite3.Connection) -> None:
        priced.append(self.sid)
        real(self, conn)

    monkeypatch.setattr(CA.PricedSession, "refresh", spy)
    for (by, since), want in fresh.items():
        assert report(ro, by, since) == want, (by, since)
    # only the --since inside a bucket re-prices, and only sessions with events in that bucket
    start = int(SINCES[2] / 900) * 900  # type: ignore[operator]
    inside = {
        r[0]
        for table in ("llm_calls", "aux_calls", "compactions")
        for r in ro.execute(
            f"SELECT session_id FROM {table} WHERE ts >= ? AND ts < ?", (start, start + 900)
        )
    }
    assert set(priced) == inside and inside
    priced.clear()

    # a new call invalidates that session only; the report is the fresh one again
    row = dict(rw.execute("SELECT * FROM llm_calls ORDER BY id DESC LIMIT 1").fetchone())
    del row["id"]
    row.update(ts=row["ts"] + 30, call_index=row["call_index"] + 1)
    rw.execute(
        f"INSERT INTO llm_calls ({', '.join(row)}) VALUES ({', '.join('?' for _ in row)})",
        tuple(row.values()),
    )
    monkeypatch.setattr(CA.PricedSession, "refresh", real)
    want = report(ro, "session", None)
    monkeypatch.setattr(CA.PricedSession, "refresh", spy)
    assert report(ro, "session", None) == want
    assert priced == [row["session_id"]]
    priced.clear()
    # the daemon's writable connection caches it again
    report(rw, "session", None, write_cache=True)
    assert report(ro, "session", None) == want and priced == [row["session_id"]]
    # other prices or TTL: priced afresh, not served from the cache
    priced.clear()
    report(ro, "mechanism", None, ttl_s=60.0)
    assert sorted(priced) == sorted(sids)
    ro.close()
    rw.close()


def test_a_database_without_the_cache_table_is_priced_fresh(tmp_path: Path) -> None:
    db = tmp_path / "ctxwrap.db"
    generate(db, sessions=2)
    conn = connect(db)
    want = report(conn, "session", None)
    conn.execute("DROP TABLE cost_cache")  # a daemon of schema 5 wrote this database
    assert report(conn, "session", None) == want
    conn.close()


def replay(
    src: sqlite3.Connection, db: Path, at: tuple[str, ...]
) -> tuple[Store, dict[str, CA.PricedSession]]:
    """Insert `src`'s rows into a new daemon store in time order; after each row of the `at`
    tables, take the turn_end path's figures and check them against pricing afresh."""
    events: list[tuple[float, int, str, dict[str, Any]]] = []
    for order, table in enumerate(
        ("session_models", "compactions", "llm_calls", "turns", "aux_calls")
    ):
        for r in src.execute(f"SELECT * FROM {table}"):
            row = dict(r)
            del row["id"]
            events.append((row["ts"], order, table, row))
    events.sort(key=lambda e: (e[0], e[1]))
    store = Store(db)
    for r in src.execute("SELECT * FROM sessions"):
        store.conn.execute(
            f"INSERT INTO sessions ({', '.join(r.keys())}) VALUES ({', '.join('?' for _ in r)})",
            tuple(r),
        )
    checked = 0
    for _ts, _order, table, row in events:
        store.insert(table, row)
        if table not in at:
            continue
        sid = row["session_id"]
        live = CA.priced_buckets(store.conn, [sid], write=True)[sid]
        fresh = CA.PricedSession(sid, 300.0, None)
        fresh.refresh(store.conn)
        assert live == CA.bucket_figures(fresh.costs()), (table, row)
        checked += 1
    assert checked > 100
    sessions = {k[0]: s for k, s in CA._LIVE[store.conn].items()}
    return store, sessions


def test_the_daemon_prices_a_live_session_incrementally_with_the_fresh_figures(
    tmp_path: Path,
) -> None:
    """Generated sessions replayed into a daemon's store: after every row, the turn_end
    path's figures (and the cache it writes) equal pricing the session afresh; at turn_ends
    only (as the daemon prices), a session is read whole again only when a compaction or a
    model record came, and priced whole again only when recalibration flips a check."""
    full = tmp_path / "full.db"
    sids = generate(full, sessions=6, seed=11)
    src = connect(full, readonly=True)
    every = ("session_models", "compactions", "llm_calls", "turns", "aux_calls")
    store, _ = replay(src, tmp_path / "every.db", every)
    store.close()
    store, sessions = replay(src, tmp_path / "live.db", ("turns",))
    ro = connect(tmp_path / "live.db", readonly=True)
    for sid in sids:
        session = sessions[sid]
        static = src.execute(
            "SELECT (SELECT COUNT(*) FROM compactions WHERE session_id=?)"
            " + (SELECT COUNT(*) FROM session_models WHERE session_id=?)",
            (sid, sid),
        ).fetchone()[0]
        assert session.resets <= static + 1
        assert session.repricings <= max(2, len(session.calls) // 10), (
            session.repricings,
            len(session.calls),
        )
        # ctxwrap stats (read-only) is served from the cache the daemon wrote
        assert CA.priced_buckets(ro, [sid])[sid] == CA.priced_buckets(store.conn, [sid])[sid]
    ro.close()
    store.close()
