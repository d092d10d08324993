"""Why, when a session costs more than plain (issue 41 item 4, issue 44 item 16; DESIGN.md
invariant 10): the live figures say which effect made it so, in the same words as replay, and
the exit line and the report say it — not only the sign.

The store is real SQLite written as the daemon writes it (`cost_accounting.record_*`): a pi
session in a small window whose plain counterfactual compacts, while the session itself never
does, so every later request carries what plain's compaction dropped.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from ctxwrap import protocol as P
from ctxwrap.headline import carried_text
from ctxwrap.mechanisms import cost_accounting as CA
from ctxwrap.state.store import Store, connect
from ctxwrap.stats.compute import carried_per_call, cost_cause, session_cost_cause

SID = "dddd4444-costs-more"
SONNET_COST = {"input": 3.0, "output": 15.0, "cacheRead": 0.3, "cacheWrite": 3.75}
# (sent, plain) tokens per call: ctxwrap keeps out a little; plain pi compacts once it is over
# 20,000 − 4,000 and the session, which never compacts, then carries its whole history
CARRYING = [
    (5000, 5200),
    (9000, 9200),
    (13000, 13200),
    (16500, 16800),
    (17000, 17300),
    (17500, 17800),
    (18000, 18300),
]
SAVING = [(3000, 6000), (3200, 7000), (3400, 7900)]


def build(db: Path, calls: list[tuple[int, int]], *, gap: float = 400.0) -> Path:
    """One pi 1.6 session; `gap` seconds between calls (over the 300 s cache: each is cold)."""
    store = Store(db)
    t0 = time.time() - gap * (len(calls) + 1)
    store.upsert_session(
        {
            "session_id": SID,
            "session_file": None,
            "cwd": "/w",
            "pid": 1,
            "pi_version": "1.6.0",
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
        context_window=20_000,
    )
    CA.record_session_model(
        store,
        SID,
        model,
        P.CompactionSettings(enabled=True, reserve_tokens=4000, keep_recent_tokens=2000),
    )
    for i, (sent, plain) in enumerate(calls):
        req = P.LlmCall(
            session_id=SID,
            call_index=i,
            message_count=2 + i,
            sent_chars=P.SizeBreakdown(system=240, messages=(sent - 100) * 4, tools=160),
            saved_chars=P.SavedBreakdown(bash=(plain - sent) * 4),
            prompt_index=0,
            model="anthropic/claude-sonnet-4-5",
        )
        store.insert(
            "llm_calls",
            {
                "session_id": SID,
                "call_index": i,
                "ts": t0 + gap * i,
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
        CA.record_call_costs(store, req)
    store.close()
    return db


def test_a_session_carrying_past_plains_compaction_says_so(tmp_path: Path) -> None:
    conn = connect(build(tmp_path / "ctxwrap.db", CARRYING), readonly=True)
    costs = CA.load_session_costs(conn, [SID])[SID]
    carried = carried_per_call(costs)
    # plain compacts before call 3 (16,800 > 16,000); the session never does
    assert carried[:3] == [0, 0, 0] and all(n > 0 for n in carried[3:])
    plain_sizes = [p.input_tokens for _ts, _a, p, _c in costs.calls]
    assert carried[-1] == 18000 - plain_sizes[-1]  # what ctxwrap sent beyond plain's request
    cause = session_cost_cause(conn, SID, ttl_s=300.0, prices={})
    assert cause is not None and cause.kind == "carried"
    assert cause.tokens == max(carried)
    assert (
        cause.text
        == carried_text(max(carried))
        == (f"carried up to {max(carried):,} tokens past plain's compaction")
    )


def test_a_session_that_costs_less_has_no_cause(tmp_path: Path) -> None:
    conn = connect(build(tmp_path / "ctxwrap.db", SAVING), readonly=True)
    costs = CA.load_session_costs(conn, [SID])[SID]
    assert carried_per_call(costs) == [0, 0, 0]
    assert session_cost_cause(conn, SID, ttl_s=300.0, prices={}) is None


def test_each_part_of_a_loss_is_worded() -> None:
    """Without carried history, the largest other part of the loss is named."""
    figures = CA.CostFigures(calls=1, sent_weighted=100.0, plain_weighted=120.0, aux_weighted=50.0)
    costs = CA.SessionCosts(SID)
    assert cost_cause(costs, figures) is None  # no call priced: nothing to say
    from ctxwrap.engine.cost import PricedInput

    a = PricedInput(0, 0, 100, 100.0, None)
    p = PricedInput(0, 0, 120, 120.0, None)
    costs.calls = [(1.0, a, p, None)]
    aux = cost_cause(costs, figures)
    assert aux is not None and aux.kind == "aux" and "aux-model calls" in aux.text
    rewrites = CA.CostFigures(
        calls=1,
        sent_weighted=200.0,
        plain_weighted=120.0,
        cache_write_tokens=900,
        plain_cache_write_tokens=100,
    )
    found = cost_cause(costs, rewrites)
    assert found is not None and found.kind == "rewrites" and "800 more tokens" in found.text


def test_the_exit_line_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from ctxwrap.launch import exit_line

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("COLUMNS", "60")
    monkeypatch.delenv("PI_CTX_EXIT_LINE", raising=False)
    db = tmp_path / "state" / "ctxwrap" / "ctxwrap.db"
    db.parent.mkdir(parents=True)
    build(db, CARRYING)
    conn = connect(db, readonly=True)
    cause = session_cost_cause(conn, SID)
    assert cause is not None
    exit_line.print_exit_line("pi", SID, None)
    err = capsys.readouterr().err
    said = " ".join(line.removeprefix("ctxwrap: ") for line in err.splitlines())
    assert "cost +" in said and f"why: {cause.text}" in said
    assert said.index("cost +") < said.index("why: ")
    assert max(len(line) for line in err.splitlines()) <= 60
    # one that costs less says no why
    build(tmp_path / "less.db", SAVING)
    (tmp_path / "less.db").replace(db)
    exit_line.print_exit_line("pi", SID, None)
    err = capsys.readouterr().err
    assert "cost −" in err and "why" not in err


def _calls_carried(page: str) -> list[int]:
    import re

    return [int(n) for n in re.findall(r'<g class="call" [^>]*data-carried="(\d+)"', page)]


def test_the_report_of_a_live_session_says_why_and_draws_what_it_carried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`ctxwrap report` of a session that ran under ctxwrap: the cause under the hero, and the
    carried tokens as their own hatched part of each request's bar."""
    import html

    from ctxwrap.report import from_db, render_html

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    conn = connect(build(tmp_path / "ctxwrap.db", CARRYING), readonly=True)
    costs = CA.load_session_costs(conn, [SID])[SID]
    carried = carried_per_call(costs)
    data = from_db(conn, SID)
    cause = session_cost_cause(conn, SID)
    assert cause is not None and data.costs_more_because == cause.text
    # the carried part is taken out of the conversation, not added: each bar's height stays
    assert [c.sent.get("carried", 0) for c in data.calls] == carried
    assert [c.sent_total for c in data.calls] == [sent for sent, _plain in CARRYING]
    page = render_html(data)
    assert 'id="costs-more"' in page
    assert f"Why it cost more than plain pi: {html.escape(cause.text)}." in page
    assert _calls_carried(page) == carried
    assert 'fill="url(#carried-wide)"' in page and 'id="carried-wide"' in page
    assert "sent: carried past plain&#x27;s compaction" in page  # the legend names it
    # a session that cost less: no why, nothing hatched
    conn = connect(build(tmp_path / "less.db", SAVING), readonly=True)
    page = render_html(from_db(conn, SID))
    assert 'id="costs-more"' not in page and "carried-wide" not in page


