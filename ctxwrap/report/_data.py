"""What a report shows, from either source: the daemon's SQLite store (a session that ran
under ctxwrap, opened read-only) or a replayed session file. Sizes are tokens (chars/4)."""

from __future__ import annotations

import bisect
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ctxwrap.errors import CtxwrapError, NotFoundError
from ctxwrap.replay._sim import tokens

# What to do when there is nothing to report: every agent, and where each keeps its sessions
NOTHING_RECORDED_HINT = (
    "start a session with `ctxwrap pi`, `ctxwrap claude`\n"
    "or `ctxwrap codex`, or replay one you already ran:\n"
    "--replay PATH (pi: ~/.pi/agent/sessions, Claude Code:\n"
    "~/.claude/projects, Codex: ~/.codex/sessions)"
)
REPLAY_PATH_HINT = (
    "give a session file (or folder) of pi\n"
    "(~/.pi/agent/sessions), Claude Code (~/.claude/projects)\n"
    "or Codex (~/.codex/sessions)"
)

# Stacking order of the per-call bars (sent first, then what each mechanism kept out).
SENT_PARTS = ("system", "tools", "messages", "carried")
# "carried": of the messages sent, what the agent under ctxwrap carried past the point where
# plain's compaction had dropped it (it compacts later, on its smaller context): drawn apart,
# as what a session that cost more paid for (DESIGN.md invariant 10)
KEPT_PARTS = ("bash", "amnesia", "dedup", "writes", "masking", "skills", "tools", "thinking")
# "dedup": a replay without --tag keeps out, of the amnesia mechanism, only the unchanged
# re-reads pointed to their first copy; the tagger is then a range (MechanismRow.bound_tokens).


@dataclass
class CallRow:
    index: int
    ts: float
    sent: dict[str, int]  # tokens per SENT_PARTS
    kept: dict[str, int]  # tokens per mechanism (negative = ctxwrap added)
    cost_plain: float  # input-equivalent tokens of this call
    cost_ctxwrap: float
    usd_plain: float | None
    usd_ctxwrap: float | None
    cache_read: int
    cache_write: int
    compaction: bool = False
    masked: bool = False

    @property
    def sent_total(self) -> int:
        return sum(self.sent.values())

    @property
    def plain_total(self) -> int:
        return self.sent_total + sum(self.kept.values())


@dataclass
class InterventionRow:
    kind: str
    call_index: int | None
    label: str
    original_tokens: int | None  # None: the store records only the saving of an edit
    replacement_tokens: int | None
    handle: str | None
    note: str = ""
    saved: int | None = None  # tokens kept out per request; default before − after

    @property
    def kept_out(self) -> int:
        if self.saved is not None:
            return self.saved
        return (self.original_tokens or 0) - (self.replacement_tokens or 0)


@dataclass
class AuxRow:
    task: str
    mechanism: str
    input_tokens: int
    output_tokens: int
    ok: bool
    estimated: bool = False


@dataclass
class MechanismRow:
    """One mechanism's totals: tokens kept out summed over the calls, the aux model's tokens.

    `bound_tokens`: what it could keep out on top, unsimulated (the tagger in a replay without
    `--tag`); its aux tokens are then the cost of that range, shown beside it and counted in
    no total (`aux_counted` False): never charged without its credit.
    """

    key: str
    saved_tokens: int
    aux_tokens: int
    bound_tokens: int = 0
    aux_counted: bool = True
    # of its interventions, how many a later turn needed again (recalled, re-read, copied):
    # (needed, interventions), None where the source has no such figure
    needed_again: tuple[int, int] | None = None
    # `writes 5 of 8, edits 1 of 38` where the row covers two mechanisms (needed_again.row_parts)
    needed_parts: str | None = None

    @property
    def net_tokens(self) -> int:
        return self.saved_tokens - (self.aux_tokens if self.aux_counted else 0)


