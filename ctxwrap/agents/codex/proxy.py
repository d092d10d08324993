"""The loopback Responses proxy that Codex's provider ``base_url`` points at.

It lives in the `ctxwrap codex` process, like the Claude Code proxy (docs/architecture.md):
its lifetime is the session's, a daemon crash cannot cut Codex's API path, and the
credentials never leave the process Codex handed them to. Forwarding, the secret path and SSE
passthrough are ``agents/_proxy.py``; this module says which bodies are edited (``POST
…/responses``; ``…/responses/compact`` and Codex's local compaction request get the frozen
edits replayed) and where they go.

WebSocket upgrades (Codex's preferred transport for the built-in OpenAI provider) are refused
with 426, on which Codex 0.171 falls back to HTTPS streaming at once.
"""

from __future__ import annotations

import json
import socket
from dataclasses import dataclass
from typing import Any, Unpack
from urllib.parse import urlsplit

import httpx

from ctxwrap.agents._proxy import (
    Exchange,
    LoopbackProxy,
    ResponseTap,
    body_encoding,
)
from ctxwrap.agents._proxy.agent_proxy import AgentProxy, CallContext, ProxyArgs
from ctxwrap.agents._proxy.server import SECRET_HEADER
from ctxwrap.agents._proxy.session import SessionArgs
from ctxwrap.agents.codex import responses_wire as wire
from ctxwrap.agents.codex.session import WIRE, CodexSession
from ctxwrap.agents.codex.upstream_aux import CREDENTIAL_HEADERS, ResponsesAux

JsonDict = dict[str, Any]
OPENAI_UPSTREAM = "https://api.openai.com/v1"
CHATGPT_UPSTREAM = "https://chatgpt.com/backend-api/codex"


@dataclass
class _Context(CallContext[CodexSession]):
    summarise: str | None = None  # Codex's own compaction request: its trigger


