"""The Codex proxy's door, over real HTTP on loopback: the secret path, WebSocket refusal,
bodies it does not edit forwarded as the original bytes (no daemon: everything fails open)."""

from __future__ import annotations

import json
from typing import Any

import httpx

from ctxwrap.agents._proxy import Exchange
from ctxwrap.agents.codex import responses_wire as wire
from ctxwrap.agents.codex.proxy import CodexProxy, _Context
from ctxwrap.testing.model_server import ScriptedModelServer


def _proxy(upstream: str) -> CodexProxy:
    proxy = CodexProxy(
        upstream=upstream,
        provider="scripted",
        state_dir=None,
        socket_path=None,
        start_info={"cwd": "/", "pid": 1, "agent": "codex"},
    )
    proxy.start()
    return proxy


def test_secret_websocket_and_passthrough() -> None:
    with ScriptedModelServer([{"text": "hi"}]) as srv:
        proxy = _proxy(srv.base_url)
        try:
            base = proxy.base_url
            root = base.rsplit("/", 1)[0]
            assert httpx.post(f"{root}/responses", json={}).status_code == 404
            assert httpx.post(f"{root}/wrong-secret/responses", json={}).status_code == 404
            ws = httpx.get(f"{base}/responses", headers={"upgrade": "websocket"})
            assert ws.status_code == 426
            assert srv.all_requests == []  # nothing reached the upstream
            raw = json.dumps(
                {
                    "model": "m",
                    "stream": True,
                    "prompt_cache_key": "t1",
                    "input": [{"type": "message", "role": "user", "content": "x"}],
                },
                indent=1,  # not our compact shape: an unedited body must keep its bytes
            ).encode()
            r = httpx.post(
                f"{base}/responses",
                content=raw,
                headers={
                    "authorization": "Bearer k",
                    "content-type": "application/json",
                    "accept-encoding": "zstd,gzip",
                },
            )
            assert r.status_code == 200 and "response.completed" in r.text
            assert srv.main_requests[0].headers["authorization"] == "Bearer k"
            assert json.dumps(srv.main_requests[0].body) == json.dumps(json.loads(raw))
            assert int(srv.main_requests[0].headers["content-length"]) == len(raw)
            # the one header ctxwrap sets: a stream whose usage it can read (Codex takes gzip)
            assert srv.main_requests[0].headers["accept-encoding"] == "gzip"
        finally:
            proxy.close()


def test_a_compaction_is_recorded_only_when_its_summary_came_back() -> None:
    """Codex's summarisation request is recorded as a call whatever its answer; the compaction
    itself only when the reply came back with its usage (a refused one is no compaction)."""

    class Sess:
        def __init__(self) -> None:
            self.calls: list[Any] = []
            self.compactions: list[Any] = []

        def record_call(self, body: Any, applied: Any, usage: Any, original: Any = None) -> None:
            self.calls.append(usage)

        def record_compaction(self, usage: Any, trigger: str) -> None:
            self.compactions.append((usage, trigger))

    proxy = CodexProxy(
        upstream="http://127.0.0.1:9",
        provider="scripted",
        state_dir=None,
        socket_path=None,
        start_info={},
    )
    try:
        sess = Sess()
        ctx = _Context(sess, {"input": []}, [], summarise="manual")  # type: ignore[arg-type]
        exchange = Exchange(b"{}", "http://127.0.0.1:9/responses", ctx)
        proxy.finished(exchange, None)  # refused: tap() gave no reader
        reader = wire.UsageReader(False, "")
        body = {"object": "response", "usage": {"input_tokens": 900, "output_tokens": 50}}
        reader.feed(json.dumps(body).encode())
        proxy.finished(exchange, reader)
        assert len(sess.calls) == 2
        assert [(u.output_tokens, t) for u, t in sess.compactions] == [(50, "manual")]
        # remote compaction v1 (…/responses/compact) answers one JSON object of its own kind
        v1 = wire.UsageReader(False, "")
        answer = {
            "object": "response.compaction",
            "output": [{"type": "compaction", "encrypted_content": "gAAA"}],
            "usage": {"input_tokens": 700, "output_tokens": 30},
        }
        v1.feed(json.dumps(answer).encode())
        proxy.finished(exchange, v1)
        assert [(u.output_tokens, t) for u, t in sess.compactions][1:] == [(30, "manual")]
    finally:
        proxy.close()