@dataclass
class Totals:
    """The session's cost both ways, as the headline states it: `weighted` in cost units
    (input-equivalent tokens), `usd` None when a price is unknown. A live session: `ctxwrap
    stats`' totals (requests, aux calls, compactions); a replay: `ctxwrap replay`'s (requests,
    input side; the estimated aux calls in `aux_*`, beside it)."""

    plain_weighted: float = 0.0
    ours_weighted: float = 0.0
    plain_usd: float | None = None
    ours_usd: float | None = None
    aux_weighted: float = 0.0
    aux_usd: float | None = None
    uncounted_aux_weighted: float = 0.0  # the tagger's cost beside its range (replay)
    uncounted_aux_usd: float | None = None

    @property
    def usd_known(self) -> bool:
        return self.plain_usd is not None and self.ours_usd is not None

    @property
    def saved_weighted(self) -> float:
        return self.plain_weighted - self.ours_weighted

    @property
    def saved_usd(self) -> float | None:
        if self.plain_usd is None or self.ours_usd is None:
            return None
        return self.plain_usd - self.ours_usd

    @property
    def saved_pct(self) -> float | None:
        if self.plain_weighted <= 0:
            return None
        return 100.0 * self.saved_weighted / self.plain_weighted


@dataclass
class ReportData:
    title: str
    source: str  # "ctxwrap session" | "replay"
    session_id: str
    model: str | None
    started_at: float | None
    calls: list[CallRow] = field(default_factory=list)
    interventions: list[InterventionRow] = field(default_factory=list)
    aux: list[AuxRow] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    cost_model: str = ""
    # Totals as the source reports them (`ctxwrap stats` / `ctxwrap replay`): tokens of summed
    # characters, so they can differ from the sum of the per-call bars by rounding.
    sent_total: int | None = None
    plain_total: int | None = None
    saved_total: int | None = None  # the mechanisms' sum, as the source reports it
    mechanisms: list[MechanismRow] = field(default_factory=list)
    totals: Totals = field(default_factory=Totals)
    usd_per_unit: float | None = None  # $ of one cost unit (the model's input price), if known
    agent: str | None = None  # "pi", "claude": names the counterfactual ("plain pi")
    # why the session cost more than plain, in words (None: it did not): replay's
    # `costs_more_because`, or the live `stats.compute.cost_cause`
    costs_more_because: str | None = None

    @property
    def sent_tokens(self) -> int:
        return (
            self.sent_total
            if self.sent_total is not None
            else sum(c.sent_total for c in self.calls)
        )

    @property
    def plain_tokens(self) -> int:
        if self.plain_total is not None:
            return self.plain_total
        return sum(c.plain_total for c in self.calls)

    @property
    def cost_plain(self) -> float:
        return sum(c.cost_plain for c in self.calls)

    @property
    def cost_ctxwrap(self) -> float:
        return sum(c.cost_ctxwrap for c in self.calls)

    @property
    def aux_tokens(self) -> int:
        return sum(a.input_tokens + a.output_tokens for a in self.aux)


def needed_again_of(doc: Any, mechanism: str) -> tuple[int, int] | None:
    """(needed again, interventions) of one mechanism from a "needed again" summary (replay's
    `needed_again`, or the live store's), None when there is no such figure."""
    if not isinstance(doc, dict):
        return None
    per = doc.get("mechanisms")
    if not isinstance(per, dict):
        return None
    from ctxwrap.mechanisms.needed_again import row_figure

    return row_figure(per, mechanism)


def needed_parts_of(doc: Any, mechanism: str) -> str | None:
    """Each part of a row that covers two mechanisms (`writes 5 of 8, edits 1 of 38`), None
    for a row of one or without figures."""
    per = doc.get("mechanisms") if isinstance(doc, dict) else None
    if not isinstance(per, dict):
        return None
    from ctxwrap.mechanisms.needed_again import parts_text, row_parts

    return parts_text(row_parts(per, mechanism))


def _live_needed_again(conn: sqlite3.Connection, sid: str) -> Any:
    """The live "needed again" summary (the daemon records recalls and re-reads of hidden
    results); None when this store cannot say (an older schema)."""
    from ctxwrap.mechanisms import needed_again

    try:
        return needed_again.summary(conn, session=sid)
    except sqlite3.Error:
        return None


