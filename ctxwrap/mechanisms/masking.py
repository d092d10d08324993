"""Mechanism 6, history masking: older results become tombstones at a cold cache boundary.

The adapter says when the prompt cache is cold anyway (idle past `cache_ttl_s`, compaction,
model switch, changed tools) and sends the whole history described; the policy
(`ctxwrap.engine.masking`) picks the results; this module words the tombstones (with a recall
handle), records every mask with its reason, size and cost, and returns them as `mask` edits
that the adapter freezes and replays like tail edits. While the cache is warm it masks only
with `mask_warm` on (the default), when the rewrite pays back over the calls expected to
follow and the session's account allows it (`mechanisms/budget.py`); what may be masked is
`engine.masking.MaskPolicy` from the `mask_*` settings.
"""

from __future__ import annotations

import sqlite3
import time
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import TYPE_CHECKING

from ctxwrap import protocol as P
from ctxwrap.engine.edits import MaskEdit, TailMessage, TailToolCall, edit_to_json, u16len
from ctxwrap.engine.masking import (
    READ_WEIGHT,
    CacheEntries,
    MaskCandidate,
    MaskPolicy,
    MaskReason,
    SessionCaches,
    expected_remaining_calls,
    plan_masks,
    rewrite_cost_tokens,
    suffix_tokens,
    suffix_tokens_estimate,
    warm_rewrite_pays,
    write_weight,
)
from ctxwrap.engine.shellcmd import shell_read
from ctxwrap.mechanisms import budget, keeps_result_of, tool_kind
from ctxwrap.mechanisms.amnesia import TagState
from ctxwrap.mechanisms.base import MaskSettings, Mechanism
from ctxwrap.mechanisms.needed_again import HiddenState
from ctxwrap.state.session import chars_to_tokens, recall_call

if TYPE_CHECKING:
    from ctxwrap.mechanisms.ports import AuxView, MaskView
    from ctxwrap.state.session import SessionRuntime

_WHY = {
    "superseded": "the file was read again or changed after it",
    "dropped": "judged not needed for the current task",
    "earlier_task": "it belongs to an earlier task",
    "older": "it was seen several requests ago",
    "untouched": "its file has not been touched for several requests",
}


def tombstone_text(label: str, chars: int, reason: MaskReason, recall: str) -> str:
    """The one line a masked result becomes (replay words it the same way)."""
    text = f"[ctxwrap: {label} ({chars:,} chars) was hidden: {_WHY[reason]}; recall with {recall}]"
    return " ".join(text.split("\n")).replace("\r", " ")


