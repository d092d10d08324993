"""`ctxwrap stats`: figures against hand-computed values on a real SQLite store, the JSON schema,
groupings, filters, and the real CLI (piped, NO_COLOR on a PTY, empty, --watch)."""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import sqlite3
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxwrap.errors import NotFoundError
from ctxwrap.state.store import Store, connect, migrate
from ctxwrap.stats.compute import MECHANISMS, chars_to_tokens, compute_stats, parse_since
from ctxwrap.stats.render import render_json, render_text

CTXWRAP = Path(sys.executable).parent / "ctxwrap"
DAY1 = datetime(2026, 11, 28, 12, 0).timestamp()  # local time, like the CLI's day rows
DAY2 = datetime(2026, 11, 29, 12, 0).timestamp()
A = "aaaa1111-session-a"
B = "bbbb2222-session-b"


def _call(sid: str, idx: int, ts: float, sent: tuple[int, int, int], **kw: int) -> dict[str, Any]:
    row: dict[str, Any] = {
        "session_id": sid,
        "call_index": idx,
        "ts": ts,
        "sent_system": sent[0],
        "sent_messages": sent[1],
        "sent_tools": sent[2],
        "head_changed": kw.pop("head_changed", 0),
        "message_count": kw.pop("message_count", 0),
    }
    for m in MECHANISMS:
        row[f"saved_{m}"] = kw.pop(m, 0)
    assert not kw
    return row


def _aux(sid: str, ts: float, mech: str, tin: int, tout: int, ok: int = 1) -> dict[str, Any]:
    task = {"bash": "digest", "amnesia": "tag", "writes": "fact"}[mech]
    return {
        "session_id": sid,
        "ts": ts,
        "task": task,
        "mechanism": mech,
        "backend": "pi",
        "input_tokens": tin,
        "output_tokens": tout,
        "ok": ok,
        "elapsed_ms": 10.0,
    }


def populate(db: Path) -> None:
    """Session A (live: our own pid) on day 1, session B (ended) on day 2.

    Expected, by hand (tokens = chars/4 away from zero, per mechanism):
      bash    8000 ch → 2000;  aux 1000+200        → net   800
      amnesia 1000 ch →  250;  aux  300+5 (failed)  → net   -55
      writes   2-10 ch → -2;   aux   50+10         → net   -62
      skills  1600 ch →  400;  aux 0               → net   400
      saved 2648, aux 1565, net 1083; sent 12000 ch → 3000; plain 5648
    """
    store = Store(db)
    store.upsert_session(
        {
            "session_id": A,
            "session_file": None,
            "cwd": "/w",
            "pid": os.getpid(),
            "pi_version": "1.6.0",
            "pi_package": None,
            "model": "m/a",
            "started_at": DAY1 - 60,
        }
    )
    store.upsert_session(
        {
            "session_id": B,
            "session_file": None,
            "cwd": "/w",
            "pid": 1,
            "pi_version": "1.6.0",
            "pi_package": None,
            "model": "m/b",
            "started_at": DAY2 - 60,
        }
    )
    store.end_session(B, "quit", at=DAY2 + 600)
    rows = [
        _call(A, 0, DAY1, (400, 4000, 400), bash=4000, skills=800, message_count=10),
        # a compaction: the head changed and the message list shrank
        _call(
            A,
            1,
            DAY1 + 10,
            (400, 4400, 400),
            bash=4000,
            amnesia=1000,
            writes=2,
            skills=800,
            head_changed=1,
            message_count=3,
        ),
        # a head change with no earlier call to compare with: "other"
        _call(B, 0, DAY2, (1000, 1000, 0), writes=-10, head_changed=1, message_count=5),
    ]
    for r in rows:
        store.insert("llm_calls", r)
    store.insert("aux_calls", _aux(A, DAY1, "bash", 1000, 200))
    store.insert("aux_calls", _aux(A, DAY1 + 5, "amnesia", 300, 5, ok=0))
    store.insert("aux_calls", _aux(B, DAY2, "writes", 50, 10))
    store.insert(
        "turns",
        {
            "session_id": A,
            "ts": DAY1 + 1,
            "turn_index": 0,
            "input_tokens": 100,
            "output_tokens": 20,
            "cache_read_tokens": 500,
            "cache_write_tokens": 50,
            "model": "m/a",
        },
    )
    store.close()