def _add(*parts: float | None) -> float | None:
    return None if any(p is None for p in parts) else sum(p for p in parts if p is not None)


def top_mechanisms(data: ReportData, most: int = 2) -> list[MechanismRow]:
    """The mechanisms that did most: the largest positive net (tokens kept out − their aux
    tokens), as `ctxwrap.headline.top_mechanisms` picks them for `ctxwrap stats`."""
    ranked = sorted((m for m in data.mechanisms if m.net_tokens > 0), key=lambda m: -m.net_tokens)
    return ranked[:most]


def _usd_per_unit(prices: Any) -> float | None:
    """A cost unit is one fresh input token: its price, when the cache prices are known too
    (the unit weights then come from the prices, so units × this is exactly the input $)."""
    if prices.input is None or prices.cache_read is None:
        return None
    if prices.caching == "explicit" and prices.cache_write is None:
        return None
    return float(prices.input) / 1_000_000


# -- replay -------------------------------------------------------------------------------------


def _note_thinking_bound(data: ReportData, model: str | None) -> None:
    """A session on a model that binds thinking to the history: why masking saved little."""
    from ctxwrap.engine.thinking import checks_thinking_prefix
    from ctxwrap.stats.render import thinking_bound_line

    if model is not None and checks_thinking_prefix(model):
        line = thinking_bound_line([model])
        data.notes.append(line[:1].upper() + line[1:] + ".")


class SessionChoice(CtxwrapError):
    """`report --replay DIR` found several sessions and was not told which (`--session`)."""

    exit_code = 64  # EX_USAGE


def _session_list(sessions: list[dict[str, Any]], width: int) -> str:
    """The sessions as a table for the hint: a unique id prefix (what --session takes), when,
    agent, calls, file."""
    import time

    from ctxwrap import _table as T
    from ctxwrap.vocabulary import agent_name

    rows = sorted(sessions, key=lambda g: g.get("started_at") or 0.0)
    when = [
        time.strftime("%Y-%m-%d %H:%M", time.localtime(g["started_at"]))
        if g.get("started_at")
        else "-"
        for g in rows
    ]
    agents = [g.get("format") or "pi" for g in rows]
    cols = [
        T.column("id", T.short_ids([str(g["session_id"]) for g in rows]), left=True),
        T.column("started", [(w, w[5:]) for w in when], left=True, drop=3),
        T.column("agent", [(agent_name(a), a) for a in agents], left=True, drop=4),
        T.column("calls", [f"{g['llm_calls']:,}" for g in rows], drop=2),
        T.column("file", [Path(g["path"]).name for g in rows], left=True, drop=5),
    ]
    return "\n".join("  " + line for line in T.render(cols, width=width - 2, color=False))


def _replayed_session(
    path: Path, session: str | None, model: str | None, width: int
) -> dict[str, Any]:
    """The one session of `path` to report (all of its calls): the only one there, or the one
    `session` (an id prefix) names; several and no `session`: SessionChoice lists them."""
    from ctxwrap.replay._run import replay_paths
    from ctxwrap.replay.command import _thresholds

    def nothing(run: Any) -> NotFoundError:
        reasons = ", ".join(f"{n} × {r}" for r, n in {**run.skipped_files}.items())
        return NotFoundError(
            f"no replayable session in {path}" + (f" ({reasons})" if reasons else ""),
            hint=REPLAY_PATH_HINT,
        )

    if path.is_file():  # one file is one session: replay it whole straight away
        run = replay_paths([path], thresholds=_thresholds(), per_call=True, model=model)
        if not run.sessions:
            raise nothing(run)
        found = run.sessions
    else:  # list first (cheaper), then replay the chosen one call by call
        run = replay_paths([path], thresholds=_thresholds(), model=model)
        if not run.sessions:
            raise nothing(run)
        found = run.sessions
    if session is not None:
        found = [g for g in found if str(g["session_id"]).startswith(session)]
        if len(found) != 1:
            what = "no session" if not found else f"{len(found)} sessions"
            raise SessionChoice(
                f"{what} in {path} with an id starting {session!r}",
                hint="give more of one of these ids:\n" + _session_list(run.sessions, width),
            )
    elif len(found) > 1:
        raise SessionChoice(
            f"{path} holds {len(found)} sessions; say which one:",
            hint=f"ctxwrap report --replay {path} --session ID\n" + _session_list(found, width),
        )
    chosen = found[0]
    if "calls" not in chosen:
        again = replay_paths(
            [Path(chosen["path"])], thresholds=_thresholds(), per_call=True, model=model
        )
        chosen = next(g for g in again.sessions if g["session_id"] == chosen["session_id"])
    return dict(chosen)


