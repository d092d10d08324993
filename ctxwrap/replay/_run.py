"""Replay over files: discovery, progress, pricing, totals and the JSON/text views."""

from __future__ import annotations

import dataclasses
import os
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ctxwrap.engine.cost import ReadFrom, cached_prefix_tokens
from ctxwrap.engine.cost import recorded_hits as engine_recorded_hits
from ctxwrap.headline import carried_text
from ctxwrap.mechanisms.amnesia import TAG_OUTPUT_WEIGHT, tag_cost
from ctxwrap.mechanisms.budget import aux_within
from ctxwrap.mechanisms.needed_again import how_text
from ctxwrap.replay import _pricing
from ctxwrap.replay._calibrate import calibrate
from ctxwrap.replay._events import Event, Header, ReadStats
from ctxwrap.replay._read import NotASession, read_session
from ctxwrap.replay._sim import (
    MECHANISMS,
    CallFigures,
    SessionReplay,
    SessionSimulator,
    Tagger,
    Thresholds,
    fingerprint,
)

SCHEMA = 1
# Mechanisms whose savings sit in the message list's characters as the transcript has them (the
# rest are system prompt and tools; old thinking is in none: a 2.1 transcript keeps its
# signature only, so the report draws it kept out beside what was sent, not taken from it).
MESSAGE_MECHANISMS = ("bash", "amnesia", "writes", "masking", "compaction")


def default_roots(home: Path | None = None) -> list[Path]:
    home = home or Path.home()
    roots = []
    pi_dir = os.environ.get("PI_CODING_AGENT_DIR")
    roots.append(Path(pi_dir) / "sessions" if pi_dir else home / ".pi" / "agent" / "sessions")
    roots.append(home / ".claude" / "projects")
    # replayread: Codex rollouts (CODEX_HOME, default ~/.codex), when there are any
    codex_home = os.environ.get("CODEX_HOME")
    codex = (Path(codex_home) if codex_home else home / ".codex") / "sessions"
    if codex.is_dir():
        roots.append(codex)
    return roots


def discover(paths: Iterable[Path], since: float | None, skipped: Counter[str]) -> list[Path]:
    """Session files under the given files/directories (*.jsonl), oldest first."""
    found: list[tuple[float, Path]] = []
    for p in paths:
        try:
            if p.is_dir():
                candidates: Iterator[Path] = (q for q in p.rglob("*.jsonl") if q.is_file())
            elif p.is_file():
                candidates = iter([p])
            else:
                skipped[f"path not found: {p}"] += 1
                continue
            for q in candidates:
                mtime = q.stat().st_mtime
                if since is not None and mtime < since:
                    continue  # not written since: none of its calls can be in the window
                found.append((mtime, q))
        except OSError as exc:
            skipped[f"unreadable: {exc.strerror or exc}"] += 1
    return [q for _, q in sorted(found)]


@dataclass
class CallCosts:
    plain: list[Any]
    ctxwrap: list[Any]
    # per call, the cache entry plain's request read by its recorded usage (recorded_hits)
    read_from: list[ReadFrom] = field(default_factory=list)
    # plain's calls that the transcript records usage for, priced from it (the bill)
    recorded_plain: list[Any] = field(default_factory=list)
    # side -> weighted input tokens of the compactions' summarisation requests (priced with
    # the call they precede; no transcript records them)
    summarisation: dict[str, float] = field(default_factory=dict)


