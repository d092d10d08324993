"""`ctxwrap stats`' render side: a `StatsReport` as text (`render_text`) or JSON (`render_json`).

Prints nothing and imports no CLI framework (the daemon renders `/ctx-stats` with it); rich is
never needed, `ctxwrap._table` draws the tables. Percentages and money are rounded by
`ctxwrap.headline`, as every other view.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from ctxwrap.headline import headline_of, pct_text, tokens_text, usd_text, why_text
from ctxwrap.mechanisms import needed_again
from ctxwrap.mechanisms.cost_accounting import CostFigures
from ctxwrap.stats.compute import Figures, Group, Money, StatsReport, money_of

SCHEMA = 1

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
        "costs_more_because": report.costs_more_because,
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


def wrap(line: str, width: int, *, indent: str = "") -> str:
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
        if report.costs_more_because:
            out.append(_paint(why_text(report.costs_more_because), "red", color))
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
        return wrap(nothing_message(report), width) + "\n"
    charts = color if charts is None else charts
    out = [wrap(line, width) for line in header_lines(report, color=color)]
    out.append("")
    if report.by == "mechanism":
        out += _mechanism_table(report, color=color, width=width, charts=charts)
    else:
        out += _group_table(report, color=color, width=width, charts=charts)
    out += [wrap(line, width) for line in notes_lines(report, color=color)]
    if verbose:
        out += ["", _paint("how the figures are made (≈: estimated, chars/4)", "bold", color)]
        out += [wrap(line, width, indent="  ") for line in accounting_lines(report, color=color)]
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
            wrap(f"cost in input-token equivalents: no price is known for {models}", width)
        )
    elif t.unpriced_sessions:
        lines.append(wrap(unpriced_note(len(t.unpriced_sessions), report.unpriced_models), width))
    return lines


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
