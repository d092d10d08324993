"""The scripted server's preserved-thinking check (ScriptedModelServer(preserved_thinking=True))
is what the e2e tests measure ctxwrap against: it must pass an append-only conversation and
fail one whose earlier content changed, as the API does. With thinking_rules=True it also
handles the thinking sent back as the provider does: earlier turns' thinking kept or dropped
by the model's default or by the `clear_thinking_20251015` edit, server-side."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from ctxwrap.engine.thinking import CLEAR_THINKING, CONTEXT_MANAGEMENT_BETA, keep_for_clearing
from ctxwrap.testing.model_server import (
    ScriptedModelServer,
    anthropic_prompt_tokens,
    thinking_prefix_failure,
    thinking_prefix_key,
)


def _conversation() -> dict[str, Any]:
    body: dict[str, Any] = {
        "system": [{"type": "text", "text": "sys", "cache_control": {"type": "ephemeral"}}],
        "tools": [{"name": "Read"}],
        "messages": [{"role": "user", "content": [{"type": "text", "text": "go"}]}],
    }
    sig = thinking_prefix_key(body, body["messages"])
    think = {"type": "thinking", "thinking": "t", "signature": sig}
    call = {"type": "tool_use", "id": "r1", "name": "Read", "input": {"file_path": "a"}}
    result = {"type": "tool_result", "tool_use_id": "r1", "content": "A" * 100}
    body["messages"] += [
        {"role": "assistant", "content": [think, call]},
        {"role": "user", "content": [result]},
    ]
    sig2 = thinking_prefix_key(body, body["messages"])
    body["messages"] += [
        {
            "role": "assistant",
            "content": [{"type": "thinking", "thinking": "u", "signature": sig2}],
        },
        {"role": "user", "content": "next"},
    ]
    return body


def test_an_append_only_conversation_passes_and_a_rewrite_fails() -> None:
    body = _conversation()
    assert thinking_prefix_failure(body) is None
    # cache markers moving and a lone text block sent as a string change nothing
    body["system"][0].pop("cache_control")
    body["messages"][0]["content"] = "go"
    assert thinking_prefix_failure(body) is None
    # a masked result: the block after it fails, the one before it does not
    body["messages"][2]["content"][0]["content"] = "[masked]"
    assert thinking_prefix_failure(body) == (3, 0)
    # a changed tool list fails the first block
    body = _conversation()
    body["tools"] = [{"name": "Read"}, {"name": "Grep"}]
    assert thinking_prefix_failure(body) == (1, 0)


# -- the provider's rules for thinking sent back (thinking_rules=True; issue 41 item 3) --------

MARK = {"type": "ephemeral"}


def _user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text, "cache_control": MARK}]}


def _request(
    model: str, messages: list[dict[str, Any]], keep: Any = None, *, stream: bool = False
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model,
        "max_tokens": 1000,
        "stream": stream,
        "thinking": {"type": "adaptive"},
        "tools": [{"name": "Bash", "description": "run", "input_schema": {"type": "object"}}],
        "system": [{"type": "text", "text": "You are Claude Code." * 20, "cache_control": MARK}],
        "messages": messages,
    }
    if keep is not None:
        value = keep if keep == "all" else {"type": "thinking_turns", "value": keep}
        body["context_management"] = {"edits": [{"type": CLEAR_THINKING, "keep": value}]}
    return body


def _post(srv: ScriptedModelServer, body: dict[str, Any], *, beta: bool = True) -> httpx.Response:
    headers = {"x-api-key": "sk-test", "anthropic-version": "2023-06-01"}
    if beta:
        headers["anthropic-beta"] = f"interleaved-thinking-2025-05-14,{CONTEXT_MANAGEMENT_BETA}"
    return httpx.post(
        f"{srv.root_url}/v1/messages?beta=true", json=body, headers=headers, timeout=10
    )


def _total(usage: dict[str, Any]) -> int:
    return int(
        usage["input_tokens"]
        + usage["cache_read_input_tokens"]
        + usage["cache_creation_input_tokens"]
    )


def _turns(srv: ScriptedModelServer, model: str, n: int, keep: Any = None) -> list[Any]:
    """n human turns, each answered with thinking; returns the messages so far."""
    msgs: list[Any] = []
    for i in range(n):
        msgs.append(_user(f"prompt {i}"))
        r = _post(srv, _request(model, msgs, keep))
        assert r.status_code == 200, r.text
        content = r.json()["content"]
        assert content[0]["type"] == "thinking"
        msgs.append({"role": "assistant", "content": content})
    return msgs


def test_the_clear_thinking_edit_leaves_earlier_turns_thinking_out_server_side() -> None:
    model = "claude-sonnet-4-6"
    with ScriptedModelServer(
        [{"text": f"answer {i}"} for i in range(5)], thinking_rules=True, preserved_thinking=True
    ) as srv:
        msgs = _turns(srv, model, 2, keep="all")  # what Claude Code 2.1.x sends
        assert [r.thinking_cleared for r in srv.main_requests] == [(), ()]
        # keep the last thinking turn: the first turn's block is left out of what the model
        # reads, not out of the request (the prefix check passes: nothing was changed)
        msgs.append(_user("prompt 2"))
        sent = _request(model, msgs, keep=1)
        r = _post(srv, sent)
        assert r.status_code == 200, r.text
        rec = srv.main_requests[-1]
        assert rec.thinking_cleared == ((1, 0),) and srv.prefix_failures == []
        view = {**sent, "messages": [msgs[0], {**msgs[1], "content": msgs[1]["content"][1:]}]}
        view["messages"] += msgs[2:]
        cleared = anthropic_prompt_tokens(sent) - anthropic_prompt_tokens(view)
        assert cleared > 0
        assert r.json()["context_management"] == {
            "applied_edits": [
                {
                    "type": CLEAR_THINKING,
                    "cleared_thinking_turns": 1,
                    "cleared_input_tokens": cleared,
                }
            ]
        }
        usage = r.json()["usage"]
        assert _total(usage) == anthropic_prompt_tokens(view)
        # the cache is read up to the cleared block only: the first prompt
        assert usage["cache_read_input_tokens"] == anthropic_prompt_tokens(
            {**sent, "messages": msgs[:1]}
        )
        # the next turn keeps the clearing where it was: the cache after it is read whole
        msgs += [{"role": "assistant", "content": r.json()["content"]}, _user("prompt 3")]
        keep = keep_for_clearing(msgs, 2)
        assert keep == 2
        r2 = _post(srv, _request(model, msgs, keep=keep))
        assert r2.status_code == 200, r2.text
        assert srv.main_requests[-1].thinking_cleared == ((1, 0),)
        assert r2.json()["usage"]["cache_read_input_tokens"] == _total(usage)


def test_leaving_a_thinking_block_out_of_the_request_fails_where_the_edit_passes() -> None:
    # why ctxwrap never removes thinking itself on a model that checks its thinking prefix
    model = "claude-sonnet-5-5"
    with ScriptedModelServer(
        [{"text": f"answer {i}"} for i in range(4)], thinking_rules=True, preserved_thinking=True
    ) as srv:
        msgs = _turns(srv, model, 2)
        msgs.append(_user("prompt 2"))
        removed = [msgs[0], {**msgs[1], "content": msgs[1]["content"][1:]}, *msgs[2:]]
        r = _post(srv, _request(model, removed))
        assert r.status_code == 400 and "bound to a different conversation" in r.text
        r = _post(srv, _request(model, msgs, keep=1))
        assert r.status_code == 200, r.text
        assert srv.main_requests[-1].thinking_cleared == ((1, 0),)


def test_without_the_edit_each_model_keeps_or_drops_earlier_turns_thinking_by_default() -> None:
    for model, cleared in (("claude-sonnet-4-5-20250929", ((1, 0),)), ("claude-opus-4-5", ())):
        with ScriptedModelServer([{"text": "a"}, {"text": "b"}], thinking_rules=True) as srv:
            msgs = _turns(srv, model, 2)
            last = srv.main_requests[-1]
            assert last.thinking_cleared == cleared, model
            assert (_total(last.usage or {}) < anthropic_prompt_tokens(last.body)) == bool(cleared)
            assert msgs[-1]["content"][0]["type"] == "thinking"


@pytest.mark.parametrize(
    ("model", "keep", "beta", "why"),
    [
        ("claude-sonnet-4-6", 1, False, "requires the beta header"),
        ("claude-sonnet-4-6", 0, True, "thinking_turns"),
        ("claude-3-7-sonnet-20250219", "all", True, "not supported"),
    ],
)
def test_a_context_edit_the_api_would_refuse_is_refused(
    model: str, keep: Any, beta: bool, why: str
) -> None:
    with ScriptedModelServer([{"text": "a"}], thinking_rules=True) as srv:
        body = _request(model, [_user("hi")])
        value = keep if keep == "all" else {"type": "thinking_turns", "value": keep}
        body["context_management"] = {"edits": [{"type": CLEAR_THINKING, "keep": value}]}
        r = _post(srv, body, beta=beta)
        assert r.status_code == 400 and why in r.json()["error"]["message"]
        assert r.json()["error"]["type"] == "invalid_request_error"
        # the script step is still there for the next request
        ok = _post(srv, _request("claude-sonnet-4-6", [_user("hi")]))
        assert ok.json()["content"][-1] == {"type": "text", "text": "a"}


def test_a_streamed_reply_says_what_was_cleared_in_its_message_delta() -> None:
    model = "claude-sonnet-4-6"
    with ScriptedModelServer([{"text": "a"}, {"text": "b"}], thinking_rules=True) as srv:
        msgs = _turns(srv, model, 1)
        msgs.append(_user("again"))
        r = _post(srv, _request(model, msgs, keep=1, stream=True))
        assert r.status_code == 200
        deltas = [
            json.loads(line.removeprefix("data: "))
            for line in r.text.splitlines()
            if line.startswith("data: ") and '"message_delta"' in line
        ]
        # one thinking turn before the prompt, kept by keep=1: nothing cleared, said so
        assert [d["context_management"] for d in deltas] == [{"applied_edits": []}]
