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

The server, the secret check and the forwarding loop are ``agents/_proxy``'s (shared with the
Codex proxy); this module is the Claude Code :class:`ProxyAdapter`.
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import dataclass
from typing import Any, Unpack

import httpx

from ctxwrap.agents._proxy import (
    Exchange,
    LoopbackProxy,
    ResponseTap,
    body_encoding,
    in_step,
)
from ctxwrap.agents._proxy.agent_proxy import AgentProxy, CallContext, ProxyArgs
from ctxwrap.agents._proxy.session import SessionArgs
from ctxwrap.agents.claude import anthropic_wire as wire
from ctxwrap.agents.claude import auto_compact
from ctxwrap.agents.claude.session import WIRE, ClaudeSession, TagRound
from ctxwrap.agents.claude.upstream_aux import CREDENTIAL_HEADERS, UpstreamAux
from ctxwrap.engine.edits import Edit
from ctxwrap.engine.thinking import Keep

DEFAULT_UPSTREAM = "https://api.anthropic.com"
HOOK_PATH = "/_ctxwrap/hook"

JsonDict = dict[str, Any]


@dataclass
class _Context(CallContext[ClaudeSession]):
    """What `prepare` decided for one request (`body` None: count_tokens, or not ours)."""

    round: TagRound | None = None
    keep: Keep | None = None  # the old-thinking edit's keep ctxwrap sent (None: the agent's)
    billed: JsonDict | None = None  # the request as the provider counts it after that edit


class ClaudeProxy(AgentProxy[ClaudeSession]):
    agent = "claude"
    wire = WIRE
    provider = "anthropic"

    def __init__(
        self,
        *,
        upstream: str,
        compact_config: auto_compact.UserConfig | None = None,
        listener: socket.socket | None = None,
        secret: str | None = None,
        **args: Unpack[ProxyArgs],
    ) -> None:
        """`listener`, `secret`: the launch's, bound before Claude Code started."""
        super().__init__(**args)
        self.upstream = upstream.rstrip("/")
        # the user's compaction settings, for plain Claude Code's compaction model
        self.compact_config = compact_config or auto_compact.UserConfig()
        self.server = LoopbackProxy(_Adapter(self), name="claude", listener=listener, secret=secret)
        self.client = self.server.client
        self.httpd = self.server.httpd
        self.aux = UpstreamAux(self.client, self.upstream, self.credentials, self._aux_model)

    # -- lifecycle ------------------------------------------------------------------------------

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def hook_url(self) -> str:
        return self.base_url + HOOK_PATH

    # -- sessions and credentials ---------------------------------------------------------------

    def _aux_model(self) -> str | None:
        for sess in self.sessions.values():
            model = sess.cfg.get("aux_model")
            if isinstance(model, str) and model:
                return model
        return None

    def _new_session(self, session_id: str, args: SessionArgs) -> ClaudeSession:
        return ClaudeSession(session_id, compact_config=self.compact_config, **args)

    def check_secret(self, path: str) -> str | None:
        """The path after the secret segment, or None for a request without the secret."""
        return self.server.check_secret(path)

    def remember_credentials(self, headers: dict[str, str]) -> None:
        found = {k: v for k, v in headers.items() if k in CREDENTIAL_HEADERS}
        if "x-api-key" in found or "authorization" in found:
            self._keep_credentials(found)

    # -- request bodies -------------------------------------------------------------------------

    def edit_body(
        self, path: str, headers: dict[str, str], raw: bytes
    ) -> tuple[bytes, ClaudeSession | None, JsonDict | None, list[Edit], Keep | None]:
        """The bytes to send upstream; the original bytes whenever ctxwrap cannot do better;
        and the old-thinking keep sent in place of the agent's (None: its own went)."""
        messages_call = wire.is_messages_call(path)
        if not (messages_call or wire.is_count_tokens(path)):
            return raw, None, None, [], None
        try:
            body = body_encoding.parse_json(raw)
        except ValueError:
            return raw, None, None, [], None
        if not isinstance(body, dict):
            return raw, None, None, [], None
        sid = wire.session_id_of(headers, body)
        if sid is None:
            return raw, None, None, [], None
        model = body.get("model") if isinstance(body.get("model"), str) else None
        sess = self.session(sid, model)
        if messages_call and body.get("tools"):  # the agent's own call: its window's betas
            sess.betas = str(headers.get("anthropic-beta", ""))
        keep: Keep | None = None
        try:
            applied = sess.prepare(body) if messages_call else sess.replay(body)
            keep = sess.thinking_keep() if messages_call else None
        except Exception:
            # Our side failed mid-request: keep replaying what is already frozen.
            try:
                body = body_encoding.parse_json(raw)
                applied = sess.replay(body)
            except Exception:
                return raw, sess, None, [], None
        if not applied and keep is None:
            return raw, sess, body if messages_call else None, [], None
        return wire.encode_body(body), sess, body if messages_call else None, applied, keep

    def handle_hook(self, raw: bytes) -> JsonDict:
        event = json.loads(raw)
        if not isinstance(event, dict) or not isinstance(event.get("session_id"), str):
            return {}
        sid = event["session_id"]
        if wire.session_id_of({"x-claude-code-session-id": sid}, {}) is None:
            return {}
        name = event.get("hook_event_name")
        if name == "SessionStart":
            # lifecycle: registered at launch (launcher.lifecycle_hooks), listed while idle
            self.session(sid).ensure_registered()
            return {}
        if name == "PostCompact":
            self.session(sid).note_compaction(event)
            return {}
        return self.session(sid).handle_hook(event)


