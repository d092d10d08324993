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
import threading
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from ctxwrap.agents._proxy import (
    DaemonLink,
    Exchange,
    LoopbackProxy,
    ResponseTap,
    body_encoding,
    in_step,
)
from ctxwrap.agents._proxy.server import SECRET_HEADER
from ctxwrap.agents.codex import responses_wire as wire
from ctxwrap.agents.codex.session import CodexSession
from ctxwrap.agents.codex.upstream_aux import CREDENTIAL_HEADERS, ResponsesAux
from ctxwrap.engine.edits import Edit

JsonDict = dict[str, Any]
OPENAI_UPSTREAM = "https://api.openai.com/v1"
CHATGPT_UPSTREAM = "https://chatgpt.com/backend-api/codex"


class _Context:
    def __init__(
        self,
        sess: CodexSession | None,
        body: JsonDict | None,
        applied: list[Edit],
        summarise: str | None = None,
        original: bytes | None = None,
    ):
        self.sess = sess
        self.body = body
        self.applied = applied
        self.summarise = summarise  # Codex's own compaction request: its trigger
        self.original = original  # Codex's own (decoded) bytes, where `applied` edited the body


class CodexProxy:
    """The Codex adapter of the shared loopback proxy."""

    def __init__(
        self,
        *,
        upstream: str | None,
        provider: str,
        state_dir: Path | None,
        socket_path: Path | None,
        start_info: JsonDict,
        daemon_start_argv: list[str] | None = None,
        compact_config: dict[str, Any] | None = None,
        listener: socket.socket | None = None,
        secret: str | None = None,
    ) -> None:
        """`listener`, `secret`: the launch's, bound before Codex started."""
        # None: the built-in OpenAI provider, whose endpoint depends on the login (an API key
        # → api.openai.com; a ChatGPT login sends chatgpt-account-id → the ChatGPT backend).
        self.upstream = upstream.rstrip("/") if upstream else None
        self.provider = provider
        self.state_dir = state_dir
        self.start_info = start_info
        self.compact_config = compact_config or {}  # auto_compact.CONFIG_KEYS of the config
        self.daemon = DaemonLink(socket_path, daemon_start_argv)
        self.sessions: dict[str, CodexSession] = {}
        self._lock = threading.Lock()
        self._credentials: dict[str, str] = {}  # memory only: the aux backend's key
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

    @property
    def base_url(self) -> str:
        return self.server.base_url

    @property
    def secret(self) -> str:
        return self.server.secret

    def launch_overrides(self) -> list[str]:
        """Codex's `-c` arguments beside the base_url one: the header door's header."""
        if self.server.door != "header":
            return []
        key = f"model_providers.{self.provider}.http_headers.{SECRET_HEADER}"
        return ["-c", f"{key}={json.dumps(self.secret)}"]

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

    def session(self, session_id: str, model: str | None) -> CodexSession:
        with self._lock:
            sess = self.sessions.get(session_id)
            if sess is None:
                info = dict(self.start_info)
                if model:
                    info["model"] = {"provider": self.provider, "id": model}
                state = self.state_dir / "codex" / f"{session_id}.jsonl" if self.state_dir else None
                sess = CodexSession(
                    session_id,
                    daemon=self.daemon,
                    state_file=state,
                    aux=self.aux,
                    start_info=info,
                    provider=self.provider,
                    compact_config=self.compact_config,
                )
                self.sessions[session_id] = sess
            return sess

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
            with self._lock:
                self._credentials = found
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
        ctx = _Context(sess, body, applied, summarise, plain if applied else None)
        # Codex accepts zstd or gzip; the usage in the stream is only readable in gzip.
        accept = {"accept-encoding": "gzip"} if "accept-encoding" in headers else {}
        if not applied:
            return Exchange(raw, url, ctx, accept)
        return Exchange(body_encoding.encode(wire.encode_body(body), encoding), url, ctx, accept)

    def tap(self, exchange: Exchange, status: int, headers: httpx.Headers) -> ResponseTap | None:
        ctx = exchange.context
        if not isinstance(ctx, _Context) or ctx.body is None or status != 200:
            return None
        streaming = "text/event-stream" in headers.get("content-type", "")
        encoding = headers.get("content-encoding", "").lower()
        reader = wire.UsageReader(streaming, encoding)
        sess = ctx.sess
        if sess is None or not streaming or encoding or ctx.original is None or ctx.summarise:
            return reader
        threshold = sess.in_step_threshold(ctx.body.get("model"))
        if threshold is None:
            return reader
        return in_step.usage_tap(
            reader,
            original=len(ctx.original),
            sent=len(wire.encode_body(ctx.body)),  # decoded: the request may go compressed
            threshold=threshold,
            read_input=wire.completed_input_tokens,
            add_input=wire.add_input_tokens,
        )

    def finished(self, exchange: Exchange, tap: ResponseTap | None) -> None:
        ctx = exchange.context
        if not isinstance(ctx, _Context) or ctx.sess is None or ctx.body is None:
            return
        tap = in_step.provider_tap(tap)  # the provider's own counts, not what Codex was told
        usage = tap.finish() if isinstance(tap, wire.UsageReader) else None
        ctx.sess.record_call(ctx.body, ctx.applied, usage, ctx.original)
        if ctx.summarise is not None and usage is not None and usage.seen:
            # a refused or cut-off summarisation is no compaction (Codex retries or fails)
            ctx.sess.record_compaction(usage, ctx.summarise)

    def failed(self, exchange: Exchange, status: int | None) -> None:
        """An error status or no answer: Codex retries, waits or fails as it would; the try is
        counted apart, not as an LLM call, and priced at nothing."""
        ctx = exchange.context
        if not isinstance(ctx, _Context) or ctx.sess is None or ctx.body is None:
            return
        ctx.sess.ensure_registered()
        payload = {"session_id": ctx.sess.session_id, "status": status}
        ctx.sess.daemon.call("/v1/failed_try", payload, timeout=3.0)
