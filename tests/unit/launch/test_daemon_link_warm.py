"""The proxy's daemon link is built at launch, not on the session's first request (issue 43).

httpx's transport costs ~50 ms of CPU (an SSL context, even for a Unix socket); the first
`/v1/sessions/start` of a `claude -p` or `codex exec` session paid it while the agent's first
request waited. The launchers' proxy build now warms the link (`DaemonLink.warm`) beside the
agent's start-up: the client exists and its connection is open before the first call.
"""

from __future__ import annotations

import socketserver
import threading
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

from ctxwrap.agents._proxy.daemon_link import DaemonLink


class _Daemon(socketserver.ThreadingUnixStreamServer):
    daemon_threads = True


def _serve(sock: Path) -> tuple[_Daemon, list[str]]:
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            return

        def address_string(self) -> str:
            return "uds"

        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            self.rfile.read(length)
            seen.append(f"{self.command} {self.path}")
            body = b'{"ok": true}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _answer

    server = _Daemon(str(sock), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, seen


def test_warm_builds_the_client_and_opens_its_connection(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    sock = run / "daemon.sock"
    server, seen = _serve(sock)
    try:
        link = DaemonLink(sock)
        link.warm()
        client = link._client
        assert client is not None and seen == ["GET /v1/health"]
        # the first real call reuses that client (and its open connection)
        assert link.call("/v1/sessions/start", {"session_id": "s"}, timeout=2) == {"ok": True}
        assert link._client is client and seen[-1] == "POST /v1/sessions/start"
    finally:
        server.shutdown()
        server.server_close()


def test_warm_fails_open(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    DaemonLink(run / "no.sock").warm()  # nothing listens: nothing raised
    DaemonLink(None).warm()


def test_the_daemon_client_loads_no_ca_bundle(tmp_path: Path, monkeypatch: Any) -> None:
    """The daemon speaks plain HTTP on a Unix socket: its client's SSL context trusts nothing
    and loads no CA bundle (httpx's default loads certifi's: ~50 ms of CPU at every proxy
    launch, beside the agent's first request). It still talks to the daemon."""
    import ssl

    from ctxwrap.client import make_client

    loaded: list[object] = []
    real = ssl.SSLContext.load_verify_locations

    def counting(self: ssl.SSLContext, *args: Any, **kw: Any) -> None:
        loaded.append(args or kw)
        real(self, *args, **kw)

    monkeypatch.setattr(ssl.SSLContext, "load_verify_locations", counting)
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    sock = run / "daemon.sock"
    server, seen = _serve(sock)
    try:
        with make_client(sock, timeout=2) as client:
            assert client.get("/v1/health").json() == {"ok": True}
        assert loaded == [] and seen == ["GET /v1/health"]
    finally:
        server.shutdown()
        server.server_close()
