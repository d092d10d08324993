"""Re-read pointers only point at a result the model still has (mechanisms/dedup.py).

On a real Daemon (SQLite on disk): an identical re-read becomes a pointer; not after a head
change (compaction: the first read may be summarised away), not when the first read has an
edit of its own (tombstone or mask), not when the content differs, not with `dedup` off.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ctxwrap import protocol as P
from ctxwrap.config import load_config
from ctxwrap.daemon.service import Daemon
from ctxwrap.engine.edits import Tail, TailMessage, TailToolCall, args_sig

TEXT = "".join(f"line {i} of the module\n" for i in range(400))
SID = "s-dedup"


Send = Callable[..., None]


@pytest.fixture(params=["tag_batch", "tool_result"])
def result(request: pytest.FixtureRequest) -> Send:
    """Both ways a read reaches the daemon: a tool round's batch (what the adapters send) and
    a result posted on its own."""

    def send(d: Daemon, cid: str, text: str = TEXT) -> None:
        item = P.TagItem(tool_call_id=cid, tool_name="read", input={"path": "m.py"}, text=text)
        if request.param == "tag_batch":
            d.tag_batch(P.TagBatch(session_id=SID, results=[item]))
        else:
            asyncio.run(d.tool_result(item.as_result(SID)))

    return send


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    loaded = load_config(tmp_path / "absent.toml", environ={"PI_CTX_AUX_BACKEND": "none"})
    d = Daemon(loaded, socket=tmp_path / "s.sock", state_dir=tmp_path / "state")
    d.session_start(P.SessionStart(session_id=SID, cwd=str(tmp_path), pid=os.getpid()))
    yield d
    d.store.close()


def context(d: Daemon, cid: str, *, head_changed: bool = False) -> list[P.Edit]:
    call = TailToolCall(id=cid, name="read", argsSig=args_sig("read", {"path": "m.py"}))
    tail = Tail(
        start=5,
        messages=[
            TailMessage(role="assistant", toolCalls=[call]),
            TailMessage(
                role="toolResult", toolCallId=cid, toolName="read", chars=len(TEXT), isError=False
            ),
        ],
    )
    req = P.ContextRequest(
        session_id=SID, call_index=3, message_count=7, head_changed=head_changed, tail=tail
    )
    return asyncio.run(d.context(req)).edits


def pointers(edits: list[P.Edit]) -> list[str]:
    return [e.toolCallId for e in edits if "returned the same" in getattr(e, "text", "")]


def test_identical_reread_becomes_a_pointer(daemon: Daemon, result: Send) -> None:
    result(daemon, "c1")
    context(daemon, "c1")
    result(daemon, "c2")
    assert pointers(context(daemon, "c2")) == ["c2"]


def test_no_pointer_across_a_head_change(daemon: Daemon, result: Send) -> None:
    result(daemon, "c1")
    result(daemon, "c2")
    assert pointers(context(daemon, "c2", head_changed=True)) == []
    result(daemon, "c3")  # the earlier reads are forgotten: c3 is whole, and remembered
    context(daemon, "c3")
    result(daemon, "c4")
    assert pointers(context(daemon, "c4")) == ["c4"]


def test_no_pointer_to_a_result_with_an_edit(daemon: Daemon, result: Send) -> None:
    result(daemon, "c1")
    daemon.store.insert(
        "edits",
        {"session_id": SID, "tool_call_id": "c1", "kind": "mask", "saved_chars": 9, "ts": 0.0},
    )
    result(daemon, "c2")
    assert pointers(context(daemon, "c2")) == []


def test_masked_after_the_note_but_before_the_context(daemon: Daemon, result: Send) -> None:
    result(daemon, "c1")
    result(daemon, "c2")
    daemon.store.insert(
        "edits",
        {"session_id": SID, "tool_call_id": "c1", "kind": "mask", "saved_chars": 9, "ts": 0.0},
    )
    assert pointers(context(daemon, "c2")) == []


def test_changed_content_is_whole(daemon: Daemon, result: Send) -> None:
    result(daemon, "c1")
    result(daemon, "c2", TEXT + "one more line\n")
    assert pointers(context(daemon, "c2")) == []


def test_dedup_off(tmp_path: Path, result: Send) -> None:
    loaded = load_config(
        tmp_path / "absent.toml", environ={"PI_CTX_AUX_BACKEND": "none", "PI_CTX_DEDUP": "0"}
    )
    d = Daemon(loaded, socket=tmp_path / "s.sock", state_dir=tmp_path / "state")
    d.session_start(P.SessionStart(session_id=SID, cwd=str(tmp_path), pid=os.getpid()))
    try:
        result(d, "c1")
        result(d, "c2")
        assert pointers(context(d, "c2")) == []
    finally:
        d.store.close()