def decide(
    d: MaskView,
    rt: SessionRuntime,
    req: P.ContextRequest,
    tail_edited: Collection[str],
    mech: Masking | None = None,
    entries: CacheEntries | None = None,
) -> list[P.Edit]:
    """`entries`: the cache entries of the request's conversation (`Masking.context` keeps
    them up to date around this call)."""
    mask = req.mask
    cfg = d.cfg
    mech = mech or Masking()
    entries = entries or rt.part(SessionCaches).of(req.conversation)
    # a provider that does not cache: a rewrite costs nothing, warm or not
    warm = mask is not None and mask.reason == "warm" and not entries.uncached
    if mask is None or not mech.active(cfg, warm=warm):
        return []
    history = mask.history.messages
    stored = {
        str(r["tool_call_id"]): (str(r["handle"]), r["command"])
        for r in d.store.query(
            "SELECT tool_call_id, handle, command FROM raw_outputs WHERE session_id=? "
            "ORDER BY created_at",
            (req.session_id,),
        )
    }
    handles = {cid: h for cid, (h, _) in stored.items()} | rt.handles
    edited = set(mask.edited) | set(tail_edited)
    calls = {c.id: c for m in history for c in m.toolCalls or ()}
    hidden_sigs = set(rt.dropped_sigs) | {calls[i].argsSig for i in edited if i in calls}

    def maskable(call: TailToolCall) -> bool:
        # Only what the model can get back: a stored output behind a recall handle.
        kind = tool_kind(call.name)
        return (kind in ("amnesia", "bash") or keeps_result_of(call.name)) and call.id in handles

    # A file's content printed through the shell (`cat f`, `sed -n …p f`) is a read: masked
    # by the read rules, as a read of its file (the command it was stored with names it).
    paths = dict(mask.paths)
    reads: set[str] = set()
    for cid, call in calls.items():
        if tool_kind(call.name) == "bash" and cid in stored:
            is_read, path = shell_read(str(stored[cid][1] or ""))
            if is_read:
                reads.add(cid)
                if path is not None:
                    paths.setdefault(cid, path)

    plan = mech.plan(
        cfg,
        history,
        paths=paths,
        reads=reads,
        protected={m.toolCallId for m in req.tail.messages if m.toolCallId}
        | {c.id for m in req.tail.messages for c in m.toolCalls or ()}
        | set(req.keep),
        edited=edited,
        hidden_sigs=hidden_sigs,
        late_drops=rt.part(TagState).late_drops,
        maskable=maskable,
    )
    if not plan:
        return []
    edits = [_edit(mech, rt, c, handles[c.toolCallId], _label(rt, c, paths, stored)) for c in plan]
    removed = chars_to_tokens(sum(max(e.savedChars, 0) for e in edits))
    counted, ttl_s = _counted_rate(d, req.session_id) if warm else (None, None)
    suffix = suffix_tokens(
        suffix_tokens_estimate(
            _suffix_chars(history, entries.rewrite_start(plan[0].index)),
            _suffix_chars(history, 0),
            _last_sent_messages(d, req.session_id) if warm else None,
        ),
        counted,
    )
    weight = write_weight(ttl_s)
    if warm and not mech.pays(removed, suffix, mask.calls, ttl_s):
        return []
    cost = rewrite_cost_tokens(suffix, warm=warm, write_weight=weight)
    account = rt.part(budget.Savings)
    if warm and not mech.within(cfg, cost, removed, free=account.free, plain=account.plain):
        return []
    if warm:
        budget.charge(rt, cost, request=req.call_index)  # until totals hold that request
    entries.rewritten(plan[0].index)
    # The model asking for a masked result again gets it whole, at the tail too (invariant 5).
    d.hide_signatures(rt, {c.call.argsSig for c in plan})
    # Needed again: a read superseded by the same read later is still in view through that
    # one, so a re-read asks for the later read, not the masked one (as replay counts it:
    # only hidden lines missing from the context); the later read registers if it is masked.
    sigs = Counter(c.argsSig for m in history for c in m.toolCalls or ())
    for c in plan:
        if c.reason == "superseded" and sigs[c.call.argsSig] > 1:
            continue
        rt.part(HiddenState).hidden_by_sig[c.call.argsSig] = c.toolCallId
        if (c.call.name in ("read", "Read") or c.toolCallId in reads) and c.toolCallId in paths:
            rt.part(HiddenState).hidden_reads.setdefault(paths[c.toolCallId], []).append(
                c.toolCallId
            )
    now = time.time()
    for e in edits:
        d.store.insert(
            "edits",
            {
                "session_id": req.session_id,
                "tool_call_id": e.toolCallId,
                "kind": e.kind,
                "saved_chars": e.savedChars,
                "ts": now,
            },
            replace=True,
        )
    d.events.write(
        "mask",
        session=req.session_id,
        trigger=mask.reason,
        gap_s=mask.gap_s,
        masks=[(e.toolCallId, e.reason, e.savedChars) for e in edits],
        removed_tokens=removed,
        cost_tokens=round(cost, 1),
    )
    return [P.Edit.model_validate(edit_to_json(e)) for e in edits]


def mask_policy(cfg: MaskSettings) -> MaskPolicy:
    return MaskPolicy(
        keep_rounds=cfg.mask_keep_rounds,
        min_chars=cfg.mask_min_chars,
        earlier_tasks=cfg.mask_earlier_tasks,
        stale_reads=cfg.mask_stale_reads,
        older_after_rounds=cfg.mask_older_rounds,
        read_idle_rounds=cfg.mask_read_idle_rounds,
        reference_reads=cfg.mask_reference_reads,
    )


def _last_sent_messages(d: MaskView, session_id: str) -> int | None:
    rows = d.store.query(
        "SELECT sent_messages FROM llm_calls WHERE session_id=? ORDER BY id DESC LIMIT 1",
        (session_id,),
    )
    return int(rows[0]["sent_messages"]) if rows else None


def _counted_rate(d: MaskView, session_id: str) -> tuple[float | None, float | None]:
    """(input tokens the provider counted per character sent, cache lifetime) of the
    session's latest request with both on record; (None, None) where nothing was counted."""
    try:
        call = d.store.query(
            "SELECT sent_system + sent_messages + sent_tools AS sent, cache_ttl_s FROM llm_calls"
            " WHERE session_id=? ORDER BY id DESC LIMIT 1",
            (session_id,),
        )
        turn = d.store.query(
            "SELECT input_tokens + cache_read_tokens + cache_write_tokens AS counted FROM turns"
            " WHERE session_id=? ORDER BY id DESC LIMIT 1",
            (session_id,),
        )
    except sqlite3.Error:  # a store from before the cache_ttl_s column
        return None, None
    ttl = call[0]["cache_ttl_s"] if call else None
    if not call or not turn or not call[0]["sent"] or not turn[0]["counted"]:
        return None, ttl
    return int(turn[0]["counted"]) / int(call[0]["sent"]), ttl


def _suffix_chars(history: list[P.TailMessage], start: int) -> int:
    """What the rewrite makes the provider write again: results and call arguments from the
    first masked message on (assistant text is not described: a lower bound)."""
    total = 0
    for m in history[start:]:
        total += m.chars or 0
        total += sum(c.argsChars for c in m.toolCalls or ())
    return total


