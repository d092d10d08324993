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
import os
import secrets
import socket
import struct
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Literal, Protocol

import httpx

from ctxwrap.agents._proxy.frozen import flush_cache_states
from ctxwrap.launch.tls import upstream_verify

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


NODELAY = (socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


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
        """After a 2xx response was passed on (run off the request thread)."""

    def failed(self, exchange: Exchange, status: int | None) -> None:
        """After a try that got no answer: an error status passed on as it came, or None for
        an upstream connection that failed (run off the request thread). No LLM call."""


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = False

    def __init__(
        self,
        address: tuple[str, int],
        handler: type[BaseHTTPRequestHandler],
        listener: socket.socket | None = None,
    ) -> None:
        super().__init__(address, handler, bind_and_activate=listener is None)
        if listener is not None:  # bound and listening already (the launcher's, before the agent)
            self.socket.close()
            self.socket = listener
            self.server_address = listener.getsockname()[:2]
        self.to_reset: set[Any] = set()
        self._reset_lock = threading.Lock()

    def reset_when_done(self, request: Any) -> None:
        with self._reset_lock:
            self.to_reset.add(request)

    def shutdown_request(self, request: Any) -> None:
        with self._reset_lock:
            reset = request in self.to_reset
            self.to_reset.discard(request)
        if reset:
            # An upstream connection that failed: the agent's connection fails the same way
            # (a reset, no FIN and no response of ours), so its own network handling applies.
            with contextlib.suppress(OSError):
                request.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.close_request(request)
            return
        super().shutdown_request(request)

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


SECRET_HEADER = "x-ctxwrap-proxy"  # the "header" door's; never forwarded
# How a request shows it is the agent's (docs/architecture.md, "the proxy's door"):
# - path: the URL starts with the per-launch secret segment (Claude Code: it never prints it);
# - header: the secret in SECRET_HEADER, the URL path the upstream's own (a Codex custom
#   provider sends it from `env_http_headers`): an error line that prints the URL shows no secret;
# - peer: the connecting socket belongs to this user and the request is no browser's (the
#   built-in Codex provider, which takes no header of ours); Linux (/proc/net/tcp) only.
Door = Literal["path", "header", "peer"]


class LoopbackProxy:
    """The HTTP server on 127.0.0.1 with the per-launch secret, forwarding through `adapter`."""

    def __init__(
        self,
        adapter: ProxyAdapter,
        *,
        name: str,
        door: Door = "path",
        base_path: str = "",
        listener: socket.socket | None = None,
        secret: str | None = None,
    ) -> None:
        """`listener` and `secret`: the port and secret the launcher gave the agent before this
        proxy existed (launch/listener.py: the agent starts while ctxwrap imports)."""
        self.adapter = adapter
        self.name = name
        self.door: Door = door if door != "peer" or _PROC_TCP.is_file() else "path"
        self.base_path = "/" + base_path.strip("/") if base_path.strip("/") else ""
        self.secret = secret or secrets.token_urlsafe(24)
        self.client = httpx.Client(
            timeout=httpx.Timeout(connect=10.0, read=600.0, write=60.0, pool=10.0),
            follow_redirects=False,
            # Nagle would hold a request's last partial segment until the upstream's delayed
            # ACK (up to 40 ms); the agents' own clients send without it
            # verify: the CA context a launcher built beside the agent's start (launch/tls.py),
            # else httpx's own default, the same context
            transport=httpx.HTTPTransport(socket_options=[NODELAY], verify=upstream_verify()),
        )
        handler = _make_handler(self)
        if listener is not None:
            self.httpd = _Server(listener.getsockname()[:2], handler, listener)
        else:
            self.httpd = _bind_server(handler)
        self._thread: threading.Thread | None = None
        # An upstream that refuses connections: the proxy stops listening until it is back.
        self._outage_lock = threading.Lock()
        self._listening = True
        self._closing = threading.Event()
        self._idle: set[Any] = set()  # client connections between requests (keep-alive)
        self._idle_lock = threading.Lock()
        # the uid at the other end of each client connection (the peer door), while it lives
        self._peer_uids: weakref.WeakKeyDictionary[Any, int | None] = weakref.WeakKeyDictionary()

    @property
    def port(self) -> int:
        return int(self.httpd.server_address[1])

    @property
    def base_url(self) -> str:
        if self.door == "path":
            return f"http://127.0.0.1:{self.port}/{self.secret}"
        return f"http://127.0.0.1:{self.port}{self.base_path}"

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self.httpd.serve_forever,
            # close() waits for the loop to see its stop: at the agent's exit the user waits too
            kwargs={"poll_interval": 0.05},
            name=f"ctxwrap-{self.name}-proxy",
            daemon=True,
        )
        self._thread.start()

    def upstream_refused(self, url: str) -> None:
        """The upstream refused a connection (or could not be reached at all): stop listening
        until it answers again. The agent's next tries then fail to connect, as they would
        against its own upstream — Codex waits for the network instead of spending its retry
        budget, Claude Code says "Unable to connect to API (ConnectionRefused)"."""
        with self._outage_lock:
            if not self._listening or self._closing.is_set():
                return
            self._listening = False
            self.httpd.shutdown()  # serve_forever runs on its own thread: returns when it stops
            with contextlib.suppress(OSError):
                self.httpd.socket.shutdown(socket.SHUT_RDWR)  # refused; the port stays bound
            with self._idle_lock:
                idle = list(self._idle)
            for conn in idle:  # a pooled keep-alive connection would not see the refusal
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)
        threading.Thread(
            target=self._wait_for_upstream, args=(url,), name=f"ctxwrap-{self.name}-outage"
        ).start()

    def upstream_down(self, url: str) -> bool:
        """After a reset or a cut: whether the upstream now refuses connections (it went
        down, as a crashing server resets its connections and then refuses)."""
        origin = httpx.URL(url).copy_with(path="/", query=None, fragment=None)
        try:
            self.client.head(origin, timeout=2.0)
        except httpx.HTTPError as exc:
            return _refused(exc)
        except Exception:
            return False
        return False

    def check_upstream(self, url: str) -> None:
        """After a reset or a cut, off the request thread (the agent sees its connection
        break at once, as it would): an upstream now refusing connections went down."""

        def check() -> None:
            if self.upstream_down(url):
                self.upstream_refused(url)

        in_background(check, self.name)

    def _wait_for_upstream(self, url: str) -> None:
        while not self._closing.wait(0.5):
            if not self.upstream_down(url):
                break
        with self._outage_lock:
            if self._closing.is_set():
                return
            try:
                self.httpd.socket.listen(self.httpd.request_queue_size)
            except OSError:
                return  # cannot listen again: the agent sees its connection refused, as now
            self._listening = True
            self.start()

    def close(self) -> None:
        self._closing.set()
        with self._outage_lock:
            listening = self._listening
        if self._thread is not None and listening:
            self.httpd.shutdown()
            self._thread.join(timeout=5)
        self.httpd.server_close()
        self.client.close()
        flush_cache_states()  # the sessions' last cache states are on disk when we return

    def admit(self, path: str, headers: dict[str, str], connection: Any) -> str | None:
        """The path to forward (after the secret segment or the base path), or None for a
        request that did not come through the door."""
        if self.door == "path":
            return self.check_secret(path)
        base = self.base_path
        if base and not (path == base or path.startswith((base + "/", base + "?"))):
            return None
        rest = path[len(base) :] or "/"
        if self.door == "header":
            given = headers.get(SECRET_HEADER, "")
            return rest if hmac.compare_digest(given.encode(), self.secret.encode()) else None
        # peer: a browser says where it comes from (a page's fetch, a rebound name); Codex
        # sends none of these
        if "origin" in headers or "sec-fetch-site" in headers or "sec-fetch-mode" in headers:
            return None
        if headers.get("host") not in (f"127.0.0.1:{self.port}", f"localhost:{self.port}"):
            return None
        # one look-up per connection, not per request: the peer of a keep-alive connection
        # does not change
        if connection in self._peer_uids:
            uid = self._peer_uids[connection]
        else:
            uid = self._peer_uids[connection] = peer_uid(connection)
        return rest if uid == os.getuid() else None

    def check_secret(self, path: str) -> str | None:
        """The path after the secret segment, or None for a request without the secret."""
        prefix, _, rest = path.lstrip("/").partition("/")
        if not hmac.compare_digest(prefix.encode(), self.secret.encode()):
            return None
        return "/" + rest


