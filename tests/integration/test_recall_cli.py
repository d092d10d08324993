"""`ctxwrap recall`, the command every agent's model runs to get back what ctxwrap hid, through
a real daemon and without one.

The command read the store directly, so the daemon never learnt of it: a hidden result the
model recalled was not counted as needed again in `ctxwrap stats` (only pi's ctx_recall tool,
which asks the daemon, was). Now it asks the daemon's `/v1/recall` where one runs (the same
bounded scan, and the recall is recorded) and reads the store itself where none does.
"""

from __future__ import annotations

import socket
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest
from support import Xdg, client, ctxwrap, daemon_process

from ctxwrap import cli as cli_module
from ctxwrap import client as client_module
from ctxwrap.mechanisms import needed_again

LOG = "".join(
    f"2026-11-30T10:00:{i % 60:02d} INFO request {i} served in {i % 97}ms status=200\n"
    for i in range(3000)
)


def digest_a_log(c: Any, sid: str, cwd: Path) -> str:
    """A long command output through the daemon: digested, its raw text stored; the handle."""
    r = c.post("/v1/sessions/start", json={"session_id": sid, "cwd": str(cwd), "pid": 1})
    assert r.status_code == 200, r.text
    r = c.post(
        "/v1/tool_result",
        json={
            "session_id": sid,
            "tool_call_id": "b1",
            "tool_name": "bash",
            "input": {"command": "python3 serve.py"},
            "text": LOG,
        },
    )
    assert r.status_code == 200, r.text
    reply = r.json()
    assert reply["action"] == "replace" and "request 1234 served" not in reply["text"]
    return str(reply["handle"])


def needed(xdg: Xdg) -> list[tuple[str, str]]:
    conn = sqlite3.connect(xdg.db)
    try:
        return conn.execute("SELECT tool_call_id, how FROM needed_again").fetchall()
    finally:
        conn.close()


def test_a_recall_is_answered_and_counted_by_the_daemon_and_answered_without_it(
    tmp_path: Path, xdg: Xdg
) -> None:
    with daemon_process(xdg), client(xdg, 30) as c:
        handle = digest_a_log(c, "s-recall", tmp_path)
        assert needed(xdg) == []
        live = ctxwrap(xdg, "recall", handle, "request 1234 served")
        assert live.returncode == 0, live.stderr
        # the digested output was needed again, as ctx_recall's would be
        assert needed(xdg) == [("b1", "recalled")]
        conn = sqlite3.connect(xdg.db)
        try:  # what `ctxwrap stats` shows beside the digest's savings
            bash = needed_again.summary(conn, session="s-recall")["mechanisms"]["bash"]
        finally:
            conn.close()
        assert (bash["needed_again"], bash["interventions"], bash["recalled"]) == (1, 1, 1)
    # the daemon is gone: the same answer from the store, nothing to record it in
    alone = ctxwrap(xdg, "recall", handle, "request 1234 served")
    assert alone.returncode == 0, alone.stderr
    assert alone.stdout == live.stdout
    assert live.stdout.splitlines() == [
        "1235: 2026-11-30T10:00:34 INFO request 1234 served in 70ms status=200",
        "[1 of 3,000 lines matched]",
    ]
    missing = ctxwrap(xdg, "recall", "rdeadbeef")
    assert missing.returncode == 66 and "no stored output" in missing.stderr


def test_a_daemon_that_does_not_answer_costs_the_recall_one_bounded_wait(
    tmp_path: Path, xdg: Xdg, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hung daemon (it accepts, then says nothing): the command reads the store itself after
    RECALL_DAEMON_TIMEOUT_S, never hangs."""
    sock_path = tmp_path / "hung.sock"
    hung = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    hung.bind(str(sock_path))
    sock_path.chmod(0o600)
    hung.listen(1)
    held: list[socket.socket] = []
    threading.Thread(target=lambda: held.append(hung.accept()[0]), daemon=True).start()
    monkeypatch.setattr(client_module.paths, "socket_path", lambda: sock_path)
    monkeypatch.setattr(cli_module, "RECALL_DAEMON_TIMEOUT_S", 0.3)
    import time

    start = time.monotonic()
    assert cli_module._recall_from_daemon({"handle": "r1a2b3c4d"}) is None
    assert time.monotonic() - start < 2.0
    hung.close()
    for s in held:
        s.close()


def test_a_socket_another_user_could_reach_gets_no_byte_of_the_recall(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The recall's handle and pattern go to the daemon only through a socket of ours in a
    directory closed to others; else the command reads the store itself, having sent nothing."""
    from ctxwrap.errors import SocketSecurityError

    open_dir = tmp_path / "shared"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    sock_path = open_dir / "daemon.sock"
    planted = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    planted.bind(str(sock_path))
    planted.listen(1)
    planted.settimeout(0.3)
    monkeypatch.setattr(client_module.paths, "socket_path", lambda: sock_path)
    try:
        with pytest.raises(SocketSecurityError):
            client_module.post_json("/v1/recall", {"handle": "r1a2b3c4d"}, timeout=1.0)
        assert cli_module._recall_from_daemon({"handle": "r1a2b3c4d"}) is None
        with pytest.raises(TimeoutError):
            planted.accept()  # no connection was ever made
    finally:
        planted.close()
