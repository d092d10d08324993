"""`ctxwrap stats`: what ctxwrap saved, per mechanism, net of the aux model's own tokens.

`compute_stats` reads the SQLite store (read-only) and returns plain dataclasses; the
renderers (`render_text`, `render_json`) turn a report into text and print nothing. Figures are
defined in docs/accounting.md. This module is imported by every `ctxwrap` command, so rich is
imported only inside the functions that draw.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import sqlite3
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

import click

from ctxwrap import paths
from ctxwrap.engine.thinking import checks_thinking_prefix
from ctxwrap.errors import NotFoundError
from ctxwrap.headline import (
    Headline,
    headline_of,
    pct_text,
    tokens_text,
    total_plain_usd,
    total_usd,
    usd_text,
)
from ctxwrap.mechanisms import needed_again
from ctxwrap.mechanisms.cost_accounting import (
    BUCKET_S,
    CostFigures,
    has_column,
    priced_buckets,
)
from ctxwrap.state.pidfile import pid_alive

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ctxwrap import protocol as P
    from ctxwrap.engine.cost import Prices

SCHEMA = 1
MECHANISMS = ("bash", "amnesia", "writes", "skills", "tools")
GroupBy = Literal["mechanism", "session", "day", "agent"]


def chars_to_tokens(chars: int) -> int:
    """pi's chars/4 estimate, rounded away from zero so a loss never looks smaller than a gain."""
    sign = -1 if chars < 0 else 1
    return sign * ((abs(chars) + 3) // 4)


# -- report -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MechanismFigures:
    mechanism: str
    saved_chars: int
    saved_tokens: int
    aux_calls: int
    aux_failed: int
    aux_input_tokens: int
    aux_output_tokens: int
    aux_tokens: int
    net_tokens: int


@dataclass(frozen=True)
class ProviderFigures:
    """Usage the provider reported per assistant turn (pi's `turns`), for comparison only."""

    turns: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    # of the agent's calls, those on which the provider's cache missed, by their usage: it
    # read less than their content had them read (`PricedInput.served`; priced so)
    cache_older_entry: int = 0
    cache_head_only: int = 0
    cache_nothing: int = 0


@dataclass(frozen=True)
class Figures:
    llm_calls: int
    head_changes: int
    head_changes_compaction: int
    sent_chars: int
    saved_chars: int
    sent_tokens: int
    saved_tokens: int
    plain_tokens: int
    saved_pct: float | None
    aux_calls: int
    aux_failed: int
    aux_input_tokens: int
    aux_output_tokens: int
    aux_tokens: int
    net_tokens: int
    provider: ProviderFigures
    mechanisms: tuple[MechanismFigures, ...]
    cost: CostFigures = field(default_factory=CostFigures)
    # `cost` of the sessions whose every price is known, and the ids of the others: money is
    # summed over the priced part, the rest is said to be unpriced (`cost.*_usd` is None then)
    priced_cost: CostFigures = field(default_factory=CostFigures)
    unpriced_sessions: tuple[str, ...] = ()
    # tries answered with an error status or not at all: no LLM call, no cost
    failed_tries: int = 0


@dataclass(frozen=True)
class SessionInfo:
    session_id: str
    live: bool
    started_at: float | None
    ended_at: float | None
    end_reason: str | None
    model: str | None
    cwd: str | None
    # Some of its records never reached the daemon (it was away), or it ended without a clean
    # shutdown: its figures are a lower bound.
    incomplete: bool = False
    agent: str = "pi"


@dataclass(frozen=True)
class Group:
    key: str  # session id or YYYY-MM-DD (local time)
    figures: Figures
    session: SessionInfo | None = None


@dataclass(frozen=True)
class StatsReport:
    generated_at: float
    session: str | None
    since: float | None
    by: GroupBy
    totals: Figures
    groups: tuple[Group, ...]
    sessions: int  # sessions with any recorded activity in the window
    live_sessions: tuple[str, ...]
    incomplete_sessions: tuple[str, ...] = ()
    agents: tuple[str, ...] = ()  # agents of the sessions with activity ("pi", "claude", …)
    # hidden results the agent asked for again, per mechanism (mechanisms/needed_again.py)
    needed_again: dict[str, Any] | None = None
    # models of these sessions that bind their thinking to the history (Claude Fable 5.1, the
    # 5.5 models): ctxwrap edits nothing a later thinking block follows, so masking saves little
    thinking_bound_models: tuple[str, ...] = ()
    # models of the sessions in `totals.unpriced_sessions` (no known price)
    unpriced_models: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        t = self.totals
        return not (
            t.llm_calls or t.failed_tries or t.aux_calls or t.provider.turns or self.live_sessions
        )


# -- compute ------------------------------------------------------------------------------------


@dataclass
class _Raw:
    """Summed raw columns for one (session, day) cell; cells add up exactly (chars, not tokens)."""

    calls: int = 0
    heads: int = 0
    heads_compaction: int = 0
    sent: int = 0
    saved: dict[str, int] = field(default_factory=dict)
    aux: dict[str, list[int]] = field(default_factory=dict)  # mechanism -> [n, failed, in, out]
    turns: list[int] = field(default_factory=lambda: [0, 0, 0, 0, 0])
    cost: CostFigures = field(default_factory=CostFigures)
    priced: CostFigures = field(default_factory=CostFigures)  # `cost` of priced sessions
    unpriced: set[str] = field(default_factory=set)  # sessions with a model of unknown price
    failed_tries: int = 0

    def add(self, other: _Raw) -> None:
        self.cost.add(other.cost)
        self.priced.add(other.priced)
        self.unpriced |= other.unpriced
        self.calls += other.calls
        self.failed_tries += other.failed_tries
        self.heads += other.heads
        self.heads_compaction += other.heads_compaction
        self.sent += other.sent
        for m, v in other.saved.items():
            self.saved[m] = self.saved.get(m, 0) + v
        for m, a in other.aux.items():
            mine = self.aux.setdefault(m, [0, 0, 0, 0])
            for i, v in enumerate(a):
                mine[i] += v
        for i, v in enumerate(other.turns):
            self.turns[i] += v


def figures_from(raw: _Raw) -> Figures:
    """Tokens are converted per mechanism, so every total is the exact sum of its parts."""
    extra = sorted(set(raw.aux) - set(MECHANISMS))
    mechs = []
    for m in (*MECHANISMS, *extra):
        saved_chars = raw.saved.get(m, 0)
        n, failed, tin, tout = raw.aux.get(m, [0, 0, 0, 0])
        saved = chars_to_tokens(saved_chars)
        mechs.append(
            MechanismFigures(
                m, saved_chars, saved, n, failed, tin, tout, tin + tout, saved - tin - tout
            )
        )
    saved_tokens = sum(m.saved_tokens for m in mechs)
    sent_tokens = chars_to_tokens(raw.sent)
    plain = sent_tokens + saved_tokens
    aux_in = sum(m.aux_input_tokens for m in mechs)
    aux_out = sum(m.aux_output_tokens for m in mechs)
    return Figures(
        llm_calls=raw.calls,
        head_changes=raw.heads,
        head_changes_compaction=raw.heads_compaction,
        sent_chars=raw.sent,
        saved_chars=sum(m.saved_chars for m in mechs),
        sent_tokens=sent_tokens,
        saved_tokens=saved_tokens,
        plain_tokens=plain,
        saved_pct=round(100.0 * saved_tokens / plain, 2) if plain > 0 else None,
        aux_calls=sum(m.aux_calls for m in mechs),
        aux_failed=sum(m.aux_failed for m in mechs),
        aux_input_tokens=aux_in,
        aux_output_tokens=aux_out,
        aux_tokens=aux_in + aux_out,
        net_tokens=saved_tokens - aux_in - aux_out,
        provider=replace(
            ProviderFigures(*raw.turns),
            cache_older_entry=raw.cost.cache_older_entry,
            cache_head_only=raw.cost.cache_head_only,
            cache_nothing=raw.cost.cache_nothing,
        ),
        mechanisms=tuple(mechs),
        cost=raw.cost,
        priced_cost=raw.priced,
        unpriced_sessions=tuple(sorted(raw.unpriced)),
        failed_tries=raw.failed_tries,
    )


def resolve_session(conn: sqlite3.Connection, wanted: str) -> str:
    """An exact id, or a unique prefix of one (the text view shows 8 characters)."""
    ids = {
        r[0]
        for r in conn.execute(
            "SELECT session_id FROM sessions WHERE session_id >= ? AND session_id < ? "
            "UNION SELECT DISTINCT session_id FROM llm_calls WHERE session_id >= ? AND session_id < ?",
            (wanted, wanted + "\U0010ffff") * 2,
        )
    }
    if wanted in ids:
        return wanted
    if len(ids) == 1:
        return str(ids.pop())
    if not ids:
        raise NotFoundError(
            f"no session {wanted!r} in the statistics",
            hint="`ctxwrap sessions --all` lists the recorded sessions",
        )
    raise NotFoundError(
        f"{wanted!r} matches {len(ids)} sessions", hint="give more characters of the session id"
    )


# Grouping by day in SQL with date(ts, 'localtime') costs a libc call per row; 15-minute UTC
# buckets are plain integer math and every real UTC offset is a multiple of 15 minutes, so each
# bucket falls within one local day. Buckets are only made when --by day asks for days (the
# cost figures, priced per session, are kept in the same buckets).
_BUCKET_S = BUCKET_S


def compute_stats(
    conn: sqlite3.Connection,
    *,
    session: str | None = None,
    since: float | None = None,
    by: GroupBy = "mechanism",
    now: float | None = None,
    is_alive: Callable[[int], bool] = pid_alive,
    ttl_s: float = 300.0,
    prices: Mapping[str, Prices] | None = None,
    write_cache: bool = False,
) -> StatsReport:
    """Aggregate the store into a report; `session` may be a unique id prefix. Reads only,
    unless `write_cache` (the daemon's connection): then sessions priced now are cached."""
    if session is not None:
        session = resolve_session(conn, session)
    where: list[str] = ["1=1"]
    params: list[Any] = []
    if session is not None:
        where.append("session_id = ?")
        params.append(session)
    if since is not None:
        where.append("ts >= ?")
        params.append(since)
    cond = " AND ".join(where)
    bucket = f"CAST(ts / {_BUCKET_S} AS INTEGER)" if by == "day" else "0"
    days: dict[int, str] = {}
    cells: dict[tuple[str, str], _Raw] = {}

    def cell(sid: str, b: int) -> _Raw:
        if by != "day":
            return cells.setdefault((sid, ""), _Raw())
        day = days.get(b)
        if day is None:
            day = days[b] = time.strftime("%Y-%m-%d", time.localtime(b * _BUCKET_S))
        return cells.setdefault((sid, day), _Raw())

    for r in conn.execute(
        f"""SELECT session_id, {bucket} b, COUNT(*), SUM(head_changed),
                   SUM(sent_system + sent_messages + sent_tools), SUM(saved_bash),
                   SUM(saved_amnesia), SUM(saved_writes), SUM(saved_skills), SUM(saved_tools)
            FROM llm_calls WHERE {cond} GROUP BY session_id, b""",
        params,
    ):
        c = cell(r[0], r[1])
        c.calls += r[2]
        c.heads += r[3]
        c.sent += r[4]
        for m, v in zip(MECHANISMS, r[5:10], strict=True):
            c.saved[m] = c.saved.get(m, 0) + v
    # A head change with fewer messages than the session's previous call is a compaction.
    # Only head-change rows look back (by the (session_id, ts) index), so this stays cheap.
    for r in conn.execute(
        f"""SELECT session_id, {bucket} b, COUNT(*) FROM llm_calls c
            WHERE head_changed = 1 AND {cond} AND message_count < (
                SELECT p.message_count FROM llm_calls p
                WHERE p.session_id = c.session_id AND p.ts <= c.ts AND p.id < c.id
                ORDER BY p.ts DESC, p.id DESC LIMIT 1)
            GROUP BY session_id, b""",
        params,
    ):
        cell(r[0], r[1]).heads_compaction += r[2]
    for r in conn.execute(
        f"""SELECT session_id, {bucket} b, mechanism, COUNT(*), SUM(1 - ok),
                   SUM(input_tokens), SUM(output_tokens)
            FROM aux_calls WHERE {cond} GROUP BY session_id, b, mechanism""",
        params,
    ):
        aux = cell(r[0], r[1]).aux.setdefault(r[2], [0, 0, 0, 0])
        for i, v in enumerate(r[3:7]):
            aux[i] += v
    for r in conn.execute(
        f"""SELECT session_id, {bucket} b, COUNT(*), SUM(input_tokens), SUM(output_tokens),
                   SUM(cache_read_tokens), SUM(cache_write_tokens)
            FROM turns WHERE {cond} GROUP BY session_id, b""",
        params,
    ):
        turns = cell(r[0], r[1]).turns
        for i, v in enumerate(r[2:7]):
            turns[i] += v

    if _has_failed_tries(conn):  # schema 12
        for r in conn.execute(
            f"""SELECT session_id, {bucket} b, COUNT(*) FROM failed_tries WHERE {cond}
                GROUP BY session_id, b""",
            params,
        ):
            cell(r[0], r[1]).failed_tries += r[2]

    # Cache-priced figures: each session is priced whole (a call's price depends on the calls
    # before it), per 15-minute bucket, as the daemon cached them unless the session changed
    # since; each bucket lands in its cell like the rows above.
    priced = priced_buckets(
        conn,
        {sid for sid, _ in cells},
        ttl_s=ttl_s,
        overrides=prices,
        since=since,
        write=write_cache,
    )
    for sid, buckets in priced.items():
        for b in sorted(buckets):
            cell(sid, b).cost.add(buckets[b])
    # A session is priced or not as a whole (its model, its aux model): one without a known
    # price leaves the money of every row it is in to the sessions that have one.
    whole: dict[str, CostFigures] = {}
    for (sid, _), raw in cells.items():
        whole.setdefault(sid, CostFigures()).add(raw.cost)
    unpriced = {sid for sid, c in whole.items() if not is_priced(c)}
    for (sid, _), raw in cells.items():
        if sid in unpriced:
            raw.unpriced.add(sid)
        else:
            raw.priced.add(raw.cost)

    infos = _session_infos(conn, session, {sid for sid, _ in cells}, is_alive)
    live = tuple(sorted(s.session_id for s in infos.values() if s.live))
    totals = _Raw()
    per_session: dict[str, _Raw] = {sid: _Raw() for sid in live}
    per_day: dict[str, _Raw] = {}
    for (sid, day), raw in cells.items():
        totals.add(raw)
        per_session.setdefault(sid, _Raw()).add(raw)
        per_day.setdefault(day, _Raw()).add(raw)

    agents = _session_agents(conn)
    groups: tuple[Group, ...] = ()
    if by == "session":
        order = sorted(
            per_session, key=lambda s: (infos[s].started_at or 0.0) if s in infos else 0.0
        )
        groups = tuple(Group(s, figures_from(per_session[s]), infos.get(s)) for s in order)
    elif by == "day":
        groups = tuple(Group(d, figures_from(per_day[d])) for d in sorted(per_day))
    elif by == "agent":
        per_agent: dict[str, _Raw] = {}
        for sid, raw in per_session.items():
            per_agent.setdefault(agents.get(sid, "pi"), _Raw()).add(raw)
        groups = tuple(Group(a, figures_from(per_agent[a])) for a in sorted(per_agent))
    return StatsReport(
        generated_at=time.time() if now is None else now,
        session=session,
        since=since,
        by=by,
        totals=figures_from(totals),
        groups=groups,
        sessions=len({sid for sid, _ in cells}),
        live_sessions=live,
        incomplete_sessions=tuple(sorted(s.session_id for s in infos.values() if s.incomplete)),
        agents=tuple(
            sorted(
                {agents.get(sid, "pi") for sid, _ in cells}
                | {agents.get(sid, "pi") for sid in live}
            )
        ),
        needed_again=needed_again.summary(conn, session=session, since=since),
        thinking_bound_models=tuple(
            sorted(
                {
                    i.model
                    for i in infos.values()
                    if i.model is not None and checks_thinking_prefix(i.model)
                }
            )
        ),
        unpriced_models=tuple(
            sorted({infos[s].model or "an unnamed model" for s in unpriced if s in infos})
        ),
    )


def is_priced(c: CostFigures) -> bool:
    """Money is known for these figures: every call, aux call and summary had a price."""
    return total_usd(c) is not None and total_plain_usd(c) is not None


def _has_failed_tries(conn: sqlite3.Connection) -> bool:
    """A store `ctxwrap stats` reads may predate schema 12."""
    query = "SELECT 1 FROM sqlite_master WHERE type='table' AND name='failed_tries'"
    return conn.execute(query).fetchone() is not None


def _session_agents(conn: sqlite3.Connection) -> dict[str, str]:
    """session id → agent ("pi", "claude"); a database from before schema 2 has only pi."""
    try:
        return {r[0]: r[1] for r in conn.execute("SELECT session_id, agent FROM sessions")}
    except sqlite3.OperationalError:
        return {}


def _session_infos(
    conn: sqlite3.Connection,
    session: str | None,
    active: set[str],
    is_alive: Callable[[int], bool],
) -> dict[str, SessionInfo]:
    has_undelivered = has_column(conn, "sessions", "undelivered")
    has_agent = has_column(conn, "sessions", "agent")
    sql = (
        "SELECT session_id, pid, started_at, ended_at, end_reason, model, cwd, "
        + ("undelivered" if has_undelivered else "0")
        + (", agent" if has_agent else ", 'pi'")
        + " FROM sessions"
    )
    rows = conn.execute(sql + " WHERE session_id = ?", (session,)) if session else conn.execute(sql)
    out = {}
    for r in rows:
        live = r[3] is None and is_alive(r[1])
        # Records the adapter gave up on, or no clean shutdown (the agent or the daemon died
        # before the session's last records could arrive).
        incomplete = not live and (r[7] > 0 or r[3] is None or r[4] == "process-gone")
        # Ended sessions outside the window are history the filter excluded; live ones always show.
        if live or r[0] in active:
            out[r[0]] = SessionInfo(
                r[0], live, r[2], r[3], r[4], r[5], r[6], incomplete, r[8] or "pi"
            )
    return out


def empty_report(
    *, session: str | None = None, since: float | None = None, by: GroupBy = "mechanism"
) -> StatsReport:
    return StatsReport(time.time(), session, since, by, figures_from(_Raw()), (), 0, ())


# -- one session's figures: the source of every view's headline (ctxwrap.headline) ----------


def session_agent(conn: sqlite3.Connection, session_id: str) -> str | None:
    try:
        row = conn.execute(
            "SELECT agent FROM sessions WHERE session_id=?", (session_id,)
        ).fetchone()
    except sqlite3.OperationalError:  # a store from before agents were recorded: pi only
        return "pi"
    return (row[0] or "pi") if row is not None else None


def session_figures(
    conn: sqlite3.Connection,
    session_id: str,
    *,
    ttl_s: float | None = None,
    prices: Mapping[str, Prices] | None = None,
    write_cache: bool = False,
) -> Figures:
    """`ctxwrap stats --session ID`'s totals: the one compute path of a session's figures.
    `ttl_s`/`prices` default to the configured ones (PI_CTX_* over config.toml)."""
    if ttl_s is None or prices is None:
        cfg_ttl, cfg_prices = cost_settings()
        ttl_s = cfg_ttl if ttl_s is None else ttl_s
        prices = cfg_prices if prices is None else prices
    report = compute_stats(
        conn, session=session_id, ttl_s=ttl_s, prices=prices, write_cache=write_cache
    )
    return report.totals


def session_headline(
    conn: sqlite3.Connection,
    session_id: str,
    *,
    ttl_s: float | None = None,
    prices: Mapping[str, Prices] | None = None,
    write_cache: bool = False,
) -> Headline:
    """THE headline of one recorded session (an id or unique prefix). Every view of a session
    that ran under ctxwrap takes its figures from here."""
    sid = resolve_session(conn, session_id)
    figures = session_figures(conn, sid, ttl_s=ttl_s, prices=prices, write_cache=write_cache)
    return headline_of(figures, session_agent(conn, sid))


def session_totals(
    conn: sqlite3.Connection,
    session_id: str,
    *,
    ttl_s: float,
    prices: Mapping[str, Prices],
) -> P.SessionTotals:
    """The totals the daemon returns at turn_end and /ctx-stats (pi's footer, the shell prompt
    segment, Claude Code's status line): the same figures and headline as `ctxwrap stats`."""
    from ctxwrap import protocol as P

    try:
        figures = session_figures(conn, session_id, ttl_s=ttl_s, prices=prices, write_cache=True)
    except NotFoundError:  # nothing recorded for it yet
        return P.SessionTotals()
    h = headline_of(figures, session_agent(conn, session_id))
    c = figures.cost
    return P.SessionTotals(
        llm_calls=figures.llm_calls,
        sent_tokens=figures.sent_tokens,
        plain_tokens=figures.plain_tokens,
        saved_tokens=figures.saved_tokens,
        aux_tokens=figures.aux_tokens,
        net_tokens=figures.net_tokens,
        cost_weighted=round(c.total_weighted, 1),
        plain_cost_weighted=round(c.total_plain_weighted, 1),
        cost_saved_pct=c.total_saved_pct if c.calls else None,
        cost_usd=h.usd,
        saved_usd=c.total_saved_usd,
        compactions=c.compactions,
        plain_compactions=c.plain_compactions,
        headline=h.short(),
        headline_pct=h.pct,
    )


# -- --since ------------------------------------------------------------------------------------

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_since(text: str, *, now: float | None = None) -> float:
    """`90m`, `2h`, `3d`, `1w` ago; or a date / ISO timestamp (local time unless it has a zone)."""
    text = text.strip()
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([smhdw])", text)
    if m:
        return (time.time() if now is None else now) - float(m[1]) * _UNITS[m[2]]
    try:
        dt = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(
            f"{text!r} is neither a duration (2h, 3d) nor a date or ISO timestamp"
        ) from None
    return dt.timestamp()  # naive → local time, which is what a person typing a date means


# -- render -------------------------------------------------------------------------------------


def _figures_json(f: Figures, agent: str | None) -> dict[str, Any]:
    return {
        "llm_calls": f.llm_calls,
        "failed_tries": f.failed_tries,
        "head_changes": f.head_changes,
        "head_changes_compaction": f.head_changes_compaction,
        "sent_chars": f.sent_chars,
        "saved_chars": f.saved_chars,
        "sent_tokens": f.sent_tokens,
        "saved_tokens": f.saved_tokens,
        "plain_tokens": f.plain_tokens,
        "saved_pct": f.saved_pct,
        "aux_calls": f.aux_calls,
        "aux_failed": f.aux_failed,
        "aux_input_tokens": f.aux_input_tokens,
        "aux_output_tokens": f.aux_output_tokens,
        "aux_tokens": f.aux_tokens,
        "net_tokens": f.net_tokens,
        "provider": {
            "turns": f.provider.turns,
            "input_tokens": f.provider.input_tokens,
            "output_tokens": f.provider.output_tokens,
            "cache_read_tokens": f.provider.cache_read_tokens,
            "cache_write_tokens": f.provider.cache_write_tokens,
            "cache_older_entry": f.provider.cache_older_entry,
            "cache_head_only": f.provider.cache_head_only,
            "cache_nothing": f.provider.cache_nothing,
        },
        "cost": _cost_json(f.cost),
        "money": _money_json(f),
        "headline": _headline_json(f, agent),
        "mechanisms": [
            {
                "mechanism": m.mechanism,
                "saved_chars": m.saved_chars,
                "saved_tokens": m.saved_tokens,
                "aux_calls": m.aux_calls,
                "aux_failed": m.aux_failed,
                "aux_input_tokens": m.aux_input_tokens,
                "aux_output_tokens": m.aux_output_tokens,
                "aux_tokens": m.aux_tokens,
                "net_tokens": m.net_tokens,
            }
            for m in f.mechanisms
        ],
    }


def _headline_json(f: Figures, agent: str | None) -> dict[str, Any]:
    """The headline as every view shows it (`ctxwrap.headline`): text and rounded figures."""
    h = headline_of(f, agent)
    return {
        "text": h.short(),
        "sentence": h.sentence(),
        "saved_pct": h.pct,  # as shown: 60 for "cost −60%"
        "saved_usd": _r(h.saved_usd, 6),
        "plain_usd": _r(h.plain_usd, 6),
        "usd": _r(h.usd, 6),
        "plain": h.plain_name,
        "top_mechanisms": list(h.top_mechanisms),
    }


def _money_json(f: Figures) -> dict[str, Any]:
    """The $ columns of the text: all of it, or the priced sessions' part (`partial`), or
    nulls when no session of these is priced; `unpriced_sessions` are left out of the $."""
    m = money_of(f)
    return {
        "plain_usd": _r(m.plain, 6),
        "usd": _r(m.ours, 6),
        "saved_usd": _r(m.saved, 6),
        "partial": m.partial,
        "unpriced_sessions": list(f.unpriced_sessions),
    }


def _r(v: float | None, digits: int = 1) -> float | None:
    return None if v is None else round(v, digits)


def _cost_json(c: CostFigures) -> dict[str, Any]:
    """Cache-priced figures (docs/accounting.md, "Cost"): weighted = input-equivalent tokens."""
    return {
        "sent_weighted": _r(c.sent_weighted),
        "plain_weighted": _r(c.plain_weighted),
        "aux_weighted": _r(c.aux_weighted),
        "saved_weighted": _r(c.saved_weighted),
        "saved_pct": c.saved_pct,
        "sent_usd": _r(c.sent_usd, 6),
        "plain_usd": _r(c.plain_usd, 6),
        "aux_usd": _r(c.aux_usd, 6),
        "saved_usd": _r(c.saved_usd, 6),
        "cache_read_tokens": c.cache_read_tokens,
        "cache_write_tokens": c.cache_write_tokens,
        "uncached_input_tokens": c.uncached_input_tokens,
        "plain_input_tokens": c.plain_input_tokens,
        "plain_cache_read_tokens": c.plain_cache_read_tokens,
        "plain_cache_write_tokens": c.plain_cache_write_tokens,
        "plain_uncached_input_tokens": c.plain_uncached_input_tokens,
        "compactions": c.compactions,
        "plain_compactions": c.plain_compactions,
        "compactions_avoided": c.compactions_avoided,
        "compaction_weighted": _r(c.compaction_weighted),
        "plain_compaction_weighted": _r(c.plain_compaction_weighted),
        "compaction_usd": _r(c.compaction_usd, 6),
        "plain_compaction_usd": _r(c.plain_compaction_usd, 6),
        "total_weighted": _r(c.total_weighted),
        "total_plain_weighted": _r(c.total_plain_weighted),
        "total_saved_weighted": _r(c.total_saved_weighted),
        "total_saved_pct": c.total_saved_pct,
        "total_saved_usd": _r(c.total_saved_usd, 6),
        "aux_share_pct": c.aux_share_pct,
    }


def report_to_json(report: StatsReport) -> dict[str, Any]:
    """The documented `--json` shape (docs/accounting.md); bump SCHEMA on any breaking change."""
    groups = []
    for g in report.groups:
        s = g.session
        groups.append(
            {
                "key": g.key,
                "session": None
                if s is None
                else {
                    "session_id": s.session_id,
                    "live": s.live,
                    "started_at": s.started_at,
                    "ended_at": s.ended_at,
                    "end_reason": s.end_reason,
                    "incomplete": s.incomplete,
                    "model": s.model,
                    "cwd": s.cwd,
                    "agent": s.agent,
                },
                **_figures_json(g.figures, _group_agent(report, g)),
            }
        )
    return {
        "schema": SCHEMA,
        "generated_at": report.generated_at,
        "filter": {"session": report.session, "since": report.since},
        "by": report.by,
        "empty": report.empty,
        "sessions": report.sessions,
        "live_sessions": list(report.live_sessions),
        "incomplete_sessions": list(report.incomplete_sessions),
        "needed_again": report.needed_again,
        "thinking_bound_models": list(report.thinking_bound_models),
        "unpriced_models": list(report.unpriced_models),
        "totals": _figures_json(report.totals, _one_agent(report.agents)),
        "groups": groups,
    }


def _one_agent(agents: tuple[str, ...]) -> str | None:
    return agents[0] if len(agents) == 1 else None


def _group_agent(report: StatsReport, g: Group) -> str | None:
    if g.session is not None:
        return g.session.agent
    if report.by == "agent":
        return g.key
    return _one_agent(report.agents)


def render_json(report: StatsReport) -> str:
    return json.dumps(report_to_json(report), indent=2, sort_keys=True)


def _n(v: int) -> str:
    return f"{v:,}"


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}%"


