"""Cache-priced figures from a real SQLite store: what the daemon records (protocol models in,
rows out) and what `ctxwrap stats` computes from them, against hand-computed values."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from ctxwrap import protocol as P
from ctxwrap.mechanisms import cost_accounting as CA
from ctxwrap.state.store import Store, connect, migrate
from ctxwrap.stats.compute import compute_stats
from ctxwrap.stats.render import render_text

SID = "cccc3333-cost-session"
SONNET_COST = {"input": 3.0, "output": 15.0, "cacheRead": 0.3, "cacheWrite": 3.75}
# tokens per call: (sent, plain, sent prefix, plain prefix); system 60 + tools 40 = base 100
CALLS = [(300, 300, None, None), (350, 600, 300, 300), (400, 900, 350, 600), (450, 1200, 400, 900)]


def build(
    tmp_path: Path,
    *,
    window: int = 1000,
    pi_version: str = "1.6.0",
    calls: list[tuple[int, int, int | None, int | None]] = CALLS,
    compaction: bool = True,
) -> Path:
    db = tmp_path / "ctxwrap.db"
    store = Store(db)
    t0 = time.time() - 100
    store.upsert_session(
        {
            "session_id": SID,
            "session_file": None,
            "cwd": "/w",
            "pid": 1,
            "pi_version": pi_version,
            "pi_package": "pi",
            "model": "anthropic/claude-sonnet-4-5",
            "started_at": t0,
        }
    )
    model = P.ModelRef(
        provider="anthropic",
        id="claude-sonnet-4-5",
        api="anthropic-messages",
        cost=SONNET_COST,
        context_window=window,
    )
    CA.record_session_model(
        store,
        SID,
        model,
        P.CompactionSettings(enabled=True, reserve_tokens=200, keep_recent_tokens=200),
    )
    for i, (sent, plain, sp, pp) in enumerate(calls):
        req = P.LlmCall(
            session_id=SID,
            call_index=i,
            message_count=2 + i,
            sent_chars=P.SizeBreakdown(system=240, messages=(sent - 100) * 4, tools=160),
            saved_chars=P.SavedBreakdown(bash=(plain - sent) * 4),
            sent_prefix_chars=None if sp is None else sp * 4,
            plain_prefix_chars=None if pp is None else pp * 4,
            prompt_index=0,
            model="anthropic/claude-sonnet-4-5",
        )
        store.insert(
            "llm_calls",
            {
                "session_id": SID,
                "call_index": i,
                "ts": t0 + i,
                "sent_system": 240,
                "sent_messages": (sent - 100) * 4,
                "sent_tools": 160,
                "saved_bash": (plain - sent) * 4,
                "saved_amnesia": 0,
                "saved_writes": 0,
                "saved_skills": 0,
                "saved_tools": 0,
                "head_changed": 0,
                "message_count": 2 + i,
            },
        )
        CA.record_call_costs(store, req)  # as the daemon does right after its insert
    store.insert(
        "aux_calls",
        {
            "session_id": SID,
            "ts": t0 + 1.5,
            "task": "digest",
            "mechanism": "bash",
            "backend": "pi",
            "input_tokens": 100,
            "output_tokens": 10,
            "ok": 1,
            "elapsed_ms": 1.0,
        },
    )
    CA.record_aux_model(store, SID, "anthropic/claude-haiku-4-5")
    if compaction:
        CA.record_compaction(
            store, P.Compaction(session_id=SID, tokens_before=900, summary_chars=200)
        )  # now: after the last call
    store.close()
    return db


def test_priced_figures_by_hand(tmp_path: Path) -> None:
    conn = connect(build(tmp_path), readonly=True)
    c = compute_stats(conn, session=SID).totals.cost
    # as sent: 375 + (30+62.5) + (35+62.5) + (40+62.5); see tests/unit/engine/test_cost.py
    assert c.sent_weighted == pytest.approx(667.5)
    # plain pi compacts before call 2 (900 > 1000-200) down to 100 + summary 50 + the last
    # request's 300 (over keepRecentTokens by itself: pi 1.x keeps it whole)
    assert c.plain_weighted == pytest.approx(375 + 405 + 447.5 + 420)
    assert c.plain_compactions == 1 and c.compactions == 1 and c.compactions_avoided == 0
    # plain's summarisation: 500 + pi's prompt 400 in, 50 out × 5; the real one (no measure
    # from the bridge): 900-200 + 400 in, 50 out × 5
    assert c.plain_compaction_weighted == pytest.approx(1150)
    assert c.compaction_weighted == pytest.approx(1350)
    # aux priced by its own model (haiku 1/5): 100 in + 10 out × 5
    assert c.aux_weighted == pytest.approx(150)
    assert c.aux_usd == pytest.approx(100e-6 + 50e-6)
    assert c.saved_weighted == pytest.approx(1647.5 - 667.5 - 150)
    assert c.saved_pct == pytest.approx(round(100 * 830 / 1647.5, 2))
    assert c.total_saved_pct == pytest.approx(round(100 * (2797.5 - 2167.5) / 2797.5, 2))
    assert c.sent_usd == pytest.approx((1050 * 0.3 + 450 * 3.75) / 1e6)
    assert c.saved_usd is not None and c.saved_usd > 0
    text = render_text(compute_stats(conn, session=SID), color=False, width=120, verbose=True)
    # the headline is the whole reduction (requests, aux, summaries): 630 / 2797.5 = 22.5 %
    assert "cost −23% · $" in text.splitlines()[1], text
    assert "compactions 1, plain pi 1 (0 avoided" in text
    conn.close()


def test_unknown_window_simulates_no_compaction_and_unknown_price_stays_unknown(
    tmp_path: Path,
) -> None:
    db = build(tmp_path, window=0)
    conn = connect(db)
    conn.execute(
        "UPDATE session_models SET price_input=0, price_output=0, price_cache_read=0, price_cache_write=0, model='x/local'"
    )
    conn.execute("UPDATE llm_calls SET model='x/local'")
    conn.execute("UPDATE aux_calls SET model=NULL")
    conn.execute("UPDATE sessions SET model='x/local'")
    c = compute_stats(conn, session=SID).totals.cost
    assert c.plain_compactions == 0
    assert c.plain_weighted == pytest.approx(375 + 405 + 435 + 465)  # explicit: from pi's api
    assert c.sent_usd is None and c.saved_usd is None and c.total_saved_usd is None
    # a config override prices it
    over = CA.settings_overrides("x/*=1,2,0.1,1.25")
    c2 = compute_stats(conn, session=SID, prices=over).totals.cost
    assert c2.sent_usd == pytest.approx((1050 * 0.1 + 450 * 1.25) / 1e6)
    conn.close()


def test_pi_073_compacts_before_prompts_only(tmp_path: Path) -> None:
    conn = connect(build(tmp_path, pi_version="0.73.1"), readonly=True)
    c = compute_stats(conn, session=SID).totals.cost
    # one prompt: pi 0.73 checks only when the run ends, so no request is capped, but it
    # compacts once after the last one
    assert c.plain_weighted == pytest.approx(375 + 405 + 435 + 465)
    assert c.plain_compactions == 1
    conn.close()


def test_accounting_migration_keeps_old_rows_priced_as_append_only(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    conn = connect(db)
    conn.execute("PRAGMA user_version = 0")
    from ctxwrap.state import store as store_mod

    for stmt in filter(None, (s.strip() for s in store_mod.MIGRATIONS[1].split(";"))):
        conn.execute(stmt)
    conn.execute("PRAGMA user_version = 1")
    for i, chars in enumerate((400, 800)):
        conn.execute(
            "INSERT INTO llm_calls (session_id, call_index, ts, sent_system, sent_messages, sent_tools,"
            " saved_bash, saved_amnesia, saved_writes, saved_skills, saved_tools) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
            (SID, i, 1000.0 + i, 0, chars, 0, 0, 0, 0, 0, 0),
        )
    assert migrate(conn) == store_mod.SCHEMA_VERSION
    c = compute_stats(conn).totals.cost
    assert c.cache_read_tokens == 100 and c.cache_write_tokens == 200  # 100, then 100 of 200
    conn.close()


def test_cost_settings_env_over_file_over_defaults(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ctxwrap.stats.compute import _cost_settings

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.delenv("PI_CTX_CACHE_TTL_S", raising=False)
    monkeypatch.delenv("PI_CTX_PRICES", raising=False)
    assert _cost_settings() == (300.0, {})
    (tmp_path / "ctxwrap").mkdir()
    (tmp_path / "ctxwrap" / "config.toml").write_text(
        'cache_ttl_s = 3600\nprices = "local/*=1,2,0.1,1.25"\n'
    )
    ttl, prices = _cost_settings()
    assert ttl == 3600 and prices["local/*"].input == 1
    monkeypatch.setenv("PI_CTX_CACHE_TTL_S", "60")
    monkeypatch.setenv("PI_CTX_PRICES", "x=1,1,1,1")
    ttl, prices = _cost_settings()
    assert ttl == 60 and list(prices) == ["x"]
    monkeypatch.setenv("PI_CTX_CACHE_TTL_S", "soon")
    monkeypatch.setenv("PI_CTX_PRICES", "garbage")
    assert _cost_settings() == (300.0, {})


@pytest.mark.parametrize("measured", [None, "first", "second"])
def test_a_compaction_pi_ran_twice_costs_and_counts_twice(
    tmp_path: Path, measured: str | None
) -> None:
    conn = connect(build(tmp_path, pi_version="0.73.1"))
    row = conn.execute("SELECT ts, tokens_before, summary_chars FROM compactions").fetchone()
    conn.execute(
        "INSERT INTO compactions (session_id, ts, reason, tokens_before, summary_chars)"
        " VALUES (?, ?, 'threshold', ?, ?)",
        (SID, row[0] + 0.5, row[1], row[2]),
    )
    if measured is not None:  # the bridge measured one of the two overlapping runs: 400 tokens
        conn.execute(
            "UPDATE compactions SET summarized_chars=1600 WHERE id=(SELECT "
            + ("MIN" if measured == "first" else "MAX")
            + "(id) FROM compactions)"
        )
    c = compute_stats(conn, session=SID).totals.cost
    assert c.compactions == 2  # two entries in pi's session file
    # both summarise the same messages: 900-200 (or the measured 400) + 400 in, 50 out × 5
    each = 1350 if measured is None else 400 + 400 + 250
    assert c.compaction_weighted == pytest.approx(2 * each)
    conn.close()


@pytest.mark.parametrize(("pi_version", "plain_after"), [("1.6.0", 1403), ("0.73.1", 1203)])
def test_plain_pi_grows_across_a_real_compaction_by_what_was_added(
    tmp_path: Path, pi_version: str, plain_after: int
) -> None:
    db = build(tmp_path, window=100_000, pi_version=pi_version)  # plain pi never compacts
    conn = connect(db)
    # pi compacted before the last call: that call carries system + tools (100), the summary
    # (50) and 300 tokens (the new tool result), 200 more for plain pi (a digested output)
    t3 = conn.execute("SELECT ts FROM llm_calls WHERE call_index=3").fetchone()[0]
    conn.execute("UPDATE compactions SET ts=?, tokens_before=?", (t3 - 0.5, 400 + 3 + 300))
    conn.execute(
        "UPDATE llm_calls SET sent_messages=?, saved_bash=? WHERE call_index=3",
        ((50 + 300) * 4, 200 * 4),
    )
    # the provider's usage of the request before it: 400 in, 3 out (pi's tokensBefore is that
    # plus chars/4 of the messages after it: 300)
    conn.execute(
        "INSERT INTO turns (session_id, ts, turn_index, input_tokens, output_tokens,"
        " cache_read_tokens, cache_write_tokens) VALUES (?, ?, 2, 50, 3, 350, 0)",
        (SID, t3 - 0.7),
    )
    costs = CA.load_session_costs(conn, [SID])[SID]
    plain = [p.input_tokens for _ts, _a, p, _c in costs.calls]
    # plain pi had 900 and got the 303 new tokens; pi 1.x compacts with new tool results in,
    # so ctxwrap's saving on them (200) is plain pi's too; pi 0.73 compacts before a prompt
    assert plain == [300, 600, 900, plain_after]
    conn.close()


def _claude_compacts_before_call_3(
    db: Path,
    *,
    before: Callable[[sqlite3.Connection], None] | None = None,
    agent: str = "claude",
) -> sqlite3.Connection:
    """The built session as Claude Code's (or `agent`'s), which compacted (auto) just before
    call 3, its summarisation one of the calls; `before(conn)` runs first, while the session
    has no compaction yet."""
    conn = connect(db)
    conn.execute("UPDATE sessions SET agent=?", (agent,))
    conn.execute("DELETE FROM compactions")
    t3 = conn.execute("SELECT ts FROM llm_calls WHERE call_index=3").fetchone()[0]
    if before is not None:
        before(conn)
    store = Store(db)
    CA.record_compaction(
        store, P.Compaction(session_id=SID, reason="auto", summary_chars=200, priced_as_call=True)
    )
    store.close()
    conn.execute("UPDATE compactions SET ts=?", (t3 - 0.5,))
    return conn


def test_claude_codes_compaction_is_counted_and_priced_as_its_call(tmp_path: Path) -> None:
    """Claude Code's summarisation request passed the proxy as an ordinary call: the
    compaction event counts and adds no cost of its own. The plain session compacts with it
    when the plain model has not compacted as often (here its threshold is out of reach: one
    Anthropic's servers set, say) — its context is never the smaller — at that same request,
    so it goes on from the same summary: the next request as plain would send it."""
    plain_before: list[int] = []

    def drop_and_price(conn: sqlite3.Connection) -> None:
        # after the compaction the real conversation is the summary and what followed it
        # (30 tokens), with 10 tokens kept out by ctxwrap
        conn.execute("UPDATE llm_calls SET sent_messages=120, saved_bash=40 WHERE call_index=3")
        costs = CA.load_session_costs(conn, [SID])[SID]
        plain_before.extend(p.input_tokens for _ts, _a, p, _c in costs.calls)

    db = build(tmp_path, window=100_000, pi_version="2.1.197")  # plain never crosses
    conn = _claude_compacts_before_call_3(db, before=drop_and_price)
    c = compute_stats(conn, session=SID).totals.cost
    assert c.compactions == 1 and c.compaction_weighted == 0.0
    assert c.plain_compactions == 1 and c.plain_compaction_weighted == 0.0
    after = CA.load_session_costs(conn, [SID])[SID]
    plain_after = [p.input_tokens for _ts, _a, p, _c in after.calls]
    assert plain_after[3] == 100 + 30 + 10  # system and tools, the conversation, the saving
    # the summarisation request (call 2) is priced at plain's full size on both sides
    assert plain_after[:3] == plain_before[:3] == [300, 600, 900]
    conn.close()


def test_plain_claude_code_that_compacted_already_does_not_compact_again(tmp_path: Path) -> None:
    """The plain model crossed its own threshold before the session's compaction (its context
    is bigger): the session's compaction is the one plain already ran, not a second."""
    db = build(tmp_path, pi_version="2.1.197")  # window 1000: plain compacts before call 2
    conn = _claude_compacts_before_call_3(db)
    c = compute_stats(conn, session=SID).totals.cost
    assert c.compactions == 1 and c.plain_compactions == 1  # plain's own, before call 2
    conn.close()