def _label(
    rt: SessionRuntime,
    c: MaskCandidate,
    paths: dict[str, str],
    stored: dict[str, tuple[str, object]],
) -> str:
    label = rt.call_args.get(c.toolCallId)
    if label:
        return label
    # what the output was stored as (`call_label`: a Codex read's command names its lines)
    command = stored.get(c.toolCallId, ("", None))[1]
    if command:
        return str(command)[:120]
    path = paths.get(c.toolCallId)
    return f"{c.call.name} {path[:120]}" if path else c.call.name


def _edit(mech: Masking, rt: SessionRuntime, c: MaskCandidate, handle: str, label: str) -> MaskEdit:
    text = mech.tombstone(label, c.chars, c.reason, recall_call(rt.profile, handle))
    return MaskEdit(
        toolCallId=c.toolCallId, text=text, savedChars=c.chars - u16len(text), reason=c.reason
    )


class Masking(Mechanism):
    """Older results the model can recall become one-line tombstones at a cold boundary, or
    while warm when the rewrite pays back (engine/masking.py has the policy)."""

    name = "masking"
    switch = "mask"
    settings = (
        "mask",
        "mask_warm",
        "mask_keep_rounds",
        "mask_min_chars",
        "mask_earlier_tasks",
        "mask_stale_reads",
        "mask_older_rounds",
        "mask_read_idle_rounds",
        "mask_reference_reads",
        "rewrite_within_savings",
    )

    def active(self, s: MaskSettings, *, warm: bool) -> bool:
        return s.mask and (not warm or s.mask_warm)

    def keeps_for_recall(self, s: MaskSettings, chars: int, *, is_error: bool = False) -> bool:
        """Whether a command's output the digest left whole (too short, or a read: a file's
        content printed through the shell is never digested) is stored behind a recall handle,
        so that masking may take it once it is old (only what the model can get back is
        masked; an error is never masked). A read is masked by the read rules (`decide`)."""
        return s.mask and not is_error and chars >= s.mask_min_chars

    def keep_for_recall(self, d: AuxView, rt: SessionRuntime, req: P.ToolResult) -> None:
        """Store a command's output the digest left whole (too short, or a read), or a result
        of a tool no other mechanism takes (`keeps_result_of`)."""
        command = str(req.input.get("command", ""))
        if not self.keeps_for_recall(d.cfg, len(req.text), is_error=req.is_error):
            return
        d.raw.try_put_text(
            req.text,
            session_id=rt.session_id,
            tool_call_id=req.tool_call_id,
            tool_name=req.tool_name,
            command=command,
        )

    def policy(self, s: MaskSettings) -> MaskPolicy:
        return mask_policy(s)

    def plan(
        self,
        s: MaskSettings,
        history: Sequence[TailMessage],
        *,
        paths: Mapping[str, str],
        protected: Collection[str],
        edited: Collection[str],
        hidden_sigs: Collection[str],
        maskable: Callable[[TailToolCall], bool],
        late_drops: Collection[str] = (),
        reads: Collection[str] = (),
    ) -> list[MaskCandidate]:
        return plan_masks(
            history,
            paths=paths,
            protected=protected,
            edited=edited,
            hidden_sigs=hidden_sigs,
            late_drops=late_drops,
            maskable=maskable,
            policy=self.policy(s),
            reads=reads,
        )

    def pays(self, removed: int, suffix: int, calls: int, ttl_s: float | None) -> bool:
        """While warm: whether removing `removed` tokens pays back rewriting the cached
        `suffix` over the calls still expected after `calls` so far."""
        return warm_rewrite_pays(
            removed, suffix, expected_remaining_calls(calls), write_weight=write_weight(ttl_s)
        )

    def within(
        self, s: MaskSettings, cost: float, removed: int, *, free: float, plain: float
    ) -> bool:
        """While warm: whether the session's account allows a rewrite of `cost` that keeps
        `removed` tokens out of every later request (`budget.rewrite_within`)."""
        return not s.rewrite_within_savings or budget.rewrite_within(
            cost, removed * READ_WEIGHT, free=free, plain=plain
        )

    def tombstone(self, label: str, chars: int, reason: MaskReason, recall: str) -> str:
        return tombstone_text(label, chars, reason, recall)

    def context(
        self, d: MaskView, rt: SessionRuntime, req: P.ContextRequest, tail_edited: Collection[str]
    ) -> list[P.Edit]:
        entries = rt.part(SessionCaches).of(req.conversation, req.call_index)
        if req.head_changed or (req.mask is not None and req.mask.reason != "warm"):
            entries.cold()  # past the cache's lifetime, or a new conversation: nothing left
        edits = decide(d, rt, req, tail_edited, self, entries)
        entries.add(req.call_index, req.message_count)
        return edits


def on_usage(rt: SessionRuntime, req: P.TurnEnd) -> None:
    """A request's recorded usage: where the provider missed its cache (`CacheEntries`).
    A side request's (no call_index) says nothing of the conversation's entries."""
    if req.call_index is not None:
        rt.part(SessionCaches).usage(
            req.call_index, req.input_tokens, req.cache_read_tokens, req.cache_write_tokens
        )
