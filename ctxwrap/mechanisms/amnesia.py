"""Mechanism 2, meta-amnesia: read-like results are tagged RETAIN/DROP out of band; a DROP
becomes a tombstone in the part of the conversation the model has not seen yet.

Only an exact DROP drops (invariant 4): a tag that is pending when the next LLM call starts,
malformed, or failed means RETAIN — and a result the model has seen stays forever.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ctxwrap import protocol as P
from ctxwrap.aux import prompts
from ctxwrap.engine.edits import args_sig
from ctxwrap.engine.tagview import tag_view
from ctxwrap.mechanisms import budget, needed_again
from ctxwrap.mechanisms.base import AmnesiaSettings, Mechanism
from ctxwrap.state.session import (
    PendingAux,
    SessionRuntime,
    call_label,
    chars_to_tokens,
    recall_call,
)

if TYPE_CHECKING:
    from ctxwrap.mechanisms.ports import AuxView


@dataclass
class TagState:
    """A session's tags (amnesia's own state; `rt.part(TagState)`)."""

    tags: dict[str, str] = field(default_factory=dict)  # toolCallId → DROP | RETAIN | PENDING
    late_tags: set[str] = field(default_factory=set)  # RETAIN only because the tag came late
    late_drops: set[str] = field(default_factory=set)  # ... and then said DROP: mask candidates
    past_tail: set[str] = field(default_factory=set)  # results the model has seen (tail passed)
    tasks: dict[str, asyncio.Task[None]] = field(default_factory=dict)  # http backend tag tasks


def _admit(
    d: AuxView, rt: SessionRuntime, req: P.ToolResult, mech: Amnesia
) -> tuple[str | None, bool]:
    """Keep a result for recall; its raw-output handle and whether asking the tagger can pay.

    No tag for a result that could not be dropped anyway: an error or a small result, one with
    nothing to recall it from, a repeat of a call ctxwrap hid (kept whatever the tag says,
    invariant 5), a result tagged already (a resent result), and one the model has already seen
    when masking is off (a late DROP only ever serves history masking).
    """
    cfg = d.cfg
    cid = req.tool_call_id
    needed_again.on_first_arrival(d, rt, req)  # does it ask again for something hidden?
    rt.sizes[cid] = len(req.text)
    if req.is_error or not mech.wants(cfg, len(req.text)):
        return None, False
    if cid in rt.part(TagState).tags:
        return rt.handles.get(cid), False
    label = call_label(req.tool_name, req.input)
    stored = d.raw.try_put_text(
        req.text,
        session_id=rt.session_id,
        tool_call_id=cid,
        tool_name=req.tool_name,
        command=label,
    )
    if stored is None:
        return None, False  # nothing to recall it from (state disk full): keep it
    rt.handles[cid] = stored.handle
    rt.call_args[cid] = label
    if args_sig(req.tool_name, req.input) in rt.dropped_sigs or (
        cid in rt.part(TagState).past_tail and not cfg.mask
    ):
        rt.part(TagState).tags[cid] = "RETAIN"
        return stored.handle, False
    return stored.handle, True


# The output tokens of a tag call, weighted against its input: the highest output:input price
# ratio of the default aux models (gpt-5-mini 8x, Claude Haiku 5x), so an estimate is an upper
# bound of what the totals will count for it.
TAG_OUTPUT_WEIGHT = 8.0


def tag_cost(input_tokens: int, max_output_tokens: int) -> float:
    """A tag call's cost in input-equivalent tokens, at most (`_charge`; replay the same)."""
    return input_tokens + TAG_OUTPUT_WEIGHT * max_output_tokens


def _charge(
    d: AuxView, rt: SessionRuntime, first: str, system: str, prompt: str, max_tokens: int
) -> bool:
    """Whether a tag call goes out: something runs it, and (`tag_within_savings`) the
    session's savings so far cover it (`budget.aux_within`: invariant 10, a session in which
    nothing else saves never pays for tags); if so it is charged, in flight under its first
    result's id until it is recorded."""
    if not d.aux.delegated() and d.aux.http_backend() is None:
        return False
    cost = tag_cost(chars_to_tokens(len(system) + len(prompt)), max_tokens)
    if d.cfg.tag_within_savings and not budget.aux_within(rt.part(budget.Savings).free, cost):
        return False
    budget.charge(rt, cost, first)
    return True


def _view(d: AuxView, text: str) -> str:
    # head, outline and tail: what a relevance judgement needs, at a fraction of the tokens
    return tag_view(text, min(d.cfg.tag_view_chars, d.cfg.amnesia_max_chars))


