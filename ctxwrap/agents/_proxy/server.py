"""The loopback HTTP server every agent proxy runs on: the secret path, forwarding, SSE passthrough.

The rules (docs/architecture.md, "Claude Code" and "Codex CLI"): 127.0.0.1 only; a request
must start with the per-launch secret path segment, else 404; every method, path, query,
header and body is forwarded unchanged and the response (SSE included) streamed back as it
arrives — except the bodies an adapter edits; credentials pass through and are kept in memory
only; nothing is ever logged; anything of ours that fails falls back to the original bytes.

An agent adapter supplies a :class:`ProxyAdapter` (which requests it answers itself, which
bodies it edits, which response it reads, what it does afterwards); the Claude Code and Codex
proxies are both built on this module.
"""

from __future__ import annotations

import contextlib
import hmac
import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

import httpx

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


class ResponseTap(Protocol):
    """Sees a response's bytes as they pass (usage, tool calls); must never raise."""

    def feed(self, chunk: bytes) -> None: ...


@dataclass
class Exchange:
    """One forwarded request, as the adapter shaped it."""

    body: bytes  # what goes upstream
    upstream_url: str
    context: Any = None  # the adapter's own, handed back in `tap` and `finished`
    # headers the adapter sets (lower-case name → value); every other header goes as sent
    header_overrides: dict[str, str] = field(default_factory=dict)


class ProxyAdapter(Protocol):
    def refuse(self, method: str, rest: str, headers: dict[str, str]) -> tuple[int, bytes] | None:
        """A status and JSON body to answer without forwarding (None: forward)."""

    def answer(self, method: str, rest: str, raw: bytes) -> tuple[int, bytes] | None:
        """A status and JSON body for a request of ours (the Claude hook); None: forward it."""

    def prepare(self, method: str, rest: str, headers: dict[str, str], raw: bytes) -> Exchange:
        """The bytes and URL to send upstream; the original bytes whenever it cannot do better."""

    def tap(self, exchange: Exchange, status: int, headers: httpx.Headers) -> ResponseTap | None:
        """A reader for this response's bytes, or None."""

    def finished(self, exchange: Exchange, tap: ResponseTap | None) -> None:
        """After the response was passed on (run off the request thread)."""

    def unreachable(self, exc: Exception) -> bytes:
        """The API-shaped JSON error body of a 502 when the upstream cannot be reached."""


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = False

    def handle_error(self, request: Any, client_address: Any) -> None:
        return  # a client that went away mid-stream is normal; never print on the user's TTY


def read_body(handler: BaseHTTPRequestHandler) -> bytes:
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


class LoopbackProxy:
    """The HTTP server on 127.0.0.1 with the per-launch secret, forwarding through `adapter`."""

    def __init__(self, adapter: ProxyAdapter, *, name: str) -> None:
        self.adapter = adapter
        self.name = name
        self.secret = secrets.token_urlsafe(24)
        self.client = httpx.Client(
            timeout=httpx.Timeout(connect=10.0, read=600.0, write=60.0, pool=10.0),
            follow_redirects=False,
        )
        self.httpd = _Server(("127.0.0.1", 0), _make_handler(self))
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self.httpd.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/{self.secret}"

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self.httpd.serve_forever,
            kwargs={"poll_interval": 0.2},
            name=f"ctxwrap-{self.name}-proxy",
            daemon=True,
        )
        self._thread.start()

    def close(self) -> None:
        if self._thread is not None:
            self.httpd.shutdown()
            self._thread.join(timeout=5)
        self.httpd.server_close()
        self.client.close()

    def check_secret(self, path: str) -> str | None:
        """The path after the secret segment, or None for a request without the secret."""
        prefix, _, rest = path.lstrip("/").partition("/")
        if not hmac.compare_digest(prefix.encode(), self.secret.encode()):
            return None
        return "/" + rest


def _make_handler(proxy: LoopbackProxy) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = f"ctxwrap-{proxy.name}-proxy"

        def log_message(self, format: str, *args: Any) -> None:
            return  # never log: request lines and headers may carry credentials

        def _plain(self, status: int, data: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
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
            headers = {k.lower(): v for k, v in self.headers.items()}
            refused = proxy.adapter.refuse(self.command, rest, headers)
            if refused is not None:
                self.close_connection = True
                self._plain(*refused)
                return
            raw = read_body(self)
            local = proxy.adapter.answer(self.command, rest, raw)
            if local is not None:
                self._plain(*local)
                return
            exchange = proxy.adapter.prepare(self.command, rest, headers, raw)
            overrides = exchange.header_overrides
            out_headers = [
                (k, overrides.get(k.lower(), v))
                for k, v in self.headers.items()
                if k.lower() not in HOP_BY_HOP
            ]
            try:
                req = proxy.client.build_request(
                    self.command,
                    exchange.upstream_url,
                    headers=out_headers,
                    content=exchange.body
                    if (exchange.body or self.command in ("POST", "PUT", "PATCH"))
                    else None,
                )
                resp = proxy.client.send(req, stream=True)
            except httpx.HTTPError as exc:
                self._plain(502, proxy.adapter.unreachable(exc))
                return
            tap = None
            with contextlib.suppress(Exception):
                tap = proxy.adapter.tap(exchange, resp.status_code, resp.headers)
            try:
                self._relay(resp, tap)
            except (BrokenPipeError, ConnectionResetError, httpx.HTTPError):
                self.close_connection = True
            finally:
                resp.close()
            in_background(lambda: proxy.adapter.finished(exchange, tap), proxy.name)

        def _relay(self, resp: httpx.Response, tap: ResponseTap | None) -> None:
            self.send_response(resp.status_code)
            for k, v in resp.headers.multi_items():
                if k.lower() not in HOP_BY_HOP:
                    self.send_header(k, v)
            length = resp.headers.get("content-length")
            # a tap may change what the agent reads of a stream (in_step.py: the usage of one
            # response): its length is then unknown ahead, so it goes chunked
            rewrite = getattr(tap, "rewrite", None) if self.command != "HEAD" else None
            if rewrite is not None:
                length = None
            chunked = length is None and self.command != "HEAD"
            if length is not None:
                self.send_header("Content-Length", length)
            elif chunked:
                self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            if self.command == "HEAD":
                return
            # a failing rewrite passes the chunk as it came
            for chunk in resp.iter_raw():
                if not chunk:
                    continue
                if tap is not None:
                    with contextlib.suppress(Exception):
                        tap.feed(chunk)
                if rewrite is not None:
                    try:
                        chunk = rewrite(chunk)
                    except Exception:
                        rewrite = None
                    if not chunk:
                        continue
                if chunked:
                    self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                else:
                    self.wfile.write(chunk)
                self.wfile.flush()
            if rewrite is not None:
                flush = getattr(tap, "flush", None)
                rest = flush() if flush is not None else b""
                if rest:
                    self.wfile.write(f"{len(rest):x}\r\n".encode() + rest + b"\r\n")
            if chunked:
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = _handle

    return Handler


def in_background(fn: Callable[[], None], name: str) -> None:
    def run() -> None:
        with contextlib.suppress(Exception):
            fn()

    threading.Thread(target=run, name=f"ctxwrap-{name}-after", daemon=True).start()
