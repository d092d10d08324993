"""ScriptedModelServer over real HTTP on loopback (httpx), in-thread and as a CLI process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from ctxwrap.aux import prompts
from ctxwrap.testing.model_server import (
    EXHAUSTED_TEXT,
    ScriptedModelServer,
    ScriptError,
    ToolCall,
    estimate_completion_tokens,
    estimate_prompt_tokens,
)

REPO = Path(__file__).resolve().parents[3]
TOOLS = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]


def main_body(text: str = "go", *, stream: bool = False, usage: bool = True) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": "scripted-model",
        "messages": [
            {"role": "system", "content": "You are pi."},
            {"role": "user", "content": [{"type": "text", "text": text}]},
        ],
        "tools": TOOLS,
    }
    if stream:
        body["stream"] = True
        if usage:
            body["stream_options"] = {"include_usage": True}
    return body


def aux_body(task: str, user: str, *, stream: bool = False) -> dict[str, Any]:
    return {
        "model": "scripted-model",
        "stream": stream,
        "messages": [
            {"role": "system", "content": f"[ctxwrap-aux:{task}] You help ctxwrap."},
            {"role": "user", "content": user},
        ],
    }


def post(srv: ScriptedModelServer, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{srv.base_url}/chat/completions", json=body, timeout=10)


def message(resp: httpx.Response) -> dict[str, Any]:
    assert resp.status_code == 200, resp.text
    msg: dict[str, Any] = resp.json()["choices"][0]["message"]
    return msg


def read_stream(resp: httpx.Response) -> tuple[list[dict[str, Any]], bool]:
    """Data events of an SSE response and whether it ended with [DONE]."""
    assert resp.headers["content-type"].startswith("text/event-stream")
    events: list[dict[str, Any]] = []
    done = False
    for line in resp.text.splitlines():
        if not line.startswith("data: "):
            assert line == "", line
            continue
        data = line[len("data: ") :]
        if data == "[DONE]":
            done = True
        else:
            assert not done, "event after [DONE]"
            events.append(json.loads(data))
    return events, done


def assemble(events: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]], str | None]:
    """Rebuild text, tool calls and finish_reason the way an OpenAI client does."""
    text = ""
    calls: dict[int, dict[str, Any]] = {}
    finish = None
    for ev in events:
        for choice in ev["choices"]:
            delta = choice["delta"]
            text += delta.get("content") or ""
            for tc in delta.get("tool_calls", []):
                slot = calls.setdefault(tc["index"], {"id": None, "name": "", "arguments": ""})
                slot["id"] = tc.get("id") or slot["id"]
                fn = tc.get("function", {})
                slot["name"] += fn.get("name", "")
                slot["arguments"] += fn.get("arguments", "")
            finish = choice["finish_reason"] or finish
    return text, [calls[i] for i in sorted(calls)], finish


def test_binds_loopback_ephemeral_port() -> None:
    with ScriptedModelServer([]) as a, ScriptedModelServer([]) as b:
        assert a.port != b.port
        assert a.base_url == f"http://127.0.0.1:{a.port}/v1"


def test_non_streaming_text() -> None:
    script = [{"text": "hello there"}]
    with ScriptedModelServer(script) as server:
        body = main_body()
        resp = post(server, body)
        data = resp.json()
        assert data["object"] == "chat.completion"
        assert data["model"] == "scripted-model"
        assert data["choices"][0]["finish_reason"] == "stop"
        assert message(resp) == {"role": "assistant", "content": "hello there"}
        expected_prompt = -(-(len(json.dumps(body["messages"])) + len(json.dumps(TOOLS))) // 4)
        assert data["usage"] == {
            "prompt_tokens": expected_prompt,
            "completion_tokens": 3,  # ceil(11 / 4)
            "total_tokens": expected_prompt + 3,
        }
        assert estimate_prompt_tokens(body) == expected_prompt


def test_streaming_text_with_usage_chunk() -> None:
    script = [{"text": "x" * 100}, {"text": "short"}]
    with ScriptedModelServer(script) as server:
        body = main_body(stream=True)
        events, done = read_stream(post(server, body))
        assert done
        text, calls, finish = assemble(events)
        assert (text, calls, finish) == ("x" * 100, [], "stop")
        assert events[0]["choices"][0]["delta"]["role"] == "assistant"
        assert (
            sum(1 for e in events if e["choices"] and e["choices"][0]["delta"].get("content")) > 1
        )
        usage_events = [e for e in events if "usage" in e]
        assert len(usage_events) == 1 and usage_events[0] is events[-1]
        assert usage_events[0]["choices"] == []
        assert usage_events[0]["usage"]["prompt_tokens"] == estimate_prompt_tokens(body)
        assert usage_events[0]["usage"]["completion_tokens"] == 25

        events, done = read_stream(post(server, main_body(stream=True, usage=False)))
        assert done and not any("usage" in e for e in events)
        assert assemble(events)[0] == "short"


def test_streaming_parallel_tool_calls() -> None:
    script: list[dict[str, Any]] = [
        {
            "text": "reading both",
            "tool_calls": [
                {"name": "read", "arguments": {"path": "a.txt"}},
                {"name": "read", "arguments": {"path": "b.txt"}},
            ],
        },
        {"tool_calls": [{"name": "bash", "arguments": {"command": "echo " + "y" * 80}}]},
    ]
    with ScriptedModelServer(script) as server:
        text, calls, finish = assemble(read_stream(post(server, main_body(stream=True)))[0])
        assert text == "reading both"
        assert finish == "tool_calls"
        assert calls == [
            {"id": "call_0_0", "name": "read", "arguments": '{"path": "a.txt"}'},
            {"id": "call_0_1", "name": "read", "arguments": '{"path": "b.txt"}'},
        ]
        # long arguments arrive in several deltas and still reassemble
        text, calls, finish = assemble(read_stream(post(server, main_body(stream=True)))[0])
        assert (text, finish) == ("", "tool_calls")
        assert calls[0]["id"] == "call_1_0"
        assert json.loads(calls[0]["arguments"]) == {"command": "echo " + "y" * 80}


def test_non_streaming_tool_call() -> None:
    script = [{"tool_calls": [{"name": "bash", "arguments": {"command": "ls"}}]}]
    with ScriptedModelServer(script) as server:
        resp = post(server, main_body())
        assert resp.json()["choices"][0]["finish_reason"] == "tool_calls"
        msg = message(resp)
        assert msg["content"] is None
        assert msg["tool_calls"] == [
            {
                "id": "call_0_0",
                "type": "function",
                "function": {"name": "bash", "arguments": '{"command": "ls"}'},
            }
        ]
        expected = estimate_completion_tokens(None, [ToolCall("bash", '{"command": "ls"}')])
        assert resp.json()["usage"]["completion_tokens"] == expected == 6


def test_exhausted_script_answers_fixed_text() -> None:
    script = [{"text": "only"}]
    with ScriptedModelServer(script) as server:
        assert message(post(server, main_body()))["content"] == "only"
        assert not server.exhausted or server.steps_consumed == 1
        for _ in range(2):
            assert message(post(server, main_body()))["content"] == EXHAUSTED_TEXT
            text, _, finish = assemble(read_stream(post(server, main_body(stream=True)))[0])
            assert (text, finish) == (EXHAUSTED_TEXT, "stop")
        assert server.exhausted
        assert [r.step_index for r in server.main_requests] == [0, None, None, None, None]


def test_aux_requests_do_not_consume_script() -> None:
    script = [{"text": "main-1"}, {"text": "main-2"}]
    with ScriptedModelServer(script) as server:
        assert message(post(server, aux_body("tag", "some read result")))["content"] == (
            '{"decision": "RETAIN"}'
        )
        assert message(post(server, main_body()))["content"] == "main-1"
        text, _, _ = assemble(read_stream(post(server, aux_body("tag", "x", stream=True)))[0])
        assert json.loads(text) == {"decision": "RETAIN"}
        assert message(post(server, main_body()))["content"] == "main-2"
        assert [r.kind for r in server.requests] == ["aux", "main", "aux", "main"]
        assert [r.aux_task for r in server.aux_requests] == ["tag", "tag"]
        assert server.steps_consumed == 2


def test_aux_marker_in_developer_role_and_parts() -> None:
    body: dict[str, Any] = {
        "model": "m",
        "messages": [
            {"role": "developer", "content": [{"type": "text", "text": "[ctxwrap-aux:fact] x"}]},
            {"role": "user", "content": "write path: src/app.py done"},
        ],
    }
    with ScriptedModelServer([{"text": "main"}]) as srv:
        assert message(post(srv, body))["content"] == "Wrote src/app.py — file written"
        assert srv.steps_consumed == 0
        # a marker elsewhere than the start of the system prompt is a main request
        body["messages"][0] = {"role": "system", "content": "see [ctxwrap-aux:fact]"}
        assert message(post(srv, body))["content"] == "main"


def test_aux_defaults() -> None:
    with ScriptedModelServer([]) as srv:
        digest = message(post(srv, aux_body("digest", "line one\nall good\nline three")))
        assert digest["content"] == "Digest: 3 lines."
        log = "collecting\ntests/test_x.py::test_a PASSED\nFAILED tests/test_x.py::test_b\nE  Error: boom"
        digest = message(post(srv, aux_body("digest", log)))
        assert digest["content"] == "Digest: 4 lines. First error: FAILED tests/test_x.py::test_b"
        digest = message(post(srv, aux_body("digest", "ok\nmake: *** [all] Error 2")))
        assert digest["content"].endswith("First error: make: *** [all] Error 2")
        fact = message(post(srv, aux_body("fact", '{"path": "/tmp/w/notes.md", "content": "x"}')))
        assert fact["content"] == "Wrote /tmp/w/notes.md — file written"
        fact = message(post(srv, aux_body("fact", "Path: src/x.py\n\nContent:\nimport os\n")))
        assert fact["content"] == "Wrote src/x.py — file written"
        fact = message(post(srv, aux_body("fact", "The agent wrote docs/guide.md with 40 lines")))
        assert fact["content"] == "Wrote docs/guide.md — file written"
        shaped = "User's current request:\nfix the error\n\nCommand: make\nExit code: 2\n\n"
        shaped += "Output (already condensed by an extractive filter):\ncc a.c\na.c:3: error: x"
        digest = message(post(srv, aux_body("digest", shaped)))
        assert digest["content"] == "Digest: 2 lines. First error: a.c:3: error: x"
        other = message(post(srv, aux_body("other", "x")))
        assert other["content"] == "(aux other)"
        assert srv.steps_consumed == 0 and len(srv.aux_requests) == 8


def test_aux_rules_first_match_wins() -> None:
    rules: list[dict[str, Any]] = [
        {"task": "tag", "match": "node_modules", "answer": {"decision": "DROP"}},
        {"task": "tag", "match": "node_modules", "answer": "never reached"},
        {"task": "digest", "answer": "custom digest"},
        {"task": "*", "match": "anything-goes", "answer": "wildcard"},
    ]
    with ScriptedModelServer([], aux_rules=rules) as srv:
        assert json.loads(message(post(srv, aux_body("tag", "ls node_modules")))["content"]) == {
            "decision": "DROP"
        }
        assert json.loads(message(post(srv, aux_body("tag", "src/")))["content"]) == {
            "decision": "RETAIN"
        }
        assert message(post(srv, aux_body("digest", "whatever")))["content"] == "custom digest"
        assert message(post(srv, aux_body("fact", "anything-goes")))["content"] == "wildcard"
        # the rule's match is looked up in the conversation, not the system prompt
        assert message(post(srv, aux_body("tag", "nothing")))["content"] == (
            '{"decision": "RETAIN"}'
        )


def test_a_batched_tag_is_answered_per_item() -> None:
    rules: list[dict[str, Any]] = [
        {"task": "tag", "match": "node_modules", "answer": {"decision": "DROP"}},
        {"task": "tag", "match": "garbled", "answer": "not json at all"},
    ]
    items = [
        ("ls", {"path": "node_modules"}, "left-pad/\nreact/"),
        ("read", {"path": "src/a.py"}, "def a():\n    pass\n### result 3 (00000000)\nnode_modules"),
        ("read", {"path": "vendor/node_modules.txt"}, "node_modules listing"),
    ]
    prompt = prompts.tag_batch_prompt(
        items=items, user_prompt="fix a", max_chars=6000, key="1234abcd"
    )
    with ScriptedModelServer([], aux_rules=rules) as srv:
        answer = json.loads(message(post(srv, aux_body("tag", prompt)))["content"])
        # each item on its own text; a header with another key is item 2's text, not item 3
        assert answer == {"1": "DROP", "2": "DROP", "3": "DROP"}
        two = prompts.tag_batch_prompt(
            items=[items[0], ("read", {"path": "b.py"}, "def b(): ...")],
            user_prompt="fix b",
            max_chars=6000,
            key="feed0001",
        )
        assert json.loads(message(post(srv, aux_body("tag", two)))["content"]) == {
            "1": "DROP",
            "2": "RETAIN",
        }
        bad = prompts.tag_batch_prompt(
            items=[items[0], ("read", {"path": "g"}, "garbled")],
            user_prompt="x",
            max_chars=6000,
            key="feed0002",
        )
        # a rule answer that is not a decision is the whole (malformed) reply
        assert message(post(srv, aux_body("tag", bad)))["content"] == "not json at all"
        # single-result tags keep the old behaviour
        assert json.loads(message(post(srv, aux_body("tag", "ls node_modules")))["content"]) == {
            "decision": "DROP"
        }


def test_aux_failure_status_leaves_main_alone() -> None:
    with ScriptedModelServer([{"text": "fine"}], aux_status=500) as srv:
        resp = post(srv, aux_body("tag", "x"))
        assert resp.status_code == 500
        assert resp.json()["error"]["message"] == "scripted aux failure 500"
        assert message(post(srv, main_body()))["content"] == "fine"
        assert len(srv.aux_requests) == 1


def test_step_status_error() -> None:
    with ScriptedModelServer([{"status": 429, "text": "slow down"}, {"text": "ok"}]) as srv:
        resp = post(srv, main_body(stream=True))
        assert resp.status_code == 429
        assert resp.json()["error"]["message"] == "slow down"
        assert message(post(srv, main_body()))["content"] == "ok"


def test_delays_apply_per_kind_and_do_not_block_each_other() -> None:
    with ScriptedModelServer(
        [{"text": "slow", "delay_s": 0.6}], aux_delay_s=0.2, main_delay_s=0.2
    ) as srv:
        results: dict[str, float] = {}

        def timed(name: str, body: dict[str, Any]) -> None:
            t0 = time.monotonic()
            assert post(srv, body).status_code == 200
            results[name] = time.monotonic() - t0

        main = threading.Thread(target=timed, args=("main", main_body()))
        main.start()
        time.sleep(0.05)
        timed("aux", aux_body("tag", "x"))
        main.join()
        assert 0.2 <= results["aux"] < 0.6
        assert results["main"] >= 0.8


def test_requests_recorded_and_logged(tmp_path: Path) -> None:
    log = tmp_path / "requests.jsonl"
    with ScriptedModelServer([{"text": "a"}], requests_log=log) as srv:
        before = time.time()
        body = main_body(stream=True)
        post(srv, body)
        post(srv, aux_body("digest", "text"))
        got = srv.wait_for_requests(2, timeout=2)
        assert [r.kind for r in got] == ["main", "aux"]
        assert got[0].body == body
        assert got[0].step_index == 0
        assert got[0].headers["content-type"] == "application/json"
        assert before <= got[0].timestamp <= got[1].timestamp <= time.time()
        assert srv.main_requests == [got[0]] and srv.aux_requests == [got[1]]
        assert len(srv.wait_for_requests(1, kind="main", timeout=0.01)) == 1
        with pytest.raises(TimeoutError):
            srv.wait_for_requests(2, kind="main", timeout=0.1)
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(x["kind"], x["aux_task"], x["step_index"]) for x in lines] == [
        ("main", None, 0),
        ("aux", "digest", None),
    ]
    assert lines[0]["body"] == body and lines[0]["path"] == "/v1/chat/completions"


def test_models_endpoint_and_errors() -> None:
    with ScriptedModelServer([]) as srv:
        models = httpx.get(f"{srv.base_url}/models", timeout=5).json()
        assert models["object"] == "list"
        assert [m["id"] for m in models["data"]] == ["scripted-model"]
        assert httpx.get(f"{srv.root_url}/nope", timeout=5).status_code == 404
        bad = httpx.post(
            f"{srv.base_url}/chat/completions",
            content=b"{not json",
            headers={"content-type": "application/json"},
            timeout=5,
        )
        assert bad.status_code == 400
        assert srv.requests == []


def test_keep_alive_connection_serves_sequential_requests() -> None:
    with (
        ScriptedModelServer([{"text": "1"}, {"text": "2"}, {"text": "3"}]) as srv,
        httpx.Client(timeout=5) as client,
    ):
        url = f"{srv.base_url}/chat/completions"
        assert client.post(url, json=main_body()).json()["choices"][0]["message"]["content"] == "1"
        assert assemble(read_stream(client.post(url, json=main_body(stream=True)))[0])[0] == "2"
        assert client.post(url, json=main_body()).json()["choices"][0]["message"]["content"] == "3"


@pytest.mark.parametrize(
    "script",
    [
        ["not an object"],
        [{}],
        [{"text": 3}],
        [{"tool_calls": [{"arguments": {}}]}],
        [{"text": "x", "bogus": 1}],
        [{"text": "x", "fill": "no group"}],
        [{"text": "x", "fill": "(two) (groups)"}],
        [{"text": "x", "fill": "(unclosed"}],
    ],
)
def test_bad_script_rejected(script: list[Any]) -> None:
    with pytest.raises(ScriptError):
        ScriptedModelServer(script)


def test_bad_aux_rule_rejected() -> None:
    with pytest.raises(ScriptError):
        ScriptedModelServer([], aux_rules=[{"task": "tag"}])


def test_cli_process(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(
        json.dumps(
            {
                "steps": [{"tool_calls": [{"name": "bash", "arguments": {"command": "ls"}}]}],
                "aux_rules": [{"task": "tag", "answer": {"decision": "DROP"}}],
            }
        )
    )
    port_file = tmp_path / "port"
    log = tmp_path / "req.jsonl"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ctxwrap.testing.model_server",
            "--script",
            str(script),
            "--port",
            "0",
            "--port-file",
            str(port_file),
            "--requests-log",
            str(log),
        ],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 10
        while not port_file.exists():
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() < deadline, "port file never appeared"
            time.sleep(0.02)
        base = f"http://127.0.0.1:{int(port_file.read_text())}/v1"
        resp = httpx.post(f"{base}/chat/completions", json=main_body(), timeout=5)
        assert resp.json()["choices"][0]["message"]["tool_calls"][0]["id"] == "call_0_0"
        resp = httpx.post(f"{base}/chat/completions", json=aux_body("tag", "x"), timeout=5)
        assert json.loads(resp.json()["choices"][0]["message"]["content"]) == {"decision": "DROP"}
        resp = httpx.post(f"{base}/chat/completions", json=main_body(), timeout=5)
        assert resp.json()["choices"][0]["message"]["content"] == EXHAUSTED_TEXT
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    kinds = [json.loads(line)["kind"] for line in log.read_text().splitlines()]
    assert kinds == ["main", "aux", "main"]


def test_cli_rejects_bad_script(tmp_path: Path) -> None:
    script = tmp_path / "bad.json"
    script.write_text(json.dumps([{"nope": 1}]))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-m", "ctxwrap.testing.model_server", "--script", str(script)],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 2
    assert "unknown keys" in proc.stderr