@pytest.mark.parametrize(("agent", "version"), [("claude", "2.1.197"), ("codex", "0.171.0")])
def test_plain_summarises_on_its_cached_prefix_and_keeps_nothing(
    tmp_path: Path, agent: str, version: str
) -> None:
    """Claude Code and Codex send their summarisation on the conversation's own prefix, so
    plain's, at its threshold, reads the previous request's 600 tokens from the cache (pi's
    runs uncached) and the summary replaces the whole conversation (pi keeps the newest
    request). The session itself compacted only after its last call (its context was
    smaller), which gives the summary's size (50)."""
    db = build(tmp_path, pi_version=version)  # window 1000: plain compacts before call 2
    conn = connect(db)
    conn.execute("UPDATE sessions SET agent=?", (agent,))
    c = compute_stats(conn, session=SID).totals.cost
    assert c.plain_compactions == 1
    # 600 read × 0.1 + the 300 added and the instruction's 400 written × 1.25 + 50 out × 5
    assert c.plain_compaction_weighted == pytest.approx(60 + 875 + 250)
    costs = CA.load_session_costs(conn, [SID])[SID]
    plain = [p.input_tokens for _ts, _a, p, _c in costs.calls]
    assert plain[2] == 100 + 50  # system and tools, the summary; nothing kept (pi: + 300)
    conn.close()


