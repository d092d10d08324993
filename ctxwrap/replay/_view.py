"""`ctxwrap replay` for a person: one row per session (date, project, agent, calls, $ plain →
$ with ctxwrap, %), a total, the sessions that already ran under ctxwrap apart, and what each
mechanism would have done — simulated, or only bounded (the tagger, without --tag).

Figures come from replay's JSON document (`_run.run_json`); nothing here re-runs a session.
Percentages and money are rounded by `ctxwrap.headline`, as every other view.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ctxwrap import _table as T
from ctxwrap.headline import pct_text, usd_text
from ctxwrap.mechanisms.needed_again import parts_text, row_figure, row_parts
from ctxwrap.replay._run import FIT_TOLERANCE
from ctxwrap.vocabulary import agent_name, mechanism_label, mechanism_words, plural

if TYPE_CHECKING:
    from ctxwrap.stats.compute import Money

_HEAD_BYTES = 256 * 1024


@dataclass
class Row:
    doc: dict[str, Any]
    started: float | None
    project: str
    project_short: str
    agent: str
    under_ctxwrap: bool
    plain: float  # $ when priced, else input-equivalent tokens
    ours: float
    priced: bool


def _file_facts(path: str) -> tuple[float | None, str | None]:
    """The first timestamp and cwd of a transcript (for readers that did not report them)."""
    from ctxwrap.replay._events import parse_ts

    started: float | None = None
    cwd: str | None = None
    try:
        with open(path, "rb") as fh:
            for n, raw in enumerate(fh):
                if n > 200 or (started is not None and cwd is not None):
                    break
                try:
                    entry = json.loads(raw)
                except ValueError:
                    continue
                if not isinstance(entry, dict):
                    continue
                if started is None:
                    ts = entry.get("timestamp")
                    if ts is None and isinstance(entry.get("snapshot"), dict):
                        ts = entry["snapshot"].get("timestamp")
                    started = parse_ts(ts)
                if cwd is None and isinstance(entry.get("cwd"), str):
                    cwd = entry["cwd"]
    except OSError:
        pass
    return started, cwd


def ran_under_ctxwrap(g: dict[str, Any]) -> bool:
    """A session ctxwrap already edited, as replay's reader found it (its markers in the
    transcript, or its id in ctxwrap's database): one detector for every view."""
    reader = g.get("reader")
    return bool(isinstance(reader, dict) and reader.get("ran_under_ctxwrap"))


def _project(g: dict[str, Any], cwd: str | None) -> tuple[str, str]:
    """(full, short): Claude Code's project directory name, else the session's cwd."""
    path = Path(g["path"])
    if path.parent.parent.name == "projects":
        name = path.parent.name  # ~/.claude/projects/-home-me-src-app/<id>.jsonl
        return name, name.rsplit("-", 1)[-1] or name
    cwd = g.get("cwd") or cwd
    if cwd:
        return cwd, Path(cwd).name or cwd
    return path.stem, path.stem[:24]


def _input_only(side: dict[str, Any], model: str | None) -> float | None:
    """A side's money without the main model's output (which ctxwrap does not change: the
    same on both sides, left out as `ctxwrap stats` leaves it out)."""
    from ctxwrap.engine.cost import default_prices

    usd = side.get("usd")
    if usd is None:
        return None
    out = side.get("output_tokens") or 0
    price = default_prices(model).output if out else 0.0
    if price is None:
        return float(usd)
    return float(usd) - out * price / 1_000_000