_PROC_TCP = Path("/proc/net/tcp")


def peer_uid(connection: Any) -> int | None:
    """The uid owning the other end of a loopback TCP connection (Linux: its row in
    /proc/net/tcp, the client's address as local and ours as remote); None when unknown."""
    try:
        host, port = connection.getpeername()[:2]
        our_host, our_port = connection.getsockname()[:2]
        local = f"{_hex_ipv4(host)}:{port:04X}"
        remote = f"{_hex_ipv4(our_host)}:{our_port:04X}"
        with _PROC_TCP.open(encoding="ascii") as fh:
            next(fh, None)
            for line in fh:
                parts = line.split()
                if len(parts) > 7 and parts[1] == local and parts[2] == remote:
                    return int(parts[7])
    except (OSError, ValueError):
        return None
    return None


def _hex_ipv4(host: str) -> str:
    """An IPv4 address as /proc/net/tcp writes it (the 32-bit value in host byte order)."""
    return f"{struct.unpack('=I', socket.inet_aton(host))[0]:08X}"


def _refused(exc: Exception) -> bool:
    """A connection to the upstream that could not be made (refused, unreachable, timed out)."""
    return isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout))


def _bind_server(handler: type[BaseHTTPRequestHandler]) -> _Server:
    """A server on a free loopback port bound by number: a socket bound so keeps its port
    when it stops listening (`upstream_refused`) and can listen on it again."""
    for _ in range(20):
        probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
        probe.close()
        try:
            return _Server(("127.0.0.1", port), handler)
        except OSError:
            continue  # taken in between
    return _Server(("127.0.0.1", 0), handler)


