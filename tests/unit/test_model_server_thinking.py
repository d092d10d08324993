"""The scripted server's preserved-thinking check (ScriptedModelServer(preserved_thinking=True))
is what the e2e tests measure ctxwrap against: it must pass an append-only conversation and
fail one whose earlier content changed, as the API does."""

from __future__ import annotations

from typing import Any

from ctxwrap.testing.model_server import thinking_prefix_failure, thinking_prefix_key


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
