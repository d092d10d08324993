"""Frozen tail edits (invariant 3): the one decision point shared by amnesia and writes.

Edits are decided only for the tail the model has not seen; the adapter persists and replays
them on every later request, so the prefix stays byte-stable. At a cold cache boundary the same
reply also carries history masks (`masking.py`), frozen the same way.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from ctxwrap import protocol as P
from ctxwrap.engine.edits import decide_edits, dropped_signatures, edit_to_json
from ctxwrap.mechanisms import amnesia, dedup
from ctxwrap.mechanisms.chain import Mechanisms, default_mechanisms
from ctxwrap.mechanisms.dedup import ReadState
from ctxwrap.mechanisms.needed_again import HiddenState

if TYPE_CHECKING:
    from ctxwrap.mechanisms.ports import DaemonView
    from ctxwrap.state.session import SessionRuntime


async def decide(
    d: DaemonView, rt: SessionRuntime, req: P.ContextRequest, mechs: Mechanisms | None = None
) -> P.ContextReply:
    cfg = d.cfg
    m = mechs or default_mechanisms()
    await amnesia.wait_for_tail_tags(
        d, rt, {m.toolCallId for m in req.tail.messages if m.toolCallId}
    )
    if cfg.off:
        return P.ContextReply()
    dedup.settle(d, rt, req)
    edits = decide_edits(
        req.tail,
        amnesia.drop_tags(d, rt),
        mode=cfg.amnesia_mode,
        dropped_sigs=rt.dropped_sigs,
        write_min_bytes=m.writes.min_bytes(cfg, rt.profile),
        tombstone_for=lambda result, call: (
            dedup.tombstone
            if (result.toolCallId or call.id) in rt.part(ReadState).dedups
            else amnesia.tombstone
        )(rt, result.toolCallId or call.id, result.chars or 0),
        strip_marker_for=m.writes.marker,
        edit_min_chars=m.edits.min_chars(cfg),
    )
    # what a checked thinking block binds stays as sent (the adapter would refuse the edit:
    # deciding or recording it would count a saving never made)
    kept = set(req.keep)
    edits = [e for e in edits if e.toolCallId not in kept]
    d.hide_signatures(rt, dropped_signatures(req.tail, edits))
    # needed again (mechanisms/needed_again.py): which hidden result a repeat would ask for
    tail_calls = {c.id: c for m in req.tail.messages for c in m.toolCalls or ()}
    for e in edits:
        if e.kind in ("tombstone", "remove") and e.toolCallId in tail_calls:
            rt.part(HiddenState).hidden_by_sig.setdefault(
                tail_calls[e.toolCallId].argsSig, e.toolCallId
            )
    out = [P.Edit.model_validate(edit_to_json(e)) for e in edits]
    for edit in out:
        d.store.insert(
            "edits",
            {
                "session_id": req.session_id,
                "tool_call_id": edit.toolCallId,
                "kind": edit.kind,
                "saved_chars": edit.savedChars,
                "ts": time.time(),
            },
            replace=True,
        )
    if out:
        d.events.write(
            "edits",
            session=req.session_id,
            edits=[(e.kind, e.toolCallId, e.savedChars) for e in out],
        )
    # A cold boundary (the adapter says so): older history may be masked once, here.
    masks = m.masking.context(d, rt, req, {e.toolCallId for e in out})
    return P.ContextReply(edits=out + masks)