def from_replay(
    path: Path, *, model: str | None = None, session: str | None = None, width: int = 100
) -> ReportData:
    """A replayed session's report; `session`: an id prefix, to pick one of several in `path`."""
    from ctxwrap.replay._run import MESSAGE_MECHANISMS

    s = _replayed_session(path, session, model, width)
    from ctxwrap.replay import _pricing
    from ctxwrap.replay._pricing import COST_MODEL

    data = ReportData(
        agent=s.get("format") or "pi",
        title=f"replay of {Path(s['path']).name}",
        source="replay",
        session_id=s["session_id"],
        model=s["model"],
        started_at=s["started_at"],
        cost_model=COST_MODEL,
        sent_total=s["sent_tokens"],
        plain_total=s["plain_tokens"],
        saved_total=s["saved_tokens"],
    )
    tagged = bool(s["tagged_by_aux"])
    data.costs_more_because = s.get("costs_more_because")
    prices = _pricing.default_prices(s["model"])
    # input $ only, as `ctxwrap stats` (main-model output is the same either way)
    per_unit = data.usd_per_unit = _usd_per_unit(prices)
    for c in s["calls"]:
        saved = c["saved"]
        wp, wo = c["cost_plain"]["weighted_tokens"], c["cost_ctxwrap"]["weighted_tokens"]
        sent_msgs = tokens(c["messages_chars"] - sum(saved.get(m, 0) for m in MESSAGE_MECHANISMS))
        # of the messages sent, the history plain's compaction had dropped and ctxwrap still
        # carries (replay's per-call `carried_tokens`, where its JSON has it), drawn apart
        carried = min(max(0, int(c.get("carried_tokens") or 0)), max(sent_msgs, 0))
        data.calls.append(
            CallRow(
                index=c["index"],
                ts=c["ts"],
                sent={
                    "system": tokens(c["system_chars"] - saved.get("skills", 0)),
                    "tools": tokens(c["tools_chars"] - saved.get("tools", 0)),
                    "messages": sent_msgs - carried,
                    **({"carried": carried} if carried else {}),
                },
                kept={
                    ("dedup" if m == "amnesia" and not tagged else m): tokens(saved[m])
                    for m in KEPT_PARTS
                    if saved.get(m, 0)
                },
                cost_plain=wp,
                cost_ctxwrap=wo,
                usd_plain=None if per_unit is None else wp * per_unit,
                usd_ctxwrap=None if per_unit is None else wo * per_unit,
                cache_read=c["cost_ctxwrap"]["cache_read_tokens"],
                cache_write=c["cost_ctxwrap"]["cache_write_tokens"],
                compaction=c["compaction"],
                masked=c["masked"],
            )
        )
    for i in s["intervention_list"]:
        if i["kind"] == "tombstone-bound":
            continue  # an upper bound, not something ctxwrap would surely do
        data.interventions.append(
            InterventionRow(
                i["kind"],
                i["call_index"],
                i["label"],
                tokens(i["original_chars"]),
                tokens(i["replacement_chars"]),
                i["handle"],
                i["reason"],
            )
        )
    from ctxwrap.engine.cost import one_off_cost

    t = data.totals
    t.plain_weighted = float(s["cost"]["plain"]["weighted_tokens"])
    requests = float(s["cost"]["ctxwrap"]["weighted_tokens"])
    counted = uncounted = 0.0
    for mech in s["mechanisms"]:
        key = mech["mechanism"]
        aux_t = int(mech["aux_tokens_estimated"])
        if mech["aux_calls_estimated"]:
            data.aux.append(AuxRow("estimated", key, aux_t, 0, True, not tagged))
        # the tagger without --tag: its aux calls are estimated, its saving only bounded
        bounded = key == "amnesia" and not tagged
        cost = one_off_cost(aux_t, 0, prices).weighted_tokens if aux_t else 0.0
        if bounded:
            uncounted += cost
        else:
            counted += cost
        needed = needed_again_of(s.get("needed_again"), key)
        parts = needed_parts_of(s.get("needed_again"), key)
        if bounded:
            # what is certain: unchanged re-reads pointed to their first copy (no aux call);
            # without --tag they are all of amnesia's interventions
            data.mechanisms.append(
                MechanismRow("dedup", int(mech["saved_tokens"]), 0, needed_again=needed)
            )
        data.mechanisms.append(
            MechanismRow(
                key,
                0 if bounded else int(mech["saved_tokens"]),
                aux_t,
                bound_tokens=int(s["tagger_bound_tokens"]) if bounded else 0,
                aux_counted=not bounded,
                needed_again=None if bounded else needed,
                needed_parts=None if bounded else parts,
            )
        )
    # The headline is `ctxwrap replay`'s: requests only, input side. The aux calls are
    # estimated (from their prompts, at the session model's rate): beside it, not in it.
    t.aux_weighted, t.uncounted_aux_weighted = counted, uncounted
    t.ours_weighted = requests
    if per_unit is not None:
        t.plain_usd = t.plain_weighted * per_unit
        t.ours_usd = t.ours_weighted * per_unit
        t.aux_usd = counted * per_unit
        t.uncounted_aux_usd = uncounted * per_unit
    data.notes.append(
        "Replayed without a model call: bash digests are the real extractive digests, write "
        "facts the heuristic ones; masking happens only at real idle gaps over the cache TTL. "
        "Aux model calls are estimated from their prompts; as in `ctxwrap replay`, the "
        "headline is the requests' cost and the aux tokens stand beside it (priced at the "
        "session model's input rate they would be an upper bound: the aux model is cheaper)."
    )
    _note_thinking_bound(data, s["model"])
    if s["system_estimated"]:
        data.notes.append(
            "This agent does not record its system prompt and tools: their size is estimated "
            "from the first call's provider-reported prompt size."
        )
    return data