def test_the_agents_own_summarisation_is_plains_compaction(tmp_path: Path) -> None:
    """Plain crosses its threshold at the very request that is Claude Code's summarisation
    (a compaction priced as a call follows it): that request is plain's summarisation too,
    at its full size, not one more compaction of the model's before it."""
    db = build(tmp_path, pi_version="2.1.197")  # window 1000: plain crosses at call 2
    conn = _claude_compacts_before_call_3(db)
    c = compute_stats(conn, session=SID).totals.cost
    assert c.compactions == 1 and c.plain_compactions == 1
    assert c.plain_compaction_weighted == 0.0  # its cost is call 2's
    costs = CA.load_session_costs(conn, [SID])[SID]
    plain = [p.input_tokens for _ts, _a, p, _c in costs.calls]
    assert plain[2] == 900  # before: 150, after a modelled compaction priced on its own
    conn.close()


@pytest.mark.parametrize("agent", ["claude", "codex"])
def test_a_compaction_whose_next_request_is_not_recorded_yet_is_plains_too(
    tmp_path: Path, agent: str
) -> None:
    """The proxy records a call off the request thread, so `stats` can read the session's
    compaction before the request after it: plain's is counted then too (it read 1 vs 0)."""
    db = build(tmp_path, window=100_000, pi_version="2.1.197")  # plain never crosses
    conn = _claude_compacts_before_call_3(db, agent=agent)
    conn.execute("DELETE FROM llm_calls WHERE call_index=3")
    c = compute_stats(conn, session=SID).totals.cost
    assert c.compactions == c.plain_compactions == 1
    assert c.plain_compaction_weighted == 0.0
    conn.close()