def _when(ts: float | None) -> str:
    return "-" if ts is None else time.strftime("%Y-%m-%d %H:%M", time.localtime(ts))


def _bar(value: int, scale: int, width: int = 12) -> tuple[str, str]:
    """A bar proportional to |value|; a minus sign marks losses even without colour."""
    if scale <= 0 or value == 0:
        return "", ""
    cells = max(1, round(width * abs(value) / scale))
    return ("-" + "█" * cells, "red") if value < 0 else ("█" * cells, "green")


def thinking_bound_line(models: Sequence[str]) -> str:
    """Why masking saved little on these models (`ctxwrap stats`, `replay` and `report`)."""
    names = ", ".join(m.rsplit("/", 1)[-1] for m in models)
    return (
        f"history masking saves little on {names}: the model binds its reasoning to the"
        " history, so ctxwrap edits nothing a later thinking block follows"
        " (docs/architecture.md)"
    )


def nothing_message(report: StatsReport) -> str:
    where = []
    if report.session:
        where.append(f"for session {report.session}")
    if report.since is not None:
        where.append(f"since {_when(report.since)}")
    return "no statistics recorded yet" + (" " + " ".join(where) if where else "")


def _paint(text: str, style: str, color: bool) -> str:
    from ctxwrap._table import paint

    return paint(text, style, color)


