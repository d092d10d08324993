"""What both agents' proxies do around their sessions: one base for the Claude Code and Codex
proxies (``agents/claude/proxy.py``, ``agents/codex/proxy.py``).

A proxy owns the loopback server (``server.py``), the daemon link, its sessions by the agent's
session id (each a ``ProxySession``, made on the first request that names it) and the last
credentials the agent sent (memory only: the aux backend's). After a response it hands the
call's stats to its session; a try answered with an error is counted apart, never as a call.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Generic, NotRequired, TypedDict, TypeVar, Unpack

from ctxwrap.agents._proxy import in_step
from ctxwrap.agents._proxy.daemon_link import DaemonLink
from ctxwrap.agents._proxy.server import Exchange, LoopbackProxy, ResponseTap
from ctxwrap.agents._proxy.session import AuxRunner, ProxySession, SessionArgs
from ctxwrap.agents._proxy.wire import Usage, UsageReader, Wire
from ctxwrap.engine.edits import Edit

JsonDict = dict[str, Any]
S = TypeVar("S", bound=ProxySession)


class ProxyArgs(TypedDict):
    """What every agent proxy is made with, besides its upstream."""

    state_dir: Path | None  # $XDG_STATE_HOME/ctxwrap (None: no state files)
    socket_path: Path | None  # the daemon's socket
    start_info: JsonDict  # sessions/start fields other than the id
    daemon_start_argv: NotRequired[list[str] | None]  # how to revive a daemon that died


@dataclass
class CallContext(Generic[S]):
    """What the proxy decided for one request, handed back with its response."""

    sess: S | None
    body: JsonDict | None  # the body as sent (None: not a call of ours)
    applied: list[Edit]
    original: bytes | None = None  # the agent's own bytes, where `applied` edited the body


class AgentProxy(Generic[S]):
    """The sessions, credentials and lifecycle of one agent's proxy."""

    agent: ClassVar[str]  # the state directory's name: $XDG_STATE_HOME/ctxwrap/<agent>/
    wire: ClassVar[Wire]
    provider: str  # the model's provider, as the daemon names it
    server: LoopbackProxy

    def __init__(self, **args: Unpack[ProxyArgs]) -> None:
        self.state_dir = args["state_dir"]
        self.start_info = args["start_info"]
        self.daemon = DaemonLink(args["socket_path"], args.get("daemon_start_argv"))
        self.sessions: dict[str, S] = {}
        self._lock = threading.Lock()
        self._credentials: dict[str, str] = {}  # memory only: the aux backend's key

    # -- lifecycle ------------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        return self.server.base_url

    @property
    def secret(self) -> str:
        return self.server.secret

    def start(self) -> None:
        self.server.start()

    def close(self) -> None:
        for sess in list(self.sessions.values()):
            sess.shutdown()
        self.server.close()
        self.daemon.close()

    # -- sessions and credentials ---------------------------------------------------------------

    def credentials(self) -> dict[str, str]:
        with self._lock:
            return dict(self._credentials)

    def _keep_credentials(self, found: dict[str, str]) -> None:
        with self._lock:
            self._credentials = found

    aux: AuxRunner | None

    def _new_session(self, session_id: str, args: SessionArgs) -> S:
        raise NotImplementedError

    def session(self, session_id: str, model: str | None = None) -> S:
        """The session of this id (made at its first request; `model`: the request's)."""
        with self._lock:
            sess = self.sessions.get(session_id)
            if sess is None:
                info = dict(self.start_info)
                if model:
                    info["model"] = {"provider": self.provider, "id": model}
                state = (
                    self.state_dir / self.agent / f"{session_id}.jsonl" if self.state_dir else None
                )
                args = SessionArgs(
                    daemon=self.daemon, state_file=state, aux=self.aux, start_info=info
                )
                sess = self.sessions[session_id] = self._new_session(session_id, args)
            return sess

    # -- after the response -----------------------------------------------------------------------

    def reader(
        self, exchange: Exchange, status: int, headers: Mapping[str, str]
    ) -> tuple[CallContext[S], UsageReader, bool] | None:
        """For a 200 answer to a call of ours: its context, a usage reader, and whether the
        answer can be rewritten in step (an SSE stream, not compressed, of an edited body)."""
        ctx = exchange.context
        if not isinstance(ctx, CallContext) or ctx.body is None or status != 200:
            return None
        streaming = "text/event-stream" in headers.get("content-type", "")
        encoding = headers.get("content-encoding", "").lower()
        reader = self.wire.usage_reader(streaming, encoding)
        return ctx, reader, streaming and not encoding and ctx.original is not None

    def in_step(
        self, reader: UsageReader, ctx: CallContext[S], sent: int, threshold: int | None
    ) -> ResponseTap:
        """The reader, behind the in-step rewrite where plain would have compacted (in_step.py);
        `sent`: the edited body's size as encoded for the wire, before any compression."""
        if threshold is None or ctx.original is None:
            return reader
        return in_step.usage_tap(
            reader,
            original=len(ctx.original),
            sent=sent,
            threshold=threshold,
            read_input=self.wire.input_tokens,
            add_input=self.wire.add_input_tokens,
        )

    @staticmethod
    def ours(exchange: Exchange) -> CallContext[S] | None:
        """The context of a call of a session of ours, else None."""
        ctx = exchange.context
        if not isinstance(ctx, CallContext) or ctx.sess is None or ctx.body is None:
            return None
        return ctx

    @staticmethod
    def usage_of(tap: ResponseTap | None) -> Usage | None:
        """The response's usage as the provider sent it (not what the agent was told), read
        to its end (a JSON answer's tool calls are reported then)."""
        finish = getattr(in_step.provider_tap(tap), "finish", None)
        usage = finish() if callable(finish) else None
        return usage if isinstance(usage, Usage) else None

    def failed(self, exchange: Exchange, status: int | None) -> None:
        """An error status or no answer: the agent retries, waits or fails as it would; the try
        is counted apart, not as an LLM call, and priced at nothing."""
        ctx = self.ours(exchange)
        if ctx is None or ctx.sess is None:
            return
        ctx.sess.ensure_registered()
        payload = {"session_id": ctx.sess.session_id, "status": status}
        ctx.sess.daemon.call("/v1/failed_try", payload, timeout=3.0)
