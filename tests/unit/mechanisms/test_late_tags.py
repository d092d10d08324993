"""A tag that comes after its tail went out is late, whichever came first at the daemon
(issue 43): RETAIN now, and a DROP a mask candidate — never a DROP that nothing applies. And a
proxied request waits for tags only while the tagger answers within `tag_wait_ms`."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

from ctxwrap import protocol as P
from ctxwrap.agents._proxy.tag_wait import TagWait
from ctxwrap.config import load_config
from ctxwrap.daemon.service import Daemon
from ctxwrap.mechanisms.amnesia import TagState

LICENSE = "".join(f"irrelevant line {i} of a vendored license\n" for i in range(400))


def _daemon(tmp_path: Path) -> Daemon:
    # tags from the first round: the budget apart (test_tag_budget.py)
    loaded = load_config(tmp_path / "absent.toml", environ={"PI_CTX_TAG_WITHIN_SAVINGS": "false"})
    return Daemon(loaded, socket=tmp_path / "s.sock", state_dir=tmp_path / "state")


def _tail(cid: str) -> P.Tail:
    call = P.TailToolCall(id=cid, name="read", argsSig="r")
    return P.Tail(
        start=1,
        messages=[
            P.TailMessage(role="assistant", toolCalls=[call]),
            P.TailMessage(role="toolResult", toolCallId=cid, toolName="read", chars=len(LICENSE)),
        ],
    )


def _item(cid: str) -> P.TagItem:
    return P.TagItem(tool_call_id=cid, tool_name="read", input={"path": "L"}, text=LICENSE)


def test_a_batch_sent_after_its_context_call_is_late(tmp_path: Path) -> None:
    """The proxy sends the batch in a thread: /v1/context may reach the daemon first. The
    DROP then must become a late drop (masking hides it), not a tail tag nothing applies."""
    d = _daemon(tmp_path)
    d.session_start(P.SessionStart(session_id="s1", cwd="/w", pid=os.getpid(), agent="claude"))
    asyncio.run(
        d.context(
            P.ContextRequest(session_id="s1", call_index=0, message_count=3, tail=_tail("t1"))
        )
    )
    reply = d.tag_batch(P.TagBatch(session_id="s1", results=[_item("t1")]))
    assert reply.aux is not None  # masking on: still worth a tag
    d.aux_result(P.AuxResult(session_id="s1", aux_id=reply.aux.aux_id, text='{"1": "DROP"}'))
    rt = d.sessions["s1"]
    assert (
        rt.part(TagState).tags["t1"] == "RETAIN" and "t1" in rt.part(TagState).late_drops
    )  # without the fix: DROP, unused
    d.store.close()


def test_a_pending_tag_at_the_context_call_is_late_too(tmp_path: Path) -> None:
    d = _daemon(tmp_path)
    d.session_start(P.SessionStart(session_id="s1", cwd="/w", pid=os.getpid(), agent="claude"))
    reply = d.tag_batch(P.TagBatch(session_id="s1", results=[_item("t1")]))
    assert reply.aux is not None
    started = time.monotonic()
    asyncio.run(
        d.context(
            P.ContextRequest(session_id="s1", call_index=0, message_count=3, tail=_tail("t1"))
        )
    )
    assert time.monotonic() - started < 0.2  # the daemon holds no proxied request either
    d.aux_result(P.AuxResult(session_id="s1", aux_id=reply.aux.aux_id, text='{"1": "DROP"}'))
    rt = d.sessions["s1"]
    assert rt.part(TagState).tags["t1"] == "RETAIN" and "t1" in rt.part(TagState).late_drops
    d.store.close()


def test_a_request_waits_only_for_a_tagger_that_answers_in_time() -> None:
    wait = TagWait()
    assert wait.allowance(0.4) == 0.25  # nothing measured: the first round may wait a little
    for _ in range(3):
        token = wait.begin()
        wait._running[token] -= 0.05  # a round of 50 ms
        wait.end(token)
    assert wait.allowance(0.4) == 0.4  # a fast (local) tagger: worth the wait
    slow = wait.begin()
    wait._running[slow] -= 0.6  # still running past the budget: counts as slow already
    fresh = TagWait()
    token = fresh.begin()
    fresh._running[token] -= 0.6
    assert fresh.allowance(0.4) == 0.0  # the request goes; its tag will be late
    for _ in range(3):
        token = fresh.begin()
        fresh._running[token] -= 0.8
        fresh.end(token)
    assert fresh.allowance(0.4) == 0.0  # a 0.8 s tagger never holds a turn back
    assert TagWait().allowance(0.0) == 0.0  # tag_wait_ms = 0: never