def _wrap(line: str, width: int, *, indent: str = "") -> str:
    """A prose line folded at spaces to `width`: a number never breaks across lines."""
    import textwrap

    if len(indent) + len(_strip_sgr(line)) <= width:
        return indent + line
    return "\n".join(
        textwrap.wrap(
            line,
            width=max(20, width),
            initial_indent=indent,
            subsequent_indent=indent + "  ",
            break_long_words=False,
            break_on_hyphens=False,
        )
    )


_SGR_RE = re.compile(r"\x1b\[[0-9;]*m")


def _strip_sgr(text: str) -> str:
    return _SGR_RE.sub("", text)


def header_lines(report: StatsReport, *, color: bool) -> list[str]:
    """The lines above the table: scope and the headline (the accounting is `verbose`)."""
    from ctxwrap.vocabulary import plural

    t = report.totals
    h = headline_of(t, _one_agent(report.agents))
    scope = f"session {report.session}" if report.session else "all sessions"
    if report.since is not None:
        scope += f" since {_when(report.since)}"
    live = f", {len(report.live_sessions)} live" if report.live_sessions else ""
    sessions = "" if report.session else f" ({plural(report.sessions, 'session')}{live})"
    out = [f"{_paint('ctxwrap stats', 'bold', color)} — {scope}{sessions}"]
    if t.cost.calls and h.short():
        style = "red bold" if (h.pct or 0) < 0 else "green bold"
        mostly = h.mostly() if (h.pct or 0) > 0 else ""
        money = money_of(t)
        hp = headline_of(replace(t, cost=t.priced_cost), _one_agent(report.agents))
        if t.unpriced_sessions and money.plain is not None and hp.money():
            # the % counts every session; the money only the priced ones, and says so
            n = len(t.unpriced_sessions)
            head = f"{h.short()} · {hp.money()} on the priced sessions"
            what = (
                f"{hp.sentence().split(' — ')[0]};"
                f" {plural(n, 'session')} unpriced ({', '.join(report.unpriced_models)})"
            )
        else:
            head, what = h.short(), h.sentence().split(" — ")[0]
        out.append(f"{_paint(head, style, color)}: {what}" + (f"; {mostly}" if mostly else ""))
    return out


