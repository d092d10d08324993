"""Re-reads: a file read again with the same arguments and the same content is not sent twice.

Agents re-read files they already have (to check before an edit, after losing track). When the
new result is identical, character for character, to an earlier result of the same call that the
model still has whole, the new one becomes a one-line note pointing at it. It is a tail edit
(decided before the model sees the result, frozen and replayed like any other), so the prompt
cache is untouched, and no aux call is made for it.

When the earlier result may no longer be in the context, nothing is deduplicated: after a
compaction or any head change (the adapter says so), after a session (re)start, and once the
earlier result has an edit of its own (a tombstone, a mask). A call repeated after its result was
deduplicated is kept whole (invariant 5, through the hidden signatures).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ctxwrap import protocol as P
from ctxwrap.engine.edits import args_sig
from ctxwrap.engine.rereads import pointer_text, result_digest
from ctxwrap.mechanisms.amnesia import TagState
from ctxwrap.mechanisms.base import Mechanism, RereadSettings
from ctxwrap.state.session import call_label, recall_call

if TYPE_CHECKING:
    from ctxwrap.mechanisms.ports import StoreView
    from ctxwrap.state.session import SessionRuntime

# Only whole-file reads: a listing or a search can change without its arguments changing, a
# read's content is exactly what is compared.
_READERS = frozenset({"read"})


@dataclass(frozen=True)
class ReadSeen:
    tool_call_id: str
    digest: str  # of the result text


@dataclass
class ReadState:
    """Re-reads' own per-session state (`rt.part(ReadState)`): the latest whole result of each
    read signature, and the results that repeat one (toolCallId → the earlier result)."""

    reads: dict[str, ReadSeen] = field(default_factory=dict)
    dedups: dict[str, ReadSeen] = field(default_factory=dict)


def note_result(
    d: StoreView, rt: SessionRuntime, req: P.ToolResult, mech: Rereads | None = None
) -> bool:
    """Record a read's result; True when it repeats an earlier one the model still has whole
    (its tail edit is then a pointer, made at the next context step)."""
    if not (mech or Rereads()).applies(d.cfg, rt.profile, req.tool_name, req.is_error):
        return False
    sig = args_sig(req.tool_name, req.input)
    digest = result_digest(req.text)
    earlier = rt.part(ReadState).reads.get(sig)
    if (
        earlier is not None
        and earlier.digest == digest
        and sig not in rt.dropped_sigs  # asked again after a hide: the model wants it whole
        and not _has_edit(d, rt, earlier.tool_call_id)
    ):
        rt.part(ReadState).dedups[req.tool_call_id] = earlier
        rt.part(TagState).tags[req.tool_call_id] = (
            "DROP"  # the tail-edit path turns it into the pointer
        )
        rt.sizes[req.tool_call_id] = len(req.text)
        rt.call_args[req.tool_call_id] = call_label(req.tool_name, req.input)
        return True
    rt.part(ReadState).reads[sig] = ReadSeen(req.tool_call_id, digest)
    return False


def forget(rt: SessionRuntime) -> None:
    """The earlier results may be gone from the context (compaction, a new process)."""
    rt.part(ReadState).reads.clear()
    for cid in [c for c in rt.part(ReadState).dedups if rt.part(TagState).tags.get(c) == "DROP"]:
        rt.part(TagState).tags[cid] = "RETAIN"  # not applied yet: keep the result whole
    rt.part(ReadState).dedups.clear()


def settle(d: StoreView, rt: SessionRuntime, req: P.ContextRequest) -> None:
    """Before the tail's edits are decided: no pointer to a result that may be gone."""
    if req.head_changed:
        forget(rt)
        return
    tail = {m.toolCallId for m in req.tail.messages if m.toolCallId}
    for cid, earlier in list(rt.part(ReadState).dedups.items()):
        if cid not in tail:
            continue  # decided at an earlier context step (frozen there) or not arrived yet
        if rt.part(TagState).tags.get(cid) == "DROP" and _has_edit(d, rt, earlier.tool_call_id):
            rt.part(TagState).tags[cid] = "RETAIN"
            del rt.part(ReadState).dedups[cid]


def tombstone(rt: SessionRuntime, call_id: str, chars: int) -> str:
    earlier = rt.part(ReadState).dedups.get(call_id)
    handle = rt.handles.get(earlier.tool_call_id) if earlier is not None else None
    recall = recall_call(rt.profile, handle) if handle else None
    return pointer_text(rt.call_args.get(call_id, "read"), chars, recall)


def _has_edit(d: StoreView, rt: SessionRuntime, tool_call_id: str) -> bool:
    rows = d.store.query(
        "SELECT 1 FROM edits WHERE session_id=? AND tool_call_id=? LIMIT 1",
        (rt.session_id, tool_call_id),
    )
    return bool(rows)


class Rereads(Mechanism):
    """An unchanged re-read of a whole file → a pointer to the earlier result the model still
    has whole."""

    name = "rereads"
    switch = "dedup"
    settings = ("dedup",)

    def applies(
        self, s: RereadSettings, profile: P.AgentProfile, tool_name: str, is_error: bool
    ) -> bool:
        # Only where the adapter reports head changes (compaction) on every context step (pi's
        # bridge; the proxies do not yet): a pointer to a read compacted away would point at
        # nothing.
        return s.dedup and profile.reports_head_changes and tool_name in _READERS and not is_error

    def pointer(self, label: str, chars: int, recall: str | None = None) -> str:
        return pointer_text(label, chars, recall)

    def tool_result(self, d: StoreView, rt: SessionRuntime, req: P.ToolResult) -> bool:
        """True: a repeat, answered by a pointer at the next context step (no tag needed)."""
        return note_result(d, rt, req, self)