def rows_of(doc: dict[str, Any], *, model: str | None) -> list[Row]:
    rows = []
    for g in doc["groups"]:
        started, cwd = g.get("started_at"), g.get("cwd")
        if started is None or cwd is None:
            first, file_cwd = _file_facts(g["path"])
            started = started if started is not None else first
            cwd = cwd or file_cwd
        full, short = _project(g, cwd)
        under = ran_under_ctxwrap(g)
        g["under_ctxwrap"] = under
        m = model or g.get("model")
        plain_usd = _input_only(g["cost"]["plain"], m)
        our_usd = _input_only(g["cost"]["ctxwrap"], m)
        priced = plain_usd is not None and our_usd is not None
        rows.append(
            Row(
                g,
                started,
                full,
                short,
                g.get("format") or "pi",
                bool(under),
                plain_usd
                if priced and plain_usd is not None
                else g["cost"]["plain"]["weighted_tokens"],
                our_usd
                if priced and our_usd is not None
                else g["cost"]["ctxwrap"]["weighted_tokens"],
                priced,
            )
        )
    rows.sort(key=lambda r: (r.started is None, r.started or 0.0, r.project))
    return rows


def _pct(plain: float, ours: float) -> float | None:
    return 100.0 * (plain - ours) / plain if plain > 0 else None


def fit_text(g: dict[str, Any]) -> str:
    """How replay's plain compares with the bill the transcript records: `1.00` (every call
    recorded), `1.15!` (more than FIT_TOLERANCE off: trust its saving less), `est.` (no usage
    recorded: plain is an estimate)."""
    src = g.get("plain_source") or {}
    fit = src.get("fit")
    if fit is None:
        return "est."
    return f"{fit:.2f}" + ("" if src.get("fit_ok") else "!")


def _weighted(rows: list[Row]) -> tuple[float, float]:
    """Both sides in input-token equivalents (cache-priced): what every session has."""
    return (
        sum(r.doc["cost"]["plain"]["weighted_tokens"] for r in rows),
        sum(r.doc["cost"]["ctxwrap"]["weighted_tokens"] for r in rows),
    )


def _row_money(rows: list[Row]) -> list[Money]:
    from ctxwrap.stats.compute import Money

    return [Money(r.plain, r.ours) if r.priced else Money(None, None) for r in rows]


def headline_of(doc: dict[str, Any], *, model: str | None = None) -> dict[str, Any]:
    """The figures of the text's first lines, for `--json`: the sessions not already run under
    ctxwrap, main-model input only (output is the same on both sides), cache-priced. The cost
    % is of input-token equivalents over every session; money sums the priced ones."""
    from ctxwrap.stats.compute import money_total

    counted = [r for r in rows_of(doc, model=model) if not r.under_ctxwrap]
    wp, wo = _weighted(counted)
    pct = _pct(wp, wo)
    money = money_total(_row_money(counted))
    off = [
        r.doc["session_id"]
        for r in counted
        if not (r.doc.get("plain_source") or {}).get("fit_ok", False)
    ]
    return {
        "sessions": len(counted),
        "plain_weighted": round(wp, 1),
        "ctxwrap_weighted": round(wo, 1),
        "cost_pct": None if pct is None else round(-pct, 1),
        "text": pct_text(pct),
        "plain_usd": None if money.plain is None else round(money.plain, 6),
        "ctxwrap_usd": None if money.ours is None else round(money.ours, 6),
        "saved_usd": None if money.saved is None else round(money.saved, 6),
        "usd_partial": money.partial,
        "unpriced_sessions": [r.doc["session_id"] for r in counted if not r.priced],
        "sessions_off_the_bill": off,
    }