def notes_lines(report: StatsReport, *, color: bool) -> list[str]:
    """Under the table, always: what makes the figures a lower bound or small."""
    from ctxwrap.vocabulary import plural

    out = []
    t = report.totals
    if t.failed_tries:
        out.append(
            f"{plural(t.failed_tries, 'try', 'tries')} failed (an error or no answer from the"
            " provider: not LLM calls, priced at nothing)"
        )
    if report.incomplete_sessions:
        ids = ", ".join(s[:8] for s in report.incomplete_sessions[:5])
        more = "…" if len(report.incomplete_sessions) > 5 else ""
        n = len(report.incomplete_sessions)
        out.append(
            _paint(
                f"incomplete: {plural(n, 'session')} lost records while the daemon was away"
                f" or ended uncleanly ({ids}{more}); figures are a lower bound",
                "yellow",
                color,
            )
        )
    if report.thinking_bound_models:
        out.append(thinking_bound_line(report.thinking_bound_models))
    return out


def accounting_lines(report: StatsReport, *, color: bool) -> list[str]:
    """`--verbose`: the figures behind the headline, each labelled by what it counts (the
    requests ctxwrap saw, the replies the provider billed, estimated or counted tokens)."""
    from ctxwrap.vocabulary import plural

    t = report.totals
    plain = headline_of(t, _one_agent(report.agents)).plain_name
    out = [
        f"requests through ctxwrap: {plural(t.llm_calls, 'LLM call')}, ≈{_n(t.sent_tokens)}"
        f" tokens sent; {plain} would have sent ≈{_n(t.plain_tokens)}"
    ]
    net = _paint(_n(t.net_tokens), "red" if t.net_tokens < 0 else "green", color)
    out.append(
        f"kept out ≈{_n(t.saved_tokens)} tokens ({_pct(t.saved_pct)}) − aux model"
        f" {_n(t.aux_tokens)} tokens ({plural(t.aux_calls, 'aux call')}, {_n(t.aux_failed)}"
        f" failed) = net {net}"
    )
    c = t.cost
    if c.calls:
        out.append(
            f"cache (estimated): read {_n(c.cache_read_tokens)}, write"
            f" {_n(c.cache_write_tokens)}, fresh {_n(c.uncached_input_tokens)};"
            f" {plain}: read {_n(c.plain_cache_read_tokens)}, write"
            f" {_n(c.plain_cache_write_tokens)}, fresh {_n(c.plain_uncached_input_tokens)}"
        )
        if c.compactions or c.plain_compactions:
            avoided = c.compactions_avoided
            # ctxwrap's context is smaller: it compacts later, so rarely more often than plain
            # (a threshold the plain model cannot see); said as it is, never "-1 avoided"
            tail = (
                f"{_n(avoided)} avoided"
                if avoided >= 0
                else f"{_n(-avoided)} more than {plain} would have run"
            )
            out.append(
                f"compactions {_n(c.compactions)}, {plain} {_n(c.plain_compactions)} ({tail})"
            )
    if t.head_changes:
        out.append(
            f"cache prefix changed {_n(t.head_changes)}× ({_n(t.head_changes_compaction)}"
            f" compaction, {_n(t.head_changes - t.head_changes_compaction)} other)"
        )
    need = needed_again.text_line(report.needed_again) if report.needed_again else None
    if need:
        out.append(need)
    p = t.provider
    if p.turns:
        # the provider's input counts cached tokens apart: its "input" is the fresh part only
        whole = p.input_tokens + p.cache_read_tokens + p.cache_write_tokens
        out.append(
            f"the provider's own count, over {plural(p.turns, 'reply', 'replies')}:"
            f" {_n(whole)} input tokens ({_n(p.input_tokens)} fresh, {_n(p.cache_read_tokens)}"
            f" cache read, {_n(p.cache_write_tokens)} cache write), {_n(p.output_tokens)} output"
        )
    if p.cache_older_entry or p.cache_head_only or p.cache_nothing:
        # why the bill is above what an ideal cache would cost (docs/accounting.md)
        out.append(
            f"the provider's cache missed: {plural(p.cache_nothing, 'request')} read nothing,"
            f" {_n(p.cache_older_entry)} an older entry, {_n(p.cache_head_only)} the system"
            " prompt and tools alone (the cost figures price them so)"
        )
    return out