def test_the_report_of_a_replay_says_why_and_draws_what_it_carried(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`ctxwrap report --replay`: replay's own cause (`costs_more_because`), and per call the
    history plain's compaction had dropped that the session still carried (replay's per-call
    `carried_tokens`), drawn apart from the conversation."""
    import html

    from ctxwrap.replay import _pricing
    from ctxwrap.replay._run import price_session, session_json
    from ctxwrap.replay._sim import SessionSimulator, Thresholds
    from ctxwrap.report import _data, render_html
    from tests.unit.replay.test_replay import _compacting_session

    # a pi session whose write strip (on: pi's default keeps the body) delays its compaction
    sim = SessionSimulator("s", Thresholds(mask=False, compact_in_step=False, write=True))
    sim.feed(_compacting_session(None, 184_000))
    r = sim.finish()
    prices = _pricing.default_prices("claude-opus-4-5")
    doc = session_json(r, price_session(r, prices, 300.0), per_call=True, prices=prices)
    assert doc["costs_more_because"] is not None
    for c, f in zip(doc["calls"], r.calls, strict=True):
        c.setdefault("carried_tokens", f.carried_tokens)  # the simulator's per-call figure
    assert any(c["carried_tokens"] for c in doc["calls"])
    monkeypatch.setattr(_data, "_replayed_session", lambda *_a, **_k: dict(doc))
    data = _data.from_replay(Path("s"))
    assert data.costs_more_because == doc["costs_more_because"]
    assert [c.sent.get("carried", 0) for c in data.calls] == [
        c["carried_tokens"] for c in doc["calls"]
    ]
    page = render_html(data)
    why = html.escape(doc["costs_more_because"])
    assert f"Why it would have cost more than plain pi: {why}." in page
    assert _calls_carried(page) == [c.sent.get("carried", 0) for c in data.calls]
    assert 'fill="url(#carried-wide)"' in page


def test_stats_of_the_session_says_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`ctxwrap stats --session ID` (where the exit line sends the user): a `why:` line under
    the headline, and `costs_more_because` in --json; none for the whole store."""
    import json

    from ctxwrap.stats.compute import load_report
    from ctxwrap.stats.render import render_json, render_text

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    db = tmp_path / "state" / "ctxwrap" / "ctxwrap.db"
    db.parent.mkdir(parents=True)
    build(db, CARRYING)
    report = load_report(session=SID[:8], since=None, by="mechanism")
    assert report is not None
    cause = session_cost_cause(connect(db, readonly=True), SID)
    assert cause is not None and report.costs_more_because == cause.text
    lines = render_text(report, color=False, width=100).splitlines()
    assert lines[1].startswith("cost +") and lines[2] == f"why: {cause.text}"
    assert json.loads(render_json(report))["costs_more_because"] == cause.text
    whole = load_report(session=None, since=None, by="mechanism")
    assert whole is not None and whole.costs_more_because is None


def test_pis_ctx_stats_says_why_too(tmp_path: Path) -> None:
    """/ctx-stats inside pi (the daemon's /v1/stats) gives the `why:` line `ctxwrap stats
    --session` gives."""
    import inspect

    from starlette.testclient import TestClient

    from ctxwrap.config import Settings
    from ctxwrap.daemon.app import build_app

    db = build(tmp_path / "ctxwrap.db", CARRYING)
    cause = session_cost_cause(connect(db, readonly=True), SID, ttl_s=300.0, prices={})
    assert cause is not None

    class Daemon:
        started = 0.0
        store = Store(db)
        cfg = Settings()

        def session_totals(self, session_id: str) -> None:
            return None

        def __getattr__(self, name: str) -> Any:
            return lambda *a, **k: None

    app = inspect.getclosurevars(build_app(Daemon())).nonlocals["app"]  # type: ignore[arg-type]
    with TestClient(app) as client:
        reply = client.get("/v1/stats", params={"session": SID, "width": "100"})
    assert reply.status_code == 200, reply.text
    assert f"why: {cause.text}" in reply.json()["text"].splitlines()