@pytest.fixture
def state(tmp_path: Path) -> Path:
    populate(tmp_path / "ctxwrap" / "ctxwrap.db")
    return tmp_path


@pytest.fixture
def conn(state: Path) -> sqlite3.Connection:
    return connect(state / "ctxwrap" / "ctxwrap.db", readonly=True)


def run_cli(state: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "XDG_STATE_HOME": str(state), **env}
    if "NO_COLOR" not in env:
        full.pop("NO_COLOR", None)  # the developer's own setting must not decide the test
    return subprocess.run(
        [str(CTXWRAP), "stats", *args], env=full, capture_output=True, text=True, timeout=30
    )


# -- figures ------------------------------------------------------------------------------------


def test_tokens_round_away_from_zero() -> None:
    assert [chars_to_tokens(c) for c in (0, 1, 4, 5, -1, -4, -5, -8)] == [
        0,
        1,
        1,
        2,
        -1,
        -1,
        -2,
        -2,
    ]


def test_totals_and_mechanisms_match_hand_computation(conn: sqlite3.Connection) -> None:
    r = compute_stats(conn)
    t = r.totals
    by = {m.mechanism: m for m in t.mechanisms}
    assert [m.mechanism for m in t.mechanisms] == list(MECHANISMS)
    assert (by["bash"].saved_tokens, by["bash"].aux_tokens, by["bash"].net_tokens) == (
        2000,
        1200,
        800,
    )
    assert (by["amnesia"].saved_tokens, by["amnesia"].net_tokens) == (250, -55)
    assert (by["amnesia"].aux_calls, by["amnesia"].aux_failed) == (1, 1)
    assert (by["writes"].saved_chars, by["writes"].saved_tokens, by["writes"].net_tokens) == (
        -8,
        -2,
        -62,
    )
    assert (by["skills"].saved_tokens, by["skills"].net_tokens) == (400, 400)
    assert by["tools"].saved_tokens == 0
    assert (t.saved_tokens, t.aux_tokens, t.net_tokens) == (2648, 1565, 1083)
    assert (t.aux_input_tokens, t.aux_output_tokens) == (1350, 215)
    assert (t.sent_chars, t.sent_tokens, t.plain_tokens) == (12000, 3000, 5648)
    assert t.saved_pct == round(100 * 2648 / 5648, 2)
    assert (t.llm_calls, t.head_changes, t.head_changes_compaction) == (3, 2, 1)
    assert (t.provider.turns, t.provider.input_tokens, t.provider.cache_read_tokens) == (
        1,
        100,
        500,
    )
    assert r.sessions == 2
    assert r.live_sessions == (A,)
    assert not r.empty


def test_one_session_with_a_negative_net(conn: sqlite3.Connection) -> None:
    t = compute_stats(conn, session="bbbb").totals  # a unique prefix is enough
    assert (t.saved_tokens, t.aux_tokens, t.net_tokens) == (-3, 60, -63)
    assert (t.sent_tokens, t.plain_tokens) == (500, 497)
    assert t.head_changes == 1 and t.head_changes_compaction == 0


def test_unknown_or_ambiguous_session(conn: sqlite3.Connection) -> None:
    with pytest.raises(NotFoundError):
        compute_stats(conn, session="zzzz")
    with pytest.raises(NotFoundError):
        compute_stats(conn, session="")  # matches both


def test_by_session(conn: sqlite3.Connection) -> None:
    r = compute_stats(conn, by="session")
    assert [g.key for g in r.groups] == [A, B]
    a, b = r.groups
    assert a.session is not None and a.session.live and a.session.model == "m/a"
    assert b.session is not None and not b.session.live and b.session.end_reason == "quit"
    assert a.figures.net_tokens == 800 - 55 + 0 + 400 + (1 - 0)  # writes: 2 ch → 1 token
    assert b.figures.net_tokens == -63


def test_dead_pid_is_not_live(conn: sqlite3.Connection) -> None:
    r = compute_stats(conn, by="session", is_alive=lambda pid: False)
    assert r.live_sessions == ()
    assert all(g.session is not None and not g.session.live for g in r.groups)


