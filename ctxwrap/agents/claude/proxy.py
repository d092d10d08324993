"""The loopback Anthropic Messages proxy that `ANTHROPIC_BASE_URL` points at.

It lives in the `ctxwrap claude` process (docs/architecture.md, "Claude Code"): its lifetime
is the session's, a daemon crash cannot take Claude Code's API path down with it, and the
credentials never leave the process that Claude Code handed them to.

- 127.0.0.1 only; a request must start with the per-launch secret path segment, else 404.
- Every method, path, query, header and body is forwarded unchanged, the response (SSE
  included) streamed back as it arrives — except the body of POST /v1/messages (and
  count_tokens), on which the session's frozen edits are applied.
- ``/<secret>/_ctxwrap/hook`` serves `ctxwrap hook claude`.
- Anything of ours that fails falls back to forwarding the original bytes.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import os
import secrets
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

from ctxwrap.agents.claude import anthropic_wire as wire
from ctxwrap.agents.claude.session import ClaudeSession, DaemonLink
from ctxwrap.agents.claude.upstream_aux import CREDENTIAL_HEADERS, UpstreamAux
from ctxwrap.engine.edits import Edit

DEFAULT_UPSTREAM = "https://api.anthropic.com"
HOOK_PATH = "/_ctxwrap/hook"
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)

JsonDict = dict[str, Any]


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = False

    def handle_error(self, request: Any, client_address: Any) -> None:
        return  # a client that went away mid-stream is normal; never print on the user's TTY


class ClaudeProxy:
    def __init__(
        self,
        *,
        upstream: str,
        state_dir: Path | None,
        socket_path: Path | None,
        start_info: JsonDict,
        daemon_start_argv: list[str] | None = None,
    ) -> None:
        self.upstream = upstream.rstrip("/")
        self.secret = secrets.token_urlsafe(24)
        self.state_dir = state_dir
        self.start_info = start_info
        self.daemon = DaemonLink(socket_path, daemon_start_argv)
        self.sessions: dict[str, ClaudeSession] = {}
        self._lock = threading.Lock()
        self._credentials: dict[str, str] = {}  # memory only: the aux backend's key
        self.client = httpx.Client(
            timeout=httpx.Timeout(connect=10.0, read=600.0, write=60.0, pool=10.0),
            follow_redirects=False,
        )
        self.aux = UpstreamAux(self.client, self.upstream, self.credentials, self._aux_model)
        self.httpd = _Server(("127.0.0.1", 0), _make_handler(self))
        self._thread: threading.Thread | None = None

    # -- lifecycle ------------------------------------------------------------------------------

    @property
    def port(self) -> int:
        return int(self.httpd.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/{self.secret}"

    @property
    def hook_url(self) -> str:
        return self.base_url + HOOK_PATH

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self.httpd.serve_forever,
            kwargs={"poll_interval": 0.2},
            name="ctxwrap-claude-proxy",
            daemon=True,
        )
        self._thread.start()

    def close(self) -> None:
        for sess in list(self.sessions.values()):
            sess.shutdown()
        if self._thread is not None:
            self.httpd.shutdown()
            self._thread.join(timeout=5)
        self.httpd.server_close()
        self.client.close()
        self.daemon.close()

    # -- sessions and credentials ---------------------------------------------------------------

    def credentials(self) -> dict[str, str]:
        with self._lock:
            return dict(self._credentials)

    def _aux_model(self) -> str | None:
        for sess in self.sessions.values():
            model = sess.cfg.get("aux_model")
            if isinstance(model, str) and model:
                return model
        return None

    def session(self, session_id: str, model: str | None = None) -> ClaudeSession:
        with self._lock:
            sess = self.sessions.get(session_id)
            if sess is None:
                info = dict(self.start_info)
                if model:
                    info["model"] = {"provider": "anthropic", "id": model}
                state = (
                    self.state_dir / "claude" / f"{session_id}.jsonl" if self.state_dir else None
                )
                sess = ClaudeSession(
                    session_id, daemon=self.daemon, state_file=state, aux=self.aux, start_info=info
                )
                self.sessions[session_id] = sess
            return sess

    def check_secret(self, path: str) -> str | None:
        """The path after the secret segment, or None for a request without the secret."""
        prefix, _, rest = path.lstrip("/").partition("/")
        if not hmac.compare_digest(prefix.encode(), self.secret.encode()):
            return None
        return "/" + rest

    def remember_credentials(self, headers: dict[str, str]) -> None:
        found = {k: v for k, v in headers.items() if k in CREDENTIAL_HEADERS}
        if "x-api-key" in found or "authorization" in found:
            with self._lock:
                self._credentials = found

    # -- request bodies -------------------------------------------------------------------------

    def edit_body(
        self, path: str, headers: dict[str, str], raw: bytes
    ) -> tuple[bytes, ClaudeSession | None, JsonDict | None, list[Edit]]:
        """The bytes to send upstream; the original bytes whenever ctxwrap cannot do better."""
        messages_call = wire.is_messages_call(path)
        if not (messages_call or wire.is_count_tokens(path)):
            return raw, None, None, []
        try:
            body = json.loads(raw)
        except ValueError:
            return raw, None, None, []
        if not isinstance(body, dict):
            return raw, None, None, []
        sid = wire.session_id_of(headers, body)
        if sid is None:
            return raw, None, None, []
        model = body.get("model") if isinstance(body.get("model"), str) else None
        sess = self.session(sid, model)
        try:
            applied = sess.prepare(body) if messages_call else sess.replay(body)
        except Exception:
            # Our side failed mid-request: keep replaying what is already frozen.
            try:
                body = json.loads(raw)
                applied = sess.replay(body)
            except Exception:
                return raw, sess, None, []
        if not applied:
            return raw, sess, body if messages_call else None, []
        return wire.encode_body(body), sess, body if messages_call else None, applied

    def handle_hook(self, raw: bytes) -> JsonDict:
        event = json.loads(raw)
        if not isinstance(event, dict) or not isinstance(event.get("session_id"), str):
            return {}
        sid = event["session_id"]
        if wire.session_id_of({"x-claude-code-session-id": sid}, {}) is None:
            return {}
        if event.get("hook_event_name") == "SessionStart":
            # lifecycle: registered at launch (launcher.session_start_hooks), listed while idle
            self.session(sid).ensure_registered()
            return {}
        return self.session(sid).handle_hook(event)


def _read_body(handler: BaseHTTPRequestHandler) -> bytes:
    if "chunked" in (handler.headers.get("Transfer-Encoding") or "").lower():
        out = bytearray()
        while True:
            size = int(handler.rfile.readline().split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while handler.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass
                return bytes(out)
            out += handler.rfile.read(size)
            handler.rfile.readline()
    length = int(handler.headers.get("Content-Length") or 0)
    return handler.rfile.read(length) if length else b""


def _make_handler(proxy: ClaudeProxy) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "ctxwrap-claude-proxy"

        def log_message(self, format: str, *args: Any) -> None:
            return  # never log: request lines and headers may carry credentials

        def _plain(self, status: int, data: bytes, content_type: str = "application/json") -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        def _handle(self) -> None:
            rest = proxy.check_secret(self.path)
            if rest is None:
                self.close_connection = True
                self._plain(404, b'{"error":"not found"}')
                return
            raw = _read_body(self)
            if rest.split("?", 1)[0] == HOOK_PATH and self.command == "POST":
                try:
                    out = proxy.handle_hook(raw)
                except Exception:
                    out = {}  # fail open: Claude Code keeps the original output
                self._plain(200, json.dumps(out).encode())
                return
            self._forward(rest, raw)

        def _forward(self, rest: str, raw: bytes) -> None:
            headers = {k.lower(): v for k, v in self.headers.items()}
            proxy.remember_credentials(headers)
            body_out: bytes = raw
            sess: ClaudeSession | None = None
            body: JsonDict | None = None
            applied: list[Edit] = []
            if self.command == "POST":
                body_out, sess, body, applied = proxy.edit_body(rest, headers, raw)
            out_headers = [(k, v) for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP]
            try:
                req = proxy.client.build_request(
                    self.command,
                    proxy.upstream + rest,
                    headers=out_headers,
                    content=body_out
                    if (body_out or self.command in ("POST", "PUT", "PATCH"))
                    else None,
                )
                resp = proxy.client.send(req, stream=True)
            except httpx.HTTPError as exc:
                err = {
                    "type": "error",
                    "error": {
                        "type": "api_error",
                        "message": f"ctxwrap proxy: upstream unreachable ({type(exc).__name__})",
                    },
                }
                self._plain(502, json.dumps(err).encode())
                return
            reader = None
            tag_round = None
            if body is not None and resp.status_code == 200:
                streaming = "text/event-stream" in resp.headers.get("content-type", "")
                reader = wire.UsageReader(
                    streaming, resp.headers.get("content-encoding", "").lower()
                )
                if sess is not None:
                    # The read-like calls of this message are tagged as one batch.
                    tag_round = sess.open_round()
                    reader.on_tool_use = lambda cid, name: sess.round_tool_use(tag_round, cid, name)
                    reader.on_end = lambda: sess.round_ended(tag_round)
            try:
                self.send_response(resp.status_code)
                for k, v in resp.headers.multi_items():
                    if k.lower() not in HOP_BY_HOP:
                        self.send_header(k, v)
                length = resp.headers.get("content-length")
                chunked = length is None and self.command != "HEAD"
                if length is not None:
                    self.send_header("Content-Length", length)
                elif chunked:
                    self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                if self.command != "HEAD":
                    for chunk in resp.iter_raw():
                        if not chunk:
                            continue
                        if reader is not None:
                            reader.feed(chunk)
                        if chunked:
                            self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                        else:
                            self.wfile.write(chunk)
                        self.wfile.flush()
                    if chunked:
                        self.wfile.write(b"0\r\n\r\n")
                        self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError, httpx.HTTPError):
                self.close_connection = True
            finally:
                resp.close()
            if sess is not None and body is not None:
                usage = reader.finish() if reader is not None else None
                if tag_round is not None:
                    sess.round_ended(tag_round)  # a stream cut short ends its round too
                _background(lambda: sess.record_call(body, applied, usage))

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = _handle

    return Handler


def _background(fn: Callable[[], None]) -> None:
    def run() -> None:
        with contextlib.suppress(Exception):
            fn()

    threading.Thread(target=run, name="ctxwrap-claude-stats", daemon=True).start()


UPSTREAM_OVERRIDE = "CTXWRAP_CLAUDE_UPSTREAM"


def upstream_from_env(env: dict[str, str] | None = None) -> str:
    """Where the proxy forwards: the user's own ANTHROPIC_BASE_URL, else the public endpoint.

    ``CTXWRAP_CLAUDE_UPSTREAM`` overrides both and stands for Anthropic's own endpoint (a
    pass-through egress proxy, or the scripted server in tests): Claude Code then behaves as
    it does toward api.anthropic.com (launcher.first_party_env).
    """
    env = env if env is not None else dict(os.environ)
    value = env.get(UPSTREAM_OVERRIDE, "").strip() or env.get("ANTHROPIC_BASE_URL", "").strip()
    return value.rstrip("/") if value else DEFAULT_UPSTREAM
