"""When the Claude Code proxy sends a tool round's tag batch, through real HTTP and a real daemon.

The scripted Anthropic server answers with parallel Read calls (SSE, as Claude Code asks);
the test plays Claude Code's hooks. The batch goes out when every Read of the message has
ended (PostToolUse or PostToolUseFailure), else at the latest with the next request.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
from support import Xdg, daemon_process

from ctxwrap.agents.claude.proxy import ClaudeProxy
from ctxwrap.testing.model_server import RecordedRequest, ScriptedModelServer

SID = "0f0e0d0c-aaaa-bbbb-cccc-0000000round"
HEADERS = {
    "x-api-key": "sk-ant-round-test-key",
    "anthropic-version": "2023-06-01",
    "x-claude-code-session-id": SID,
    "content-type": "application/json",
}
TOOLS = [{"name": n, "input_schema": {"type": "object"}} for n in ("Bash", "Read")]
NAMES = ("alpha", "bravo", "charlie")


def content(name: str) -> str:
    return "".join(f"{i:6d}\u2192{name} line {i}: nothing needed\n" for i in range(150))


def body(messages: list[dict[str, Any]]) -> dict[str, Any]:
    return {"model": "claude-test", "max_tokens": 64, "stream": True, "tools": TOOLS,
            "messages": messages}  # fmt: skip


def send(proxy: ClaudeProxy, messages: list[dict[str, Any]]) -> None:
    r = httpx.post(proxy.base_url + "/v1/messages", json=body(messages), headers=HEADERS)
    assert r.status_code == 200, r.text
    assert "text/event-stream" in r.headers["content-type"]


def hook(proxy: ClaudeProxy, event: str, cid: str, name: str, path: Path) -> None:
    fields: dict[str, Any] = {
        "session_id": SID,
        "hook_event_name": event,
        "tool_name": "Read",
        "tool_use_id": cid,
        "tool_input": {"file_path": str(path / name)},
    }
    if event == "PostToolUse":
        fields["tool_response"] = {"type": "text", "file": {"content": content(name)}}
    else:
        fields["error"] = "File does not exist."
    assert proxy.handle_hook(json.dumps(fields).encode()) == {}


def tag_calls(srv: ScriptedModelServer, n: int, within_s: float) -> list[RecordedRequest]:
    end = time.monotonic() + within_s
    while True:
        tags = [r for r in srv.aux_requests if r.aux_task == "tag"]
        if len(tags) >= n or time.monotonic() > end:
            return tags
        time.sleep(0.05)


def read_round(tmp_path: Path) -> dict[str, Any]:
    calls = [{"name": "Read", "arguments": {"file_path": str(tmp_path / n)}} for n in NAMES]
    return {"tool_calls": calls}


def run_round(tmp_path: Path, xdg: Xdg, third: str | None) -> tuple[list[Any], list[Any]]:
    """Three parallel Reads; the third ends with `third` (None: no hook at all)."""
    with (
        daemon_process(xdg, {"PI_CTX_TAG_WITHIN_SAVINGS": "false"}),  # tags from round one
        ScriptedModelServer([read_round(tmp_path), {"text": "done"}]) as srv,
    ):
        proxy = ClaudeProxy(
            upstream=srv.root_url,
            state_dir=xdg.state / "ctxwrap",
            socket_path=xdg.socket,
            start_info={"cwd": "/", "pid": 1, "agent": "claude"},
        )
        proxy.start()
        try:
            messages: list[dict[str, Any]] = [
                {"role": "user", "content": [{"type": "text", "text": "read them"}]}
            ]
            send(proxy, messages)
            ids = [f"toolu_0_{i}" for i in range(3)]
            for cid, name in zip(ids[:2], NAMES[:2], strict=True):
                hook(proxy, "PostToolUse", cid, name, tmp_path)
            if third is not None:
                hook(proxy, third, ids[2], NAMES[2], tmp_path)
            before_next = tag_calls(srv, 1, within_s=3.0)
            messages.append(
                {
                    "role": "assistant",
                    "content": [
                        {"type": "tool_use", "id": c, "name": "Read", "input": {}} for c in ids
                    ],
                }
            )
            messages.append(
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": c, "content": content(n)}
                        for c, n in zip(ids, NAMES, strict=True)
                    ],
                }
            )
            send(proxy, messages)
            after_next = tag_calls(srv, 1, within_s=3.0)
        finally:
            proxy.close()
    return before_next, after_next


def items(req: RecordedRequest) -> list[str]:
    text = json.dumps(req.body["messages"])
    return [n for n in NAMES if f"{n} line 0" in text]


def test_a_failed_read_ends_its_call_so_the_batch_goes_at_once(tmp_path: Path, xdg: Xdg) -> None:
    before_next, after_next = run_round(tmp_path, xdg, "PostToolUseFailure")
    assert len(before_next) == 1  # sent without waiting for the next request
    assert items(before_next[0]) == ["alpha", "bravo"]
    assert len(after_next) == 1  # and only once


def test_a_read_without_a_hook_holds_the_batch_until_the_next_request(
    tmp_path: Path, xdg: Xdg
) -> None:
    # A denied call gets no hook: the round is not complete, nothing is sent...
    before_next, after_next = run_round(tmp_path, xdg, None)
    assert before_next == []
    # ...until the next request carries the round's results: then one batch for both.
    assert len(after_next) == 1
    assert items(after_next[0]) == ["alpha", "bravo"]


def test_every_read_hooked_is_one_batch_of_three(tmp_path: Path, xdg: Xdg) -> None:
    before_next, after_next = run_round(tmp_path, xdg, "PostToolUse")
    assert len(before_next) == 1
    assert items(before_next[0]) == list(NAMES)
    assert len(after_next) == 1