def test_by_day(conn: sqlite3.Connection) -> None:
    r = compute_stats(conn, by="day")
    assert [g.key for g in r.groups] == ["2026-11-28", "2026-11-29"]
    assert [g.figures.llm_calls for g in r.groups] == [2, 1]
    assert r.groups[1].figures.net_tokens == -63
    assert sum(g.figures.saved_chars for g in r.groups) == r.totals.saved_chars


def test_since_filters_every_table(conn: sqlite3.Connection) -> None:
    t = compute_stats(conn, since=parse_since("2026-11-29")).totals
    assert (t.llm_calls, t.aux_tokens, t.provider.turns, t.net_tokens) == (1, 60, 0, -63)
    # compaction is judged against the previous call even when that call is filtered out
    t = compute_stats(conn, since=DAY1 + 5).totals
    assert (t.llm_calls, t.head_changes_compaction) == (2, 1)


def test_parse_since_forms() -> None:
    now = 1_000_000.0
    assert parse_since("2h", now=now) == now - 7200
    assert parse_since("3d", now=now) == now - 3 * 86400
    assert parse_since("90m", now=now) == now - 5400
    assert parse_since("2026-11-30") == datetime(2026, 11, 30).timestamp()
    utc10 = datetime(2026, 11, 30, 10, tzinfo=UTC).timestamp()
    assert parse_since("2026-11-30T10:00:00+00:00") == utc10
    assert parse_since("2026-11-30T10:00:00Z") == utc10
    assert parse_since("2026-11-30T12:00:00+02:00") == utc10
    with pytest.raises(ValueError):
        parse_since("yesterday")


# -- renderers ----------------------------------------------------------------------------------

FIGURE_KEYS = {
    "llm_calls",
    "failed_tries",
    "headline",
    "head_changes",
    "head_changes_compaction",
    "sent_chars",
    "saved_chars",
    "sent_tokens",
    "saved_tokens",
    "plain_tokens",
    "saved_pct",
    "aux_calls",
    "aux_failed",
    "aux_input_tokens",
    "aux_output_tokens",
    "aux_tokens",
    "net_tokens",
    "provider",
    "mechanisms",
    "cost",
    "money",
}
COST_KEYS = {
    "sent_weighted",
    "plain_weighted",
    "aux_weighted",
    "saved_weighted",
    "saved_pct",
    "sent_usd",
    "plain_usd",
    "aux_usd",
    "saved_usd",
    "cache_read_tokens",
    "cache_write_tokens",
    "uncached_input_tokens",
    "plain_input_tokens",
    "plain_cache_read_tokens",
    "plain_cache_write_tokens",
    "plain_uncached_input_tokens",
    "compactions",
    "plain_compactions",
    "compactions_avoided",
    "compaction_weighted",
    "plain_compaction_weighted",
    "compaction_usd",
    "plain_compaction_usd",
    "total_weighted",
    "total_plain_weighted",
    "total_saved_weighted",
    "total_saved_pct",
    "total_saved_usd",
    "aux_share_pct",
}
MECH_KEYS = {
    "mechanism",
    "saved_chars",
    "saved_tokens",
    "aux_calls",
    "aux_failed",
    "aux_input_tokens",
    "aux_output_tokens",
    "aux_tokens",
    "net_tokens",
}