@pytest.mark.parametrize(
    ("pi_version", "reason", "from_extension", "as_call", "plain_compacts"),
    [
        ("1.6.0", "manual", False, False, True),  # the user's /compact: plain runs it too
        ("1.6.0", "manual", True, False, False),  # ctxwrap asked pi (compact_like_plain)
        ("1.6.0", "threshold", False, False, False),  # pi's own: plain compacts on its own
        ("2.1.197", "manual", False, True, True),  # Claude Code's /compact, its call priced
        ("0.171.0", "auto", False, True, True),  # Codex's: plain compacts with each
    ],
)
def test_the_users_own_compaction_happens_in_the_plain_session_too(
    tmp_path: Path,
    pi_version: str,
    reason: str,
    from_extension: bool,
    as_call: bool,
    plain_compacts: bool,
) -> None:
    db = build(tmp_path, window=100_000, pi_version=pi_version)  # never over the threshold
    conn = connect(db)
    agent = {"2.1.197": "claude", "0.171.0": "codex"}.get(pi_version, "pi")
    conn.execute("UPDATE sessions SET agent=?", (agent,))
    conn.execute("DELETE FROM compactions")
    t3 = conn.execute("SELECT ts FROM llm_calls WHERE call_index=3").fetchone()[0]
    conn.execute("UPDATE llm_calls SET sent_messages=?, saved_bash=0 WHERE call_index=3", (200,))
    store = Store(db)
    CA.record_compaction(
        store,
        P.Compaction(
            session_id=SID,
            reason=reason,
            summary_chars=200,
            from_extension=from_extension,
            priced_as_call=as_call,
        ),
    )
    store.close()
    conn.execute("UPDATE compactions SET ts=?", (t3 - 0.5,))
    costs = CA.load_session_costs(conn, [SID])[SID]
    plain = [p.input_tokens for _ts, _a, p, _c in costs.calls]
    comps = [c for _ts, _a, _p, c in costs.calls if c is not None]
    c = compute_stats(conn, session=SID).totals.cost
    assert c.compactions == 1
    if not plain_compacts:
        assert plain == [300, 600, 900, 900] and comps == [] and c.plain_compactions == 0
        text = render_text(compute_stats(conn, session=SID), color=False, width=120, verbose=True)
        assert "compactions 1, plain " in text and " 0 (1 more than plain " in text, text
        assert "-1 avoided" not in text
    else:
        # plain compacted with it: system and tools (100), the summary (50), and under pi what
        # it keeps of the recent messages (the newest whole request's 300 covers
        # keep_recent_tokens 200); Claude Code and Codex keep nothing
        assert c.plain_compactions == 1
        assert plain[3] == 100 + 50 + (0 if as_call else 300)
        # Claude Code's summarisation request was one of the calls, priced on both sides
        assert (c.plain_compaction_weighted == 0) is as_call
    conn.close()