def render_text(
    report: StatsReport,
    *,
    color: bool,
    width: int,
    charts: bool | None = None,
    verbose: bool = False,
    more_hint: str | None = None,
) -> str:
    """The headline, the table, then notes; `verbose` adds the accounting after the table,
    else one line says how to see it (`more_hint`: the command, "" for none). `color=False`
    emits no escape codes; `charts` defaults to `color`."""
    if report.empty:
        return _wrap(nothing_message(report), width) + "\n"
    charts = color if charts is None else charts
    out = [_wrap(line, width) for line in header_lines(report, color=color)]
    out.append("")
    if report.by == "mechanism":
        out += _mechanism_table(report, color=color, width=width, charts=charts)
    else:
        out += _group_table(report, color=color, width=width, charts=charts)
    out += [_wrap(line, width) for line in notes_lines(report, color=color)]
    if verbose:
        out += ["", _paint("how the figures are made (≈: estimated, chars/4)", "bold", color)]
        out += [_wrap(line, width, indent="  ") for line in accounting_lines(report, color=color)]
    else:
        from ctxwrap._table import hint

        if more_hint is None:
            # 13 characters: a UUIDv7's whole millisecond timestamp, unique in practice and
            # short enough for a 60-column line (resolve_session takes a unique prefix)
            one = f" --session {report.session[:13]}" if report.session else ""
            more_hint = f"ctxwrap stats{one} --verbose"
        if more_hint:
            out += hint("≈ estimated (chars/4); details:", more_hint, width)
    return "\n".join(out) + "\n"