class RequestShapes:
    """Both sides' requests as growing block lists, built call by call (`extend`): what
    `price_session` prices. Kept between questions by `Account`, which extends it with the
    calls replayed since."""

    def __init__(self, r: SessionReplay) -> None:
        self.r = r
        self.plain: list[Any] = []
        self.ours: list[Any] = []
        self.p_blocks: list[tuple[str, int]] = []
        self.o_blocks: list[tuple[str, int]] = []
        self.o_spans: list[tuple[int, int]] = []  # the calls whose new messages each o_block holds
        self.p_prev = self.o_prev = 0
        self.head = self.head_of(r)

    @staticmethod
    def head_of(r: SessionReplay) -> int:
        """The fixed prefix's tokens (system prompt and tools)."""
        call0 = r.calls[0] if r.calls else None
        return (
            r.head_tokens
            if r.head_tokens is not None
            else r.to_tokens(call0.system_chars + call0.tools_chars if call0 else 0)
        )

    def extend(self, calls: Sequence[CallFigures]) -> None:
        r, head, sid = self.r, self.head, self.r.session_id
        for c in calls:
            fixed = max(c.system_chars + c.tools_chars, 1)
            head_tools = round(head * c.tools_chars / fixed)
            head_sys = head - head_tools
            p_msgs = max(0, round(r.plain_tokens(c)) - head)
            o_msgs = max(0, p_msgs - round(c.kept_out_tokens))
            head_p = [("sys", head_sys), ("tools", head_tools)]
            head_o = [
                ("sys-cw", max(0, head_sys - r.to_tokens(c.saved.get("skills", 0)))),
                ("tools-cw", max(0, head_tools - r.to_tokens(c.saved.get("tools", 0)))),
            ]
            if c.compaction or not self.p_blocks or p_msgs < self.p_prev:
                self.p_blocks = [(fingerprint(sid, "p-epoch", c.index), p_msgs)]
            else:
                self.p_blocks.append((fingerprint(sid, "p", c.index), p_msgs - self.p_prev))
            # a masking pass, or a clearing of old thinking, rewrites from the first call whose
            # messages it changed
            starts = [c.rewrite_from if c.masked else None, c.thinking_rewrite_from]
            rewrite_from = min((s for s in starts if s is not None), default=None)
            if rewrite_from is not None and not c.ours_compaction and self.o_blocks:
                # the blocks before it stay cached, the rest is one new block: the entries the
                # provider wrote inside it hold the content as it was before (a later rewrite
                # from within it finds no entry of the new content before its own change)
                keep = 0
                while keep < len(self.o_spans) and self.o_spans[keep][1] < rewrite_from:
                    keep += 1
                start = self.o_spans[keep][0] if keep < len(self.o_spans) else c.index
                self.o_blocks, self.o_spans = self.o_blocks[:keep], self.o_spans[:keep]
                kept = sum(n for _, n in self.o_blocks)
                if kept > o_msgs:
                    self.o_blocks, self.o_spans, kept = [], [], 0
                self.o_blocks.append((fingerprint(sid, "o-mask", c.index), o_msgs - kept))
                self.o_spans.append((start, c.index))
            elif c.ours_compaction or c.masked or not self.o_blocks or o_msgs < self.o_prev:
                self.o_blocks = [(fingerprint(sid, "o-epoch", c.index), o_msgs)]
                self.o_spans = [(c.index, c.index)]
            else:
                self.o_blocks.append((fingerprint(sid, "o", c.index), o_msgs - self.o_prev))
                self.o_spans.append((c.index, c.index))
            self.p_prev, self.o_prev = p_msgs, o_msgs
            c.tokens_plain = head + p_msgs
            c.tokens_sent = sum(n for _, n in head_o) + o_msgs
            shape = _pricing.request_shape
            self.plain.append(shape(c.ts, (*head_p, *self.p_blocks), c.output_tokens))
            self.ours.append(shape(c.ts, (*head_o, *self.o_blocks), c.output_tokens))


def price_session(
    r: SessionReplay,
    prices: Any,
    ttl_s: float,
    record_prices: Any = None,
    first: int = 0,
    pending_summaries: bool = True,
    shapes: RequestShapes | None = None,
) -> CallCosts:
    """Model both request sequences as growing block lists and price them (the calls from
    `first` on: a call's price depends on it and the calls before only). A summarisation
    before a call not replayed yet goes with the last call, or (`pending_summaries` False)
    waits for that call to be priced. `shapes`: the requests built so far (`Account`).

    Sizes are tokens as the provider counted them: each plain request is its recorded input
    (estimated at the session's own rate where the transcript records none), ctxwrap's is
    that less what it keeps out, converted at the session's rate (`replay/_calibrate.py`).
    Both grow append-only between calls (every ctxwrap edit is decided before the model sees
    the message), so one block per call's new messages is exact; a compaction (both) or a
    masking pass (ctxwrap) starts a new block list.

    Plain's recorded requests are priced from their recorded split (the bill itself), and
    ctxwrap's carry the same modelling residual: ctxwrap = its simulated cost + (plain as
    recorded - plain as simulated), so the cache model's error on plain's side cannot show
    up as a saving (docs/accounting.md, "Plain from the record").
    """
    if shapes is None:
        shapes = RequestShapes(r)
    shapes.extend(r.calls[len(shapes.plain) :])
    plain, ours = shapes.plain, shapes.ours
    hits = recorded_hits(r.calls, r.uncached)
    # ctxwrap's requests go the same way as plain's (the same agent, timing and provider):
    # where plain's read is not what its own content explains — an entry missed, an older one
    # served — ctxwrap's request reads from the same entry; elsewhere its content decides.
    ours_hits: list[ReadFrom] = [
        h
        if i >= first
        and h is not None
        and cached_prefix_tokens(plain, i, h, ttl_s) != cached_prefix_tokens(plain, i, None, ttl_s)
        else None
        for i, h in enumerate(hits)
    ]
    p_sim = _pricing.price_requests(plain, prices, ttl_s=ttl_s, read_from=hits, first=first)
    o_sim = _pricing.price_requests(ours, prices, ttl_s=ttl_s, read_from=ours_hits, first=first)
    p_out: list[Any] = []
    o_out: list[Any] = []
    rp = record_prices if record_prices is not None else prices
    calls = r.calls[first:]
    for c, ps, os_ in zip(calls, p_sim, o_sim, strict=True):
        if c.usage is None:
            p_out.append(ps)
            o_out.append(os_)
            continue
        uncached, read, write, write_1h = c.usage
        rec = _pricing.price_recorded(
            rp, uncached=uncached, read=read, write=write, write_1h=write_1h, output=c.output_tokens
        )
        p_out.append(rec)
        o_out.append(_pricing.shifted(os_, rec, ps))
    costs = CallCosts(p_out, o_out, hits)
    costs.recorded_plain = [p for c, p in zip(calls, p_out, strict=True) if c.usage is not None]
    for at, side, input_tokens, output_tokens, read_tokens in r.summarisations:
        series = costs.plain if side == "plain" else costs.ctxwrap
        if not pending_summaries and at >= len(r.calls):
            continue
        if series and min(at, len(r.calls) - 1) >= first:
            i = min(at, len(r.calls) - 1) - first
            before = series[i].weighted_tokens
            series[i] = _pricing.with_one_off(
                series[i], input_tokens, output_tokens, prices, read_tokens=read_tokens
            )
            costs.summarisation[side] = (
                costs.summarisation.get(side, 0.0) + series[i].weighted_tokens - before
            )
    return costs