@pytest.mark.parametrize(
    ("version", "agent", "check"),
    [("0.73.1", "pi", "prompt"), ("1.6.0", "pi", "turn"), ("0.171.0", "codex", "turn")],
)
def test_when_plain_checks_for_compaction_follows_the_agent_not_its_version(
    tmp_path: Path, version: str, agent: str, check: str
) -> None:
    conn = connect(build(tmp_path, pi_version=version))
    conn.execute("UPDATE sessions SET agent=?", (agent,))
    assert CA.load_session_costs(conn, [SID])[SID].policy.check == check
    conn.close()


def test_the_report_marks_the_call_after_a_recorded_compaction(tmp_path: Path) -> None:
    """Claude Code and Codex send no head change: the report's compaction marker comes from
    the recorded compaction (on the call after it; none for one after the last call)."""
    from ctxwrap.report._data import from_db

    db = build(tmp_path, window=100_000, pi_version="2.1.197")
    conn = connect(db)
    conn.execute("UPDATE sessions SET agent='claude'")
    t2 = conn.execute("SELECT ts FROM llm_calls WHERE call_index=2").fetchone()[0]
    conn.execute("UPDATE compactions SET ts=?, priced_as_call=1, reason='auto'", (t2 - 0.5,))
    assert [c.compaction for c in from_db(conn, SID).calls] == [False, False, True, False]
    conn.execute("UPDATE compactions SET ts=ts+100")
    assert not any(c.compaction for c in from_db(conn, SID).calls)
    conn.close()


