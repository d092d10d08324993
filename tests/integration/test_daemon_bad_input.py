"""Bad input over the real socket: a 4xx with a reason where an answer is possible, the daemon
stays up after each, and a secret carried in a bad body is written nowhere (daemon log,
events.jsonl, the SQLite files, the raw store).

One daemon serves the whole module, so "stays up" holds across every case, not just one.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from support import CTXWRAP, Xdg, client, make_xdg, wait_ready

from ctxwrap import protocol as P

SECRET = "sk-test-SECRET123456789"
FRAMES = Path(__file__).resolve().parents[1] / "fixtures" / "frames"


class Daemon:
    def __init__(self, xdg: Xdg, proc: subprocess.Popen[bytes], log: Path) -> None:
        self.xdg, self.proc, self.log = xdg, proc, log
        self.pid = int(wait_ready(xdg)["pid"])

    def assert_up(self) -> None:
        assert self.proc.poll() is None, "the daemon died"
        with client(self.xdg) as c:
            r = c.get("/v1/health")
        assert r.status_code == 200 and r.json()["pid"] == self.pid

    def raw(self, data: bytes, *, half_close: bool = False, timeout: float = 10) -> bytes:
        """Send bytes as they are; return whatever comes back before the daemon closes."""
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(timeout)
            s.connect(str(self.xdg.socket))
            s.sendall(data)
            if half_close:
                s.shutdown(socket.SHUT_WR)
            got = b""
            with contextlib.suppress(TimeoutError, ConnectionResetError):
                while chunk := s.recv(65536):
                    got += chunk
                    if half_close is False and b"\r\n\r\n" in got and _complete(got):
                        break
            return got


def _complete(resp: bytes) -> bool:
    head, _, body = resp.partition(b"\r\n\r\n")
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return len(body) >= int(line.split(b":")[1])
    return False


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    xdg = make_xdg(tmp_path_factory.mktemp("bad-input"))
    log = xdg.root / "daemon-stderr.log"
    with log.open("wb") as err:
        proc = subprocess.Popen(
            [*CTXWRAP, "daemon", "run"], env=xdg.env(), stdout=subprocess.DEVNULL, stderr=err
        )
    try:
        yield Daemon(xdg, proc, log)
    finally:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGCONT)
            proc.kill()
        proc.wait(10)
        xdg.kill_daemon()
        import shutil

        shutil.rmtree(xdg.runtime, ignore_errors=True)


def tool_result(**extra: Any) -> dict[str, Any]:
    return {
        "session_id": "bad-input",
        "tool_call_id": "call_1",
        "tool_name": "read",
        "input": {"path": "README.md"},
        "text": "short",
        **extra,
    }


def assert_error(r: httpx.Response, status: int, error: str) -> dict[str, Any]:
    assert r.status_code == status, r.text
    body = dict(r.json())
    assert P.ErrorReply.model_validate(body).error == error
    assert SECRET not in r.text, "an error reply must not echo the value"
    return body


# -- each bad input ------------------------------------------------------------------------------


def test_malformed_json(daemon: Daemon) -> None:
    with client(daemon.xdg) as c:
        r = c.post(
            "/v1/tool_result",
            content=b'{"session_id": "s", "text": "' + SECRET.encode() + b'", ',
            headers={"content-type": "application/json"},
        )
    body = assert_error(r, 400, "malformed JSON")
    assert body["detail"]
    daemon.assert_up()


@pytest.mark.parametrize("payload", [b"\xff\xfe" + SECRET.encode(), b""], ids=["not-utf8", "empty"])
def test_undecodable_or_empty_body(daemon: Daemon, payload: bytes) -> None:
    with client(daemon.xdg) as c:
        r = c.post("/v1/context", content=payload)
    assert_error(r, 400, "malformed JSON")
    daemon.assert_up()


def test_unknown_field_is_named_not_echoed(daemon: Daemon) -> None:
    with client(daemon.xdg) as c:
        r = c.post("/v1/tool_result", json=tool_result(api_key=SECRET))
    body = assert_error(r, 422, "invalid request")
    assert body["detail"].startswith("api_key:"), body
    daemon.assert_up()


@pytest.mark.parametrize(
    ("route", "payload"),
    [
        ("/v1/context", {"session_id": "s", "call_index": SECRET, "message_count": 1, "tail": {}}),
        ("/v1/recall", {"handle": SECRET * 4}),  # over max_length=64
        ("/v1/tool_result", [SECRET]),
        ("/v1/turn_end", SECRET),
    ],
    ids=["wrong-type", "too-long", "array", "string"],
)
def test_invalid_values_are_not_echoed(daemon: Daemon, route: str, payload: object) -> None:
    with client(daemon.xdg) as c:
        r = c.post(route, json=payload)
    assert_error(r, 422, "invalid request")
    daemon.assert_up()


def test_50_mb_body(daemon: Daemon) -> None:
    big = "x" * (50 * 1024 * 1024)
    with client(daemon.xdg, timeout=120) as c:
        r = c.post("/v1/tool_result", json=tool_result(text=big, api_key=SECRET))
    body = assert_error(r, 422, "invalid request")
    assert body["detail"].startswith("api_key:")
    daemon.assert_up()


def test_declared_length_over_the_limit_is_refused_before_reading(daemon: Daemon) -> None:
    too_big = P.MAX_BODY_BYTES + 1
    head = (
        f"POST /v1/tool_result HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {too_big}\r\n\r\n"
    ).encode()
    resp = daemon.raw(head + b'{"text": "' + SECRET.encode())
    assert resp.startswith(b"HTTP/1.1 413"), resp[:200]
    assert b"body too large" in resp and SECRET.encode() not in resp
    daemon.assert_up()


def test_chunked_body_over_the_limit_is_refused(daemon: Daemon) -> None:
    def chunks() -> Iterator[bytes]:
        yield b'{"text": "' + SECRET.encode()
        block = b"y" * (1 << 20)
        for _ in range(P.MAX_BODY_BYTES // len(block) + 2):
            yield block

    with client(daemon.xdg, timeout=120) as c:
        try:
            r = c.post("/v1/tool_result", content=chunks())
        except httpx.HTTPError:
            r = None  # the daemon may answer and close while we are still sending
    if r is not None:
        assert_error(r, 413, "body too large")
    daemon.assert_up()


def test_truncated_request_then_close(daemon: Daemon) -> None:
    body = json.dumps(tool_result(text=SECRET)).encode()
    head = (
        f"POST /v1/tool_result HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body) + 500}\r\n\r\n"
    ).encode()
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(str(daemon.xdg.socket))
        s.sendall(head + body)
    daemon.assert_up()


def test_truncated_request_half_closed_gets_400(daemon: Daemon) -> None:
    """The client stops sending but still listens: the answer is possible, so it comes."""
    body = json.dumps(tool_result(text=SECRET)).encode()
    head = (
        f"POST /v1/tool_result HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body) + 500}\r\n\r\n"
    ).encode()
    resp = daemon.raw(head + body, half_close=True)
    if resp:  # h11 may also just close on EOF mid-body; then no answer is possible
        assert resp.startswith(b"HTTP/1.1 400"), resp[:200]
        assert SECRET.encode() not in resp
    daemon.assert_up()


def test_garbage_instead_of_http(daemon: Daemon) -> None:
    resp = daemon.raw(b"\x16\x03\x01 not http at all " + SECRET.encode() + b"\r\n\r\n")
    assert SECRET.encode() not in resp
    if resp:
        assert resp.startswith(b"HTTP/1.1 4"), resp[:200]
    daemon.assert_up()


def test_unknown_route_and_wrong_method(daemon: Daemon) -> None:
    with client(daemon.xdg) as c:
        assert_error(c.post("/v1/nope", json={"k": SECRET}), 404, "not found")
        assert_error(c.get("/v1/tool_result"), 404, "not found")
    daemon.assert_up()


def test_many_bad_requests_on_one_keep_alive_connection(daemon: Daemon) -> None:
    with client(daemon.xdg) as c:
        for i in range(50):
            r = c.post("/v1/turn_end", content=b"{" * (i + 1))
            assert r.status_code == 400
        assert c.get("/v1/health").status_code == 200
    daemon.assert_up()


# -- good frames, then the secret audit (runs last in this module) -------------------------------

REPLY_OF_ROUTE = {
    "POST /v1/sessions/start": P.SessionStartReply,
    "POST /v1/tool_result": P.ToolResultReply,
    "POST /v1/aux/result": P.AuxResultReply,
    "POST /v1/context": P.ContextReply,
    "POST /v1/recall": P.RecallReply,
    "POST /v1/capabilities/search": P.CapabilityReply,
}
ORDER = ["session_start", "prompt", "tool_result", "aux_result", "context", "llm_call"]


# The frames were captured with the skills under this root; the test lays the skill out anew
# under its own temp dir and rewrites the root, so a fresh machine needs no file in /tmp.
FRAMES_SKILL_ROOT = "/tmp/ctxwrap-frames"


def _golden_frames(skill_root: Path) -> list[dict[str, Any]]:
    docs = []
    for p in sorted(FRAMES.glob("*.json")):
        text = p.read_text().replace(FRAMES_SKILL_ROOT, str(skill_root))
        docs.append(json.loads(text) | {"name": p.stem})
    return docs


def _lay_out_frame_skills(skill_root: Path, docs: list[dict[str, Any]]) -> None:
    """Write each skill the catalog frame names, with the body the golden reply expects."""
    (catalog,) = (d for d in docs if d["name"] == "catalog")
    (reply,) = (d for d in docs if d["name"] == "capabilities_reply")
    for skill in catalog["frame"]["skills"]:
        path = Path(skill["file_path"])
        assert path.is_relative_to(skill_root), path
        path.parent.mkdir(parents=True, exist_ok=True)
        body = reply["frame"]["skill_body"] if path == Path(reply["frame"]["skill_path"]) else "x"
        path.write_text(
            f"---\nname: {skill['name']}\ndescription: {skill['description']}\n---\n{body}\n"
        )


def test_golden_request_frames_are_accepted(daemon: Daemon, tmp_path: Path) -> None:
    """Every bridge->daemon golden frame passes the real daemon's validation (no 400/422)."""
    docs = _golden_frames(tmp_path)
    _lay_out_frame_skills(tmp_path, docs)
    (golden_skill_reply,) = (d["frame"] for d in docs if d["name"] == "capabilities_reply")
    requests = [d for d in docs if d["direction"] == "bridge->daemon"]
    rank = {n: i for i, n in enumerate(ORDER)}
    requests.sort(key=lambda d: next((rank[k] for k in ORDER if d["name"].startswith(k)), 99))
    assert requests
    for d in requests:
        if "pid" in d["frame"]:
            # The captured pid is long gone: housekeeping (every 2 s) would end the session and
            # drop its catalog before the search frame on a slow machine. Ours is alive.
            d["frame"]["pid"] = os.getpid()
    with client(daemon.xdg) as c:
        for d in requests:
            method, path = d["route"].split(" ", 1)
            r = c.request(method, path, json=d["frame"])
            if d["model"] == "RecallRequest" and r.status_code == 404:
                continue  # the frame's handle belongs to the daemon that captured it
            assert r.status_code == 200, (d["name"], r.text)
            reply = REPLY_OF_ROUTE.get(d["route"], P.Ack)
            reply.model_validate(r.json())
            if d["name"] == "capabilities_search":
                got = r.json()
                assert got["skill_path"] == golden_skill_reply["skill_path"], got
                assert got["skill_body"].strip() == golden_skill_reply["skill_body"].strip()
    daemon.assert_up()


def test_zz_secret_was_written_nowhere(daemon: Daemon) -> None:
    daemon.assert_up()
    # The daemon log (stderr), events.jsonl, ctxwrap.db(-wal/-shm), raw store: every file.
    state = daemon.xdg.state
    files = [daemon.log, *(p for p in state.rglob("*") if p.is_file())]
    names = {p.name for p in files}
    assert "ctxwrap.db" in names and "daemon-stderr.log" in names, names
    for path in files:
        assert SECRET.encode() not in path.read_bytes(), f"secret found in {path}"