def start_tag(
    d: AuxView, rt: SessionRuntime, req: P.ToolResult, mech: Amnesia | None = None
) -> P.ToolResultReply:
    """One result, one tag: a read-like result posted on its own to `/v1/tool_result` (both
    adapters now send a tool round's results to `/v1/tag_batch` instead)."""
    cfg = d.cfg
    handle, taggable = _admit(d, rt, req, mech or Amnesia())
    if not taggable:
        return P.ToolResultReply(handle=handle)
    rt.part(TagState).tags[req.tool_call_id] = "PENDING"
    prompt = prompts.tag_prompt(
        tool=req.tool_name,
        args=req.input,
        result=_view(d, req.text),
        user_prompt=rt.user_prompt,
        max_chars=cfg.amnesia_max_chars,
    )
    if not _charge(d, rt, req.tool_call_id, prompts.TAG_SYSTEM, prompt, cfg.tag_max_tokens):
        rt.part(TagState).tags[req.tool_call_id] = "RETAIN"  # kept; masking may hide it later
        return P.ToolResultReply(handle=handle)
    ctx = {"tool": req.tool_name}
    if d.aux.delegated():
        aux = d.aux.request(
            rt, "tag", req.tool_call_id, prompts.TAG_SYSTEM, prompt, cfg.tag_max_tokens, ctx
        )
        return P.ToolResultReply(handle=handle, aux=aux)
    pending = PendingAux("tag", req.tool_call_id, ctx)

    async def run_tag() -> None:
        answer = await d.aux.http_complete(
            rt, "tag", prompts.TAG_SYSTEM, prompt, cfg.tag_max_tokens, waited_for=False
        )
        finish_tag(d, rt, pending, answer)

    rt.part(TagState).tasks[req.tool_call_id] = asyncio.create_task(run_tag())
    return P.ToolResultReply(handle=handle)


# Output tokens per result of a batched answer (`"12": "RETAIN", ` is about 7).
TOKENS_PER_ITEM = 8


def start_tag_batch(
    d: AuxView, rt: SessionRuntime, req: P.TagBatch, mech: Amnesia | None = None
) -> P.TagBatchReply:
    """The results of one tool round, tagged in one aux call (one `aux_calls` row)."""
    cfg = d.cfg
    handles: dict[str, str] = {}
    items: list[P.TagItem] = []
    for item in req.results:
        if item.tool_call_id in {i.tool_call_id for i in items}:
            continue  # the same id twice: tagged once
        handle, taggable = _admit(d, rt, item.as_result(req.session_id), mech or Amnesia())
        if handle:
            handles[item.tool_call_id] = handle
        if taggable:
            items.append(item)
    if not items:
        return P.TagBatchReply(handles=handles)
    for item in items:
        rt.part(TagState).tags[item.tool_call_id] = "PENDING"
    prompt = prompts.tag_batch_prompt(
        items=[(i.tool_name, i.input, _view(d, i.text)) for i in items],
        user_prompt=rt.user_prompt,
        max_chars=cfg.amnesia_max_chars,
        key=secrets.token_hex(4),
    )
    max_tokens = cfg.tag_max_tokens + TOKENS_PER_ITEM * len(items)
    first = items[0].tool_call_id
    if not _charge(d, rt, first, prompts.TAG_BATCH_SYSTEM, prompt, max_tokens):
        for item in items:  # kept; masking may hide them later
            rt.part(TagState).tags[item.tool_call_id] = "RETAIN"
        return P.TagBatchReply(handles=handles)
    # The numbers the answer may use, and the only ids it can ever reach (invariant 7).
    ctx = {"batch": [(i.tool_call_id, i.tool_name) for i in items]}
    if d.aux.delegated():
        aux = d.aux.request(rt, "tag", first, prompts.TAG_BATCH_SYSTEM, prompt, max_tokens, ctx)
        return P.TagBatchReply(handles=handles, aux=aux)
    pending = PendingAux("tag", first, ctx)

    async def run_batch() -> None:
        answer = await d.aux.http_complete(
            rt, "tag", prompts.TAG_BATCH_SYSTEM, prompt, max_tokens, waited_for=False
        )
        finish_tag(d, rt, pending, answer)

    task = asyncio.create_task(run_batch())
    for item in items:
        rt.part(TagState).tasks[item.tool_call_id] = task
    return P.TagBatchReply(handles=handles)


