"""Invariant 5 across a daemon restart and a resume: a call whose result ctxwrap hid is kept
whole when the model issues it again, even when the daemon that hid it is gone."""

from __future__ import annotations

import asyncio
from pathlib import Path

from ctxwrap import protocol as P
from ctxwrap.config import load_config
from ctxwrap.daemon.service import Daemon
from ctxwrap.engine.edits import args_sig
from ctxwrap.mechanisms.amnesia import TagState

READ = {"path": "THIRD_PARTY_NOTICES.txt"}
BIG = "license text line\n" * 2000  # over amnesia_min_tokens: would be tagged


def _daemon(tmp_path: Path) -> Daemon:
    # tags from the first round: the budget apart (test_tag_budget.py)
    loaded = load_config(tmp_path / "absent.toml", environ={"PI_CTX_TAG_WITHIN_SAVINGS": "false"})
    return Daemon(loaded, socket=tmp_path / "s.sock", state_dir=tmp_path / "state")


def _start(d: Daemon, sid: str = "s1") -> None:
    d.session_start(P.SessionStart(session_id=sid, cwd="/w", pid=0))


def _read_again(d: Daemon, call_id: str) -> P.ToolResultReply:
    req = P.ToolResult(
        session_id="s1", tool_call_id=call_id, tool_name="read", input=READ, text=BIG
    )
    return asyncio.run(d.tool_result(req))


def test_a_hidden_call_repeated_after_a_restart_is_not_tagged_again(tmp_path: Path) -> None:
    first = _daemon(tmp_path)
    _start(first)
    first.hide_signatures(first.sessions["s1"], {args_sig("read", READ)})
    first.store.close()

    restarted = _daemon(tmp_path)  # the old daemon died; the bridge just goes on
    reply = _read_again(restarted, "c-2")
    assert reply.aux is None, "the repeat of a hidden call was sent to the tagger"
    assert restarted.sessions["s1"].part(TagState).tags["c-2"] == "RETAIN"
    restarted.store.close()

    resumed = _daemon(tmp_path)
    _start(resumed)  # `pi --continue` registers the same session again
    assert args_sig("read", READ) in resumed.sessions["s1"].dropped_sigs
    resumed.store.close()


def test_an_unrelated_read_is_still_tagged_after_a_restart(tmp_path: Path) -> None:
    d = _daemon(tmp_path)
    _start(d)
    d.hide_signatures(d.sessions["s1"], {args_sig("read", {"path": "other.txt"})})
    d.store.close()
    again = _daemon(tmp_path)
    assert _read_again(again, "c-3").aux is not None  # the pi backend: the bridge runs the tag
    again.store.close()