def test_json_schema_is_pinned(conn: sqlite3.Connection) -> None:
    doc = json.loads(render_json(compute_stats(conn, by="session")))
    assert doc["schema"] == 1
    assert set(doc) == {
        "schema",
        "generated_at",
        "filter",
        "by",
        "empty",
        "sessions",
        "live_sessions",
        "incomplete_sessions",
        "needed_again",
        "thinking_bound_models",
        "unpriced_models",
        "costs_more_because",  # --session ID that cost more than plain: why (else null)
        "totals",
        "groups",
    }
    assert set(doc["needed_again"]) == {"interventions", "needed_again", "share_pct", "mechanisms"}
    assert set(doc["filter"]) == {"session", "since"}
    assert set(doc["totals"]) == FIGURE_KEYS
    assert set(doc["totals"]["provider"]) == {
        "turns",
        "input_tokens",
        "output_tokens",
        "cache_read_tokens",
        "cache_write_tokens",
        "cache_older_entry",
        "cache_head_only",
        "cache_nothing",
    }
    assert all(set(m) == MECH_KEYS for m in doc["totals"]["mechanisms"])
    assert set(doc["totals"]["money"]) == {
        "plain_usd",
        "usd",
        "saved_usd",
        "partial",
        "unpriced_sessions",
    }
    assert set(doc["totals"]["cost"]) == COST_KEYS
    assert all(set(g["cost"]) == COST_KEYS for g in doc["groups"])
    for g in doc["groups"]:
        assert set(g) == FIGURE_KEYS | {"key", "session"}
        assert set(g["session"]) == {
            "session_id",
            "live",
            "started_at",
            "ended_at",
            "end_reason",
            "incomplete",
            "model",
            "cwd",
            "agent",
        }
    assert doc["totals"]["net_tokens"] == 1083


def test_text_without_color_has_no_escapes(conn: sqlite3.Connection) -> None:
    r = compute_stats(conn)
    plain = render_text(r, color=False, width=100)
    assert "\x1b" not in plain and "█" not in plain
    assert "-55" in plain and "1,083" in plain
    colored = render_text(r, color=True, width=100)
    assert "\x1b[31m-55\x1b[0m" in colored
    # the bar chart goes first when the words of the mechanisms need the room
    assert "█" in render_text(r, color=True, width=160)


# -- the real CLI -------------------------------------------------------------------------------


def test_cli_piped_text(state: Path) -> None:
    for by in ("mechanism", "session", "day"):
        p = run_cli(state, "--by", by)
        assert p.returncode == 0, p.stderr
        assert "\x1b" not in p.stdout and "█" not in p.stdout
    p = run_cli(state, "--by", "session")
    assert "aaaa1111" in p.stdout and "live" in p.stdout and "ended" in p.stdout
    p = run_cli(state, "--by", "day", "--since", "2026-11-29")
    assert "2026-11-29" in p.stdout and "2026-11-28" not in p.stdout


def test_cli_json(state: Path) -> None:
    p = run_cli(state, "--json", "--session", B)
    doc = json.loads(p.stdout)
    assert doc["filter"]["session"] == B and doc["totals"]["net_tokens"] == -63


def test_cli_bad_since_and_unknown_session(state: Path) -> None:
    p = run_cli(state, "--since", "soon")
    assert p.returncode == 2 and "--since" in p.stderr
    p = run_cli(state, "--session", "nope")
    assert p.returncode == 66 and "ctxwrap: error:" in p.stderr


def _on_pty(state: Path, env: dict[str, str]) -> str:
    master, slave = pty.openpty()
    full = {**os.environ, "XDG_STATE_HOME": str(state), "TERM": "xterm", "COLUMNS": "120", **env}
    if "NO_COLOR" not in env:
        full.pop("NO_COLOR", None)
    proc = subprocess.Popen([str(CTXWRAP), "stats"], env=full, stdout=slave, stderr=slave)
    os.close(slave)
    chunks = []
    while True:
        ready, _, _ = select.select([master], [], [], 10)
        if not ready:
            break
        try:
            data = os.read(master, 65536)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=10)
    os.close(master)
    return b"".join(chunks).decode()


def test_terminal_color_and_no_color(state: Path) -> None:
    out = _on_pty(state, {})
    assert "\x1b[" in out and "█" in out
    out = _on_pty(state, {"NO_COLOR": "1"})
    assert "\x1b[" not in out and "█" in out  # bars stay: they are shapes, not colour


def test_missing_db_says_so(tmp_path: Path) -> None:
    p = run_cli(tmp_path)
    assert (p.returncode, p.stdout) == (0, "no statistics recorded yet\n")
    doc = json.loads(run_cli(tmp_path, "--json").stdout)
    assert doc["schema"] == 1 and doc["empty"] is True and doc["totals"]["llm_calls"] == 0


def test_empty_db_says_so(tmp_path: Path) -> None:
    Store(tmp_path / "ctxwrap" / "ctxwrap.db").close()
    p = run_cli(tmp_path)
    assert (p.returncode, p.stdout.strip()) == (0, "no statistics recorded yet")
    p = run_cli(tmp_path, "--since", "2h")
    assert p.returncode == 0 and p.stdout.startswith("no statistics recorded yet since")


