"""The proxy's door, opened before the proxy exists: the agent starts while ctxwrap imports.

Importing the proxy (httpx, the edit engine, the digesters, pydantic) and building it costs
~0.6 s of a 2-core machine; Claude Code and Codex need only its address and secret to start.
So a launcher binds the loopback port and draws the secret first (standard library only),
starts the agent with them, and builds the proxy on that socket beside the agent's own
start-up (`ProxySetup`). A request the agent sends before then waits in the socket's backlog
(the port listens from the first instant: never refused), and is served once the proxy is up.
"""

from __future__ import annotations

import secrets
import socket
import sys
import threading
from collections.abc import Callable
from typing import Any, Protocol

BACKLOG = 64  # the agent's connections that may wait while the proxy is built


class Listener:
    """A listening socket on 127.0.0.1 and the per-launch secret (`secrets`, 32 characters)."""

    def __init__(self) -> None:
        self.sock = bind_loopback()
        self.secret = secrets.token_urlsafe(24)

    @property
    def port(self) -> int:
        return int(self.sock.getsockname()[1])

    def close(self) -> None:
        self.sock.close()


def bind_loopback() -> socket.socket:
    """A listening socket on a free loopback port, bound by number as the proxy's own server
    binds (agents/_proxy/server.py): a socket bound so keeps its port when it stops listening
    during an upstream outage, and can listen on it again."""
    for _ in range(20):
        probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
        probe.close()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            sock.close()
            continue  # taken in between
        sock.listen(BACKLOG)
        return sock
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(BACKLOG)
    return sock


def skip_httpx_cli() -> None:
    """httpx imports its command-line client (click, rich, pygments: ~0.1 s) when they are
    installed, as they are with ctxwrap; no proxy uses it. Called before the proxy's imports."""
    import types

    if "httpx" not in sys.modules and "httpx._main" not in sys.modules:
        cli = types.ModuleType("httpx._main")
        cli.main = lambda: None  # type: ignore[attr-defined]
        sys.modules["httpx._main"] = cli


class ProxySetup:
    """Builds and starts the proxy on a thread once the agent runs (`start`, run_child's
    `on_started`); `get` waits for it, `finish` closes it when the agent has exited.

    Fail open: when `build` raises, one warning on stderr and `fallback` serves the agent's
    requests as plain forwarding on the same socket — the agent, already running with our
    address, still reaches its upstream, as without ctxwrap.
    """

    def __init__(
        self, build: Callable[[], Closable], what: str, fallback: Callable[[], Closable]
    ) -> None:
        self._build = build
        self._fallback = fallback
        self._what = what
        self._done = threading.Event()
        self._value: Closable | None = None
        self._plain: Closable | None = None
        self.thread = threading.Thread(target=self._run, name="ctxwrap-proxy-setup", daemon=True)

    def start(self) -> None:
        # The upstream's CA bundle loads beside the imports (GIL released): launch/tls.py.
        from ctxwrap.launch.tls import build_beside

        build_beside()
        self.thread.start()

    def _run(self) -> None:
        try:
            skip_httpx_cli()
            self._value = self._build()
        except Exception as exc:  # anything of ours unavailable: the agent runs on without us
            sys.stderr.write(
                f"ctxwrap: warning: cannot set up the {self._what} proxy "
                f"({type(exc).__name__}: {exc}); running {self._what} without savings\n"
            )
            try:
                self._plain = self._fallback()
            except Exception:
                return  # nothing serves the port: the agent reports its connection refused
        finally:
            self._done.set()

    def get(self, timeout: float | None = None) -> Any:
        """The proxy once built (None: it failed, or is not built within `timeout`)."""
        self._done.wait(timeout)
        return self._value

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def finish(self) -> Any:
        """After the agent exited: the proxy, closed (its sessions' last records sent), or
        None when it was not up — then no request of the agent's can have reached it, and the
        setup thread (a daemon thread) is left to the process's exit instead of waited for."""
        if not self._done.is_set():
            return None
        for proxy in (self._value, self._plain):
            if proxy is not None:
                proxy.close()
        return self._value


class Closable(Protocol):
    def close(self) -> None: ...


PRELOAD_AFTER_S = 2.0


# What the exit line runs (launch/exit_line.py): the figures' compute and the line's words. The
# `ctxwrap.stats` package alone imports none of its modules.
EXIT_LINE_MODULES = (
    "ctxwrap.stats.compute",
    "ctxwrap.state.store",
    "ctxwrap.headline",
    "ctxwrap.statusline",
    "ctxwrap.launch.exit_line",
    "shlex",
    "textwrap",
    "tomllib",
)


def preload_exit_line(after_s: float = PRELOAD_AFTER_S) -> None:
    """The exit line's figures come from `ctxwrap.stats.compute` (~50 ms of imports): imported
    while the agent runs — `after_s` later, past its start-up and first request, which it would
    only slow on a 2-core machine — not after it has exited, when the user waits."""

    def load() -> None:
        import contextlib
        import importlib

        for name in EXIT_LINE_MODULES:
            with contextlib.suppress(Exception):
                importlib.import_module(name)

    timer = threading.Timer(after_s, load)
    timer.daemon = True
    timer.start()