class _Adapter:
    """The Claude Code side of the shared loopback proxy (agents/_proxy.ProxyAdapter)."""

    def __init__(self, proxy: ClaudeProxy) -> None:
        self.proxy = proxy

    def refuse(self, method: str, rest: str, headers: dict[str, str]) -> tuple[int, bytes] | None:
        return None

    def answer(self, method: str, rest: str, raw: bytes) -> tuple[int, bytes] | None:
        """The hook endpoint: what `ctxwrap hook claude` prints (fail open: nothing)."""
        if rest.split("?", 1)[0] != HOOK_PATH or method != "POST":
            return None
        try:
            out = self.proxy.handle_hook(raw)
        except Exception:
            out = {}  # fail open: Claude Code keeps the original output
        # nothing to say: an empty body, not `{}` — Claude Code records the URL of an HTTP hook
        # that answered something (the per-launch secret is in it) in its transcript
        return 200, json.dumps(out).encode() if out else b""

    def prepare(self, method: str, rest: str, headers: dict[str, str], raw: bytes) -> Exchange:
        self.proxy.remember_credentials(headers)
        url = self.proxy.upstream + rest
        if method != "POST":
            return Exchange(raw, url)
        body_out, sess, body, applied, keep = self.proxy.edit_body(rest, headers, raw)
        changed = (applied or keep is not None) and body
        return Exchange(
            body_out, url, _Context(sess, body, applied, raw if changed else None, keep=keep)
        )

    def tap(self, exchange: Exchange, status: int, headers: httpx.Headers) -> ResponseTap | None:
        found = self.proxy.reader(exchange, status, headers)
        if found is None:
            return None
        ctx, reader, in_step_ok = found
        sess = ctx.sess
        if sess is None or not isinstance(ctx, _Context):
            return reader
        assert isinstance(reader, wire.UsageReader)
        # The read-like calls of this message are tagged as one batch.
        tag_round = ctx.round = sess.open_round()
        reader.on_tool_use = lambda cid, name: sess.round_tool_use(tag_round, cid, name)
        reader.on_end = lambda: sess.round_ended(tag_round)
        threshold = sess.in_step_threshold() if in_step_ok else None
        sent = len(exchange.body)
        if ctx.keep is not None and ctx.body is not None:
            # the provider counts the request without the thinking its edit left out
            ctx.billed = sess.billed(ctx.body, ctx.keep)
            if threshold is not None:
                sent = len(wire.encode_body(ctx.billed))
        return self.proxy.in_step(reader, ctx, sent, threshold)

    def finished(self, exchange: Exchange, tap: ResponseTap | None) -> None:
        ctx = self.proxy.ours(exchange)
        if not isinstance(ctx, _Context) or ctx.sess is None or ctx.body is None:
            return
        usage = self.proxy.usage_of(tap)
        if ctx.round is not None:
            ctx.sess.round_ended(ctx.round)  # a stream cut short ends its round too
        billed = ctx.billed
        if billed is None and ctx.keep is not None:
            billed = ctx.sess.billed(ctx.body, ctx.keep)
        if ctx.keep is not None:
            reader = in_step.provider_tap(tap)
            reported = getattr(reader, "cleared_thinking_turns", None)
            ctx.sess.check_cleared(ctx.body, ctx.keep, reported)
        ctx.sess.record_call(ctx.body, ctx.applied, usage, ctx.original, billed)

    def failed(self, exchange: Exchange, status: int | None) -> None:
        self.proxy.failed(exchange, status)


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