def session_pricing(
    r: SessionReplay, th: Thresholds, model: str | None = None
) -> tuple[Any, float, Any]:
    """(prices, cache TTL, the prices of the recorded bill) to price a session with."""
    record_prices = _pricing.default_prices(model or r.model)
    prices = record_prices
    if r.uncached:
        # the provider billed every input token fresh: no cache to read, none to rewrite
        prices = dataclasses.replace(prices, caching="none")
    ttl = th.ttl_s
    if r.cache_ttl_s:
        # 1-hour cache writes (the recorded usage shows them): billed at 2x input
        ttl = r.cache_ttl_s
        if prices.input is not None:
            prices = dataclasses.replace(prices, cache_write=2.0 * prices.input)
    return prices, ttl, record_prices


class Account:
    """(plain's cost, ctxwrap's) of the requests replayed so far, input-equivalent tokens, as
    the daemon's totals hold them at a turn's end (`mechanisms.budget`): each side priced,
    ctxwrap's with every aux call made so far at its most (the budget's gate on tags comes
    after; counting them all can only make the account smaller). The calls priced once are
    kept: each question prices only the calls since the last."""

    def __init__(self, th: Thresholds, model: str | None = None) -> None:
        self.th = th
        self.model = model  # `replay --model`: priced as the bill will be
        self.priced = 0
        self.plain = self.ours = 0.0
        self.pricing: Any = None
        self.shapes: RequestShapes | None = None

    def __call__(self, r: SessionReplay) -> tuple[float, float]:
        if not r.calls:
            return 0.0, 0.0
        pricing = session_pricing(r, self.th, self.model)
        if (
            pricing != self.pricing
            or self.priced > len(r.calls)
            or self.shapes is None
            or self.shapes.head != RequestShapes.head_of(r)
        ):
            # the model, the cache's lifetime or the fixed prefix became known: price every
            # call again
            self.pricing, self.priced, self.plain, self.ours = pricing, 0, 0.0, 0.0
            self.shapes = RequestShapes(r)
        prices, ttl, record_prices = pricing
        costs = price_session(
            r,
            prices,
            ttl,
            record_prices,
            first=self.priced,
            pending_summaries=False,
            shapes=self.shapes,
        )
        self.priced = len(r.calls)
        self.plain += sum(c.weighted_tokens for c in costs.plain)
        self.ours += sum(c.weighted_tokens for c in costs.ctxwrap)
        aux = sum(inp + TAG_OUTPUT_WEIGHT * out for _, _, _, inp, out in r.aux_events)
        return self.plain, self.ours + aux


def gate_tags(r: SessionReplay, costs: CallCosts, th: Thresholds) -> None:
    """The tagger's budget, as the daemon keeps it (`mechanisms.budget`): a tag call
    goes out only while the session is ahead of plain — its priced requests so far, less the
    aux calls made — by the call's cost at most; the others leave `r.aux`. Under `--tag` the
    backend answered every one (and its DROPs shaped the requests): nothing is taken back."""
    if not th.tag_within_savings or r.aux_real or not r.aux_events:
        return
    ahead, spent, at = 0.0, 0.0, 0  # requests priced so far (index < at), aux calls recorded
    # since the last request priced: the aux calls made (the next totals hold them) and, as the
    # daemon charges them until then, its tags at their most
    made = charged = 0.0
    kept: list[tuple[int, str, str, int, int]] = []
    for event in r.aux_events:
        before, mech, task, inp, out = event
        while at < len(r.calls) and r.calls[at].index < before:
            ahead += costs.plain[at].weighted_tokens - costs.ctxwrap[at].weighted_tokens
            at, spent, made, charged = at + 1, spent + made, 0.0, 0.0
        if r.calls and before < r.calls[0].index:
            kept.append(event)  # before `since`: outside this replay's calls, left as it was
            continue
        if mech == "amnesia" and task == "tag":
            cost = tag_cost(inp, th.tag_max_tokens)
            if not aux_within(ahead - spent - charged, cost):
                a = r.aux[mech]
                a["calls"] -= 1
                a["input_tokens"] -= inp
                a["output_tokens"] -= out
                continue
            charged += cost
        made += inp + TAG_OUTPUT_WEIGHT * out  # as the totals will count it, at most
        kept.append(event)
    r.aux_events = kept