def _session_table(
    rows: list[Row], *, width: int, color: bool, total: bool, costs: bool = True
) -> list[str]:
    from ctxwrap.stats.compute import money_total
    from ctxwrap.stats.render import money_texts, unpriced_note, wrap

    money = _row_money(rows)
    whole = money_total(money)
    weighted = [
        (r.doc["cost"]["plain"]["weighted_tokens"], r.doc["cost"]["ctxwrap"]["weighted_tokens"])
        for r in rows
    ]
    pcts = [_pct(p, o) for p, o in weighted]
    extra: list[str | tuple[str, ...]] = ["total"] if total else []
    n = len(rows)
    bold = [""] * n + (["bold"] if total else [])
    calls = [r.doc["llm_calls"] for r in rows]
    cells = [money_texts(m) for m in money] + ([money_texts(whole)] if total else [])
    dates: list[str | tuple[str, ...]] = [
        (
            time.strftime("%Y-%m-%d", time.localtime(r.started)),
            time.strftime("%m-%d", time.localtime(r.started)),
        )
        if r.started
        else "-"
        for r in rows
    ]
    cols = [
        T.column("date", dates + extra, styles=bold, left=True),
        T.column(
            "project",
            [(r.project, r.project_short, r.project_short[:14]) for r in rows]
            + ([""] if total else []),
            left=True,
            drop=2,
        ),
        T.column(
            "agent",
            [(agent_name(r.agent), r.agent) for r in rows] + ([""] if total else []),
            left=True,
            drop=3,
        ),
        T.column(
            "calls",
            [f"{c:,}" for c in calls] + ([f"{sum(calls):,}"] if total else []),
            styles=bold,
        ),
        T.column("$ plain", [c[0] for c in cells], styles=bold),
        T.column(("$ with ctxwrap", "$ with"), [c[1] for c in cells], styles=bold),
        T.column(
            "cost",
            [pct_text(p) or "-" for p in pcts]
            + ([pct_text(_pct(*_weighted(rows))) or "-"] if total else []),
            styles=bold,
        ),
    ]
    if not costs:  # figures another view owns (`ctxwrap stats`): none here
        cols = cols[:4]
    else:
        cols.append(
            T.column(
                ("plain ÷ bill", "÷ bill"),
                [fit_text(r.doc) for r in rows] + ([""] if total else []),
                drop=1,
            )
        )
    lines = T.render(cols, width=width, color=color, total_rows=1 if total else 0)
    unpriced = [r for r in rows if not r.priced]
    if unpriced and costs:
        models = sorted({str(r.doc.get("model") or "?") for r in unpriced})
        lines.append(wrap(unpriced_note(len(unpriced), models), width))
    return lines


_SIMULATED = ("bash", "writes", "masking", "compaction", "skills", "tools", "thinking")