def _default_sigint() -> None:
    # A runner started in the background of a script inherits SIGINT ignored, and Python then
    # installs no KeyboardInterrupt handler: the watch would never see the Ctrl+C this test sends.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_watch_without_tty_prints_each_interval(state: Path) -> None:
    env = {**os.environ, "XDG_STATE_HOME": str(state)}
    proc = subprocess.Popen(
        [str(CTXWRAP), "stats", "--watch", "0.2"],
        env=env,
        stdout=subprocess.PIPE,
        preexec_fn=_default_sigint,
    )
    assert proc.stdout
    fd = proc.stdout.fileno()
    # Wait for the frames themselves rather than a fixed sleep: start-up time varies with load.
    out, deadline = b"", time.monotonic() + 60
    while out.count("ctxwrap stats —".encode()) < 3 and time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        if not ready or not (chunk := os.read(fd, 65536)):
            break
        out += chunk
    proc.send_signal(signal.SIGINT)
    rest, _ = proc.communicate(timeout=10)
    text = (out + rest).decode()
    assert proc.returncode == 0, text
    assert text.count("ctxwrap stats —") >= 3


# -- property: totals are the sum of their parts -----------------------------------------------

calls_st = st.lists(
    st.tuples(
        st.sampled_from(["s1", "s2", "s3"]),
        st.integers(0, 3 * 86400),
        st.integers(0, 10**6),
        st.lists(st.integers(-5000, 10**6), min_size=5, max_size=5),
    ),
    max_size=25,
)
aux_st = st.lists(
    st.tuples(
        st.sampled_from(["s1", "s2", "s3"]),
        st.integers(0, 3 * 86400),
        st.sampled_from(["bash", "amnesia", "writes", "other"]),
        st.integers(0, 10**5),
        st.integers(0, 10**4),
    ),
    max_size=15,
)


@settings(max_examples=60, deadline=None)
@given(calls=calls_st, aux=aux_st)
def test_property_totals_add_up(
    calls: list[tuple[str, int, int, list[int]]], aux: list[tuple[str, int, str, int, int]]
) -> None:
    db = sqlite3.connect(":memory:", isolation_level=None)
    migrate(db)
    for i, (sid, dt, sent, saved) in enumerate(calls):
        db.execute(
            "INSERT INTO llm_calls (session_id, call_index, ts, sent_system, sent_messages,"
            " sent_tools, saved_bash, saved_amnesia, saved_writes, saved_skills, saved_tools)"
            " VALUES (?,?,?,?,?,?,?,?,?,?,?)",
            (sid, i, DAY1 + dt, 0, sent, 0, *saved),
        )
    for sid, dt, mech, tin, tout in aux:
        db.execute(
            "INSERT INTO aux_calls (session_id, ts, task, mechanism, backend, input_tokens,"
            " output_tokens, ok, elapsed_ms) VALUES (?,?,?,?,?,?,?,1,0)",
            (sid, DAY1 + dt, "x", mech, "pi", tin, tout),
        )
    for by in ("mechanism", "session", "day"):
        r = compute_stats(db, by=by, is_alive=lambda pid: False)
        for f in (r.totals, *(g.figures for g in r.groups)):
            assert f.saved_tokens == sum(m.saved_tokens for m in f.mechanisms)
            assert f.aux_tokens == sum(m.aux_tokens for m in f.mechanisms)
            assert f.net_tokens == f.saved_tokens - f.aux_tokens
            assert f.plain_tokens == f.sent_tokens + f.saved_tokens
            for m in f.mechanisms:
                assert m.net_tokens == m.saved_tokens - m.aux_input_tokens - m.aux_output_tokens
        if r.groups:  # chars add up exactly across groups; tokens are rounded per row
            assert sum(g.figures.saved_chars for g in r.groups) == r.totals.saved_chars
            assert sum(g.figures.aux_tokens for g in r.groups) == r.totals.aux_tokens
    want_saved = sum(chars_to_tokens(sum(c[3][i] for c in calls)) for i in range(5))
    want_aux = sum(a[3] + a[4] for a in aux)
    t = compute_stats(db).totals
    assert (t.saved_tokens, t.net_tokens) == (want_saved, want_saved - want_aux)
    assert any(m.mechanism == "other" for m in t.mechanisms) == any(a[2] == "other" for a in aux)


