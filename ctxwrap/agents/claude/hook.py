"""Claude Code's hooks under `ctxwrap claude`: `HookServer` (the `"type": "http"` hooks, in the
launch's own process) and `ctxwrap hook claude`, the command hook where HTTP hooks cannot serve.

The command is a thin client, standard library only (it starts once per tool call): it hands
the event to the proxy of its `ctxwrap claude` launch (``CTXWRAP_CLAUDE_HOOK``) and prints the answer. Any
failure — no proxy, a deadline, garbage — prints nothing and exits 0: Claude Code then keeps
the tool's original output (fail open).
"""

from __future__ import annotations

import hmac
import json
import os
import sys
from collections.abc import Callable
from typing import IO, Any
from urllib.parse import urlsplit

HOOK_ENV = "CTXWRAP_CLAUDE_HOOK"
# The proxy's own bash deadline is 15 s; Claude Code's hook timeout (settings) is 30 s.
DEADLINE_S = {"Bash": 20.0, "Write": 22.0}
DEFAULT_DEADLINE_S = 3.0
MAX_EVENT_BYTES = 64 << 20


def run_hook(stdin: IO[bytes], stdout: IO[str], env: dict[str, str] | None = None) -> int:
    env = dict(os.environ) if env is None else env
    url = env.get(HOOK_ENV, "")
    try:
        import http.client

        raw = stdin.read(MAX_EVENT_BYTES)
        if not url:
            return 0
        event = json.loads(raw)
        tool = event.get("tool_name") if isinstance(event, dict) else None
        # SessionStart (run in the background) may come while the proxy is still being built
        deadline = DEADLINE_S.get(tool, DEFAULT_DEADLINE_S) if isinstance(tool, str) else 3.0
        parts = urlsplit(url)
        if parts.hostname != "127.0.0.1" or parts.port is None:
            return 0  # never send a tool's output anywhere but our own loopback proxy
        conn = http.client.HTTPConnection("127.0.0.1", parts.port, timeout=deadline)
        try:
            conn.request("POST", parts.path, body=raw, headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            data = resp.read()
        finally:
            conn.close()
        if resp.status != 200:
            return 0
        answer = json.loads(data)
        if isinstance(answer, dict) and answer:
            stdout.write(json.dumps(answer))
            stdout.flush()
    except Exception:
        pass
    return 0


def main() -> int:
    return run_hook(sys.stdin.buffer, sys.stdout)


# -- the HTTP hooks' own door, in `ctxwrap claude`'s process ---------------------------------

SECRET_HEADER = "x-ctxwrap-hook"
HOOK_URL_PATH = "/hook"
# How long a hook that arrives while the proxy is still being built waits for it (Claude
# Code's own wait is 3 s for a Read; the proxy is up within ~1 s of the launch).
SETUP_WAIT_S = 2.5


class HookServer:
    """Claude Code's `"type": "http"` hooks, answered on a loopback port of their own.

    Not on the proxy's port, whose URL holds the per-launch secret:
    - Claude Code 2.1.197 writes the URL of an HTTP hook that answered something (a digest) in
      its transcript, and shows it in a failed hook's error. This URL holds no secret; the
      secret travels in a header (the hook's `headers`: sent, never recorded or shown).
    - During an upstream outage the proxy stops listening (the agent's requests are refused as
      by its upstream); a hook refused so would show "hook error". This port always answers.
    - It listens from before Claude Code starts; a hook that comes while the proxy is being
      built waits for it (bounded), and any failure of ours answers 200 with nothing to say:
      Claude Code keeps the tool's own output, and shows no error.
    """

    def __init__(self) -> None:
        from ctxwrap.launch.listener import Listener

        self.listener = Listener()
        self._httpd: Any = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.listener.port}{HOOK_URL_PATH}"

    def hook_entry(self) -> dict[str, Any]:
        """The `url` and `headers` of our entries in Claude Code's settings."""
        return {"url": self.url, "headers": {SECRET_HEADER: self.listener.secret}}

    def serve(self, proxy: Callable[[float], Any]) -> None:
        """Answer hooks with `proxy(timeout)`'s `handle_hook` (None: nothing to say), from now
        on, on a thread."""
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        secret = self.listener.secret.encode()

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return  # never on the user's terminal

            def do_POST(self) -> None:
                given = (self.headers.get(SECRET_HEADER) or "").encode()
                if self.path != HOOK_URL_PATH or not hmac.compare_digest(given, secret):
                    self.close_connection = True
                    self._send(404, b"")
                    return
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(min(length, MAX_EVENT_BYTES))
                self._send(200, _answer(proxy, raw))

            def _send(self, status: int, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request: Any, client_address: Any) -> None:
                return  # a hook that went away: nothing to say, nothing to print

        httpd = Server(self.listener.sock.getsockname()[:2], Handler, bind_and_activate=False)
        httpd.socket.close()
        httpd.socket = self.listener.sock
        self._httpd = httpd
        threading.Thread(
            target=httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="ctxwrap-claude-hooks",
            daemon=True,
        ).start()

    def close(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
        self.listener.close()


def _answer(proxy: Callable[[float], Any], raw: bytes) -> bytes:
    """The hook's answer: the proxy's, or an empty body (nothing to say) on any failure.
    Empty, not `{}`: Claude Code records an HTTP hook that answered something."""
    try:
        built = proxy(SETUP_WAIT_S)
        out = built.handle_hook(raw) if built is not None else {}
    except Exception:
        out = {}
    return json.dumps(out).encode() if out else b""