def recorded_hits(calls: Sequence[CallFigures], uncached: bool = False) -> list[ReadFrom]:
    """Which cache entry each request read, where the transcript records the provider's usage
    (`engine.cost.recorded_hits`, as live stats read it). A session whose provider never
    cached (`uncached`) names nothing: there is no entry to miss."""
    if uncached:
        return [None] * len(calls)
    return engine_recorded_hits(
        [c.cache_read_recorded for c in calls], [c.cache_entry_recorded for c in calls]
    )


def _recorded_cache_counts(hits: list[ReadFrom], calls: Sequence[CallFigures]) -> dict[str, int]:
    """How many requests read an older entry, the system prompt and tools alone, or nothing,
    by their recorded usage; and how many recorded it at all."""
    out = {"recorded": sum(1 for c in calls if c.cache_read_recorded is not None)}
    out["older_entry"] = sum(1 for i, h in enumerate(hits) if isinstance(h, int) and h != i - 1)
    out["head_only"] = hits.count("head")
    out["nothing"] = hits.count("none")
    return out


def _sum_costs(costs: list[Any]) -> dict[str, Any]:
    usd = [c.usd for c in costs]
    return {
        "cache_read_tokens": sum(c.cache_read_tokens for c in costs),
        "cache_write_tokens": sum(c.cache_write_tokens for c in costs),
        "uncached_input_tokens": sum(c.uncached_input_tokens for c in costs),
        "output_tokens": sum(c.output_tokens for c in costs),
        "weighted_tokens": round(sum(c.weighted_tokens for c in costs), 1),
        "usd": None if any(u is None for u in usd) else round(sum(u for u in usd if u), 6),
    }


def _figures(calls: list[CallFigures], aux: dict[str, dict[str, int]]) -> dict[str, Any]:
    sent = sum(c.sent_chars for c in calls)
    plain = sum(c.plain_chars for c in calls)
    mechs: list[dict[str, Any]] = []
    for m in MECHANISMS:
        chars = sum(c.saved.get(m, 0) for c in calls)
        # each call at its session's own rate (replay/_calibrate.py)
        kept = round(sum(c.saved.get(m, 0) * c.rate for c in calls))
        a = aux.get(m, {"calls": 0, "input_tokens": 0, "output_tokens": 0})
        aux_t = a["input_tokens"] + a["output_tokens"]
        mechs.append(
            {
                "mechanism": m,
                "saved_chars": chars,
                "saved_tokens": kept,
                "aux_calls_estimated": a["calls"],
                "aux_tokens_estimated": aux_t,  # the backend's own counts for amnesia with --tag
                "net_tokens": kept - aux_t,
            }
        )
    saved_tokens = sum(m["saved_tokens"] for m in mechs)
    aux_total = sum(m["aux_tokens_estimated"] for m in mechs)
    return {
        "llm_calls": len(calls),
        "sent_chars": sent,
        "plain_chars": plain,
        "saved_chars": plain - sent,
        "sent_tokens": sum(c.tokens_sent for c in calls),
        "plain_tokens": sum(c.tokens_plain for c in calls),
        "saved_tokens": saved_tokens,
        "saved_pct": (
            round(100.0 * (1 - sum(c.tokens_sent for c in calls) / tp), 1)
            if (tp := sum(c.tokens_plain for c in calls))
            else None
        ),
        "aux_tokens_estimated": aux_total,
        "net_tokens": saved_tokens - aux_total,
        "tagger_bound_tokens": round(sum(c.tagger_bound_chars * c.rate for c in calls)),
        "mechanisms": mechs,
    }


# Intervention kinds → the mechanism they serve (needed-again shares are per mechanism).
KIND_MECHANISM = {
    "digest": "bash",
    "strip": "writes",
    "strip_edit": "edits",
    "mask": "masking",
    "tombstone": "amnesia",
    "pointer": "amnesia",
}


def needed_again(r: SessionReplay, prices: Any) -> dict[str, Any]:
    """Per mechanism: interventions, how many a later turn needed again (copied, re-read,
    recalled) and their share; and what a re-read of each whole needed result would cost
    (written once, then read by every later call until the next compaction; a copy also pays
    the request that asks for it), in input-equivalent tokens (DESIGN.md invariant 8)."""
    from ctxwrap.engine.cost import weights

    w = weights(prices)
    n = len(r.calls)
    # calls left before the next compaction, per call index
    left = [0] * (n + 1)
    for i in range(n - 1, -1, -1):
        left[i] = 0 if i + 1 < n and r.calls[i + 1].ours_compaction else left[i + 1] + 1
    per: dict[str, dict[str, Any]] = {}
    charge = copy_charge = 0.0
    for iv in r.interventions:
        mech = KIND_MECHANISM.get(iv.kind)
        if mech is None:
            continue
        m = per.setdefault(
            mech,
            {"interventions": 0, "needed_again": 0, "copied": 0, "reread": 0, "recalled": 0},
        )
        m["interventions"] += 1
        if iv.needed_again is None or iv.needed_at is None:
            continue
        m["needed_again"] += 1
        m[iv.needed_again] += 1
        at = min(max(iv.needed_at, 0), n)
        one = r.to_tokens(iv.original_chars) * (w.write + w.read * max(left[at] - 1, 0))
        if iv.needed_again == "copied" and n:
            # The agent that lacks what it copies asks for it first: one more request, which
            # reads ctxwrap's whole context at that point from the cache.
            one += r.calls[min(at, n - 1)].tokens_sent * w.read
        charge += one
        if iv.needed_again != "reread":
            copy_charge += one  # a re-read is in the transcript already: plain paid it too
    for m in per.values():
        m["share_pct"] = (
            round(100.0 * m["needed_again"] / m["interventions"], 1) if m["interventions"] else None
        )
    total = sum(m["interventions"] for m in per.values())
    needed = sum(m["needed_again"] for m in per.values())
    return {
        "interventions": total,
        "needed_again": needed,
        "share_pct": round(100.0 * needed / total, 1) if total else None,
        "reread_charge_weighted": round(charge, 1),
        "copy_charge_weighted": round(copy_charge, 1),
        "mechanisms": per,
    }