def test_a_model_that_binds_thinking_is_named_where_masking_saves_little(state: Path) -> None:
    """On Claude Fable 5.1 and the 5.5 models ctxwrap edits nothing a later thinking block
    follows: stats says so, or a user sees a low figure with no reason."""
    db = state / "ctxwrap" / "ctxwrap.db"
    with connect(db) as rw:
        rw.execute(
            "UPDATE sessions SET model = 'anthropic/claude-opus-5-5' WHERE session_id = ?", (A,)
        )
    report = compute_stats(connect(db, readonly=True), by="session")
    assert report.thinking_bound_models == ("anthropic/claude-opus-5-5",)
    text = render_text(report, color=False, width=200)
    assert "history masking saves little on claude-opus-5-5" in text
    assert json.loads(render_json(report))["thinking_bound_models"] == ["anthropic/claude-opus-5-5"]
    # the other models (m/a, m/b here; Opus 4.8 …) get no such line
    plain = compute_stats(connect(db, readonly=True), session=B)
    assert plain.thinking_bound_models == () and "saves little" not in render_text(
        plain, color=False, width=200
    )
    # ... and so does the session's report, among its notes
    from ctxwrap.report._data import from_db

    notes = from_db(connect(db, readonly=True), A).notes
    assert any(n.startswith("History masking saves little on claude-opus-5-5") for n in notes)
    assert not any("saves little" in n for n in from_db(connect(db, readonly=True), B).notes)


# -- one unpriced model leaves the others' money (issue 44, item 8) ------------------------------


def _price_session_a(state: Path) -> None:
    """Session A on a model with a list price; B stays on `m/b`, which has none."""
    rw = sqlite3.connect(state / "ctxwrap" / "ctxwrap.db")
    rw.execute("UPDATE llm_calls SET model='claude-sonnet-4-5' WHERE session_id=?", (A,))
    rw.execute("UPDATE sessions SET model='claude-sonnet-4-5' WHERE session_id=?", (A,))
    rw.commit()
    rw.close()


@pytest.mark.parametrize("by", ["session", "day", "agent"])
def test_one_unpriced_session_leaves_the_others_in_dollars(state: Path, by: str) -> None:
    _price_session_a(state)
    conn = connect(state / "ctxwrap" / "ctxwrap.db", readonly=True)
    report = compute_stats(conn, by=by, prices={})  # type: ignore[arg-type]
    a_only = compute_stats(conn, session=A, prices={}).totals
    conn.close()
    t = report.totals
    assert t.unpriced_sessions == (B,) and report.unpriced_models == ("m/b",)
    doc = json.loads(render_json(report))["totals"]["money"]
    # the money is A's, all of it, and says it is a part
    assert doc["partial"] is True and doc["unpriced_sessions"] == [B]
    a_plain = a_only.cost.plain_usd
    assert a_plain is not None and doc["plain_usd"] == pytest.approx(a_plain, abs=1e-6)
    text = render_text(report, color=False, width=120)
    assert "cost units" not in text and "input-token equivalents:" not in text
    rows = text.splitlines()
    total = next(line for line in rows if line.startswith("total") or line.startswith("pi "))
    assert "$" in total and "*" in total  # a sum of the priced part, marked
    assert any("unpriced: no known price for m/b (1 session)" in line for line in rows)
    if by == "session":
        a_row = next(line for line in rows if line.startswith("aaaa1111"))
        b_row = next(line for line in rows if line.startswith("bbbb2222"))
        assert "$" in a_row and "*" not in a_row and "unpriced" not in a_row
        assert "unpriced" in b_row and "$" not in b_row
    # the headline leads with the % of all and the priced sessions' money
    assert "on the priced sessions" in rows[1] and "1 session unpriced (m/b)" in " ".join(
        text.split()
    )


def test_no_priced_session_stays_in_cost_units_and_names_the_models(
    conn: sqlite3.Connection,
) -> None:
    text = render_text(compute_stats(conn, by="session", prices={}), color=False, width=120)
    assert "unpriced" not in text and "$" not in text
    assert "cost in input-token equivalents: no price is known for m/a, m/b" in text


