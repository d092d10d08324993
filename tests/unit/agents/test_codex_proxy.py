"""The Codex proxy's door, over real HTTP on loopback: the secret path, WebSocket refusal,
bodies it does not edit forwarded as the original bytes (no daemon: everything fails open)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
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
            # a custom provider's door: the secret in a header, the URL the upstream's path
            assert base == f"http://127.0.0.1:{proxy.server.port}/v1"
            assert proxy.secret not in base
            assert proxy.launch_overrides() == [
                "-c",
                f'model_providers.scripted.http_headers.x-ctxwrap-proxy="{proxy.secret}"',
            ]
            door = {"x-ctxwrap-proxy": proxy.secret}
            assert httpx.post(f"{base}/responses", json={}).status_code == 404
            wrong = {"x-ctxwrap-proxy": "wrong-secret"}
            assert httpx.post(f"{base}/responses", json={}, headers=wrong).status_code == 404
            root = f"http://127.0.0.1:{proxy.server.port}"
            assert httpx.post(f"{root}/responses", json={}, headers=door).status_code == 404
            ws = httpx.get(f"{base}/responses", headers={"upgrade": "websocket", **door})
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
                    **door,
                },
            )
            assert r.status_code == 200 and "response.completed" in r.text
            assert srv.main_requests[0].headers["authorization"] == "Bearer k"
            assert "x-ctxwrap-proxy" not in srv.main_requests[0].headers  # never forwarded
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


def test_builtin_providers_door_is_who_connects() -> None:
    """The built-in provider takes no header of ours: its requests are let in when they come
    from this user's process and from no browser (Origin, Sec-Fetch-*, a foreign Host)."""
    with ScriptedModelServer([{"text": "hi"}, {"text": "again"}]) as srv:
        proxy = CodexProxy(
            upstream=srv.base_url,
            provider="openai",
            state_dir=None,
            socket_path=None,
            start_info={"cwd": "/", "pid": 1, "agent": "codex"},
        )
        proxy.start()
        try:
            base = proxy.base_url
            assert base == f"http://127.0.0.1:{proxy.server.port}/v1"
            assert proxy.launch_overrides() == []
            body = {"model": "m", "input": []}
            for browser in (
                {"origin": "https://example.com"},
                {"sec-fetch-site": "cross-site"},
                {"host": f"evil.example:{proxy.server.port}"},
            ):
                assert (
                    httpx.post(f"{base}/responses", json=body, headers=browser).status_code == 404
                )
            assert srv.all_requests == []
            r = httpx.post(f"{base}/responses", json=body)
            assert r.status_code == 200
            system_python = Path("/usr/bin/python3")
            if os.getuid() == 0 and system_python.exists():  # another user's process: refused
                port = proxy.server.port
                code = (
                    "import socket;s=socket.create_connection(('127.0.0.1',PORT));"
                    "s.sendall(b'POST /v1/responses HTTP/1.1\\r\\nHost: 127.0.0.1:PORT\\r\\n"
                    "Content-Length: 2\\r\\n\\r\\n{}');print(s.recv(64).split()[1].decode())"
                ).replace("PORT", str(port))
                other = subprocess.run(
                    [str(system_python), "-c", code],
                    capture_output=True,
                    text=True,
                    user=65534,
                    cwd="/",
                    timeout=30,
                )
                assert other.stdout.strip() == "404", other.stderr
                assert len(srv.all_requests) == 1
        finally:
            proxy.close()