def session_json(
    r: SessionReplay, costs: CallCosts, *, per_call: bool, prices: Any = None
) -> dict[str, Any]:
    hits = costs.read_from or [None] * len(r.calls)
    out: dict[str, Any] = {
        "path": r.path,
        "format": r.fmt,
        "session_id": r.session_id,
        "cwd": r.cwd,
        "started_at": r.started_at,
        "model": r.model,
        "system_estimated": r.system_estimated,
        "compactions": r.compactions,
        # compaction timing (Thresholds.compaction_timing): of the agent's compactions, those
        # ctxwrap's smaller context would not have triggered yet; its own later ones
        "compactions_deferred": r.compactions_deferred,
        "compactions_own": r.compactions_own,
        "cache_ttl_s": r.cache_ttl_s or None,
        "compaction_points": [
            {"plain_tokens": p, "ctxwrap_tokens": o} for p, o in r.compaction_points
        ],
        "tagged_by_aux": r.aux_real,  # --tag: amnesia figures decided and counted by the backend
        "plain_source": plain_source(r, costs),
        "costs_more_because": costs_more_because(r, costs),
        **_figures(r.calls, r.aux),
        "cost": {"plain": _sum_costs(costs.plain), "ctxwrap": _sum_costs(costs.ctxwrap)},
        "interventions": {
            k: sum(1 for i in r.interventions if i.kind == k)
            for k in (
                "digest",
                "strip",
                "strip_edit",
                "mask",
                "pointer",
                "tombstone",
                "tombstone-bound",
            )
        },
        "aux_estimated": r.aux,  # mechanism → calls, input_tokens, output_tokens
        "masks_by_reason": dict(
            Counter(i.reason for i in r.interventions if i.kind == "mask").most_common()
        ),
        "needed_again": needed_again(
            r, prices if prices is not None else _pricing.default_prices(r.model)
        ),
        # requests whose recorded usage read another cache entry than the previous request's
        # (docs/accounting.md, "The cache as recorded")
        "recorded_cache": _recorded_cache_counts(hits, r.calls),
    }
    if per_call:
        out["calls"] = [
            {
                "index": c.index,
                "ts": c.ts,
                "system_chars": c.system_chars,
                "tools_chars": c.tools_chars,
                "messages_chars": c.messages_chars,
                "sent_chars": c.sent_chars,
                "plain_chars": c.plain_chars,
                "saved": c.saved,
                "tagger_bound_chars": c.tagger_bound_chars,
                "compaction": c.compaction,
                "ctxwrap_compaction": c.ours_compaction,
                "masked": c.masked,
                # tokens ctxwrap's request carried that plain's compaction had dropped (the
                # report draws them as their own band)
                "carried_tokens": c.carried_tokens,
                "idle_gap_s": round(c.idle_gap_s, 3),
                "cost_plain": _one_cost(p),
                "cost_ctxwrap": _one_cost(o),
                # the entry plain's request read: "previous" (the ideal cache), the index of
                # an older request, "head" (system prompt and tools), "none"
                "cache_read_from": "previous" if h is None else h,
            }
            for c, p, o, h in zip(r.calls, costs.plain, costs.ctxwrap, hits, strict=True)
        ]
        out["intervention_list"] = [
            {
                "kind": i.kind,
                "call_index": i.call_index,
                "tool": i.tool,
                "label": i.label,
                "original_chars": i.original_chars,
                "replacement_chars": i.replacement_chars,
                "saved_chars": i.saved_chars,
                "reason": i.reason,
                "handle": i.handle,
                "needed_again": i.needed_again,
                "needed_at": i.needed_at,
            }
            for i in r.interventions
        ]
    return out


# A session whose replayed plain is further than this from the bill its transcript records
# is flagged: its saving is a share of a base the replay does not model well.
FIT_TOLERANCE = 0.10