def _mechanism_table(report: StatsReport, *, color: bool, width: int, charts: bool) -> list[str]:
    from ctxwrap import _table as T
    from ctxwrap.vocabulary import mechanism_label, mechanism_words

    t = report.totals
    mechs = list(t.mechanisms)
    scale = max((abs(m.net_tokens) for m in mechs), default=0)
    bold = [""] * len(mechs) + ["bold"]
    cols = [
        T.column(
            ("what ctxwrap did", "mechanism"),
            [
                *(
                    (mechanism_words(m.mechanism), mechanism_label(m.mechanism), m.mechanism)
                    for m in mechs
                ),
                "total",
            ],
            styles=bold,
            left=True,
        ),
        _num_col(
            ("≈tokens kept out", "≈kept out"), [m.saved_tokens for m in mechs], t.saved_tokens
        ),
        _num_col(("aux model", "aux"), [m.aux_tokens for m in mechs], t.aux_tokens, drop=2),
        _num_col("net", [m.net_tokens for m in mechs], t.net_tokens),
    ]
    if charts:
        bars = [_bar(m.net_tokens, scale) for m in mechs] + [("", "")]
        cols.append(
            T.column("", [b[0] for b in bars], styles=[b[1] for b in bars], bar=True, left=True)
        )
    return T.render(cols, width=width, color=color, total_rows=1)


