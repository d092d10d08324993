"""A daemon that does not know a Claude Code session (its database was wiped, or another state
dir) answers 409; the adapter registers the session again and the call goes through."""

from __future__ import annotations

import shutil
from pathlib import Path

from support import client, daemon_process, make_xdg

from ctxwrap.agents._proxy import DaemonLink
from ctxwrap.agents.claude.session import ClaudeSession

SID = "claude-rereg-0001"


def _live(xdg: object) -> set[str]:
    with client(xdg, 5.0) as c:  # type: ignore[arg-type]
        return {s["session_id"] for s in c.get("/v1/sessions").json()["sessions"] if s["live"]}


def test_a_forgotten_session_is_registered_again(tmp_path: Path) -> None:
    xdg = make_xdg(tmp_path)
    try:
        link = DaemonLink(xdg.socket)
        session = ClaudeSession(
            SID,
            daemon=link,
            state_file=None,
            aux=None,
            start_info={"cwd": str(tmp_path), "pid": 0, "agent": "claude"},
        )
        with daemon_process(xdg):
            session.ensure_registered()
            assert session.registered and SID in _live(xdg)
        shutil.rmtree(xdg.state)  # the new daemon starts from an empty database
        with daemon_process(xdg):
            reply = link.call("/v1/prompt", {"session_id": SID, "prompt": "go on"}, timeout=5)
            assert reply is not None, "the 409 was not answered by registering again"
            assert SID in _live(xdg)
            link.close()
    finally:
        shutil.rmtree(xdg.runtime, ignore_errors=True)
