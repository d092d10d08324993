"""Mechanism 5, cache-priced accounting: what the bridge reports for the cost model, and the
priced figures `ctxwrap stats`, /ctx-stats and the status line show (docs/accounting.md).

Writes take the daemon's Store and protocol models; reads take a plain sqlite3 connection, so
`ctxwrap stats` prices from a read-only database while the daemon is down. The pricing itself
is `ctxwrap.engine.cost` (pure).
"""

from __future__ import annotations

import bisect
import json
import math
import sqlite3
import time
import weakref
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

from ctxwrap.engine.cost import (
    DEFAULT_SUMMARY_TOKENS,
    UNCACHED_MIN_CALLS,
    UNKNOWN_PRICES,
    CallSizes,
    CompactionCost,
    CompactionPolicy,
    PricedInput,
    Prices,
    RecordedHits,
    SessionPricer,
    caching_for_api,
    compaction_call_cost,
    default_prices,
    match_prices,
    one_off_cost,
    parse_price_overrides,
    registry_prices,
)

if TYPE_CHECKING:
    from ctxwrap import protocol as P
    from ctxwrap.config import Settings
    from ctxwrap.protocol import AgentProfile
    from ctxwrap.state.store import Store

# -- writes (daemon) ---------------------------------------------------------------------------


def _model_name(model: P.ModelRef) -> str:
    return f"{model.provider}/{model.id}"


def record_session_model(
    store: Store,
    session_id: str,
    model: P.ModelRef | None,
    compaction: P.CompactionSettings | None,
) -> None:
    """At session_start and model_select: the model's registry prices, window and pi's
    compaction settings, so calls after this point are priced and simulated with them."""
    if model is None:
        return
    cost = model.cost or {}
    store.insert(
        "session_models",
        {
            "session_id": session_id,
            "ts": time.time(),
            "model": _model_name(model),
            "api": model.api,
            "context_window": model.context_window,
            "price_input": cost.get("input"),
            "price_output": cost.get("output"),
            "price_cache_read": cost.get("cacheRead"),
            "price_cache_write": cost.get("cacheWrite"),
            "compaction_enabled": None if compaction is None else int(compaction.enabled),
            "reserve_tokens": None if compaction is None else compaction.reserve_tokens,
            "keep_recent_tokens": None if compaction is None else compaction.keep_recent_tokens,
        },
    )


def record_call_costs(store: Store, req: P.LlmCall) -> None:
    """The cost-model fields of an llm_call, on the row `Daemon.llm_call` just inserted."""
    store.conn.execute(
        """UPDATE llm_calls SET sent_prefix_chars=?, plain_prefix_chars=?, plain_summary_chars=?,
                  prompt_index=?, model=?, cache_ttl_s=?, prefix_of=?
           WHERE id = (SELECT MAX(id) FROM llm_calls WHERE session_id=? AND call_index=?)""",
        (
            req.sent_prefix_chars,
            req.plain_prefix_chars,
            req.plain_summary_chars,
            req.prompt_index,
            req.model,
            req.cache_ttl_s,
            req.prefix_of,
            req.session_id,
            req.call_index,
        ),
    )


def record_compaction(store: Store, req: P.Compaction) -> None:
    store.insert(
        "compactions",
        {
            "session_id": req.session_id,
            "ts": time.time(),
            "reason": req.reason[:40],
            "tokens_before": req.tokens_before,
            "summary_chars": req.summary_chars,
            "summarized_chars": req.summarized_chars,
            "from_extension": int(req.from_extension),
            "priced_as_call": int(req.priced_as_call),
        },
    )


def record_aux_model(store: Store, session_id: str, model: str | None) -> None:
    """The model that ran the aux call `Daemon.aux_result` just recorded."""
    if not model:
        return
    store.conn.execute(
        "UPDATE aux_calls SET model=? WHERE id = (SELECT MAX(id) FROM aux_calls WHERE session_id=?)",
        (model[:200], session_id),
    )


# -- reads (stats) ----------------------------------------------------------------------------


def tokens_of(chars: int) -> int:
    return math.ceil(chars / 4) if chars >= 0 else -math.ceil(-chars / 4)


@dataclass(frozen=True)
class ModelPrices:
    model: str
    prices: Prices
    source: str  # config | registry | default | unknown


@dataclass
class SessionCosts:
    """Priced events of one session; each carries its timestamp so reports can filter/group."""

    session_id: str
    calls: list[tuple[float, PricedInput, PricedInput, CompactionCost | None]] = field(
        default_factory=list
    )
    compactions: list[tuple[float, CompactionCost]] = field(default_factory=list)
    aux: list[tuple[float, str, CompactionCost]] = field(default_factory=list)  # ts, mechanism
    models: dict[str, ModelPrices] = field(default_factory=dict)
    policy: CompactionPolicy | None = None
    plain_trailing: tuple[float, CompactionCost] | None = None  # plain pi's after the last call