def plain_source(r: SessionReplay, costs: CallCosts) -> dict[str, Any]:
    """Where plain's figures come from and how well they match the recorded bill.

    `bill_*`: the input side (fresh input, cache reads, 5-minute and 1-hour writes) of every
    request the transcript records usage for, priced with ctxwrap's own price table.
    `plain_*`: replay's plain over all its calls, the compactions' summarisation requests
    apart (no transcript records them). A recorded request's plain is its bill, so `fit` =
    plain / bill is 1.0 where every call is recorded and above by what had to be estimated
    (`estimated_weighted`: the calls the transcript did not count)."""
    recorded = r.recorded_calls
    n = len(r.calls)
    summarised = costs.summarisation.get("plain", 0.0)
    plain_w = sum(c.weighted_tokens for c in costs.plain) - summarised
    bill_w = sum(c.weighted_tokens for c in costs.recorded_plain)
    bill_usd = [c.input_usd for c in costs.recorded_plain]
    plain_usd = [c.input_usd for c in costs.plain]
    fit = round(plain_w / bill_w, 4) if bill_w > 0 else None
    return {
        "source": "recorded" if recorded == n else "estimated" if recorded == 0 else "partly",
        "recorded_calls": recorded,
        "calls": n,
        "tokens_per_char": r.rate,
        "tokens_per_char_source": r.rate_source,
        "fixed_prefix_tokens": r.head_tokens,
        "bill_weighted": round(bill_w, 1),
        "bill_input_usd": (
            None if not bill_usd or any(u is None for u in bill_usd) else round(sum(bill_usd), 6)
        ),
        "plain_weighted": round(plain_w, 1),
        "plain_input_usd": (
            None if any(u is None for u in plain_usd) else round(sum(plain_usd), 6)
        ),
        "summarisation_weighted": {k: round(v, 1) for k, v in costs.summarisation.items()},
        "estimated_weighted": round(max(0.0, plain_w - bill_w), 1),
        "fit": fit,
        "fit_ok": fit is not None and abs(fit - 1.0) <= FIT_TOLERANCE,
    }


def costs_more_because(r: SessionReplay, costs: CallCosts) -> str | None:
    """Why a session costs more under ctxwrap than plain (None: it does not): what ctxwrap
    carried past plain's compaction, else the cache writes its rewrites (masking passes)
    cost beyond what they kept out (DESIGN.md invariant 10: said, not only signed)."""
    plain = sum(c.weighted_tokens for c in costs.plain)
    ours = sum(c.weighted_tokens for c in costs.ctxwrap)
    if ours <= plain:
        return None
    carried = max((c.carried_tokens for c in r.calls), default=0)
    if carried > 0:
        return carried_text(carried)
    writes = sum(c.cache_write_tokens for c in costs.ctxwrap) - sum(
        c.cache_write_tokens for c in costs.plain
    )
    if writes > 0 and any(c.masked for c in r.calls):
        return f"its masking passes rewrote the cache: {writes:,} more tokens written than plain"
    return "the cache, as ctxwrap's requests would have used it, cost more than they saved"


def _one_cost(c: Any) -> dict[str, Any]:
    return {
        "cache_read_tokens": c.cache_read_tokens,
        "cache_write_tokens": c.cache_write_tokens,
        "uncached_input_tokens": c.uncached_input_tokens,
        "weighted_tokens": round(c.weighted_tokens, 1),
        "usd": c.usd,
    }


@dataclass
class ReplayRun:
    sessions: list[dict[str, Any]] = field(default_factory=list)
    files: int = 0
    bytes: int = 0
    lines: int = 0
    skipped_files: Counter[str] = field(default_factory=Counter)
    skipped_entries: Counter[str] = field(default_factory=Counter)
    calls: list[CallFigures] = field(default_factory=list)
    aux: dict[str, dict[str, int]] = field(default_factory=dict)
    cost_plain: list[Any] = field(default_factory=list)
    cost_ctxwrap: list[Any] = field(default_factory=list)
    # replayread: each file not replayed, with its reason
    unread: list[dict[str, Any]] = field(default_factory=list)
    # sessions that already ran under ctxwrap: listed, but outside the totals (their plain side
    # is not plain: `ctxwrap stats` has their real figures)
    under: ReplayRun | None = None


def replay_file(
    path: Path, th: Thresholds, stats: ReadStats, tagger: Tagger | None = None
) -> SessionReplay:
    """The first session of a file (most files hold one)."""
    return replay_sessions(path, th, stats, tagger)[0]


def replay_sessions(
    path: Path,
    th: Thresholds,
    stats: ReadStats,
    tagger: Tagger | None = None,
    model: str | None = None,
) -> list[SessionReplay]:
    """Every session of one file, in file order: a reader starts each with a Header (several
    Claude Code sessions joined in one file, the sub-agents inline in it). Each converts
    characters to tokens at its own rate, fitted on its own usage (`_calibrate.py`). `model`:
    the one to price them as (`replay --model`), for the account their rewrites draw on too."""
    out: list[SessionReplay] = []
    for events in _by_session(read_session(path, stats)):
        sim = SessionSimulator(str(path), th, tagger, calibrate(events))
        sim.account = Account(th, model)
        sim.feed(events)
        out.append(sim.finish())
    if not out:
        raise NotASession("no session in the file")
    return out