def finish_tag(d: AuxView, rt: SessionRuntime, pending: PendingAux, answer: str | None) -> None:
    budget.settle(rt, pending.tool_call_id)  # recorded: the next totals hold it
    batch = pending.context.get("batch")
    if batch is None:
        decisions = [
            (pending.tool_call_id, pending.context.get("tool", ""), prompts.parse_tag(answer))
        ]
    else:
        parsed = prompts.parse_tag_batch(answer, len(batch))
        decisions = [(cid, tool, dec) for (cid, tool), dec in zip(batch, parsed, strict=True)]
    for cid, tool, decision in decisions:
        _settle(d, rt, cid, tool, decision)


def _settle(d: AuxView, rt: SessionRuntime, cid: str, tool: str, decision: str) -> None:
    if rt.part(TagState).tags.get(cid) == "PENDING" and cid in rt.part(TagState).past_tail:
        # Tagged after its tail went out (a proxy never waits for a tag, and may even send the
        # batch after the request that carries the result): late like any other.
        rt.part(TagState).tags[cid] = "RETAIN"
        rt.part(TagState).late_tags.add(cid)
    if rt.part(TagState).tags.get(cid) == "PENDING":
        rt.part(TagState).tags[cid] = decision
    elif decision == "DROP" and cid in rt.part(TagState).late_tags:
        rt.part(TagState).late_drops.add(cid)  # too late for the tail; masking may hide it
    d.store.insert(
        "tags",
        {
            "session_id": rt.session_id,
            "tool_call_id": cid,
            "tool_name": tool,
            "decision": decision,
            "chars": rt.sizes.get(cid, 0),
            "ts": time.time(),
        },
        replace=True,
    )


async def wait_for_tail_tags(d: AuxView, rt: SessionRuntime, tail_ids: set[str]) -> None:
    """http backend: give tags of the tail a short grace; whatever is still pending → RETAIN.

    Not for the proxies' agents (Claude Code, Codex): their request is on the wire while it
    waits, and a late DROP still pays as a history mask later (issue 43)."""
    tasks = [t for cid, t in rt.part(TagState).tasks.items() if cid in tail_ids and not t.done()]
    if tasks and rt.profile.tail_waits_for_tags:
        await asyncio.wait(tasks, timeout=d.cfg.tag_wait_ms / 1000)
    rt.part(TagState).past_tail |= tail_ids
    for cid in tail_ids:
        if rt.part(TagState).tags.get(cid) == "PENDING":
            rt.part(TagState).tags[cid] = (
                "RETAIN"  # too late: the model sees it now; only masking may hide it
            )
            rt.part(TagState).late_tags.add(cid)
        rt.part(TagState).tasks.pop(cid, None)


def drop_tags(d: AuxView, rt: SessionRuntime) -> dict[str, str]:
    """The tags that drop, when amnesia is on."""
    return {k: v for k, v in rt.part(TagState).tags.items() if v == "DROP"} if d.cfg.amnesia else {}


def tombstone(rt: SessionRuntime, call_id: str, chars: int) -> str:
    label = rt.call_args.get(call_id, "tool result")
    handle = rt.handles.get(call_id)
    recall = f"; recall with {recall_call(rt.profile, handle)}" if handle else ""
    return f"[ctxwrap: {label} ({chars:,} chars) was judged not needed for the current task and hidden{recall}]"


class Amnesia(Mechanism):
    """Read-like results tagged RETAIN/DROP by the aux model out of band; a DROP becomes a
    tombstone at the tail, a late one a history mask."""

    name = "amnesia"
    switch = "amnesia"
    settings = (
        "amnesia",
        "amnesia_min_tokens",
        "amnesia_max_chars",
        "tag_view_chars",
        "tag_within_savings",
    )

    def wants(self, s: AmnesiaSettings, chars: int) -> bool:
        """Whether a result is worth a tag: one too small to drop is never asked about."""
        return chars_to_tokens(chars) >= s.amnesia_min_tokens

    def tool_result(self, d: AuxView, rt: SessionRuntime, req: P.ToolResult) -> P.ToolResultReply:
        return start_tag(d, rt, req, self)

    def tag_batch(self, d: AuxView, rt: SessionRuntime, req: P.TagBatch) -> P.TagBatchReply:
        return start_tag_batch(d, rt, req, self)

    def aux_result(
        self, d: AuxView, rt: SessionRuntime, pending: PendingAux, answer: str | None
    ) -> str | None:
        finish_tag(d, rt, pending, answer)
        return None