class PriceBook:
    """Resolves a model's prices: config override, else pi's registry, else the default
    table, else unknown (caching mode still taken from pi's API family when known)."""

    def __init__(self, overrides: Mapping[str, Prices] | None = None) -> None:
        self.overrides = dict(overrides or {})
        self.registry: dict[str, Prices] = {}
        self.apis: dict[str, str] = {}

    def learn(self, model: str, api: str | None, cost: Mapping[str, object] | None) -> None:
        if api:
            self.apis[model] = api
        found = registry_prices(cost, api)
        if found is not None:
            self.registry[model] = found

    def resolve(self, model: str | None) -> ModelPrices:
        name = model or "unknown"
        over = match_prices(model, list(self.overrides.items())) if model else None
        if over is not None:
            return ModelPrices(name, over, "config")
        if model and model in self.registry:
            return ModelPrices(name, self.registry[model], "registry")
        table = default_prices(model)
        if table is not UNKNOWN_PRICES:
            return ModelPrices(name, table, "default")
        caching = caching_for_api(self.apis.get(model or ""))
        return ModelPrices(name, Prices(None, None, None, None, caching), "unknown")


def load_session_costs(
    conn: sqlite3.Connection,
    session_ids: Iterable[str],
    *,
    ttl_s: float = 300.0,
    overrides: Mapping[str, Prices] | None = None,
) -> dict[str, SessionCosts]:
    """Price every recorded call, compaction and aux call of the given sessions (whole
    sessions: a call's price depends on the calls before it, whatever filter shows it)."""
    out: dict[str, SessionCosts] = {}
    for sid in sorted(set(session_ids)):
        out[sid] = _session_costs(conn, sid, ttl_s, overrides)
    return out


def has_column(conn: sqlite3.Connection, table: str, column: str) -> bool:
    """A store `ctxwrap stats` reads may be older than this ctxwrap."""
    return any(r[1] == column for r in conn.execute(f"PRAGMA table_info({table})"))


def _has_table(conn: sqlite3.Connection, name: str) -> bool:
    row = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type='table' AND name=?", (name,)
    ).fetchone()
    return row is not None


def _tok(expr: str) -> str:
    """chars/4 rounded away from zero, as `tokens_of`, in SQL."""
    return f"(CASE WHEN {expr} >= 0 THEN ({expr} + 3) / 4 ELSE -((3 - {expr}) / 4) END)"


def _session_costs(
    conn: sqlite3.Connection, sid: str, ttl_s: float, overrides: Mapping[str, Prices] | None
) -> SessionCosts:
    session = PricedSession(sid, ttl_s, overrides)
    session.refresh(conn)
    return session.costs()


# Sums and chars/4 in SQL: `ctxwrap stats` prices every call of every session it shows.
_SENT_SQL = "(sent_system + sent_messages + sent_tools)"
_BASE_SQL = "(sent_system + sent_tools + saved_skills + saved_tools)"
_SAVED_SQL = "saved_bash + saved_amnesia + saved_writes + saved_skills + saved_tools"


def saved_sql(conn: sqlite3.Connection) -> str:
    """What every mechanism kept out of a call (chars), in SQL; a store older than schema 13
    has no saved_thinking column, one older than 14 no saved_masking (`ctxwrap stats` reads
    it before the daemon migrates it)."""
    extra = "".join(
        f" + {col}"
        for col in ("saved_thinking", "saved_masking")
        if has_column(conn, "llm_calls", col)
    )
    return f"({_SAVED_SQL}{extra})"


