"""`ctxwrap stats`' compute side: the SQLite store (read-only) → figures, as plain dataclasses.

What the daemon runs for a session's totals at every turn end (`session_totals`), and what
every view of a session takes its headline from (`session_headline`). Imports no CLI framework
and draws nothing: `ctxwrap.stats.render` turns a report into text and JSON,
`ctxwrap.stats.command` is the click command. Figures are defined in docs/accounting.md.
"""

from __future__ import annotations

import contextlib
import os
import re
import sqlite3
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from ctxwrap import paths
from ctxwrap.engine.thinking import checks_thinking_prefix
from ctxwrap.errors import NotFoundError
from ctxwrap.headline import Headline, carried_text, headline_of, total_plain_usd, total_usd
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
    from ctxwrap.mechanisms.cost_accounting import SessionCosts

MECHANISMS = ("bash", "amnesia", "masking", "writes", "skills", "tools", "thinking")
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
    # one session (`session`) that cost more than plain: why, in words (`cost_cause`); set by
    # `load_report` (the CLI's views), never in the daemon's turn-end path
    costs_more_because: str | None = None

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

    thinking = "saved_thinking" if has_column(conn, "llm_calls", "saved_thinking") else "0"
    masking = "saved_masking" if has_column(conn, "llm_calls", "saved_masking") else "0"
    for r in conn.execute(
        f"""SELECT session_id, {bucket} b, COUNT(*), SUM(head_changed),
                   SUM(sent_system + sent_messages + sent_tools), SUM(saved_bash),
                   SUM(saved_amnesia), SUM({masking}), SUM(saved_writes), SUM(saved_skills),
                   SUM(saved_tools), SUM({thinking})
            FROM llm_calls WHERE {cond} GROUP BY session_id, b""",
        params,
    ):
        c = cell(r[0], r[1])
        c.calls += r[2]
        c.heads += r[3]
        c.sent += r[4]
        for m, v in zip(MECHANISMS, r[5:12], strict=True):
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


# -- why a session cost more than plain ------------------------------------------------------


CauseKind = Literal["carried", "aux", "summaries", "rewrites", "own_tools"]


@dataclass(frozen=True)
class CostCause:
    """Which effect made a session cost more than plain (DESIGN.md invariant 10: a loss is
    said, not only signed). `weighted`: its share of the loss, input-equivalent tokens;
    `tokens`: the figure the words give (tokens carried, tokens written to the cache)."""

    kind: CauseKind
    text: str
    weighted: float
    tokens: int = 0


def carried_per_call(costs: SessionCosts) -> list[int]:
    """Per recorded call, the tokens ctxwrap's request carried beyond plain's while plain had
    compacted more often than the session (the agent under ctxwrap compacts later, on its
    smaller context: docs/accounting.md, "Compaction timing"); 0 elsewhere."""
    compactions = sorted(ts for ts, _c in costs.compactions)
    out: list[int] = []
    plain_n = 0
    for ts, a, p, comp in costs.calls:
        plain_n += comp is not None
        real_n = sum(1 for c in compactions if c <= ts)
        out.append(max(0, a.input_tokens - p.input_tokens) if plain_n > real_n else 0)
    return out


def cost_cause(costs: SessionCosts, figures: CostFigures) -> CostCause | None:
    """Why the session cost more than plain, None when it did not: of the parts of the loss
    (requests carrying history past plain's compaction, the aux model's calls, ctxwrap's own
    compactions' summaries, the other requests: rewrites of the cached history, ctxwrap's own
    tool specs), the largest."""
    if figures.total_saved_weighted >= 0 or not costs.calls:
        return None
    carried = carried_per_call(costs)
    carried_w = sum(
        max(0.0, a.weighted_tokens - p.weighted_tokens)
        for (_ts, a, p, _c), n in zip(costs.calls, carried, strict=True)
        if n > 0
    )
    requests = figures.sent_weighted - figures.plain_weighted - carried_w
    writes = figures.cache_write_tokens - figures.plain_cache_write_tokens
    parts = [
        CostCause("carried", carried_text(max(carried)), carried_w, max(carried)),
        CostCause(
            "aux",
            "its aux-model calls cost more than the context they kept out",
            figures.aux_weighted,
        ),
        CostCause(
            "summaries",
            "its own compactions' summaries cost more than plain's",
            figures.compaction_weighted - figures.plain_compaction_weighted,
        ),
        CostCause(
            "rewrites",
            f"its rewrites of the history wrote {writes:,} more tokens to the cache than plain",
            requests,
            writes,
        )
        if writes > 0
        else CostCause(
            "own_tools", "its own tool specs and facts added more than it kept out", requests
        ),
    ]
    worst = max(parts, key=lambda c: c.weighted)
    return worst if worst.weighted > 0 else None


def session_cost_cause(
    conn: sqlite3.Connection,
    session_id: str,
    *,
    ttl_s: float | None = None,
    prices: Mapping[str, Prices] | None = None,
) -> CostCause | None:
    """`cost_cause` of one recorded session, priced as `ctxwrap stats` prices it (the same
    settings); None when it did not cost more. Prices the session call by call: asked only of
    a session whose figures say it cost more."""
    from ctxwrap.mechanisms.cost_accounting import load_session_costs

    if ttl_s is None or prices is None:
        cfg_ttl, cfg_prices = cost_settings()
        ttl_s = cfg_ttl if ttl_s is None else ttl_s
        prices = cfg_prices if prices is None else prices
    figures = session_figures(conn, session_id, ttl_s=ttl_s, prices=prices)
    if figures.cost.total_saved_weighted >= 0:
        return None
    costs = load_session_costs(conn, [session_id], ttl_s=ttl_s, overrides=prices)[session_id]
    return cost_cause(costs, figures.cost)


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


# -- the default database and settings ------------------------------------------------------


def with_cause(
    conn: sqlite3.Connection,
    report: StatsReport,
    *,
    ttl_s: float,
    prices: Mapping[str, Prices] | None,
) -> StatsReport:
    """`report` with why its one session cost more than plain (`cost_cause`), where it did:
    `ctxwrap stats --session` and pi's /ctx-stats say the same."""
    c = report.totals.cost
    if report.session is None or not c.calls or c.total_saved_weighted >= 0:
        return report
    from ctxwrap.mechanisms.cost_accounting import load_session_costs

    costs = load_session_costs(conn, [report.session], ttl_s=ttl_s, overrides=prices)
    cause = cost_cause(costs[report.session], c)
    return replace(report, costs_more_because=cause.text if cause else None)


def load_report(*, session: str | None, since: float | None, by: GroupBy) -> StatsReport | None:
    """The report from the default database, or None when nothing was ever recorded."""
    from ctxwrap.state.store import connect

    db = paths.db_path()
    if not db.exists():
        return None
    ttl_s, prices = cost_settings()
    conn = connect(db, readonly=True)
    try:
        report = compute_stats(
            conn, session=session, since=since, by=by, ttl_s=ttl_s, prices=prices
        )
        return with_cause(conn, report, ttl_s=ttl_s, prices=prices)
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