def _num_col(
    header: str | tuple[str, ...], values: list[int], total: int | None, *, drop: int = 0
) -> Any:
    from ctxwrap import _table as T

    vals = [*values, *([] if total is None else [total])]
    styles = ["red" if v < 0 else "" for v in values]
    if total is not None:
        styles.append("red bold" if total < 0 else "bold")
    return T.column(header, [_n(v) for v in vals], styles=styles, drop=drop)


def _group_table(report: StatsReport, *, color: bool, width: int, charts: bool) -> list[str]:
    from ctxwrap import _table as T
    from ctxwrap.vocabulary import agent_name

    groups = list(report.groups)
    t = report.totals
    figs = [g.figures for g in groups] + [t]
    n = len(groups)
    bold = [""] * n + ["bold"]
    cols: list[Any] = []
    if report.by == "session":
        infos = [g.session for g in groups]
        cols.append(
            T.column(
                "session",
                [*T.short_ids([g.key for g in groups]), "total"],
                styles=bold,
                left=True,
            )
        )
        cols.append(
            T.column(
                "agent",
                [(agent_name(s.agent), s.agent) if s else "-" for s in infos] + [""],
                left=True,
                drop=3,
            )
        )
        cols.append(
            T.column(
                "started",
                [
                    (_when(s.started_at)[5:], _when(s.started_at)[5:10])
                    if s and s.started_at
                    else "-"
                    for s in infos
                ]
                + [""],
                left=True,
                drop=4,
            )
        )
        states = ["-" if s is None else ("live" if s.live else "ended") for s in infos]
        cols.append(
            T.column(
                "state",
                [*states, ""],
                styles=["green" if st == "live" else "" for st in states] + [""],
                left=True,
                drop=5,
            )
        )
    elif report.by == "day":
        cols.append(
            T.column(
                "day", [(g.key, g.key[5:]) for g in groups] + ["total"], styles=bold, left=True
            )
        )
    else:
        cols.append(
            T.column(
                "agent",
                [(agent_name(g.key), g.key) for g in groups] + ["total"],
                styles=bold,
                left=True,
            )
        )
    cols.append(_num_col("calls", [f.llm_calls for f in figs[:-1]], t.llm_calls))
    money = [money_of(f) for f in figs]
    priced = any(m.plain is not None for m in money)
    if priced:
        texts = [money_texts(m) for m in money]
        saved = [m.saved for m in money]
        cols += [
            T.column(("$ without ctxwrap", "$ plain"), [t[0] for t in texts], styles=bold),
            T.column(("$ with ctxwrap", "$ with"), [t[1] for t in texts], styles=bold),
            T.column(
                "saved",
                [t[2] for t in texts],
                styles=[
                    ("red " if (v or 0) < 0 else "") + b for v, b in zip(saved, bold, strict=True)
                ],
            ),
        ]
    else:
        cols += [
            T.column(
                ("cost without ctxwrap", "cost plain"),
                [tokens_text(f.cost.total_plain_weighted) for f in figs],
                styles=bold,
            ),
            T.column(
                ("cost with ctxwrap", "cost with"),
                [tokens_text(f.cost.total_weighted) for f in figs],
                styles=bold,
            ),
        ]
    pcts = [f.cost.total_saved_pct if f.cost.calls else None for f in figs]
    cols.append(
        T.column(
            "cost",
            [pct_text(p) or "-" for p in pcts],
            styles=[
                ("red " if (p or 0) < -0.5 else "") + b for p, b in zip(pcts, bold, strict=True)
            ],
        )
    )
    cols += [
        _num_col(
            ("≈tokens sent", "≈sent"), [f.sent_tokens for f in figs[:-1]], t.sent_tokens, drop=8
        ),
        _num_col(
            ("≈kept out", "≈kept"), [f.saved_tokens for f in figs[:-1]], t.saved_tokens, drop=6
        ),
        _num_col("aux", [f.aux_tokens for f in figs[:-1]], t.aux_tokens, drop=7),
        _num_col("net", [f.net_tokens for f in figs[:-1]], t.net_tokens, drop=6),
    ]
    if charts:
        scale = max((abs(f.net_tokens) for f in figs[:-1]), default=0)
        bars = [_bar(f.net_tokens, scale) for f in figs[:-1]] + [("", "")]
        cols.append(
            T.column("", [b[0] for b in bars], styles=[b[1] for b in bars], bar=True, left=True)
        )
    lines = T.render(cols, width=width, color=color, total_rows=1 if n > 1 else 0)
    if n == 1:
        lines = lines[:-1]  # one row: its total is the same row
    if not priced:
        models = ", ".join(report.unpriced_models) or "these models"
        lines.append(
            _wrap(f"cost in input-token equivalents: no price is known for {models}", width)
        )
    elif t.unpriced_sessions:
        lines.append(_wrap(unpriced_note(len(t.unpriced_sessions), report.unpriced_models), width))
    return lines


# -- money where it is known: one session without a price must not hide everyone's ------------


@dataclass(frozen=True)
class Money:
    """A row's cost in money both ways. `plain`/`ours` None: no price is known for any of it;
    `partial`: the sum of its priced part only (some of it has no known price)."""

    plain: float | None
    ours: float | None
    partial: bool = False

    @property
    def saved(self) -> float | None:
        return None if self.plain is None or self.ours is None else self.plain - self.ours