def _mechanism_table(
    groups: list[dict[str, Any]],
    need: dict[str, dict[str, int]],
    *,
    tagged: bool,
    width: int,
    color: bool,
) -> list[str]:
    """Per mechanism over the counted sessions: simulated ones in the totals; the tagger as a
    range (0 … the most it could hide) with its own aux cost beside, outside the totals —
    counted both ways or neither. `need`: `_needed_per_mechanism(groups)`."""

    def total(mech: str, key: str) -> int:
        return sum(
            next((m[key] for m in g["mechanisms"] if m["mechanism"] == mech), 0) for g in groups
        )

    labels: list[str | tuple[str, ...]] = []
    needed: list[str | tuple[str, ...]] = []
    kept: list[str | tuple[str, ...]] = []
    aux: list[str] = []
    net: list[str | tuple[str, ...]] = []
    how: list[str | tuple[str, ...]] = []
    # compaction timing only where the agent compacted on its own and ctxwrap would not have
    # yet; old thinking only where the agent's edit kept some to leave out
    shown = [
        m for m in _SIMULATED if m not in ("compaction", "thinking") or total(m, "saved_tokens")
    ]
    for mech in shown:
        s, a = total(mech, "saved_tokens"), total(mech, "aux_tokens_estimated")
        labels.append((mechanism_words(mech), mechanism_label(mech), mech))
        kept.append(f"{s:,}")
        aux.append(f"{a:,}")
        net.append(f"{s - a:,}")
        needed.append(_needed_cell(need, mech))
        how.append(("simulated", "sim."))
    am_saved, am_aux = total("amnesia", "saved_tokens"), total("amnesia", "aux_tokens_estimated")
    bound = sum(g.get("tagger_bound_tokens") or 0 for g in groups)
    if tagged:
        labels.append((mechanism_words("amnesia"), mechanism_label("amnesia"), "amnesia"))
        kept.append(f"{am_saved:,}")
        aux.append(f"{am_aux:,}")
        net.append(f"{am_saved - am_aux:,}")
        needed.append(_needed_cell(need, "amnesia"))
        how.append(("tagged by aux", "tagged"))
        counted_saved = sum(total(m, "saved_tokens") for m in (*_SIMULATED, "amnesia"))
        counted_aux = sum(total(m, "aux_tokens_estimated") for m in (*_SIMULATED, "amnesia"))
    else:
        # an unchanged re-read's pointer needs no tagger: simulated, in the totals
        labels.append((mechanism_words("dedup"), mechanism_label("dedup"), "dedup"))
        kept.append(f"{am_saved:,}")
        aux.append("0")
        net.append(f"{am_saved:,}")
        needed.append(_needed_cell(need, "amnesia"))
        how.append(("simulated", "sim."))
        labels.append(
            ("reads the task no longer needs hidden (tagger)", "reads hidden (tagger)", "tagger")
        )
        kept.append((f"0 … {bound:,}", f"0…{bound:,}"))
        aux.append(f"≈{am_aux:,}")
        net.append((f"{-am_aux:,} … {bound - am_aux:,}", f"{-am_aux:,}…{bound - am_aux:,}"))
        needed.append("–")
        how.append(("bounded", "bound"))
        counted_saved = sum(total(m, "saved_tokens") for m in (*_SIMULATED, "amnesia"))
        counted_aux = sum(total(m, "aux_tokens_estimated") for m in _SIMULATED)
    labels.append("total")
    kept.append(f"{counted_saved:,}")
    aux.append(f"{counted_aux:,}")
    net.append(f"{counted_saved - counted_aux:,}")
    n_need = sum(v["needed_again"] for v in need.values())
    n_hidden = sum(v["interventions"] for v in need.values())
    needed.append(f"{n_need:,} of {n_hidden:,}" if n_hidden else "–")
    how.append("")
    n = len(labels)
    bold = [""] * (n - 1) + ["bold"]
    cols = [
        T.column(("what ctxwrap would have done", "mechanism"), labels, styles=bold, left=True),
        T.column(("≈tokens kept out", "≈kept out"), kept, styles=bold),
        T.column(("aux model ≈", "aux≈"), aux, styles=bold, drop=3),
        T.column("net", net, styles=bold),
        T.column(("needed again", "needed"), needed, styles=bold, drop=2),
        T.column("how", how, left=True),
    ]
    return T.render(cols, width=width, color=color, total_rows=1)