def _turn(
    store: Store, i: int, read: int, write: int, *, linked: bool = True, fresh: int = 5
) -> None:
    from ctxwrap.mechanisms.accounting import record_turn

    record_turn(
        store,
        P.TurnEnd(
            session_id=SID,
            turn_index=i,
            input_tokens=fresh,
            output_tokens=10,
            cache_read_tokens=read,
            cache_write_tokens=write,
            call_index=i if linked else None,
        ),
    )


def test_live_stats_price_the_cache_entry_the_provider_reported(tmp_path: Path) -> None:
    """A turn's usage names its call (`TurnEnd.call_index`); the call is priced on the entry
    the provider read — a miss, an older entry — as `ctxwrap replay` prices a transcript."""
    db = build(tmp_path)
    with connect(db, readonly=True) as conn:
        ideal = compute_stats(conn, session=SID).totals.cost
    assert ideal.sent_weighted == pytest.approx(667.5)
    store = Store(db)
    # entries end at 300 and 350; request 2 read nothing; request 3 read request 1's entry
    for i, (read, write) in enumerate([(0, 300), (300, 50), (0, 400), (350, 100)]):
        _turn(store, i, read, write)
    links = [r[0] for r in store.conn.execute("SELECT llm_call_id FROM turns ORDER BY id")]
    calls = [r[0] for r in store.conn.execute("SELECT id FROM llm_calls ORDER BY id")]
    assert links == calls
    store.close()
    with connect(db, readonly=True) as conn:
        c = compute_stats(conn, session=SID).totals.cost
    # request 2: 400 written (500) instead of 350 read + 50 written (97.5); request 3: the
    # 350 it shares with request 1 read, 100 written (160) instead of 400 read, 50 written
    assert c.sent_weighted == pytest.approx(375 + 92.5 + 500 + 160)
    assert c.plain_weighted > ideal.plain_weighted  # plain missed at request 2 as well
    # and the view says so: which requests the cache served otherwise than their content had
    # them read (request 3's older entry is within 64 tokens of that: not counted)
    with connect(db, readonly=True) as conn:
        report = compute_stats(conn, session=SID)
        p = report.totals.provider
        assert (p.cache_nothing, p.cache_older_entry, p.cache_head_only) == (1, 0, 0)
        text = render_text(report, color=False, width=120, verbose=True)
        assert "the provider's cache missed: 1 request read nothing, 0 an older entry" in text, text
        # a --since after the miss counts only what follows it
        later = compute_stats(conn, session=SID, since=time.time() - 100 + 2.5).totals.provider
        assert later.cache_nothing == 0
        # the report's notes say the same
        from ctxwrap.report._data import from_db

        conn.row_factory = sqlite3.Row
        notes = " ".join(from_db(conn, SID).notes)
        assert "missed on 1 of these requests" in notes and "1 read nothing" in notes, notes


