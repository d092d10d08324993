"""Plain forwarding on the launch's port: what the agent gets when ctxwrap's proxy could not be
built after the agent started (launch/listener.py) — the shared loopback server with an adapter
that forwards every request as it came."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ctxwrap.agents._proxy.server import Exchange, LoopbackProxy

if TYPE_CHECKING:
    from ctxwrap.launch.listener import Closable, Listener


def plain_forwarding(listener: Listener, upstream: str, name: str, **door: Any) -> Closable:
    """The shared loopback server with an adapter that forwards every request as it came."""

    class Forward:
        def refuse(self, method: str, rest: str, headers: dict[str, str]) -> None:
            return None

        def answer(self, method: str, rest: str, raw: bytes) -> None:
            return None

        def prepare(self, method: str, rest: str, headers: dict[str, str], raw: bytes) -> Any:
            return Exchange(raw, upstream.rstrip("/") + rest)

        def tap(self, exchange: Any, status: int, headers: Any) -> None:
            return None

        def finished(self, exchange: Any, tap: Any) -> None:
            return None

        def failed(self, exchange: Any, status: int | None) -> None:
            return None

    proxy = LoopbackProxy(
        Forward(), name=name, listener=listener.sock, secret=listener.secret, **door
    )
    proxy.start()
    return proxy