def _needed_per_mechanism(groups: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """Over the counted sessions, per mechanism: interventions and how many a later turn
    needed again (copied from, re-read, recalled)."""
    out: dict[str, dict[str, int]] = {}
    for g in groups:
        for mech, f in (g.get("needed_again") or {}).get("mechanisms", {}).items():
            t = out.setdefault(mech, {"interventions": 0, "needed_again": 0})
            t["interventions"] += int(f.get("interventions") or 0)
            t["needed_again"] += int(f.get("needed_again") or 0)
    return out


def _needed_cell(need: dict[str, dict[str, int]], mech: str) -> str:
    """`7 of 34`: of the row's interventions, those needed again; – where it hid nothing."""
    n = row_figure(need, mech)
    return f"{n[0]:,} of {n[1]:,}" if n[1] else "–"


def render_text(
    doc: dict[str, Any],
    *,
    width: int,
    color: bool = False,
    model: str | None = None,
    tagged: bool = False,
) -> str:
    from ctxwrap.engine.thinking import checks_thinking_prefix
    from ctxwrap.stats.render import thinking_bound_line, wrap

    rows = rows_of(doc, model=model)
    counted = [r for r in rows if not r.under_ctxwrap]
    already = [r for r in rows if r.under_ctxwrap]
    calls = sum(r.doc["llm_calls"] for r in counted)
    how = (
        "the aux backend tagged the reads (its tokens counted)" if tagged else "no model was called"
    )
    out = [
        f"ctxwrap replay — {plural(len(counted), 'session')}, {plural(calls, 'LLM call')}"
        f" from {plural(doc['files'], 'file')} ({doc['bytes'] / 1e6:,.1f} MB); {how}"
    ]
    if counted:
        h = headline_of(doc, model=model)
        if h["saved_usd"] is not None:
            saved, star = h["saved_usd"], "*" if h["usd_partial"] else ""
            money = f"{usd_text(abs(saved))}{star} {'saved' if saved >= 0 else 'more'}"
            out.append(
                f"cost {h['text']} · {money}: {usd_text(h['plain_usd'])}{star} plain →"
                f" {usd_text(h['ctxwrap_usd'])}{star} with ctxwrap (main-model input,"
                " cache-priced; aux model in tokens below"
                + ("; $*: the priced sessions only)" if star else ")")
            )
        else:
            out.append(
                f"cost {h['text']}: {h['plain_weighted']:,.0f} → {h['ctxwrap_weighted']:,.0f}"
                " cost units (input-token equivalents, cache-priced; aux model in tokens"
                " below)"
            )
        out = [wrap(line, width) for line in out]
        out.append("")
        out += _session_table(counted, width=width, color=color, total=len(counted) > 1)
        off = [
            r
            for r in counted
            if (src := r.doc.get("plain_source") or {}).get("fit") is not None
            and not src.get("fit_ok")
        ]
        out.append(
            wrap(
                "plain ÷ bill: replay's plain against the input the transcript's recorded usage"
                " bills (1.00: every call recorded, each priced as billed; above: calls the"
                " transcript did not count, estimated, 1.13 adding 13 %; est.: none recorded,"
                " plain estimated)"
                + (
                    f"; {plural(len(off), 'session')} with more than"
                    f" {round(100 * FIT_TOLERANCE)} % estimated (!): trust its saving less"
                    if off
                    else ""
                ),
                width,
            )
        )
        for r in counted:
            why = r.doc.get("costs_more_because")
            if why:
                out.append(
                    wrap(f"costs more: {r.project_short} ({r.doc['session_id'][:8]}): {why}", width)
                )
        out.append("")
        docs = [r.doc for r in counted]
        need = _needed_per_mechanism(docs)
        out += _mechanism_table(docs, need, tagged=tagged, width=width, color=color)
        # the writes row counts the write and the edit strip: their shares differ too much for
        # one figure to stand for both
        apart = parts_text(row_parts(need, "writes"))
        out.append(
            wrap(
                "needed again: of the results a mechanism hid, those a later turn copied from,"
                " read again or recalled (a lower bound; docs/accounting.md)"
                + (f"; the writes row apart: {apart}" if apart else ""),
                width,
            )
        )
        bound = sorted(
            {r.doc["model"] for r in counted if checks_thinking_prefix(r.doc.get("model"))}
        )
        if bound:
            out.append(wrap(thinking_bound_line(bound), width))
        if not tagged:
            out.append(
                wrap(
                    "tagger: without --tag no model decides which reads to hide; the range runs"
                    " from none to every read/grep/find/ls result, its aux cost beside it —"
                    " neither is in the totals",
                    width,
                )
            )
    else:
        out = [wrap(line, width) for line in out]
    if already:
        out.append("")
        out.append(
            wrap(
                f"already run under ctxwrap ({plural(len(already), 'session')}, not in the"
                " totals: their transcripts hold ctxwrap's edits; `ctxwrap stats` has their"
                " figures):",
                width,
            )
        )
        out += _session_table(already, width=width, color=color, total=False, costs=False)
    if doc["skipped_files"] or doc["skipped_entries"]:
        out.append("")
        out.append("skipped:")
        for reason, n in sorted(doc["skipped_files"].items()):
            out.append(
                wrap(
                    f"  {reason}"
                    if n == 1 and reason.startswith("path not found")
                    else f"  {plural(n, 'file')}: {reason}",
                    width,
                )
            )
        for reason, n in sorted(doc["skipped_entries"].items()):
            out.append(wrap(f"  {plural(n, 'entry', 'entries')}: {reason}", width))
    return "\n".join(out) + "\n"