class PricedSession:
    """One session priced from the store, and kept up to date: `refresh` reads what was added
    since the last one and prices only the new calls, unless a compaction, a model record or
    the session's own record changed (then everything is read again), or the recalibrated
    compaction policy would have decided an earlier check otherwise (then every call is
    priced again, from the calls already read). The daemon keeps one per live session, so the
    turn_end totals cost what the turn added; `ctxwrap stats` uses a fresh one per session.
    """

    def __init__(self, sid: str, ttl_s: float, overrides: Mapping[str, Prices] | None) -> None:
        self.sid = sid
        self.ttl_s = ttl_s
        self.overrides = overrides
        self.signature: tuple[object, ...] | None = None
        self.resets = 0  # times everything was read again, and priced again (tests, bench)
        self.repricings = 0

    def _signature(self, conn: sqlite3.Connection) -> tuple[object, ...]:
        sess = conn.execute(
            "SELECT model, pi_version FROM sessions WHERE session_id=?", (self.sid,)
        ).fetchone()
        sig: list[object] = [None if sess is None else tuple(sess)]
        if _has_table(conn, "session_models"):
            for table in ("session_models", "compactions"):
                sig.append(
                    tuple(
                        conn.execute(
                            f"SELECT COUNT(*), MAX(id) FROM {table} WHERE session_id=?",
                            (self.sid,),
                        ).fetchone()
                    )
                )
        return tuple(sig)

    def _reset(self, conn: sqlite3.Connection, signature: tuple[object, ...]) -> None:
        sid = self.sid
        self.signature = signature
        self.resets += 1
        self.book = book = PriceBook(self.overrides)
        self.models: dict[str, ModelPrices] = {}
        sess = conn.execute(
            "SELECT model, pi_version FROM sessions WHERE session_id=?", (sid,)
        ).fetchone()
        self.session_model: str | None = sess[0] if sess else None
        pi_version = (sess[1] if sess else None) or ""
        self.new_schema = new_schema = len(signature) > 1
        self.has_ttl = has_column(conn, "llm_calls", "cache_ttl_s")  # schema 8
        agent = "pi"
        if has_column(conn, "sessions", "agent"):  # schema 2
            row = conn.execute("SELECT agent FROM sessions WHERE session_id=?", (sid,)).fetchone()
            agent = row[0] if row else "pi"
        # pydantic: imported here, not on the read-only views' import path
        from ctxwrap.protocol import profile_of

        profile = profile_of(agent, pi_version)
        window: int | None = None
        reserve, keep, enabled = 16384, 20000, True  # pi's defaults
        if new_schema:
            for r in conn.execute(
                """SELECT model, api, context_window, price_input, price_output,
                          price_cache_read, price_cache_write, compaction_enabled,
                          reserve_tokens, keep_recent_tokens
                   FROM session_models WHERE session_id=? ORDER BY ts, id""",
                (sid,),
            ):
                book.learn(
                    r[0],
                    r[1],
                    {"input": r[3], "output": r[4], "cacheRead": r[5], "cacheWrite": r[6]},
                )
                if r[2]:
                    window = int(r[2])
                if r[7] is not None:
                    enabled = bool(r[7])
                if r[8] is not None:
                    reserve = int(r[8])
                if r[9] is not None:
                    keep = int(r[9])
        self.keep = keep
        comps: list[tuple[float, int, int, int | None]] = []
        as_call: list[bool] = []
        plain_too: list[PlainToo] = []
        if new_schema:
            has_as_call = has_column(conn, "compactions", "priced_as_call")  # schema 9
            for r in conn.execute(
                f"""SELECT ts, tokens_before, summary_chars, summarized_chars,
                           {"priced_as_call" if has_as_call else "0"}, reason, from_extension
                    FROM compactions WHERE session_id=? ORDER BY ts, id""",
                (sid,),
            ):
                comps.append((float(r[0]), int(r[1]), int(r[2]), r[3]))
                as_call.append(bool(r[4]))
                plain_too.append(_plain_compacts_too(profile, r[5], bool(r[6]), bool(r[4])))
        self.comps = comps
        # Claude Code's and Codex's summarisation request is one of the session's calls, priced
        # as such
        self.as_call = as_call
        self.plain_too = plain_too  # per compaction: does plain compact with it
        summaries = [tokens_of(c[2]) for c in comps if c[2] > 0]
        summary = round(sum(summaries) / len(summaries)) if summaries else DEFAULT_SUMMARY_TOKENS
        # pi 0.73 checks at prompts only (its profile says so)
        self.check: Literal["turn", "prompt"] = profile.compaction_check
        # pi 0.73 can run a compaction twice back to back (its end-of-run check races the
        # next prompt's): two compactions in its session file, the second on the same
        # tokensBefore. Calls only come after the compactions read here.
        call_ts = [
            float(r[0])
            for r in conn.execute("SELECT ts FROM llm_calls WHERE session_id=? ORDER BY id", (sid,))
        ]
        self.repeats = [
            i > 0
            and comps[i - 1][1] == before
            and bisect.bisect_right(call_ts, ts) == bisect.bisect_right(call_ts, comps[i - 1][0])
            for i, (ts, before, _s, _z) in enumerate(comps)
        ]
        self.static_policy = CompactionPolicy(
            repeat_at_prompt=self.check == "prompt" and any(self.repeats),
            context_window=window,
            reserve_tokens=reserve,
            keep_recent_tokens=keep,
            enabled=enabled,
            check=self.check,
            summary_tokens=summary,
            summarise_cached=profile.compaction_is_call,
            keeps_tail=not profile.compaction_is_call,
        )
        self.growth_at = _growth_at_compactions(conn, sid, comps)
        # what has been read: calls (and the state of reading them), turns, aux calls
        self.calls: list[CallSizes] = []
        self.last_call_id = self.last_turn_id = self.last_aux_id = 0
        self.sent_sum = 0
        self.turns = [0, 0, 0]  # count, provider input (incl. cache), output
        self.aux: list[tuple[float, str, CompactionCost]] = []
        self.aux_buckets: dict[int, CostFigures] = {}  # aux calls alone, per bucket
        self._ci = 0
        self._prev_ts = -math.inf
        self._prev_count: int | None = None
        self._prev_prompt: int | None = None
        self.pricer: SessionPricer | None = None
        # the provider's usage of each call, where the adapter linked it (schema 11): llm_calls
        # id → (cache read, cache write); which entry each call read follows from it
        self.has_link = has_column(conn, "turns", "llm_call_id")  # schema 11, with prefix_of
        self.plain_sql = f"({_SENT_SQL} + {saved_sql(conn)})"
        self.call_ids: list[int] = []
        self.pos_of_index: dict[int, int] = {}  # call_index → the latest call's place with it
        self.call_pos: dict[int, int] = {}  # llm_calls id → its place in self.calls
        self.usage: dict[int, tuple[int, int]] = {}
        self.hits = RecordedHits()
        self.hits_fed = 0  # calls fed to self.hits
        # a provider that has counted UNCACHED_MIN_CALLS requests and never read or written
        # its cache does not cache (a local model, some gateways): every input token is
        # fresh, on both sides, as replay prices such a session
        self.uncached = False

    def prices_of(self, model: str | None) -> Prices:
        key = model or "unknown"
        if key not in self.models:
            self.models[key] = self.book.resolve(model)
        prices = self.models[key].prices
        return replace(prices, caching="none") if self.uncached else prices

    def refresh(self, conn: sqlite3.Connection) -> None:
        signature = self._signature(conn)
        if signature != self.signature:
            self._reset(conn, signature)
        sid = self.sid
        extra = (
            "sent_prefix_chars, plain_prefix_chars, prompt_index, model, plain_summary_chars"
            if self.new_schema
            else "NULL, NULL, NULL, NULL, NULL"
        )
        ttl = "cache_ttl_s" if self.has_ttl else "NULL"
        prefix_of = "prefix_of" if self.has_link else "NULL"
        plain = self.plain_sql
        rows = conn.execute(
            f"""SELECT id, ts, {_tok(_SENT_SQL)}, {_tok(plain)}, {_BASE_SQL}, {plain},
                       head_changed, message_count, {extra}, saved_bash, {ttl},
                       call_index, {prefix_of}
                FROM llm_calls WHERE session_id=? AND id > ? ORDER BY id""",
            (sid, self.last_call_id),
        ).fetchall()
        for i, row in enumerate(rows):
            # the next call's time, if read: a compaction before it follows this call
            self._add_call(row[1:-2], rows[i + 1][1] if i + 1 < len(rows) else None)
            pos = len(self.call_ids)
            if row[-1] is not None and int(row[-1]) in self.pos_of_index:
                # measured against an earlier call of its conversation: the latest with that
                # index (a resumed session numbers its calls from 0 again)
                of = self.pos_of_index[int(row[-1])]
                self.calls[-1] = self.calls[-1]._replace(prefix_of=of)
            self.pos_of_index[int(row[-2])] = pos
            self.call_pos[int(row[0])] = pos
            self.call_ids.append(int(row[0]))
        if rows:
            self.last_call_id = rows[-1][0]
        if self.has_link:
            # a usage of nothing at all is none recorded (an error's, an aborted request's)
            for cid, read, write in conn.execute(
                """SELECT llm_call_id, cache_read_tokens, cache_write_tokens FROM turns
                   WHERE session_id=? AND id > ? AND llm_call_id IS NOT NULL
                         AND input_tokens + cache_read_tokens + cache_write_tokens > 0
                   ORDER BY id""",
                (sid, self.last_turn_id),
            ):
                self.usage[int(cid)] = (int(read), int(write))
                if self.call_pos.get(int(cid), self.hits_fed) < self.hits_fed:
                    # its call was judged without it: judge them all again
                    self.hits, self.hits_fed = RecordedHits(), 0
        # pi's threshold is in the provider's tokens: calibrate chars/4 on what the provider
        # reported for this session's turns (input incl. cache reads/writes, and output).
        turns = conn.execute(
            """SELECT COUNT(*), SUM(input_tokens + cache_read_tokens + cache_write_tokens),
                      SUM(output_tokens), MAX(id) FROM turns WHERE session_id=? AND id > ?""",
            (sid, self.last_turn_id),
        ).fetchone()
        if turns[0]:
            self.turns[0] += turns[0]
            self.turns[1] += turns[1] or 0
            self.turns[2] += turns[2] or 0
            self.last_turn_id = turns[3]
        aux_model = "model" if self.new_schema else "NULL"
        for r in conn.execute(
            f"""SELECT id, ts, mechanism, input_tokens, output_tokens, {aux_model}
                FROM aux_calls WHERE session_id=? AND id > ? ORDER BY id""",
            (sid, self.last_aux_id),
        ):
            prices = self.prices_of(r[5] or self.session_model)
            cost = one_off_cost(int(r[3]), int(r[4]), prices)
            self.aux.append((float(r[1]), str(r[2]), cost))
            self.aux_buckets.setdefault(int(r[1] / BUCKET_S), CostFigures()).add_aux(cost)
            self.last_aux_id = r[0]
        self._price()

    def policy(self) -> CompactionPolicy:
        scale, out_tokens = 1.0, 0
        count, provider_input, output = self.turns
        if count and provider_input and self.calls:
            per_turn = provider_input / count
            per_call = self.sent_sum / len(self.calls)
            if per_call > 0:
                scale = min(4.0, max(0.5, per_turn / per_call))
            out_tokens = round(output / count)
        return replace(self.static_policy, scale=scale, output_tokens=out_tokens)

    def _follow_recorded_cache(self) -> None:
        """Each call's cache entry by its provider usage (`RecordedHits`): live stats price
        the cache the provider ran, as `ctxwrap replay` does from a transcript. A usage that
        arrives after its call was judged changes what that call (or a later one) read: the
        calls are judged again, and those already priced make the session priced again."""
        priced = len(self.priced) if self.pricer is not None else 0
        for k in range(self.hits_fed, len(self.calls)):
            u = self.usage.get(self.call_ids[k])
            how = self.hits.add(
                None if u is None else u[0], u[0] + u[1] if u is not None and u[1] > 0 else None
            )
            if self.calls[k].read_from != how:
                self.calls[k] = self.calls[k]._replace(read_from=how)
                if k < priced:
                    self.pricer = None
        self.hits_fed = len(self.calls)

    def _price(self) -> None:
        self._follow_recorded_cache()
        uncached = len(self.usage) >= UNCACHED_MIN_CALLS and not any(
            read or write for read, write in self.usage.values()
        )
        if uncached != self.uncached:
            self.uncached, self.pricer = uncached, None  # every call priced again
        policy = self.policy()
        if self.pricer is None or not self.pricer.holds_for(policy):
            if self.pricer is not None:
                self.repricings += 1
            self.pricer = SessionPricer(self.prices_of, policy, ttl_s=self.ttl_s)
            self.priced: list[tuple[float, PricedInput, PricedInput, CompactionCost | None]] = []
            self.call_buckets: dict[int, CostFigures] = {}
            last_bucket, acc = None, CostFigures()
        else:
            self.pricer.policy = policy
            last_bucket = int(self.priced[-1][0] / BUCKET_S) if self.priced else None
            acc = self.call_buckets[last_bucket] if last_bucket is not None else CostFigures()
        for call in self.calls[len(self.priced) :]:
            a, p, comp, _size = self.pricer.add(call)
            self.priced.append((call.ts, a, p, comp))
            b = int(call.ts / BUCKET_S)
            if b != last_bucket:
                last_bucket = b
                acc = self.call_buckets.setdefault(b, CostFigures())
            acc.add_call(a, p, comp)

    def _add_call(self, row: tuple[Any, ...], next_ts: float | None = None) -> None:
        (
            ts,
            sent_tok,
            plain_tok,
            base,
            plain,
            head,
            count,
            sp,
            pp,
            prompt,
            model,
            summ,
            bash,
            ttl,
        ) = row
        comps = self.comps
        grown: int | None = None
        plain_too: PlainToo = ""
        if comps:
            compacted = False
            while self._ci < len(comps) and comps[self._ci][0] <= ts:
                if comps[self._ci][0] > self._prev_ts and not compacted:
                    compacted = True
                    grown = self.growth_at[self._ci]
                    plain_too = self.plain_too[self._ci]
                self._ci += 1
        else:  # no compaction events recorded: infer from a head change that dropped messages
            compacted = bool(head) and self._prev_count is not None and count < self._prev_count
        # Claude Code's and Codex's summarisation is a recorded call: the compaction priced as a
        # call that comes next, before the next call (if one was read), was this request
        nxt = self._ci
        summarises = (
            nxt < len(comps) and self.as_call[nxt] and (next_ts is None or comps[nxt][0] <= next_ts)
        )
        if grown is not None and self.check == "turn":
            # pi 1.x compacts with new tool results in; pi's measure of them is of its session
            # messages, which hold bash results as digested (other edits are views of the
            # request only), so plain pi's were bigger by this request's bash saving, all
            # taken as on the new results (an upper bound when an older digest survived the
            # compaction). pi 0.73 compacts before a prompt: the new messages are the final
            # reply and the prompt, which ctxwrap does not edit.
            grown += max(0, tokens_of(bash))
        self.calls.append(
            CallSizes(
                ts,
                sent_tok,
                plain_tok,
                None if sp is None else -(-sp // 4),
                None if pp is None else -(-pp // 4),
                -(-base // 4),
                None if summ is None or plain <= base else min(1.0, summ / (plain - base)),
                compacted and len(self.calls) > 0,
                prompt is not None and prompt != self._prev_prompt,
                model or self.session_model,
                grown,
                None if ttl is None else float(ttl),
                plain_too,
                summarises,
            )
        )
        self.sent_sum += sent_tok
        self._prev_ts, self._prev_count, self._prev_prompt = ts, count, prompt

    def _compaction_costs(self) -> list[tuple[float, CompactionCost]]:
        """pi's real compactions, priced by the session's latest model."""
        main = self.prices_of(self.calls[-1].model if self.calls else self.session_model)
        comps, keep = self.comps, self.keep
        # A compaction and its repeats summarise the same messages; the two runs overlap, so
        # the bridge may have measured either one of them.
        group: list[int] = []
        for i, again in enumerate(self.repeats):
            group.append(group[-1] if again else i)
        measured: dict[int, int] = {}
        for g, event in zip(group, comps, strict=True):
            if event[3] is not None:
                measured.setdefault(g, event[3])
        out: list[tuple[float, CompactionCost]] = []
        previous = 0
        summarised_in: dict[int, int] = {}
        for (ts, before, summary_chars, _), g, as_call in zip(
            comps, group, self.as_call, strict=True
        ):
            if as_call:  # counted; its cost is the recorded call's
                out.append((ts, CompactionCost(0, 0, 0.0, 0.0)))
                previous = tokens_of(summary_chars)
                continue
            # pi's own measure when the bridge saw it; else the context less what pi keeps
            if g not in summarised_in:
                summarised_in[g] = (
                    tokens_of(measured[g]) if g in measured else max(0, before - keep) + previous
                )
            out.append((ts, compaction_call_cost(summarised_in[g], tokens_of(summary_chars), main)))
            previous = tokens_of(summary_chars)
        return out

    def _trailing(self) -> tuple[float, CompactionCost] | None:
        """A plain compaction after the last call: pi 0.73's end-of-run check, or the one
        plain runs with the session's own compaction whose next request is not recorded yet
        (Claude Code's or Codex's: the proxy records a call off the request thread, so `stats`
        may read the compaction before it) — counted now, as it will be at that request."""
        assert self.pricer is not None
        trailing = self.pricer.trailing()
        if trailing is not None:
            return self.calls[-1].ts, trailing
        plain, real = self.pricer.plain_compactions, self.pricer.real_compactions
        for i in range(self._ci, len(self.comps)):
            real += 1
            too = self.plain_too[i]
            if too in ("call", "behind") and plain < real:
                return self.comps[i][0], CompactionCost(0, 0, 0.0, 0.0)
        return None

    def costs(self) -> SessionCosts:
        """Every priced event of the session."""
        assert self.pricer is not None
        costs = SessionCosts(self.sid, policy=self.pricer.policy)
        costs.calls = list(self.priced)
        costs.plain_trailing = self._trailing()
        costs.compactions = self._compaction_costs()
        costs.aux = list(self.aux)
        costs.models = self.models
        return costs

    def buckets(self) -> dict[int, CostFigures]:
        """`bucket_figures(self.costs())`, without going over every call again."""
        out = {b: replace(f) for b, f in self.call_buckets.items()}

        def at(ts: float) -> CostFigures:
            return out.setdefault(int(ts / BUCKET_S), CostFigures())

        for ts, c in self._compaction_costs():
            at(ts).add_compaction(c)
        trailing = self._trailing()
        if trailing is not None:
            at(trailing[0]).add_plain_compaction(trailing[1])
        # nothing else adds to the aux figures: their sums, kept as the calls came, are the
        # same floats `bucket_figures` adds up
        for b, aux in self.aux_buckets.items():
            f = out.setdefault(b, CostFigures())
            f.aux_weighted, f.aux_usd = aux.aux_weighted, aux.aux_usd
        return out


PlainToo = Literal["", "priced", "call", "behind"]


def _plain_compacts_too(
    profile: AgentProfile, reason: object, from_extension: bool, as_call: bool
) -> PlainToo:
    """Whether the plain session compacts with one of the session's own (CallSizes):
    - the user's `/compact` (a manual one ctxwrap did not ask for) happens under plain too —
      under Claude Code and Codex, unless the plain model has compacted as often already: then
      it is the session catching up (the status line said plain would have compacted);
    - Claude Code's and Codex's automatic ones: plain's context is never the smaller, so plain
      has compacted by then — with it, unless the plain model compacted as often already (a
      threshold the proxy cannot see: one Anthropic's servers set, a Codex model whose window
      is unknown);
    - pi's threshold compactions: the plain model runs its own.
    """
    if reason == "manual" and not from_extension:
        return "call" if as_call else "priced"
    if profile.compaction_is_call and as_call:
        return "behind"
    return ""


def _growth_at_compactions(
    conn: sqlite3.Connection, sid: str, comps: list[tuple[float, int, int, int | None]]
) -> list[int | None]:
    """Per compaction: what the conversation grew by between the request before it and the
    request after it, in the session's (sent) tokens; None = unknown.

    pi's `tokensBefore` is the last reply's usage (the request's input + the reply) plus
    chars/4 of the messages after it, so that less the request's input is what was added.
    The turn of that request is the last one the provider reported before the compaction.
    """
    turns = conn.execute(
        """SELECT ts, input_tokens + cache_read_tokens + cache_write_tokens FROM turns
           WHERE session_id=? ORDER BY ts, id""",
        (sid,),
    ).fetchall()
    out: list[int | None] = []
    ti = 0
    last_input: int | None = None
    for cts, before, _summary, _summarised in comps:
        while ti < len(turns) and turns[ti][0] <= cts:
            last_input = int(turns[ti][1])
            ti += 1
        out.append(None if last_input is None or before <= 0 else max(0, before - last_input))
    return out


# -- figures ------------------------------------------------------------------------------------


def _add_usd(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a + b


def _pct(part: float, whole: float) -> float | None:
    return round(100.0 * part / whole, 2) if whole > 0 else None


@dataclass
class CostFigures:
    """Cache-priced figures of a set of calls; `weighted` = input-equivalent tokens, `usd` =
    money (None as soon as one priced item has an unknown price). Sums of parts add up."""

    calls: int = 0
    sent_weighted: float = 0.0
    plain_weighted: float = 0.0
    aux_weighted: float = 0.0
    sent_usd: float | None = 0.0
    plain_usd: float | None = 0.0
    aux_usd: float | None = 0.0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    uncached_input_tokens: int = 0
    plain_input_tokens: int = 0
    plain_cache_read_tokens: int = 0
    plain_cache_write_tokens: int = 0
    plain_uncached_input_tokens: int = 0
    compactions: int = 0
    plain_compactions: int = 0
    compaction_weighted: float = 0.0
    plain_compaction_weighted: float = 0.0
    compaction_usd: float | None = 0.0
    plain_compaction_usd: float | None = 0.0
    # calls on which the provider's cache missed (`PricedInput.served`)
    cache_older_entry: int = 0
    cache_head_only: int = 0
    cache_nothing: int = 0

    def add(self, o: CostFigures) -> None:
        for name in self.__dataclass_fields__:
            a, b = getattr(self, name), getattr(o, name)
            setattr(self, name, _add_usd(a, b) if name.endswith("_usd") else a + b)

    def add_call(self, a: PricedInput, p: PricedInput, plain_comp: CompactionCost | None) -> None:
        self.calls += 1
        self.sent_weighted += a.weighted_tokens
        self.plain_weighted += p.weighted_tokens
        self.sent_usd = _add_usd(self.sent_usd, a.input_usd)
        self.plain_usd = _add_usd(self.plain_usd, p.input_usd)
        self.cache_read_tokens += a.cache_read_tokens
        self.cache_write_tokens += a.cache_write_tokens
        self.uncached_input_tokens += a.uncached_input_tokens
        self.plain_input_tokens += p.input_tokens
        self.plain_cache_read_tokens += p.cache_read_tokens
        self.plain_cache_write_tokens += p.cache_write_tokens
        self.plain_uncached_input_tokens += p.uncached_input_tokens
        if a.served == "none":
            self.cache_nothing += 1
        elif a.served == "head":
            self.cache_head_only += 1
        elif a.served is not None:
            self.cache_older_entry += 1
        if plain_comp is not None:
            self.add_plain_compaction(plain_comp)

    def add_plain_compaction(self, c: CompactionCost) -> None:
        self.plain_compactions += 1
        self.plain_compaction_weighted += c.weighted_tokens
        self.plain_compaction_usd = _add_usd(self.plain_compaction_usd, c.usd)

    def add_compaction(self, c: CompactionCost) -> None:
        self.compactions += 1
        self.compaction_weighted += c.weighted_tokens
        self.compaction_usd = _add_usd(self.compaction_usd, c.usd)

    def add_aux(self, c: CompactionCost) -> None:
        self.aux_weighted += c.weighted_tokens
        self.aux_usd = _add_usd(self.aux_usd, c.usd)

    # derived
    @property
    def saved_weighted(self) -> float:
        """Main-model input cost kept out, net of aux calls (compactions apart)."""
        return self.plain_weighted - self.sent_weighted - self.aux_weighted

    @property
    def saved_usd(self) -> float | None:
        if self.plain_usd is None or self.sent_usd is None or self.aux_usd is None:
            return None
        return self.plain_usd - self.sent_usd - self.aux_usd

    @property
    def saved_pct(self) -> float | None:
        return _pct(self.saved_weighted, self.plain_weighted)

    @property
    def total_plain_weighted(self) -> float:
        return self.plain_weighted + self.plain_compaction_weighted

    @property
    def total_weighted(self) -> float:
        return self.sent_weighted + self.aux_weighted + self.compaction_weighted

    @property
    def total_saved_weighted(self) -> float:
        """Everything: requests, aux calls and the summarisation calls of compactions."""
        return self.total_plain_weighted - self.total_weighted

    @property
    def total_saved_pct(self) -> float | None:
        return _pct(self.total_saved_weighted, self.total_plain_weighted)

    @property
    def total_saved_usd(self) -> float | None:
        parts = [self.saved_usd, self.plain_compaction_usd, self.compaction_usd]
        if any(p is None for p in parts):
            return None
        return (
            (self.saved_usd or 0.0)
            + (self.plain_compaction_usd or 0.0)
            - (self.compaction_usd or 0.0)
        )

    @property
    def aux_share_pct(self) -> float | None:
        """The aux calls' share of what ctxwrap's session cost (requests + aux + compactions)."""
        return _pct(self.aux_weighted, self.total_weighted)

    @property
    def compactions_avoided(self) -> int:
        return self.plain_compactions - self.compactions


# -- the priced figures cache ----------------------------------------------------------------

# Figures are kept per session and 15-minute UTC bucket: every real UTC offset is a multiple of
# 15 minutes, so a bucket falls within one local day (`ctxwrap stats --by day`).
BUCKET_S = 900
# Bump when the pricing of a session changes (code, not data): figures cached by an older
# daemon are priced again.
COST_MODEL_VERSION = 2  # 2: calls priced on the cache entry their usage names
_FIELDS = tuple(CostFigures.__dataclass_fields__)


def bucket_figures(costs: SessionCosts, since: float | None = None) -> dict[int, CostFigures]:
    """A priced session's figures per bucket, from its events at or after `since`."""
    out: dict[int, CostFigures] = {}

    def at(ts: float) -> CostFigures:
        b = int(ts / BUCKET_S)
        f = out.get(b)
        if f is None:
            f = out[b] = CostFigures()
        return f

    last_bucket, acc = None, CostFigures()
    for ts, a, p, comp in costs.calls:
        if since is None or ts >= since:
            b = int(ts / BUCKET_S)
            if b != last_bucket:  # calls are in order: look the bucket up when it changes
                last_bucket, acc = b, at(ts)
            acc.add_call(a, p, comp)
    for ts, c in costs.compactions:
        if since is None or ts >= since:
            at(ts).add_compaction(c)
    if costs.plain_trailing and (since is None or costs.plain_trailing[0] >= since):
        at(costs.plain_trailing[0]).add_plain_compaction(costs.plain_trailing[1])
    for ts, _mech, c in costs.aux:
        if since is None or ts >= since:
            at(ts).add_aux(c)
    return out


def cost_cache_keys(
    conn: sqlite3.Connection,
    ttl_s: float,
    overrides: Mapping[str, Prices] | None,
    only: Sequence[str] | None = None,
) -> dict[str, str]:
    """Per session (all, or `only` these few), what its priced figures depend on: every row a
    session's pricing reads (counted, and the newest id: rows are only ever added), its pi
    version and model, the settings and the pricing code's version. Cheap: a few grouped
    index scans."""
    settings = f"v{COST_MODEL_VERSION}|{float(ttl_s)!r}|{sorted((overrides or {}).items())!r}"
    where, params = "", tuple(only or ())
    if only is not None:
        where = f" WHERE session_id IN ({', '.join('?' for _ in params)})"
    parts: dict[str, list[str]] = {}
    for r in conn.execute(f"SELECT session_id, pi_version, model FROM sessions{where}", params):
        parts[r[0]] = [settings, f"{r[1]}|{r[2]}"]
    for table in ("llm_calls", "aux_calls", "turns", "compactions", "session_models"):
        for r in conn.execute(
            f"SELECT session_id, COUNT(*), MAX(id) FROM {table}{where} GROUP BY session_id",
            params,
        ):
            parts.setdefault(r[0], [settings, "-"]).append(f"{table}:{r[1]}:{r[2]}")
    return {sid: "|".join(p) for sid, p in parts.items()}


def _encode(buckets: Mapping[int, CostFigures]) -> str:
    return json.dumps([[b, [getattr(f, n) for n in _FIELDS]] for b, f in sorted(buckets.items())])


def _decode(text: str) -> dict[int, CostFigures]:
    return {int(b): CostFigures(*values) for b, values in json.loads(text)}


def priced_buckets(
    conn: sqlite3.Connection,
    session_ids: Iterable[str],
    *,
    ttl_s: float = 300.0,
    overrides: Mapping[str, Prices] | None = None,
    since: float | None = None,
    write: bool = False,
) -> dict[str, dict[int, CostFigures]]:
    """Per session, its figures per bucket from events at or after `since`: the cached ones
    when the session has not changed since they were priced (and `since` does not fall inside
    one of its buckets), else priced now, and cached when `write` (the daemon's connection;
    `ctxwrap stats` reads only). Identical to pricing afresh: both go through
    `bucket_figures`, and a bucket wholly at or after `since` is the same either way."""
    sids = sorted(set(session_ids))
    cached: dict[str, tuple[str, str]] = {}
    keys: dict[str, str] = {}
    if sids and _has_table(conn, "cost_cache"):
        few = sids if len(sids) <= 50 else None  # else scanning everything once is cheaper
        keys = cost_cache_keys(conn, ttl_s, overrides, few)
        wanted = set(sids)
        if few is None:
            rows = conn.execute("SELECT session_id, key, buckets FROM cost_cache")
        else:
            rows = conn.execute(
                "SELECT session_id, key, buckets FROM cost_cache WHERE session_id IN"
                f" ({', '.join('?' for _ in few)})",
                few,
            )
        cached = {r[0]: (r[1], r[2]) for r in rows if r[0] in wanted}
    cut = None if since is None else int(since / BUCKET_S)
    out: dict[str, dict[int, CostFigures]] = {}
    for sid in sids:
        hit = cached.get(sid)
        if hit is not None and hit[0] == keys.get(sid):
            buckets = _decode(hit[1])
            if cut is None or since is None:
                out[sid] = buckets
                continue
            if cut * BUCKET_S == since or cut not in buckets:
                out[sid] = {b: f for b, f in buckets.items() if b >= cut}
                continue
        if write:
            session = _live_session(conn, sid, ttl_s, overrides)
        else:
            session = PricedSession(sid, ttl_s, overrides)
        session.refresh(conn)
        if since is None or write:
            whole = session.buckets()
            if write and sid in keys:
                conn.execute(
                    "INSERT OR REPLACE INTO cost_cache (session_id, key, buckets) VALUES (?, ?, ?)",
                    (sid, keys[sid], _encode(whole)),
                )
            if since is None:
                out[sid] = whole
                continue
        out[sid] = bucket_figures(session.costs(), since)
    return out


# The daemon's PricedSession per session, per connection (a new Store starts afresh), the
# most recently used kept: live sessions are priced incrementally at each turn_end.
_LIVE: weakref.WeakKeyDictionary[sqlite3.Connection, OrderedDict[tuple[str, str], PricedSession]]
_LIVE = weakref.WeakKeyDictionary()
LIVE_SESSIONS_KEPT = 64


def _live_session(
    conn: sqlite3.Connection, sid: str, ttl_s: float, overrides: Mapping[str, Prices] | None
) -> PricedSession:
    live = _LIVE.setdefault(conn, OrderedDict())
    key = (sid, f"{float(ttl_s)!r}|{sorted((overrides or {}).items())!r}")
    session = live.pop(key, None) or PricedSession(sid, ttl_s, overrides)
    live[key] = session
    while len(live) > LIVE_SESSIONS_KEPT:
        live.popitem(last=False)
    return session


def forget_live_session(conn: sqlite3.Connection, sid: str) -> None:
    live = _LIVE.get(conn)
    if live is not None:
        for key in [k for k in live if k[0] == sid]:
            del live[key]


def refresh_cost_cache(conn: sqlite3.Connection, session_id: str, cfg: Settings) -> None:
    """Price a session into the cache unless its cached figures still hold (the daemon, when
    a session ends: a finished session is then priced once), and stop keeping it live."""
    priced_buckets(
        conn,
        [session_id],
        ttl_s=cfg.cache_ttl_s,
        overrides=settings_overrides(cfg.prices),
        write=True,
    )
    forget_live_session(conn, session_id)


def settings_overrides(prices: str | None) -> dict[str, Prices]:
    """The `prices` setting parsed; a bad value prices nothing rather than failing a report
    (`ctxwrap config show` reports it)."""
    if not prices:
        return {}
    try:
        return parse_price_overrides(prices)
    except ValueError:
        return {}


def fill_cost_totals(
    conn: sqlite3.Connection, totals: P.SessionTotals, session_id: str, cfg: Settings
) -> None:
    """Add the session's cache-priced figures to the totals the status line shows (and keep
    them in the cache `ctxwrap stats` reads)."""
    f = CostFigures()
    buckets = priced_buckets(
        conn,
        [session_id],
        ttl_s=cfg.cache_ttl_s,
        overrides=settings_overrides(cfg.prices),
        write=True,
    )[session_id]
    for b in sorted(buckets):
        f.add(buckets[b])
    totals.cost_weighted = round(f.total_weighted, 1)
    totals.plain_cost_weighted = round(f.total_plain_weighted, 1)
    totals.cost_saved_pct = f.total_saved_pct
    totals.cost_usd = (
        None if f.sent_usd is None else _add_usd(_add_usd(f.sent_usd, f.aux_usd), f.compaction_usd)
    )
    totals.saved_usd = f.total_saved_usd
    totals.compactions = f.compactions
    totals.plain_compactions = f.plain_compactions