def _by_session(events: Iterable[Event]) -> Iterator[list[Event]]:
    group: list[Event] = []
    for ev in events:
        if isinstance(ev, Header) and any(isinstance(e, Header) for e in group):
            yield group
            group = []
        group.append(ev)
    if group:
        yield group


@dataclass
class _FileResult:
    size: int
    stats: ReadStats
    skip: str | None = None
    sessions: list[_SessionResult] = field(default_factory=list)


@dataclass
class _SessionResult:
    session: dict[str, Any]
    calls: list[CallFigures]
    cost_plain: list[Any]
    cost_ctxwrap: list[Any]
    aux: dict[str, dict[str, int]]


def _replay_one(
    job: tuple[Path, int, Thresholds, float | None, bool, str | None],
    tagger: Tagger | None = None,
) -> _FileResult:
    path, size, th, since, per_call, model = job
    stats = ReadStats()
    res = _FileResult(size, stats)
    try:
        replays = replay_sessions(path, th, stats, tagger, model)
    except NotASession as exc:
        res.skip = str(exc)
        return res
    except OSError as exc:
        res.skip = f"unreadable: {exc.strerror or exc}"
        return res
    for r in replays:
        if since is not None:
            r.calls = [c for c in r.calls if c.ts >= since]
        if not r.calls:
            continue
        prices, ttl, record_prices = session_pricing(r, th, model)
        costs = price_session(r, prices, ttl, record_prices)
        gate_tags(r, costs, th)
        res.sessions.append(
            _SessionResult(
                session_json(r, costs, per_call=per_call, prices=prices),
                r.calls,
                costs.plain,
                costs.ctxwrap,
                r.aux,
            )
        )
    if not res.sessions:
        res.skip = "no LLM call in the file" + (" since the given time" if since else "")
    return res


# Below this much input the start-up of worker processes costs more than it saves.
PARALLEL_MIN_BYTES = 64 << 20


def replay_paths(
    paths: Iterable[Path],
    *,
    thresholds: Thresholds | None = None,
    since: float | None = None,
    per_call: bool = False,
    progress: Callable[[int, int], None] | None = None,
    model: str | None = None,
    workers: int | None = None,
    tagger: Tagger | None = None,
) -> ReplayRun:
    """Replay every session file under `paths`. `progress(done_bytes, total_bytes)` is called
    after each file. Large inputs are spread over worker processes (one file each at a time);
    results are merged in file order, so the output does not depend on the worker count."""
    th = thresholds or Thresholds()
    run = ReplayRun()
    files = discover(paths, since, run.skipped_files)
    sizes = []
    for f in files:
        try:
            sizes.append(f.stat().st_size)
        except OSError:
            sizes.append(0)
    total = sum(sizes)
    jobs = [(f, size, th, since, per_call, model) for f, size in zip(files, sizes, strict=True)]
    if tagger is not None:
        workers = 1  # one aux connection, calls in order
    if workers is None:
        workers = (
            min(os.cpu_count() or 1, 8) if total >= PARALLEL_MIN_BYTES and len(files) > 1 else 1
        )
    done = 0
    if workers > 1:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(max_workers=workers) as pool:
            results: Iterator[_FileResult] = pool.map(_replay_one, jobs, chunksize=4)
            for res in results:
                done += res.size
                _merge(run, res)
                if progress is not None:
                    progress(done, total)
    else:
        for job in jobs:
            res = _replay_one(job, tagger)
            done += res.size
            _merge(run, res)
            if progress is not None:
                progress(done, total)
    return run


def _merge(run: ReplayRun, res: _FileResult) -> None:
    run.files += 1
    run.bytes += res.stats.bytes
    run.lines += res.stats.lines
    run.skipped_entries.update(res.stats.skipped)
    if res.skip is not None:
        run.skipped_files[res.skip] += 1
        run.unread.append({"path": res.stats.path, "reason": res.skip})  # replayread
    reader = res.stats.summary()  # replayread: source, sub-agent, ran under ctxwrap
    for one in res.sessions:
        one.session["reader"] = reader
        run.sessions.append(one.session)
        into = run
        if reader.get("ran_under_ctxwrap"):
            if run.under is None:
                run.under = ReplayRun()
            run.under.sessions.append(one.session)
            into = run.under  # its figures count apart
        into.calls.extend(one.calls)
        into.cost_plain.extend(one.cost_plain)
        into.cost_ctxwrap.extend(one.cost_ctxwrap)
        for mech, a in one.aux.items():
            t = into.aux.setdefault(mech, {"calls": 0, "input_tokens": 0, "output_tokens": 0})
            for k, v in a.items():
                t[k] += v


def run_json(run: ReplayRun) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "cost_model": _pricing.COST_MODEL,
        "files": run.files,
        "bytes": run.bytes,
        "lines": run.lines,
        "sessions": len(run.sessions),
        "skipped_files": dict(run.skipped_files),
        "skipped_entries": dict(run.skipped_entries),
        "unread_files": run.unread,  # replayread: per file, why it was not replayed
        # every session but those that already ran under ctxwrap (`ran_under_ctxwrap` below)
        "totals": _totals(run, [g for g in run.sessions if not _under(g)]),
        "ran_under_ctxwrap": (
            None if run.under is None else _totals(run.under, run.under.sessions)
        ),
        "groups": run.sessions,
    }