# -- the daemon's store -------------------------------------------------------------------------


def from_db(conn: sqlite3.Connection, session: str | None) -> ReportData:
    from ctxwrap.replay import _pricing
    from ctxwrap.stats.compute import resolve_session

    if session is None:
        row = conn.execute("SELECT session_id FROM llm_calls ORDER BY ts DESC LIMIT 1").fetchone()
        if row is None:
            raise NotFoundError("no session recorded yet", hint=NOTHING_RECORDED_HINT)
        sid = str(row[0])
    else:
        sid = resolve_session(conn, session)
    info = conn.execute("SELECT * FROM sessions WHERE session_id=?", (sid,)).fetchone()
    model = info["model"] if info is not None else None
    rows = conn.execute("SELECT * FROM llm_calls WHERE session_id=? ORDER BY id", (sid,)).fetchall()
    data = ReportData(
        title=f"session {sid}",
        source="ctxwrap session",
        session_id=sid,
        model=model,
        started_at=info["started_at"] if info is not None else None,
        cost_model=_pricing.COST_MODEL,
    )
    # Priced as `ctxwrap stats` prices it (the same settings, the same priced session): the
    # per-call chart then ends where the headline is. Compactions and aux calls are added to
    # the first call at or after them; plain pi's simulated compactions to the call they
    # precede.
    from ctxwrap.mechanisms.cost_accounting import load_session_costs
    from ctxwrap.stats.compute import cost_settings, session_agent, session_figures

    ttl_s, overrides = cost_settings()
    totals = session_figures(conn, sid, ttl_s=ttl_s, prices=overrides)
    data.agent = session_agent(conn, sid)
    data.sent_total, data.plain_total = totals.sent_tokens, totals.plain_tokens
    data.saved_total = totals.saved_tokens
    c = totals.cost
    data.totals = Totals(
        plain_weighted=c.total_plain_weighted,
        ours_weighted=c.total_weighted,
        plain_usd=_add(c.plain_usd, c.plain_compaction_usd),
        ours_usd=_add(c.sent_usd, c.aux_usd, c.compaction_usd),
        aux_weighted=c.aux_weighted,
        aux_usd=c.aux_usd,
    )
    data.usd_per_unit = _usd_per_unit(_pricing.default_prices(model))
    needed = _live_needed_again(conn, sid)
    data.mechanisms = [
        MechanismRow(
            m.mechanism,
            m.saved_tokens,
            m.aux_tokens,
            needed_again=needed_again_of(needed, m.mechanism),
            needed_parts=needed_parts_of(needed, m.mechanism),
        )
        for m in totals.mechanisms
    ]
    costs = load_session_costs(conn, [sid], ttl_s=ttl_s, overrides=overrides)[sid]
    priced = costs.calls
    from ctxwrap.stats.compute import carried_per_call, cost_cause

    cause = cost_cause(costs, c)
    data.costs_more_because = cause.text if cause is not None else None
    if len(priced) != len(rows):  # never seen; the figures would not line up with the rows
        raise NotFoundError(f"session {sid}: {len(rows)} calls recorded, {len(priced)} priced")
    extra_o = [0.0] * len(rows)
    extra_o_usd: list[float | None] = [0.0] * len(rows)
    extra_p = [0.0] * len(rows)
    extra_p_usd: list[float | None] = [0.0] * len(rows)
    times = [p[0] for p in priced]

    def at_or_after(ts: float) -> int:
        k = bisect.bisect_left(times, ts)
        return min(k, len(times) - 1)

    for ts, cc in costs.compactions:
        k = at_or_after(ts)
        extra_o[k] += cc.weighted_tokens
        extra_o_usd[k] = _add(extra_o_usd[k], cc.usd)
    for ts, _mech, cc in costs.aux:
        k = at_or_after(ts)
        extra_o[k] += cc.weighted_tokens
        extra_o_usd[k] = _add(extra_o_usd[k], cc.usd)
    for k, (_ts, _a, _p, comp) in enumerate(priced):
        if comp is not None:
            extra_p[k] += comp.weighted_tokens
            extra_p_usd[k] = _add(extra_p_usd[k], comp.usd)
    if costs.plain_trailing is not None and rows:
        extra_p[-1] += costs.plain_trailing[1].weighted_tokens
        extra_p_usd[-1] = _add(extra_p_usd[-1], costs.plain_trailing[1].usd)
    # the agent's recorded compactions (Claude Code and Codex send no head change) mark the
    # call after them
    after_compaction = {
        k for ts, _cc in costs.compactions if (k := bisect.bisect_left(times, ts)) < len(times)
    }
    prev_count = 0
    carried = carried_per_call(costs)
    for n, (r, (_ts, a, p, _comp)) in enumerate(zip(rows, priced, strict=True)):
        compaction = (
            bool(r["head_changed"]) and r["message_count"] < prev_count
        ) or n in after_compaction
        prev_count = r["message_count"]
        messages = tokens(r["sent_messages"])
        held = min(carried[n], messages)  # of them, carried past plain's compaction
        kept = {
            "bash": tokens(r["saved_bash"]),
            "amnesia": tokens(r["saved_amnesia"]),
            # schema 14; before it a mask was counted in amnesia
            "masking": tokens(r["saved_masking"]) if "saved_masking" in r.keys() else 0,  # noqa: SIM118
            "writes": tokens(r["saved_writes"]),
            "skills": tokens(r["saved_skills"]),
            "tools": tokens(r["saved_tools"]),
            # a store older than schema 13 has no such column (`in` on a Row tests values)
            "thinking": tokens(r["saved_thinking"]) if "saved_thinking" in r.keys() else 0,  # noqa: SIM118
        }
        data.calls.append(
            CallRow(
                index=n,
                ts=r["ts"],
                sent={
                    "system": tokens(r["sent_system"]),
                    "tools": tokens(r["sent_tools"]),
                    "messages": messages - held,
                    **({"carried": held} if held else {}),
                },
                kept={k: v for k, v in kept.items() if v},
                cost_plain=p.weighted_tokens + extra_p[n],
                cost_ctxwrap=a.weighted_tokens + extra_o[n],
                usd_plain=_add(p.input_usd, extra_p_usd[n]),
                usd_ctxwrap=_add(a.input_usd, extra_o_usd[n]),
                cache_read=a.cache_read_tokens,
                cache_write=a.cache_write_tokens,
                compaction=compaction,
            )
        )
    times = [c.ts for c in data.calls]

    def call_at(ts: float) -> int | None:
        # the first call made after the intervention: the first one that did not carry it
        for k, t in enumerate(times):
            if t >= ts:
                return k
        return None

    handles = {
        row["tool_call_id"]: row["handle"]
        for row in conn.execute(
            "SELECT tool_call_id, handle FROM raw_outputs WHERE session_id=?", (sid,)
        )
    }
    commands = {
        row["tool_call_id"]: row["command"] or row["tool_name"]
        for row in conn.execute(
            "SELECT tool_call_id, command, tool_name FROM raw_outputs WHERE session_id=?", (sid,)
        )
    }
    for d in conn.execute("SELECT * FROM digests WHERE session_id=? ORDER BY ts", (sid,)):
        data.interventions.append(
            InterventionRow(
                "digest",
                call_at(d["ts"]),
                f"bash {commands.get(d['tool_call_id'], d['tool_call_id'])}"[:160],
                tokens(d["original_chars"]),
                tokens(d["digest_chars"]),
                handles.get(d["tool_call_id"]),
                d["source"],
            )
        )
    facts = {
        f["tool_call_id"]: f for f in conn.execute("SELECT * FROM facts WHERE session_id=?", (sid,))
    }
    for e in conn.execute("SELECT * FROM edits WHERE session_id=? ORDER BY ts", (sid,)):
        kind = {"strip": "strip", "strip_write": "strip"}.get(e["kind"], e["kind"])
        fact = facts.get(e["tool_call_id"])
        label = (
            f"write {fact['path']}"
            if fact is not None
            # the daemon is told an edit's sizes, never its path: the call names it
            else f"edit (call {e['tool_call_id']})"
            if e["kind"] == "strip_edit"
            else commands.get(e["tool_call_id"], e["tool_call_id"])
        )
        data.interventions.append(
            InterventionRow(
                kind,
                call_at(e["ts"]),
                str(label)[:160],
                None,
                None,
                handles.get(e["tool_call_id"]),
                fact["text"] if fact is not None else "",
                saved=tokens(e["saved_chars"]),
            )
        )
    for a in conn.execute("SELECT * FROM aux_calls WHERE session_id=? ORDER BY ts", (sid,)):
        data.aux.append(
            AuxRow(a["task"], a["mechanism"], a["input_tokens"], a["output_tokens"], bool(a["ok"]))
        )
    data.notes.append(
        "Sizes are the ones the bridge measured on each request; costs are modelled from them "
        "with the cache rules of the cost model (a changed head is a full cache write)."
    )
    _note_thinking_bound(data, model)
    served = [a.served for _ts, a, _p, _c in priced if a.served is not None]
    if served:
        # a bill above the model's ideal cache: say why, as `ctxwrap stats` does
        data.notes.append(
            f"The provider's cache missed on {len(served)} of these requests (their usage "
            f"shows less read than their content had them read): {served.count('none')} read "
            "nothing, "
            f"{sum(isinstance(h, int) for h in served)} an older entry, "
            f"{served.count('head')} the system prompt and tools alone; they are priced on "
            "what was read."
        )
    return data


def load_db_report(session: str | None) -> ReportData:
    from ctxwrap import paths
    from ctxwrap.state.store import connect

    db = paths.db_path()
    if not db.exists():
        raise NotFoundError(f"no ctxwrap database at {db}", hint=NOTHING_RECORDED_HINT)
    conn = connect(db, readonly=True)
    try:
        return from_db(conn, session)
    finally:
        conn.close()


__all__ = ["ReportData", "SessionChoice", "from_db", "from_replay", "load_db_report"]