def _make_handler(proxy: LoopbackProxy) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = f"ctxwrap-{proxy.name}-proxy"

        def log_message(self, format: str, *args: Any) -> None:
            return  # never log: request lines and headers may carry credentials

        def setup(self) -> None:
            super().setup()
            # headers, then each SSE frame as it comes: no Nagle wait between small writes
            with contextlib.suppress(OSError):
                self.connection.setsockopt(*NODELAY)
            with proxy._idle_lock:
                proxy._idle.add(self.connection)

        def finish(self) -> None:
            with proxy._idle_lock:
                proxy._idle.discard(self.connection)
            super().finish()

        def handle_one_request(self) -> None:
            try:
                super().handle_one_request()
            finally:
                with proxy._idle_lock:
                    if not self.close_connection:
                        proxy._idle.add(self.connection)

        def _plain(self, status: int, data: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        def _handle(self) -> None:
            with proxy._idle_lock:
                proxy._idle.discard(self.connection)
            headers = {k.lower(): v for k, v in self.headers.items()}
            rest = proxy.admit(self.path, headers, self.connection)
            if rest is None:
                self.close_connection = True
                self._plain(404, b'{"error":"not found"}')
                return
            headers.pop(SECRET_HEADER, None)
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
                if k.lower() not in HOP_BY_HOP and k.lower() != SECRET_HEADER
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
                # Refused, reset, timed out: no answer to pass on, so none of ours either.
                if _refused(exc):
                    proxy.upstream_refused(exchange.upstream_url)
                else:
                    proxy.check_upstream(exchange.upstream_url)
                self._fail_connection()
                in_background(lambda: proxy.adapter.failed(exchange, None), proxy.name)
                return
            tap = None
            with contextlib.suppress(Exception):
                tap = proxy.adapter.tap(exchange, resp.status_code, resp.headers)
            try:
                self._relay(resp, tap)
            except httpx.HTTPError:
                self._fail_connection()  # the upstream stream broke: break this one alike
                proxy.check_upstream(exchange.upstream_url)
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True
            finally:
                resp.close()
            if 200 <= resp.status_code < 300:
                in_background(lambda: proxy.adapter.finished(exchange, tap), proxy.name)
            else:
                status = resp.status_code
                in_background(lambda: proxy.adapter.failed(exchange, status), proxy.name)

        def _fail_connection(self) -> None:
            self.close_connection = True
            with contextlib.suppress(Exception):
                self.wfile.flush()
            if isinstance(self.server, _Server):
                self.server.reset_when_done(self.connection)

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