def test_a_usage_that_arrives_after_its_call_was_priced_prices_it_again(tmp_path: Path) -> None:
    db = build(tmp_path)
    live = CA.PricedSession(SID, 300.0, None)
    with connect(db, readonly=True) as conn:
        live.refresh(conn)  # the daemon priced every call before any usage came
    store = Store(db)
    for i, (read, write) in enumerate([(0, 300), (300, 50), (0, 400), (350, 100)]):
        _turn(store, i, read, write)
    _turn(store, 4, 0, 0, linked=False)  # a side request: paid, but of no call
    store.close()
    with connect(db, readonly=True) as conn:
        live.refresh(conn)
        fresh = CA.PricedSession(SID, 300.0, None)
        fresh.refresh(conn)
    assert [c[1] for c in live.costs().calls] == [c[1] for c in fresh.costs().calls]
    assert [c[2] for c in live.costs().calls] == [c[2] for c in fresh.costs().calls]
    assert live.costs().calls[2][1].cache_read_tokens == 0


def test_a_provider_that_never_caches_is_priced_uncached_on_both_sides(tmp_path: Path) -> None:
    """A provider that has counted ten requests and never read or written its cache (a local
    model, some gateways) bills every input token fresh: live stats price both sides so, as
    replay does. Before, they were priced on an ideal cache (each request's earlier part read
    at a tenth of input): the saving's share came out far smaller than the bill's."""
    calls: list[tuple[int, int, int | None, int | None]] = [
        (300 + 50 * i, 300 + 300 * i, 250 + 50 * i if i else None, 300 * i if i else None)
        for i in range(12)
    ]
    db = build(tmp_path, window=1_000_000, calls=calls, compaction=False)
    store = Store(db)
    for i in range(9):
        _turn(store, i, 0, 0, fresh=calls[i][0])
    store.close()
    live = CA.PricedSession(SID, 300.0, None)  # the daemon's, priced as usage comes
    with connect(db, readonly=True) as conn:
        nine = compute_stats(conn, session=SID).totals.cost
        live.refresh(conn)
    sent = sum(c[0] for c in calls)
    plain = sum(c[1] for c in calls)
    assert nine.sent_weighted < 0.5 * sent  # nine requests say nothing yet: the ideal cache
    store = Store(db)
    for i in range(9, 12):
        _turn(store, i, 0, 0, fresh=calls[i][0])
    store.close()
    with connect(db, readonly=True) as conn:
        c = compute_stats(conn, session=SID).totals.cost
    assert c.sent_weighted == pytest.approx(sent)
    assert c.plain_weighted == pytest.approx(plain)
    # and the daemon, which priced the session before the tenth usage, prices it again
    with connect(db, readonly=True) as conn:
        live.refresh(conn)
    assert all(c[1].cache_read_tokens == c[1].cache_write_tokens == 0 for c in live.costs().calls)


