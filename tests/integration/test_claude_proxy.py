"""The Claude Code proxy over real HTTP on loopback, in front of the scripted Anthropic server.

No Claude Code binary and no daemon here: the proxy's own contract (secret path, unchanged
forwarding, SSE streamed through, frozen edits replayed from the per-session file, usage read
from the stream, upstream failure as an Anthropic error).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from ctxwrap.agents.claude import anthropic_wire as wire
from ctxwrap.agents.claude.proxy import ClaudeProxy, upstream_from_env
from ctxwrap.testing.model_server import ScriptedModelServer

KEY = "sk-ant-proxy-test-key"
SID = "0f0e0d0c-aaaa-bbbb-cccc-000000000001"
HEADERS = {
    "x-api-key": KEY,
    "anthropic-version": "2023-06-01",
    "x-claude-code-session-id": SID,
    "content-type": "application/json",
}


def proxy_for(srv: ScriptedModelServer, state: Path) -> ClaudeProxy:
    p = ClaudeProxy(
        upstream=srv.root_url,
        state_dir=state,
        socket_path=state / "no-daemon.sock",  # nothing listens: our side is down
        start_info={"cwd": "/", "pid": 1, "agent": "claude"},
    )
    p.start()
    return p


def history(read_content: str) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": [{"type": "text", "text": "read it"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "toolu_R", "name": "Read", "input": {"file_path": "/x"}}
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_R",
                    "content": read_content,
                    "cache_control": {"type": "ephemeral"},
                }
            ],
        },
    ]


def test_requests_without_the_secret_never_reach_upstream(tmp_path: Path) -> None:
    with ScriptedModelServer([{"text": "hi"}]) as srv:
        proxy = proxy_for(srv, tmp_path)
        try:
            root = f"http://127.0.0.1:{proxy.port}"
            body = {"model": "m", "max_tokens": 5, "messages": history("x")}
            for url in (f"{root}/v1/messages", f"{root}/wrong-secret/v1/messages", f"{root}/"):
                r = httpx.post(url, json=body, headers=HEADERS, timeout=5)
                assert r.status_code == 404
            assert httpx.head(f"{root}/", timeout=5).status_code == 404
            assert srv.all_requests == []
            assert proxy.httpd.server_address[0] == "127.0.0.1"
        finally:
            proxy.close()


def test_forwards_unchanged_and_streams_sse(tmp_path: Path) -> None:
    steps = [{"text": "streamed answer " * 20}, {"text": "second"}]
    with ScriptedModelServer(steps) as srv:
        proxy = proxy_for(srv, tmp_path)
        try:
            assert httpx.head(proxy.base_url + "/", timeout=5).status_code == 200
            # odd spacing: an unedited body must reach upstream byte for byte
            raw = b'{"model": "m",  "stream": true, "max_tokens": 5,\n "messages": [{"role":"user","content":"hi \\u00e9"}]}'
            with httpx.stream(
                "POST",
                proxy.base_url + "/v1/messages?beta=true",
                content=raw,
                headers={**HEADERS, "anthropic-beta": "a,b", "x-extra": "kept"},
                timeout=10,
            ) as r:
                assert r.headers["content-type"] == "text/event-stream"
                chunks = list(r.iter_bytes())
            events = [f for f in b"".join(chunks).decode().split("\n\n") if f.strip()]
            assert events[0].startswith("event: message_start")
            assert events[-1].startswith("event: message_stop")
            text = "".join(
                json.loads(e.split("data: ", 1)[1])["delta"].get("text", "")
                for e in events
                if e.startswith("event: content_block_delta")
            )
            assert text == "streamed answer " * 20
            head, main = srv.all_requests
            assert (head.method, head.path) == ("HEAD", "/")
            assert main.path == "/v1/messages?beta=true"
            assert json.dumps(main.body) == json.dumps(json.loads(raw))
            assert main.headers["x-api-key"] == KEY
            assert main.headers["anthropic-beta"] == "a,b"
            assert main.headers["x-extra"] == "kept"
        finally:
            proxy.close()


def test_frozen_edits_replay_from_the_session_file(tmp_path: Path) -> None:
    """What `claude --continue` meets: a new proxy, the history, and the edits of last time."""
    tomb = "[ctxwrap: read /x (9,000 chars) was judged not needed for the current task and hidden]"
    state = tmp_path / "claude" / f"{SID}.jsonl"
    state.parent.mkdir(parents=True)
    edit = {"kind": "tombstone", "toolCallId": "toolu_R", "text": tomb, "savedChars": 8900}
    state.write_text(json.dumps({"edit": edit}) + "\n" + "{torn line")
    with ScriptedModelServer([{"text": "a"}]) as srv:
        proxy = proxy_for(srv, tmp_path)
        try:
            body = {
                "model": "m",
                "max_tokens": 5,
                "tools": [{"name": "Read", "input_schema": {"type": "object"}}],
                "messages": history("R" * 9000),
            }
            url = proxy.base_url + "/v1/messages"
            r = httpx.post(url + "/count_tokens?beta=true", json=body, headers=HEADERS, timeout=5)
            assert r.status_code == 200
            r = httpx.post(url + "?beta=true", json=body, headers=HEADERS, timeout=5)
            assert r.json()["content"][0]["text"] == "a"
            for rec in (srv.all_requests[0], srv.main_requests[0]):
                block = rec.body["messages"][2]["content"][0]
                assert block == {
                    "type": "tool_result",
                    "tool_use_id": "toolu_R",
                    "content": tomb,
                    "cache_control": {"type": "ephemeral"},  # Claude Code's marker stays
                }
            # the history of the first request counts as seen: nothing in it is decided again
            sess = proxy.sessions[SID]
            assert sess.first_request is False and "toolu_R" in sess.seen
        finally:
            proxy.close()
        for path in tmp_path.rglob("*"):
            if path.is_file():
                assert KEY.encode() not in path.read_bytes()


def test_upstream_down_breaks_the_agents_connection_and_stops_listening(tmp_path: Path) -> None:
    """No 502 of ours (issue 43): the agent's connection is reset with no response, then the
    proxy refuses connections as the upstream does, so the agent's own network handling
    applies; it listens again on the same port once the upstream answers."""
    with ScriptedModelServer([]) as srv:
        dead = srv.root_url
        port = srv.port
    proxy = ClaudeProxy(upstream=dead, state_dir=None, socket_path=None, start_info={})
    proxy.start()
    try:
        with pytest.raises(httpx.TransportError):
            httpx.post(proxy.base_url + "/v1/messages", json={"messages": []}, timeout=20)
        with pytest.raises(httpx.ConnectError):
            httpx.post(proxy.base_url + "/v1/messages", json={"messages": []}, timeout=20)
        with ScriptedModelServer([{"text": "back"}], port=port):
            deadline = time.monotonic() + 10
            while True:
                try:
                    r = httpx.post(
                        proxy.base_url + "/v1/messages",
                        json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
                        timeout=20,
                    )
                    break
                except httpx.ConnectError:
                    assert time.monotonic() < deadline, "the proxy never listened again"
                    time.sleep(0.2)
            assert r.status_code == 200, r.text
    finally:
        proxy.close()


@pytest.mark.parametrize(
    ("env", "want"),
    [({}, "https://api.anthropic.com"), ({"ANTHROPIC_BASE_URL": "http://h:1/p/"}, "http://h:1/p")],
)
def test_upstream_is_the_users_own_base_url(env: dict[str, str], want: str) -> None:
    assert upstream_from_env(env) == want


def test_usage_reader_sse_across_chunk_boundaries() -> None:
    stream = (
        b'event: message_start\ndata: {"type":"message_start","message":{"model":"claude-x",'
        b'"usage":{"input_tokens":3,"cache_read_input_tokens":100,"cache_creation_input_tokens":7,"output_tokens":1}}}\n\n'
        b'event: message_delta\ndata: {"type":"message_delta","usage":{"output_tokens":42}}\n\n'
    )
    reader = wire.UsageReader(streaming=True)
    for i in range(0, len(stream), 7):
        reader.feed(stream[i : i + 7])
    u = reader.finish()
    assert (u.input_tokens, u.cache_read_tokens, u.cache_write_tokens, u.output_tokens) == (
        3,
        100,
        7,
        42,
    )
    assert u.model == "claude-x"


def test_usage_reader_reports_tool_calls_and_the_end_of_the_message() -> None:
    stream = (
        b'event: message_start\ndata: {"type":"message_start","message":{"usage":{}}}\n\n'
        b'data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}\n\n'
        b'data: {"type":"content_block_start","index":1,"content_block":{"type":"tool_use",'
        b'"id":"toolu_A","name":"Read","input":{}}}\n\n'
        b'data: {"type":"content_block_start","index":2,"content_block":{"type":"tool_use",'
        b'"id":"toolu_B","name":"Bash","input":{}}}\n\n'
        b'data: {"type":"message_delta","usage":{"output_tokens":9}}\n\n'
        b'data: {"type":"message_stop"}\n\n'
    )
    seen: list[object] = []
    reader = wire.UsageReader(streaming=True)
    reader.on_tool_use = lambda cid, name: seen.append((cid, name))
    reader.on_end = lambda: seen.append("end")
    for i in range(0, len(stream), 5):
        reader.feed(stream[i : i + 5])
    assert seen == [("toolu_A", "Read"), ("toolu_B", "Bash"), "end"]  # all before finish()
    reader.finish()
    assert seen[-1] == "end" and len(seen) == 3

    message = {"type": "message", "usage": {}, "content": [
        {"type": "tool_use", "id": "toolu_C", "name": "Grep", "input": {}}]}  # fmt: skip
    seen.clear()
    reader = wire.UsageReader(streaming=False)
    reader.on_tool_use = lambda cid, name: seen.append((cid, name))
    reader.on_end = lambda: seen.append("end")
    reader.feed(json.dumps(message).encode())
    reader.finish()
    assert seen == [("toolu_C", "Grep"), "end"]
