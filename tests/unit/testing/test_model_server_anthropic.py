"""The scripted server's Anthropic Messages path over real HTTP on loopback (httpx)."""

from __future__ import annotations

import json
import math
from typing import Any

import httpx
import pytest

from ctxwrap.testing.model_server import (
    PromptCacheSim,
    ScriptedModelServer,
    ScriptError,
    anthropic_prompt_tokens,
)

EPHEMERAL = {"type": "ephemeral"}
TOOLS = [{"name": "Bash", "description": "run", "input_schema": {"type": "object"}}]


def body(messages: list[dict[str, Any]], *, stream: bool = False) -> dict[str, Any]:
    return {
        "model": "claude-test",
        "max_tokens": 1000,
        "stream": stream,
        "tools": TOOLS,
        "system": [
            {"type": "text", "text": "billing header"},
            {"type": "text", "text": "You are Claude Code." * 20, "cache_control": EPHEMERAL},
        ],
        "messages": messages,
    }


def user(text: str, *, marked: bool = True) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "text", "text": text}
    if marked:
        block["cache_control"] = EPHEMERAL
    return {"role": "user", "content": [block]}


def parse_sse(raw: str) -> list[tuple[str, dict[str, Any]]]:
    events = []
    for frame in raw.split("\n\n"):
        lines = frame.strip().splitlines()
        if not lines:
            continue
        name = lines[0].removeprefix("event: ")
        data = json.loads(lines[1].removeprefix("data: "))
        assert data["type"] == name
        events.append((name, data))
    return events


def post(
    srv: ScriptedModelServer, payload: dict[str, Any], path: str = "/v1/messages"
) -> httpx.Response:
    return httpx.post(
        f"{srv.root_url}{path}?beta=true",
        json=payload,
        headers={"x-api-key": "sk-test", "anthropic-version": "2023-06-01"},
        timeout=10,
    )


def test_non_streaming_text_and_usage_add_up() -> None:
    with ScriptedModelServer([{"text": "hello there"}]) as srv:
        payload = body([user("hi")])
        r = post(srv, payload)
        assert r.status_code == 200
        msg = r.json()
        assert msg["type"] == "message" and msg["role"] == "assistant"
        assert msg["content"] == [{"type": "text", "text": "hello there"}]
        assert msg["stop_reason"] == "end_turn"
        u = msg["usage"]
        total = u["input_tokens"] + u["cache_read_input_tokens"] + u["cache_creation_input_tokens"]
        assert total == anthropic_prompt_tokens(payload)
        assert u["cache_read_input_tokens"] == 0 and u["cache_creation_input_tokens"] > 0
        assert u["output_tokens"] == math.ceil(len("hello there") / 4)
        [rec] = srv.main_requests
        assert rec.path == "/v1/messages?beta=true" and rec.usage == u
        assert rec.headers["x-api-key"] == "sk-test"


def test_streaming_parallel_tool_use() -> None:
    step = {
        "text": "two at once",
        "tool_calls": [
            {"name": "Bash", "arguments": {"command": "echo a"}},
            {"name": "Read", "arguments": {"file_path": "/tmp/x"}},
        ],
    }
    with ScriptedModelServer([step]) as srv:
        r = post(srv, body([user("go")], stream=True))
        assert r.headers["content-type"] == "text/event-stream"
        events = parse_sse(r.text)
        names = [n for n, _ in events]
        assert names[0] == "message_start" and names[-2:] == ["message_delta", "message_stop"]
        blocks: dict[int, dict[str, Any]] = {}
        partial: dict[int, str] = {}
        for name, data in events:
            if name == "content_block_start":
                blocks[data["index"]] = data["content_block"]
            elif name == "content_block_delta":
                d = data["delta"]
                if d["type"] == "text_delta":
                    blocks[data["index"]]["text"] += d["text"]
                else:
                    partial[data["index"]] = partial.get(data["index"], "") + d["partial_json"]
        for i, js in partial.items():
            blocks[i]["input"] = json.loads(js)
        assert blocks[0] == {"type": "text", "text": "two at once"}
        assert blocks[1] == {
            "type": "tool_use",
            "id": "toolu_0_0",
            "name": "Bash",
            "input": {"command": "echo a"},
        }
        assert blocks[2]["id"] == "toolu_0_1" and blocks[2]["input"] == {"file_path": "/tmp/x"}
        delta = dict(events)["message_delta"]
        assert delta["delta"]["stop_reason"] == "tool_use"
        start_usage = dict(events)["message_start"]["message"]["usage"]
        assert (
            start_usage["cache_creation_input_tokens"]
            == srv.main_requests[0].usage["cache_creation_input_tokens"]
        )


def test_a_step_fills_in_what_only_the_run_knows() -> None:
    """`fill`: a handle named in the request reaches the call's arguments, JSON-escaped."""
    recall = {"name": "Bash", "arguments": {"command": 'ctxwrap recall {fill} "a b"'}}
    steps = [
        {"tool_calls": [recall], "fill": r"recall (r[0-9a-f]+)"},
        {"tool_calls": [recall], "fill": r"(x\S*)"},
        {"tool_calls": [recall], "fill": r"recall (zz\d+)"},
    ]
    with ScriptedModelServer(steps) as srv:
        said = "digest · `ctxwrap recall r1a2b` · later `ctxwrap recall r9f8e`"
        first = post(srv, body([user(said)])).json()["content"][0]["input"]
        assert first == {"command": 'ctxwrap recall r9f8e "a b"'}  # the last match wins
        quoted = post(srv, body([user('x"q\\')])).json()["content"][0]["input"]
        # matched in the request's JSON text and escaped again: the arguments stay JSON
        assert quoted["command"].startswith('ctxwrap recall x\\"q')
        none = post(srv, body([user("nothing")])).json()["content"][0]["input"]
        assert none == {"command": 'ctxwrap recall (fill: no match) "a b"'}


