"""The proxy side of the daemon socket: deadlines, fail-open, revival (every adapter's link)."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

JsonDict = dict[str, Any]


class DaemonLink:
    """Calls to the daemon over its socket; any failure is None (fail open).

    After a timeout every call is skipped for 5 s, so a hung daemon costs one deadline, not
    one per request (the bridge's rule).
    """

    def __init__(self, socket_path: Path | None, revive_argv: list[str] | None = None) -> None:
        self.socket_path = socket_path
        # Like the bridge: nobody listening → start a daemon (detached, at most every 10 s);
        # the pidfile lock makes concurrent starts safe. None: never start one.
        self.revive_argv = revive_argv
        self._last_revive = float("-inf")
        self._client: Any = None
        self._suspended_until = 0.0
        self._lock = threading.Lock()
        # Registers the session again (True when the daemon took it): a daemon that does not
        # know the session answers 409 (a wiped or another state dir), as the bridge handles.
        self.on_unknown_session: Callable[[], bool] | None = None

    def _revive(self) -> None:
        now = time.monotonic()
        if self.revive_argv is None or now - self._last_revive < 10.0:
            return
        self._last_revive = now
        import subprocess

        with contextlib.suppress(OSError):
            subprocess.Popen(
                self.revive_argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
                close_fds=True,
            )

    def _get_client(self, timeout: float) -> Any:
        with self._lock:
            if self._client is None:
                from ctxwrap.client import make_client

                self._client = make_client(self.socket_path, timeout=timeout)
            return self._client

    def warm(self, timeout: float = 1.5) -> None:
        """Build the client and open its connection now (the launch's setup thread), not on
        the session's first request: httpx's transport alone is ~50 ms of CPU (an SSL
        context, even for a Unix socket), paid while the agent's first request waited."""
        if self.socket_path is None:
            return
        with contextlib.suppress(Exception):
            self._get_client(timeout).get("/v1/health", timeout=timeout)

    def call(
        self, path: str, body: JsonDict, timeout: float, *, retry: bool = True
    ) -> JsonDict | None:
        if self.socket_path is None or time.monotonic() < self._suspended_until:
            return None
        import httpx

        client = self._get_client(timeout)
        try:
            r = client.post(path, json=body, timeout=timeout)
        except httpx.TimeoutException:
            self._suspended_until = time.monotonic() + 5.0
            return None
        except httpx.ConnectError:  # refused, or no socket: the daemon is gone
            self._revive()
            return None
        except httpx.HTTPError:
            return None
        if r.status_code == 409 and retry and self.on_unknown_session is not None:
            if self.on_unknown_session():
                return self.call(path, body, timeout, retry=False)
            return None
        if r.status_code >= 400:
            return None
        try:
            data = r.json()
        except ValueError:
            return None
        return data if isinstance(data, dict) else None

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
