"""Mechanism 2, meta-amnesia: read-like results are tagged RETAIN/DROP out of band; a DROP
becomes a tombstone in the part of the conversation the model has not seen yet.

Only an exact DROP drops (invariant 4): a tag that is pending when the next LLM call starts,
malformed, or failed means RETAIN — and a result the model has seen stays forever.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from ctxwrap import protocol as P
from ctxwrap.aux import prompts
from ctxwrap.daemon.session import (
    PendingAux,
    SessionRuntime,
    call_label,
    chars_to_tokens,
    recall_call,
)
from ctxwrap.engine.edits import args_sig
from ctxwrap.engine.tagview import tag_view

if TYPE_CHECKING:
    from ctxwrap.daemon.service import Daemon


def start_tag(d: Daemon, rt: SessionRuntime, req: P.ToolResult) -> P.ToolResultReply:
    cfg = d.cfg
    rt.sizes[req.tool_call_id] = len(req.text)
    if req.is_error or chars_to_tokens(len(req.text)) < cfg.amnesia_min_tokens:
        return P.ToolResultReply()
    label = call_label(req.tool_name, req.input)
    stored = d.raw.try_put_text(
        req.text,
        session_id=rt.session_id,
        tool_call_id=req.tool_call_id,
        tool_name=req.tool_name,
        command=label,
    )
    if stored is None:
        return P.ToolResultReply()  # nothing to recall it from (state disk full): keep it
    rt.handles[req.tool_call_id] = stored.handle
    rt.call_args[req.tool_call_id] = label
    if args_sig(req.tool_name, req.input) in rt.dropped_sigs:
        # A repeat of a call ctxwrap hid: it is kept whatever the tag says (invariant 5), so
        # asking the tagger would be pure cost.
        rt.tags[req.tool_call_id] = "RETAIN"
        return P.ToolResultReply(handle=stored.handle)
    rt.tags[req.tool_call_id] = "PENDING"
    prompt = prompts.tag_prompt(
        tool=req.tool_name,
        args=req.input,
        # head, outline and tail: what a relevance judgement needs, at a fraction of the tokens
        result=tag_view(req.text, min(cfg.tag_view_chars, cfg.amnesia_max_chars)),
        user_prompt=rt.user_prompt,
        max_chars=cfg.amnesia_max_chars,
    )
    ctx = {"tool": req.tool_name}
    if d.aux.delegated():
        aux = d.aux.request(
            rt, "tag", req.tool_call_id, prompts.TAG_SYSTEM, prompt, cfg.tag_max_tokens, ctx
        )
        return P.ToolResultReply(handle=stored.handle, aux=aux)
    if d.aux.http_backend() is None:
        rt.tags[req.tool_call_id] = "RETAIN"
        return P.ToolResultReply(handle=stored.handle)
    pending = PendingAux("tag", req.tool_call_id, ctx)

    async def run_tag() -> None:
        answer = await d.aux.http_complete(
            rt, "tag", prompts.TAG_SYSTEM, prompt, cfg.tag_max_tokens, waited_for=False
        )
        finish_tag(d, rt, pending, answer)

    rt.tasks[req.tool_call_id] = asyncio.create_task(run_tag())
    return P.ToolResultReply(handle=stored.handle)


def finish_tag(d: Daemon, rt: SessionRuntime, pending: PendingAux, answer: str | None) -> None:
    decision = prompts.parse_tag(answer)
    if rt.tags.get(pending.tool_call_id) == "PENDING":
        rt.tags[pending.tool_call_id] = decision
    elif decision == "DROP" and pending.tool_call_id in rt.late_tags:
        rt.late_drops.add(pending.tool_call_id)  # too late for the tail; masking may hide it
    d.store.insert(
        "tags",
        {
            "session_id": rt.session_id,
            "tool_call_id": pending.tool_call_id,
            "tool_name": pending.context.get("tool", ""),
            "decision": decision,
            "chars": rt.sizes.get(pending.tool_call_id, 0),
            "ts": time.time(),
        },
        replace=True,
    )


async def wait_for_tail_tags(d: Daemon, rt: SessionRuntime, tail_ids: set[str]) -> None:
    """http backend: give tags of the tail a short grace; whatever is still pending → RETAIN."""
    tasks = [t for cid, t in rt.tasks.items() if cid in tail_ids and not t.done()]
    if tasks:
        await asyncio.wait(tasks, timeout=d.cfg.tag_wait_ms / 1000)
    for cid in tail_ids:
        if rt.tags.get(cid) == "PENDING":
            rt.tags[cid] = "RETAIN"  # too late: the model sees it now; only masking may hide it
            rt.late_tags.add(cid)
        rt.tasks.pop(cid, None)


def drop_tags(d: Daemon, rt: SessionRuntime) -> dict[str, str]:
    """The tags that drop, when amnesia is on."""
    return {k: v for k, v in rt.tags.items() if v == "DROP"} if d.cfg.amnesia else {}


def tombstone(rt: SessionRuntime, call_id: str, chars: int) -> str:
    label = rt.call_args.get(call_id, "tool result")
    handle = rt.handles.get(call_id)
    recall = f"; recall with {recall_call(rt.agent, handle)}" if handle else ""
    return f"[ctxwrap: {label} ({chars:,} chars) was judged not needed for the current task and hidden{recall}]"