def test_prefix_cache_follows_the_moving_marker() -> None:
    with ScriptedModelServer([{"text": "one"}, {"text": "two"}, {"text": "three"}]) as srv:
        first = [user("first prompt " * 30)]
        u1 = post(srv, body(first)).json()["usage"]
        assert u1["cache_read_input_tokens"] == 0 and u1["input_tokens"] == 0
        # Claude Code's next request: the old marker is gone, a new one on the last block.
        second = [
            user("first prompt " * 30, marked=False),
            {"role": "assistant", "content": [{"type": "text", "text": "one"}]},
            user("second prompt " * 30),
        ]
        u2 = post(srv, body(second)).json()["usage"]
        total1 = anthropic_prompt_tokens(body(first))
        assert u2["cache_read_input_tokens"] == total1
        assert u2["cache_creation_input_tokens"] == anthropic_prompt_tokens(body(second)) - total1
        # An edit of an earlier block: only the part before it is read.
        third = [user("EDITED " * 30, marked=False), *second[1:]]
        u3 = post(srv, body(third)).json()["usage"]
        assert 0 < u3["cache_read_input_tokens"] < total1


def test_cache_expires_after_ttl_and_ignores_other_models() -> None:
    sim = PromptCacheSim(ttl_s=300)
    b = body([user("x" * 400)])
    assert sim.usage(b, now=1000).cache_read_input_tokens == 0
    assert sim.usage(b, now=1100).cache_read_input_tokens == anthropic_prompt_tokens(b)
    other = {**b, "model": "another"}
    assert sim.usage(other, now=1101).cache_read_input_tokens == 0
    assert sim.usage(b, now=1100 + 301).cache_read_input_tokens == 0  # expired


def test_the_cache_loses_entries_as_a_real_provider_does() -> None:
    """`forget`: "older" makes the next request read the entry of the one before the latest
    (its read is that entry's end: read + written), "none" makes it read nothing."""
    texts = [f"turn {i} " * 50 for i in range(3)]
    bodies = [body([*(user(t, marked=False) for t in texts[:i]), user(texts[i])]) for i in range(3)]
    sim = PromptCacheSim()
    u0 = sim.usage(bodies[0], now=1)
    u1 = sim.usage(bodies[1], now=2)
    assert u1.cache_read_input_tokens == u0.cache_read_input_tokens + u0.cache_creation_input_tokens
    sim.forget("older")
    u2 = sim.usage(bodies[2], now=3)
    assert u2.cache_read_input_tokens == u0.cache_read_input_tokens + u0.cache_creation_input_tokens
    sim.forget("none")
    assert sim.usage(bodies[2], now=4).cache_read_input_tokens == 0
    with pytest.raises(ValueError):
        sim.forget("sometimes")
    with pytest.raises(ScriptError, match="cache loss at step 3"):
        ScriptedModelServer([], cache_losses={3: "sometimes"})


def test_no_breakpoint_means_no_write() -> None:
    sim = PromptCacheSim()
    b = {"model": "m", "messages": [user("plain", marked=False)]}
    u = sim.usage(b)
    assert (u.cache_read_input_tokens, u.cache_creation_input_tokens) == (0, 0)
    assert u.input_tokens == anthropic_prompt_tokens(b)


def test_count_tokens_head_and_every_request_recorded() -> None:
    with ScriptedModelServer([{"text": "ok"}]) as srv:
        assert httpx.head(f"{srv.root_url}/", timeout=5).status_code == 200
        payload = body([user("count me")])
        r = post(srv, payload, "/v1/messages/count_tokens")
        assert r.json() == {"input_tokens": anthropic_prompt_tokens(payload)}
        assert httpx.post(f"{srv.root_url}/v1/nope", json={}, timeout=5).status_code == 404
        post(srv, payload)
        kinds = [(r.method, r.kind) for r in srv.all_requests]
        assert kinds == [
            ("HEAD", "other"),
            ("POST", "count_tokens"),
            ("POST", "other"),
            ("POST", "main"),
        ]
        assert [r.kind for r in srv.requests] == ["main"]
        assert srv.steps_consumed == 1  # count_tokens does not eat a step


def test_aux_request_by_system_blocks_and_error_step() -> None:
    with ScriptedModelServer(
        [{"status": 529, "text": "overloaded"}],
        aux_rules=[{"task": "tag", "answer": {"decision": "DROP"}}],
    ) as srv:
        aux = {
            "model": "claude-haiku",
            "max_tokens": 50,
            "system": "[ctxwrap-aux:tag] decide",
            "messages": [{"role": "user", "content": "a read result"}],
        }
        r = post(srv, aux)
        assert r.json()["content"][0]["text"] == '{"decision": "DROP"}'
        assert srv.aux_requests[0].aux_task == "tag"
        # A mid-conversation system message in `messages` does not make a main call aux.
        main = body([user("go"), {"role": "system", "content": "[ctxwrap-aux:tag] no"}])
        err = post(srv, main)
        assert err.status_code == 529
        assert err.json() == {
            "type": "error",
            "error": {"type": "api_error", "message": "overloaded"},
        }
        assert srv.main_requests[0].usage is None
