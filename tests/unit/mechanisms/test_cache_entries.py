"""The daemon judges a warm mask on what the provider will write anew (engine/masking.
CacheEntries): from the latest cache entry its requests left before the first change; the
whole conversation where the provider has just missed its cache; nothing on a provider that
does not cache. The daemon is the real one on a real store, fed as an adapter feeds it."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from ctxwrap import protocol as P
from ctxwrap.engine.edits import describe_tail
from ctxwrap.engine.masking import call_paths
from ctxwrap.mechanisms.budget import Savings
from tests.unit.mechanisms.test_tag_budget import SID, _daemon, _start

CALLS = 10


def _bash_round(d: Any, messages: list[dict[str, Any]], k: int, *, failed: bool = False) -> None:
    """Call `k`: a bash command and its output (600 lines nobody reads again), posted to the
    daemon as the adapter posts it (stored behind a recall handle: maskable once old)."""
    cid = f"b{k}"
    text = "".join(f"{cid} line {i}: output nobody reads again\n" for i in range(600))
    args = {"command": f"make step{k}"}
    messages += [
        {"role": "assistant", "content": [
            {"type": "toolCall", "id": cid, "name": "bash", "arguments": args}]},
        {"role": "toolResult", "toolCallId": cid, "toolName": "bash",
         "content": [{"type": "text", "text": text}], "isError": failed},
    ]  # fmt: skip
    asyncio.run(d.tool_result(P.ToolResult(
        session_id=SID, tool_call_id=cid, tool_name="bash", input=args, text=text,
        is_error=failed)))  # fmt: skip


def _warm(
    messages: list[dict[str, Any]], call: int, reason: str = "warm", conversation: str = "main"
) -> P.ContextRequest:
    """A context request at `call` (warm: it may mask what the model has seen)."""
    seen = {m["toolCallId"] for m in messages if m.get("toolCallId")}
    return P.ContextRequest(
        session_id=SID, call_index=call, message_count=len(messages),
        tail=describe_tail(messages, seen), conversation=conversation,
        mask=P.MaskRequest(reason=reason, gap_s=5.0, history=describe_tail(messages, set()),
                           paths=call_paths(messages), calls=1000),
    )  # fmt: skip


def _session(tmp_path: Path, usage: str) -> dict[str, Any] | None:
    """Ten calls, each a bash command and its output (the first four failed, so never masked),
    a context request and a turn_end each; then a warm context request that may mask the
    large outputs of the rounds before the last. Returns the daemon's `mask` event."""
    d = _daemon(tmp_path, PI_CTX_MASK_KEEP_ROUNDS="1", PI_CTX_TAG_WITHIN_SAVINGS="false")
    try:
        _start(d)
        messages: list[dict[str, Any]] = [{"role": "user", "content": "fix the parser"}]
        read = 0
        for k in range(CALLS):
            seen = {m["toolCallId"] for m in messages if m.get("toolCallId")}
            asyncio.run(d.context(P.ContextRequest(
                session_id=SID, call_index=k, message_count=len(messages),
                tail=describe_tail(messages, seen), conversation="main")))  # fmt: skip
            # the first four failed: never masked, but written anew with what follows them
            _bash_round(d, messages, k, failed=k < 4)
            total = 2_000 + 300 * k
            if usage == "uncached":
                got = (total, 0, 0)
            elif usage == "miss" and k == CALLS - 1:
                got = (1, 0, total)  # the provider missed: it read nothing, wrote it all
            else:
                got = (1, read, total - read)
            read = total
            d.turn_end(P.TurnEnd(session_id=SID, turn_index=k, input_tokens=got[0],
                                 cache_read_tokens=got[1], cache_write_tokens=got[2],
                                 call_index=k))  # fmt: skip
        call = CALLS
        if usage == "sub-agent":
            # a sub-agent of the same session: its first request is a new conversation (the
            # proxy says "compaction"), short, its cache its own
            sub = [{"role": "user", "content": "find the lexer tests"}]
            asyncio.run(d.context(_warm(sub, call, "compaction", "sub")))
            d.turn_end(P.TurnEnd(session_id=SID, turn_index=call, input_tokens=1,
                                 cache_read_tokens=0, cache_write_tokens=900,
                                 call_index=call))  # fmt: skip
            call += 1
        st = d.sessions[SID].part(Savings)
        st.ahead, st.plain = 1e9, 1e10  # an account that covers any rewrite
        asyncio.run(d.context(_warm(messages, call)))
    finally:
        d.store.close()
    events = [json.loads(line) for line in (tmp_path / "state" / "events.jsonl").open()]
    masks = [e for e in events if e["event"] == "mask"]
    return masks[-1] if masks else None


@pytest.mark.parametrize("usage", ["cached", "miss", "uncached", "sub-agent"])
def test_a_warm_mask_is_judged_on_what_the_provider_writes_anew(tmp_path: Path, usage: str) -> None:
    mask = _session(tmp_path, usage)
    assert mask is not None and mask["trigger"] == "warm"
    assert {m[0] for m in mask["masks"]} == {f"b{k}" for k in range(4, CALLS - 1)}
    cached = _session(tmp_path / "again", "cached")
    assert cached is not None
    if usage == "cached":
        # from the entry of the request before the first masked output: its round and later
        assert mask["cost_tokens"] > 0
    elif usage == "sub-agent":
        # a sub-agent's requests between leave the main conversation's entries as they were
        assert mask["cost_tokens"] == cached["cost_tokens"]
    elif usage == "miss":
        # the provider missed at the last call: no entry before the masked outputs is left,
        # the whole conversation is written anew
        assert mask["cost_tokens"] > cached["cost_tokens"] * 1.2
    else:
        assert mask["cost_tokens"] == 0  # no cache, nothing to rewrite


def test_a_warm_mask_is_charged_to_the_request_that_carries_it(tmp_path: Path) -> None:
    """`masking.decide` charges a warm mask by the context request's call_index, so a late
    turn_end of an earlier call does not take it off the account (mechanisms/budget.py)."""
    d = _daemon(tmp_path, PI_CTX_MASK_KEEP_ROUNDS="1", PI_CTX_TAG_WITHIN_SAVINGS="false")
    try:
        _start(d)
        messages: list[dict[str, Any]] = [{"role": "user", "content": "fix the parser"}]
        for k in range(4):  # command output, masked a round after it was seen
            _bash_round(d, messages, k)
        st = d.sessions[SID].part(Savings)
        st.ahead, st.plain = 1e6, 1e7  # an account that covers the rewrite
        reply = asyncio.run(d.context(_warm(messages, 7)))
        assert [e.kind for e in reply.edits] and all(e.kind == "mask" for e in reply.edits)
        assert list(st.rewrites) == [7] and st.charged > 0
    finally:
        d.store.close()