def test_usage_without_a_call_index_is_priced_on_the_ideal_cache(tmp_path: Path) -> None:
    """An older adapter's turns (no call_index): nothing is linked, the ideal cache stays; so
    does a call whose usage is empty (a failed request's: no miss, nothing recorded)."""
    db = build(tmp_path)
    store = Store(db)
    for i, (read, write) in enumerate([(0, 300), (300, 50), (0, 0), (350, 100)]):
        _turn(store, i, read, write, linked=i in (0, 1, 2), fresh=0)
    store.close()
    with connect(db, readonly=True) as conn:
        assert compute_stats(conn, session=SID).totals.cost.sent_weighted == pytest.approx(667.5)


def test_a_call_measured_against_its_conversations_previous_reads_that_entry(
    tmp_path: Path,
) -> None:
    """`LlmCall.prefix_of` (a proxy: a sub-agent's call came between): the call is priced on
    the entry of the call it was measured against, the one its usage names."""
    db = build(tmp_path)
    store = Store(db)
    # call 2 is another conversation's (it shares the system prompt alone); call 3 continues
    # call 1's conversation, all of whose 350 tokens it shares
    store.conn.execute("UPDATE llm_calls SET sent_prefix_chars = 400 WHERE call_index = 2")
    store.conn.execute(
        "UPDATE llm_calls SET sent_prefix_chars = 1400, prefix_of = 1 WHERE call_index = 3"
    )
    store.conn.commit()
    for i, (read, write) in enumerate([(0, 300), (300, 50), (100, 300), (350, 100)]):
        _turn(store, i, read, write)
    store.close()
    with connect(db, readonly=True) as conn:
        live = CA.PricedSession(SID, 300.0, None)
        live.refresh(conn)
        assert live.calls[3].prefix_of == 1 and live.calls[3].read_from == 1
        assert live.costs().calls[3][1].cache_read_tokens == 350
        # what their content had them read (call 2 shared the system prompt alone): nothing
        # the provider's cache did of its own to report
        p = compute_stats(conn, session=SID).totals.provider
        assert (p.cache_older_entry, p.cache_head_only, p.cache_nothing) == (0, 0, 0)
    # without it, the way back through call 2 keeps only what call 2 shared
    store = Store(db)
    store.conn.execute("UPDATE llm_calls SET prefix_of = NULL")
    store.conn.commit()
    store.close()
    with connect(db, readonly=True) as conn:
        fresh = CA.PricedSession(SID, 300.0, None)
        fresh.refresh(conn)
        assert fresh.costs().calls[3][1].cache_read_tokens == 100