def _under(g: dict[str, Any]) -> bool:
    reader = g.get("reader")
    return bool(isinstance(reader, dict) and reader.get("ran_under_ctxwrap"))


def _totals(run: ReplayRun, sessions: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "sessions": len(sessions),
        **_figures(run.calls, run.aux),
        "needed_again": _needed_totals(sessions),
        "cost": {"plain": _sum_costs(run.cost_plain), "ctxwrap": _sum_costs(run.cost_ctxwrap)},
    }


def _needed_totals(sessions: list[dict[str, Any]]) -> dict[str, Any]:
    per: dict[str, dict[str, int]] = {}
    for s in sessions:
        for mech, f in s["needed_again"]["mechanisms"].items():
            t = per.setdefault(
                mech,
                {"interventions": 0, "needed_again": 0, "copied": 0, "reread": 0, "recalled": 0},
            )
            for k in t:
                t[k] += f[k]
    out: dict[str, Any] = {
        m: {
            **t,
            "share_pct": round(100.0 * t["needed_again"] / t["interventions"], 1)
            if t["interventions"]
            else None,
        }
        for m, t in sorted(per.items())
    }
    total = sum(t["interventions"] for t in per.values())
    needed = sum(t["needed_again"] for t in per.values())
    return {
        "interventions": total,
        "needed_again": needed,
        "share_pct": round(100.0 * needed / total, 1) if total else None,
        "reread_charge_weighted": round(
            sum(s["needed_again"]["reread_charge_weighted"] for s in sessions), 1
        ),
        "mechanisms": out,
    }


def _n(v: float) -> str:
    return f"{v:,.0f}"


def render_text(doc: dict[str, Any]) -> str:
    t = doc["totals"]
    lines = [
        f"ctxwrap replay — {doc['sessions']} session(s), {t['llm_calls']:,} LLM calls"
        f" from {doc['files']:,} file(s), {doc['bytes'] / 1e6:,.1f} MB (no model call)",
    ]
    if doc["sessions"]:
        lines += [
            f"plain: {_n(t['plain_tokens'])} tokens sent; with ctxwrap: {_n(t['sent_tokens'])}"
            f" (saved {_n(t['saved_tokens'])}"
            + (f", {t['saved_pct']}%" if t["saved_pct"] is not None else "")
            + f"); aux model ≈ {_n(t['aux_tokens_estimated'])}; net {_n(t['net_tokens'])}",
        ]
        cp, cc = t["cost"]["plain"], t["cost"]["ctxwrap"]
        money = ""
        if cp["usd"] is not None and cc["usd"] is not None:
            money = f"; ${cp['usd']:,.2f} → ${cc['usd']:,.2f}"
        lines.append(
            f"cost (cache-priced, input-equivalent tokens): {_n(cp['weighted_tokens'])} →"
            f" {_n(cc['weighted_tokens'])}{money}"
        )
        lines.append("")
        lines.append(f"{'mechanism':10} {'saved tok':>12} {'aux≈':>10} {'net':>12}")
        for m in t["mechanisms"]:
            lines.append(
                f"{m['mechanism']:10} {_n(m['saved_tokens']):>12} {_n(m['aux_tokens_estimated']):>10}"
                f" {_n(m['net_tokens']):>12}"
            )
        need = t.get("needed_again")
        if need and need["interventions"]:
            parts = ", ".join(
                f"{m} {f['needed_again']}/{f['interventions']}"
                + (f" ({how_text(f)})" if how_text(f) else "")
                for m, f in need["mechanisms"].items()
            )
            lines.append(
                f"needed again: {need['needed_again']} of {need['interventions']} hidden results"
                f" ({need['share_pct']}%: copied, re-read or recalled later) — {parts}"
            )
        if any(g["tagged_by_aux"] for g in doc["groups"]):
            lines.append(
                "amnesia: RETAIN/DROP decided by the aux backend (--tag), its tokens counted"
            )
        else:
            lines.append(
                f"tagger (upper bound, not in the totals): up to {_n(t['tagger_bound_tokens'])} more"
            )
        lines.append("")
        for s in doc["groups"]:
            pct = f"{s['saved_pct']}%" if s["saved_pct"] is not None else "-"
            lines.append(
                f"{s['session_id'][:36]:36} {s['format']:6} {s['llm_calls']:>5} calls"
                f"  plain {_n(s['plain_tokens']):>10}  saved {_n(s['saved_tokens']):>10} {pct:>6}"
            )
    if doc["skipped_files"] or doc["skipped_entries"]:
        lines.append("")
        lines.append("skipped:")
        for reason, n in sorted(doc["skipped_files"].items()):
            lines.append(
                f"  {reason}"
                if n == 1 and reason.startswith("path not found")
                else f"  {n:,} file(s): {reason}"
            )
        for reason, n in sorted(doc["skipped_entries"].items()):
            lines.append(f"  {n:,} entr{'y' if n == 1 else 'ies'}: {reason}")
    return "\n".join(lines) + "\n"