def money_of(f: Figures) -> Money:
    """A `Figures`' money: all of it when every session is priced, else its priced part."""
    if not f.unpriced_sessions:
        return Money(total_plain_usd(f.cost), total_usd(f.cost))
    c = f.priced_cost
    if not c.calls:
        return Money(None, None)
    return Money(total_plain_usd(c), total_usd(c), partial=True)


def money_total(rows: Sequence[Money]) -> Money:
    """The total row: the sum of what is priced, marked partial when any row is not whole."""
    known = [r for r in rows if r.plain is not None and r.ours is not None]
    if not known:
        return Money(None, None)
    return Money(
        sum(r.plain or 0.0 for r in known),
        sum(r.ours or 0.0 for r in known),
        partial=len(known) < len(rows) or any(r.partial for r in known),
    )


def money_texts(m: Money) -> tuple[str, str, str]:
    """Cells ($ plain, $ with, saved): `unpriced` where no price is known, a `*` on a sum of
    the priced part only (`unpriced_note` says so under the table)."""
    if m.plain is None or m.ours is None:
        return "unpriced", "-", "-"
    mark = "*" if m.partial else ""
    return (
        usd_text(m.plain) + mark,
        usd_text(m.ours) + mark,
        usd_text(m.plain - m.ours) + mark,
    )


def unpriced_note(sessions: int, models: Sequence[str]) -> str:
    """The line under a table with `unpriced` or `*` cells."""
    from ctxwrap.vocabulary import plural

    named = ", ".join(models) or "some models"
    return (
        f"unpriced: no known price for {named} ({plural(sessions, 'session')}); $ marked *:"
        " the priced sessions only; cost %: every session, in input-token equivalents"
    )


# -- command ------------------------------------------------------------------------------------


def _wants_color(stream: Any) -> bool:
    # https://no-color.org: any non-empty NO_COLOR disables colour.
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    return bool(getattr(stream, "isatty", lambda: False)())


def load_report(*, session: str | None, since: float | None, by: GroupBy) -> StatsReport | None:
    """The report from the default database, or None when nothing was ever recorded."""
    from ctxwrap.state.store import connect

    db = paths.db_path()
    if not db.exists():
        return None
    ttl_s, prices = cost_settings()
    conn = connect(db, readonly=True)
    try:
        return compute_stats(conn, session=session, since=since, by=by, ttl_s=ttl_s, prices=prices)
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):  # created by a daemon that never migrated it
            return None
        raise
    finally:
        conn.close()


def cost_settings() -> tuple[float, dict[str, Prices]]:
    """cache_ttl_s and the price overrides, as the config resolves them (PI_CTX_* over
    config.toml over defaults), read without loading the whole config: pydantic would
    double `ctxwrap stats`' start-up. A bad value falls back to the default (`ctxwrap config
    show` reports it)."""
    import tomllib

    from ctxwrap.mechanisms.cost_accounting import settings_overrides

    file: dict[str, Any] = {}
    with contextlib.suppress(OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
        file = tomllib.loads(paths.config_file().read_text(encoding="utf-8"))
    ttl_raw = os.environ.get("PI_CTX_CACHE_TTL_S") or file.get("cache_ttl_s", 300.0)
    try:
        ttl = float(ttl_raw)
    except (TypeError, ValueError):
        ttl = 300.0
    if not ttl >= 0:
        ttl = 300.0
    prices = os.environ.get("PI_CTX_PRICES") or file.get("prices")
    return ttl, settings_overrides(prices if isinstance(prices, str) else None)


_cost_settings = cost_settings  # the name other modules imported before


def _since_param(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        return parse_since(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="'--since'") from None


@click.command("stats")
@click.option("--session", "session", metavar="ID", help="One session (an id or unique prefix).")
@click.option(
    "--since", "since", metavar="WHEN", help="Only calls since 2h, 3d, 2026-11-30 or an ISO time."
)
@click.option(
    "--by",
    type=click.Choice(["mechanism", "session", "day", "agent"]),
    default="mechanism",
    show_default=True,
    help="Rows of the table.",
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (schema 1).")
@click.option(
    "-v",
    "--verbose",
    is_flag=True,
    help="After the table, the accounting behind the figures (tokens, cache, provider counts).",
)
@click.option(
    "--watch",
    type=float,
    is_flag=False,
    flag_value=2.0,
    default=None,
    metavar="[SECONDS]",
    help="Redraw every SECONDS (default 2) until Ctrl+C.",
)
def stats_command(
    session: str | None,
    since: str | None,
    by: GroupBy,
    as_json: bool,
    verbose: bool,
    watch: float | None,
) -> None:
    """What ctxwrap saved: the cost with and without it, and what each mechanism kept out.

    The first figure is the cost reduction as pi's footer and /ctx-stats show it (cache-priced,
    net of ctxwrap's own aux-model calls, compactions included). Token sizes are estimates
    (chars/4), shown beside what the provider counted. --by day reads like a daily usage
    report: $ without ctxwrap, $ with, saved.
    """
    since_ts = _since_param(since)
    if watch is not None and watch <= 0:
        raise click.BadParameter("must be more than 0 seconds", param_hint="'--watch'")

    def once() -> str:
        report = load_report(session=session, since=since_ts, by=by)
        if as_json:
            return (
                render_json(report or empty_report(session=session, since=since_ts, by=by)) + "\n"
            )
        if report is None:
            return "no statistics recorded yet\n"
        color = _wants_color(sys.stdout)
        width = shutil.get_terminal_size((100, 24)).columns
        text = render_text(
            report, color=color, width=width, charts=sys.stdout.isatty(), verbose=verbose
        )
        if report.session and sys.stdout.isatty():  # one-line per-call chart (replay package)
            from ctxwrap.replay.chart import stats_chart

            text += stats_chart(report.session, width=width, color=color)
        return text

    if watch is None:
        click.echo(once(), nl=False)
        return
    try:
        if sys.stdout.isatty() and not as_json:
            _watch_live(once, watch)
        else:
            while True:
                click.echo(once())  # the blank line separates frames
                sys.stdout.flush()
                time.sleep(watch)
    except KeyboardInterrupt:
        return  # Ctrl+C is how a watch ends, not a failure


def _watch_live(frame: Callable[[], str], interval: float) -> None:
    from rich.console import Console
    from rich.live import Live
    from rich.text import Text

    console = Console()
    with Live(Text.from_ansi(frame()), console=console, auto_refresh=False) as live:
        while True:
            time.sleep(interval)
            live.update(Text.from_ansi(frame()), refresh=True)