class CodexProxy(AgentProxy[CodexSession]):
    """The Codex adapter of the shared loopback proxy."""

    agent = "codex"
    wire = WIRE

    def __init__(
        self,
        *,
        upstream: str | None,
        provider: str,
        compact_config: dict[str, Any] | None = None,
        listener: socket.socket | None = None,
        secret: str | None = None,
        **args: Unpack[ProxyArgs],
    ) -> None:
        """`listener`, `secret`: the launch's, bound before Codex started."""
        super().__init__(**args)
        # None: the built-in OpenAI provider, whose endpoint depends on the login (an API key
        # → api.openai.com; a ChatGPT login sends chatgpt-account-id → the ChatGPT backend).
        self.upstream = upstream.rstrip("/") if upstream else None
        self.provider = provider
        self.compact_config = compact_config or {}  # auto_compact.CONFIG_KEYS of the config
        self._responses_url: str | None = None
        # Codex prints the URL it called in its error lines: no secret in it. A custom
        # provider sends the secret in a header (`http_headers`, in Codex's argv as the secret
        # path was: not in its environment, which its tools inherit whole); the built-in
        # provider takes no header of ours, so its requests are let in by who connects (this
        # user, not a browser). The URL path is the upstream's own, as plain Codex prints it.
        self.server = LoopbackProxy(
            self,
            name="codex",
            door="peer" if provider == "openai" else "header",
            base_path=urlsplit(self.upstream or OPENAI_UPSTREAM).path,
            listener=listener,
            secret=secret,
        )
        self.aux = ResponsesAux(
            self.server.client, lambda: self._responses_url, self.credentials, self._aux_model
        )

    # -- lifecycle ------------------------------------------------------------------------------

    def launch_overrides(self) -> list[str]:
        """Codex's `-c` arguments beside the base_url one: the header door's header."""
        if self.server.door != "header":
            return []
        key = f"model_providers.{self.provider}.http_headers.{SECRET_HEADER}"
        return ["-c", f"{key}={json.dumps(self.secret)}"]

    # -- sessions and credentials ---------------------------------------------------------------

    def _aux_model(self) -> str | None:
        """`aux_model` when it names a model of this provider (a bare id, `openai/…` or
        `<provider>/…`); one set for another agent's provider (`anthropic/…`) is not sent here."""
        for sess in list(self.sessions.values()):
            model = sess.cfg.get("aux_model")
            if isinstance(model, str) and model:
                prefix, _, rest = model.rpartition("/")
                if not prefix or prefix in ("openai", self.provider):
                    return rest
        return None

    def _new_session(self, session_id: str, args: SessionArgs) -> CodexSession:
        return CodexSession(
            session_id, provider=self.provider, compact_config=self.compact_config, **args
        )

    def upstream_base(self, headers: dict[str, str]) -> str:
        if self.upstream is not None:
            return self.upstream
        return CHATGPT_UPSTREAM if "chatgpt-account-id" in headers else OPENAI_UPSTREAM

    # -- ProxyAdapter -----------------------------------------------------------------------------

    def refuse(self, method: str, rest: str, headers: dict[str, str]) -> tuple[int, bytes] | None:
        if headers.get("upgrade", "").lower() == "websocket":
            err = {"error": {"message": "ctxwrap proxy: HTTPS only", "type": "upgrade_required"}}
            return 426, json.dumps(err).encode()
        return None

    def answer(self, method: str, rest: str, raw: bytes) -> tuple[int, bytes] | None:
        return None  # no endpoint of ours: Codex has no hook to serve

    def prepare(self, method: str, rest: str, headers: dict[str, str], raw: bytes) -> Exchange:
        url = self.upstream_base(headers) + rest
        found = {k: v for k, v in headers.items() if k in CREDENTIAL_HEADERS}
        if found:
            self._keep_credentials(found)
        if method != "POST":
            return Exchange(raw, url)
        compact = wire.is_compact_call(rest)
        if not (compact or wire.is_responses_call(rest)):
            return Exchange(raw, url)
        if not compact:
            self._responses_url = url.split("?", 1)[0]
        # a ChatGPT login sends zstd: read it decoded, send an edited body encoded the same
        encoding = headers.get("content-encoding", "identity")
        plain = body_encoding.decode(raw, encoding)
        if plain is None:
            return Exchange(raw, url)  # a body we cannot read goes as it is (no edit, no stats)
        try:
            body = body_encoding.parse_json(plain)
        except ValueError:
            return Exchange(raw, url)
        if not isinstance(body, dict):
            return Exchange(raw, url)
        sid = wire.session_id_of(headers, body)
        if sid is None or wire.side_thread(headers):
            return Exchange(raw, url)  # forwarded as it is, not counted
        model = body.get("model") if isinstance(body.get("model"), str) else None
        sess = self.session(sid, model)
        # Codex's own compaction (remote or local): the summariser sees what the agent has been
        # shown — frozen edits, nothing new decided (no mask at a tool-list change, no digest,
        # and a checkpoint instruction is no prompt of the user's). Priced as one of the
        # session's calls.
        summarise = "auto" if compact else wire.compaction_request(headers, body)
        try:
            applied = sess.replay(body) if compact or summarise else sess.prepare(body)
        except Exception:
            # Our side failed mid-request: keep replaying what is already frozen.
            try:
                body = body_encoding.parse_json(plain)
                applied = sess.replay(body)
            except Exception:
                return Exchange(raw, url)
        ctx = _Context(sess, body, applied, plain if applied else None, summarise)
        # Codex accepts zstd or gzip; the usage in the stream is only readable in gzip.
        accept = {"accept-encoding": "gzip"} if "accept-encoding" in headers else {}
        if not applied:
            return Exchange(raw, url, ctx, accept)
        return Exchange(body_encoding.encode(wire.encode_body(body), encoding), url, ctx, accept)

    def tap(self, exchange: Exchange, status: int, headers: httpx.Headers) -> ResponseTap | None:
        found = self.reader(exchange, status, headers)
        if found is None:
            return None
        ctx, reader, in_step_ok = found
        if ctx.sess is None or ctx.body is None or not in_step_ok:
            return reader
        if isinstance(ctx, _Context) and ctx.summarise:
            return reader
        threshold = ctx.sess.in_step_threshold(ctx.body.get("model"))
        # decoded: the request may go compressed
        return self.in_step(reader, ctx, len(wire.encode_body(ctx.body)), threshold)

    def finished(self, exchange: Exchange, tap: ResponseTap | None) -> None:
        ctx = self.ours(exchange)
        if not isinstance(ctx, _Context) or ctx.sess is None or ctx.body is None:
            return
        usage = self.usage_of(tap)
        ctx.sess.record_call(ctx.body, ctx.applied, usage, ctx.original)
        if ctx.summarise is not None and usage is not None and usage.seen:
            # a refused or cut-off summarisation is no compaction (Codex retries or fails)
            ctx.sess.record_compaction(usage, ctx.summarise)