# -- the layout: headline and table first, the accounting on request (issue 44, item 17) ---------


def test_headline_and_table_lead_and_the_accounting_waits_for_verbose(
    conn: sqlite3.Connection,
) -> None:
    report = compute_stats(conn)
    lines = render_text(report, color=False, width=100).splitlines()
    assert lines[0].startswith("ctxwrap stats — all sessions")
    assert lines[1].startswith("cost ")  # the headline, then the table right after it
    table = lines.index("") + 1
    assert lines[table].startswith("what ctxwrap did") and table <= 4
    short = "\n".join(lines)
    for accounting in ("LLM call", "provider", "cache (estimated)", "kept out ≈"):
        assert accounting not in short
    assert lines[-1] == "≈ estimated (chars/4); details: ctxwrap stats --verbose"

    verbose = render_text(report, color=False, width=100, verbose=True).splitlines()
    assert verbose[: table + 8] == lines[: table + 8]  # the same head and table
    after = verbose[verbose.index("how the figures are made (≈: estimated, chars/4)") :]
    text = "\n".join(after)
    # each count says what it counts: requests ctxwrap saw vs replies the provider billed, and
    # the provider's input whole (fresh + cached), so neither looks like a contradiction
    assert "requests through ctxwrap: 3 LLM calls" in text
    assert "the provider's own count, over 1 reply: 650 input tokens (100 fresh, 500" in text
    assert "kept out ≈2,648 tokens" in text and "net 1,083" in text


def test_cli_verbose_flag(state: Path) -> None:
    short = run_cli(state)
    long = run_cli(state, "--verbose")
    assert short.returncode == long.returncode == 0
    assert "requests through ctxwrap" not in short.stdout
    assert "requests through ctxwrap" in long.stdout


def test_short_ids_are_unique_prefixes_marked_when_cut() -> None:
    from ctxwrap._table import short_ids

    # pi's UUIDv7 ids of sessions started within a minute share their first 8 characters
    ids = ["01a24afc-4843-705e", "01a24afc-594c-7609", "bbbb2222-session-b", "abc", "abcd"]
    assert short_ids(ids) == ["01a24afc-4…", "01a24afc-5…", "bbbb2222…", "abc", "abcd"]
    for cut, whole in zip(short_ids(ids), ids, strict=True):
        prefix = cut.rstrip("…")
        assert [i for i in ids if i.startswith(prefix)] == [whole] or cut == whole


def test_failed_tries_are_counted_apart_and_cost_nothing(tmp_path: Path) -> None:
    """Four tries answered with 429 and one refused connection (issue 43): no LLM call, no
    cost, "5 tries failed"; one answered call beside them is the session's only call."""
    db = tmp_path / "s.db"
    store = Store(db)
    store.upsert_session(
        {
            "session_id": A,
            "session_file": None,
            "cwd": "/w",
            "pid": 1,
            "pi_version": "2.1.197",
            "pi_package": "@anthropic-ai/claude-code",
            "model": "anthropic/claude-sonnet-4-5",
            "started_at": DAY1 - 60,
        }
    )
    for status in (429, 429, 429, 429, None):
        store.insert("failed_tries", {"session_id": A, "ts": DAY1, "status": status})
    conn = connect(db, readonly=True)
    only_failed = compute_stats(conn, session=A)
    assert only_failed.totals.llm_calls == 0 and only_failed.totals.failed_tries == 5
    assert not only_failed.empty
    assert only_failed.totals.cost.calls == 0
    text = render_text(only_failed, color=False, width=120)
    assert "5 tries failed" in text  # under the table, always
    verbose = render_text(only_failed, color=False, width=120, verbose=True)
    assert "0 LLM calls" in verbose
    store.insert("llm_calls", _call(A, 0, DAY1 + 5, (400, 4000, 400), message_count=2))
    one_call = compute_stats(connect(db, readonly=True), session=A)
    assert one_call.totals.llm_calls == 1 and one_call.totals.failed_tries == 5
    assert json.loads(render_json(one_call))["totals"]["failed_tries"] == 5
