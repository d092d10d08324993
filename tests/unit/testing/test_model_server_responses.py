"""The scripted server's OpenAI Responses path (Codex CLI) over real HTTP on loopback."""

from __future__ import annotations

import json
from typing import Any

import httpx

from ctxwrap.testing.model_server import ScriptedModelServer
from ctxwrap.testing.responses_api import prompt_tokens

TOOLS: list[dict[str, Any]] = [
    {"type": "function", "name": "exec_command", "parameters": {"type": "object"}},
    {"type": "custom", "name": "apply_patch", "format": {"type": "grammar"}},
]


def body(items: list[dict[str, Any]], *, stream: bool = True) -> dict[str, Any]:
    return {
        "model": "gpt-test",
        "stream": stream,
        "input": items,
        "tools": TOOLS,
        "store": False,
        "prompt_cache_key": "thread-1",
    }


def dev(text: str) -> dict[str, Any]:
    return {
        "type": "message",
        "role": "developer",
        "content": [{"type": "input_text", "text": text}],
    }


def user(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def events(resp: httpx.Response) -> list[dict[str, Any]]:
    out = []
    for frame in resp.text.split("\n\n"):
        for line in frame.splitlines():
            if line.startswith("data: "):
                out.append(json.loads(line[6:]))
    return out


def test_function_and_custom_calls_stream_with_prefix_cache() -> None:
    steps = [
        {
            "tool_calls": [
                {"name": "exec_command", "arguments": {"cmd": "ls"}},
                {"name": "apply_patch", "arguments": "*** Begin Patch\n*** End Patch\n"},
            ]
        },
        {"text": "done"},
    ]
    with ScriptedModelServer(steps) as srv:
        first = [dev("You are Codex." * 50), user("go")]
        r1 = httpx.post(f"{srv.base_url}/responses", json=body(first))
        assert r1.status_code == 200
        assert r1.headers["content-type"].startswith("text/event-stream")
        ev = events(r1)
        assert ev[0]["type"] == "response.created"
        done = [e["item"] for e in ev if e["type"] == "response.output_item.done"]
        assert [i["type"] for i in done] == ["function_call", "custom_tool_call"]
        assert done[0]["call_id"] == "call_0_0"
        assert json.loads(done[0]["arguments"]) == {"cmd": "ls"}
        assert done[1]["input"] == "*** Begin Patch\n*** End Patch\n"
        usage1 = ev[-1]["response"]["usage"]
        assert ev[-1]["type"] == "response.completed"
        assert usage1["input_tokens"] == prompt_tokens(body(first))
        assert usage1["input_tokens_details"]["cached_tokens"] == 0

        second = [
            *first,
            done[0],
            {"type": "function_call_output", "call_id": "call_0_0", "output": "a\nb\n"},
            done[1],
            {"type": "custom_tool_call_output", "call_id": "call_0_1", "output": "ok"},
        ]
        ev2 = events(httpx.post(f"{srv.base_url}/responses", json=body(second)))
        usage2 = ev2[-1]["response"]["usage"]
        # the whole first request is a cached prefix of the second
        cached2 = usage2["input_tokens_details"]["cached_tokens"]
        assert usage1["input_tokens"] - 1 <= cached2 <= usage1["input_tokens"]
        deltas = "".join(e["delta"] for e in ev2 if e["type"] == "response.output_text.delta")
        assert deltas == "done"
        assert [r.kind for r in srv.requests] == ["main", "main"]


def test_aux_request_by_instructions_and_json_reply() -> None:
    with ScriptedModelServer(
        [], aux_rules=[{"task": "tag", "answer": {"decision": "DROP"}}]
    ) as srv:
        aux = {
            "model": "small",
            "instructions": "[ctxwrap-aux:tag] decide",
            "input": [user("a result")],
            "stream": False,
        }
        r = httpx.post(f"{srv.base_url}/responses", json=aux)
        out = r.json()["output"][0]["content"][0]["text"]
        assert json.loads(out) == {"decision": "DROP"}
        assert srv.aux_requests[0].aux_task == "tag"
        assert srv.steps_consumed == 0


def test_error_step() -> None:
    with ScriptedModelServer([{"status": 400, "text": "bad"}]) as srv:
        r = httpx.post(f"{srv.base_url}/responses", json=body([user("x")]))
        assert r.status_code == 400
        assert r.json()["error"]["message"] == "bad"


def test_tool_search_and_namespaced_mcp_calls() -> None:
    """Codex 0.171's deferred MCP tools: a `tool_search` step is a client `tool_search_call`
    where the request offers tool_search (a plain function call where it does not), and a
    call of a function that a `tool_search_output` loaded carries that namespace."""
    search = {"name": "tool_search", "arguments": {"query": "record", "limit": 1}}
    steps = [
        {"tool_calls": [search]},
        {"tool_calls": [{"name": "probe_tool_03", "arguments": {"record_id": "r3"}}]},
        {"tool_calls": [search]},
    ]
    with ScriptedModelServer(steps) as srv:
        offered = {**body([user("go")]), "tools": [*TOOLS, {"type": "tool_search"}]}
        ev = events(httpx.post(f"{srv.base_url}/responses", json=offered))
        (call,) = [e["item"] for e in ev if e["type"] == "response.output_item.done"]
        assert call["type"] == "tool_search_call" and call["execution"] == "client"
        assert call["call_id"] == "call_0_0"
        assert call["arguments"] == {"query": "record", "limit": 1}

        loaded = {
            "type": "tool_search_output",
            "call_id": "call_0_0",
            "execution": "client",
            "status": "completed",
            "tools": [
                {
                    "type": "namespace",
                    "name": "mcp__many",
                    "tools": [{"type": "function", "name": "probe_tool_03"}],
                }
            ],
        }
        second = {**offered, "input": [user("go"), call, loaded]}
        ev = events(httpx.post(f"{srv.base_url}/responses", json=second))
        (mcp,) = [e["item"] for e in ev if e["type"] == "response.output_item.done"]
        assert mcp["type"] == "function_call" and mcp["namespace"] == "mcp__many"
        assert mcp["name"] == "probe_tool_03"

        ev = events(httpx.post(f"{srv.base_url}/responses", json=body([user("go")])))
        (plain,) = [e["item"] for e in ev if e["type"] == "response.output_item.done"]
        assert plain["type"] == "function_call" and "namespace" not in plain


def test_the_tui_title_thread_gets_side_text_and_leaves_the_script() -> None:
    """The Codex TUI's title thread races the user's first request: with `side_text` it is
    answered apart (kind "side"), so the user's thread gets the script's steps in order; a
    user who merely mentions a title is not taken for it, and without `side_text` the title
    request takes a step like any other."""
    title = user("Generate a concise, single-line task title of at most 36 characters")
    steps = [{"text": "first step"}, {"text": "second step"}]

    def text(srv: ScriptedModelServer, items: list[dict[str, Any]], source: str = "") -> str:
        meta = {"x-codex-turn-metadata": json.dumps({"thread_source": source})} if source else {}
        ev = events(httpx.post(f"{srv.base_url}/responses", json=body(items), headers=meta))
        return "".join(e["delta"] for e in ev if e["type"] == "response.output_text.delta")

    with ScriptedModelServer(steps, side_text="A title") as srv:
        assert text(srv, [dev("sys"), user("ctx"), title]) == "A title"
        assert text(srv, [user("name it")], "thread_title") == "A title"
        # the metadata wins: the user's own thread asking for a title is the user's
        assert text(srv, [title], "user") == "first step"
        assert text(srv, [user("write the title: Generate a concise…")]) == "second step"
        assert [r.kind for r in srv.requests] == ["side", "side", "main", "main"]
    with ScriptedModelServer(steps) as srv:
        assert text(srv, [title]) == "first step"
