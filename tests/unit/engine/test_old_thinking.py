"""engine/thinking.py's old-thinking helpers (issue 41, item 3): which thinking blocks of an
Anthropic request belong to earlier turns, which the API leaves out for a `keep`, and the
`clear_thinking_20251015` edit read and written as the provider takes it."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from ctxwrap.engine.thinking import (
    CLEAR_THINKING,
    ThinkingBlock,
    accepts_context_editing,
    clear_thinking_keep,
    cleared_by_keep,
    clearing_point,
    is_human_prompt,
    keep_for_clearing,
    keeps_earlier_thinking,
    old_thinking,
    thinking_blocks,
    turns,
    with_clear_thinking,
)


def _think(sig: str = "s" * 400, text: str = "") -> dict[str, Any]:
    return {"type": "thinking", "thinking": text, "signature": sig}


def _call(i: int) -> dict[str, Any]:
    return {"type": "tool_use", "id": f"t{i}", "name": "Read", "input": {}}


def _result(i: int) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{i}"}]}


def _conversation() -> list[dict[str, Any]]:
    """Three turns that think; the third is a tool loop in progress."""
    return [
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": [_think(), _call(1)]},
        _result(1),
        {"role": "assistant", "content": [_think(), {"type": "text", "text": "done"}]},
        {"role": "user", "content": [{"type": "text", "text": "second"}]},
        {"role": "assistant", "content": [{"type": "redacted_thinking", "data": "d" * 80}]},
        {"role": "user", "content": [_result(2)["content"][0], {"type": "text", "text": "x"}]},
        {"role": "assistant", "content": [_think(text="abcdefghij"), _call(3)]},
        _result(3),
    ]


def test_a_turn_starts_at_a_user_message_that_is_more_than_tool_results() -> None:
    msgs = _conversation()
    assert [is_human_prompt(m) for m in msgs] == [
        True, False, False, False, True, False, True, False, False,
    ]  # fmt: skip
    assert turns(msgs) == [1, 1, 1, 1, 2, 2, 3, 3, 3]


def test_old_thinking_is_every_block_before_the_last_human_prompt() -> None:
    msgs = _conversation()
    blocks = thinking_blocks(msgs)
    assert [(b.message, b.block, b.turn) for b in blocks] == [
        (1, 0, 1),
        (3, 0, 1),
        (5, 0, 2),
        (7, 0, 3),
    ]
    old = old_thinking(msgs)
    assert [(b.message, b.turn) for b in old] == [(1, 1), (3, 1), (5, 2)]  # not the loop's own
    # signature-only blocks count at 4 signature chars a token, a kept text at 4 chars a token
    assert [b.tokens for b in blocks] == [100, 100, 20, 3]
    assert ThinkingBlock(0, 0, 0, 0, 0).tokens == 0
    assert old_thinking([{"role": "user", "content": "hi"}]) == []


@pytest.mark.parametrize(
    ("model", "keeps"),
    [
        ("claude-opus-4-1-20250805", False),
        ("claude-opus-4-5-20251101", True),
        ("claude-sonnet-4-5-20250929", False),
        ("claude-sonnet-4-6", True),
        ("claude-haiku-4-5-20251001", False),
        ("claude-haiku-5-5", True),
        ("claude-fable-5-1", True),
        ("anthropic/claude-sonnet-4.6", True),  # OpenRouter's naming
        ("claude-3-7-sonnet-20250219", False),
        ("claude-newfamily-1", True),  # not placed: the larger bill
        ("gpt-5", True),
    ],
)
def test_which_models_keep_earlier_turns_thinking_by_default(model: str, keeps: bool) -> None:
    assert keeps_earlier_thinking(model) is keeps


def test_context_editing_is_for_the_claude_4_models_and_later() -> None:
    assert accepts_context_editing("claude-sonnet-4-6")
    assert accepts_context_editing("claude-opus-5-5")
    assert not accepts_context_editing("claude-3-7-sonnet-20250219")
    assert not accepts_context_editing("gpt-5")


def test_the_keep_of_a_clear_thinking_edit_as_the_api_reads_it() -> None:
    assert clear_thinking_keep({}) is None
    claude_code = {"context_management": {"edits": [{"type": CLEAR_THINKING, "keep": "all"}]}}
    assert clear_thinking_keep(claude_code) == "all"
    turns2 = {"type": CLEAR_THINKING, "keep": {"type": "thinking_turns", "value": 2}}
    other = {"type": "clear_tool_uses_20250919"}
    assert clear_thinking_keep({"context_management": {"edits": [turns2, other]}}) == 2
    # without a keep: the last thinking turn
    assert clear_thinking_keep({"context_management": {"edits": [{"type": CLEAR_THINKING}]}}) == 1
    assert clear_thinking_keep({"context_management": {"edits": [other]}}) is None
    for bad in (
        {"edits": "all"},
        {"edits": [{"keep": "all"}]},
        {"edits": [{"type": CLEAR_THINKING, "keep": {"type": "thinking_turns", "value": 0}}]},
        {"edits": [{"type": CLEAR_THINKING, "keep": {"type": "turns", "value": 1}}]},
        {"edits": [{"type": CLEAR_THINKING, "keep": "some"}]},
        {"edits": [turns2, turns2]},
    ):
        with pytest.raises(ValueError, match="context_management"):
            clear_thinking_keep({"context_management": bad})


def test_what_the_api_leaves_out_for_each_keep() -> None:
    msgs = _conversation()

    def cleared(keep: Any, model: str = "claude-sonnet-4-6") -> list[int]:
        return [b.message for b in cleared_by_keep(msgs, keep, model)]

    assert cleared("all") == [] and cleared(3) == []
    assert cleared(2) == [1, 3]  # the last two turns that thought keep theirs
    assert cleared(1) == [1, 3, 5]
    assert cleared(None) == []  # Sonnet 4.6 keeps every turn's by default
    assert cleared(None, "claude-sonnet-4-5-20250929") == [1, 3, 5]  # only the loop's
    assert cleared("all", "claude-sonnet-4-5-20250929") == []  # Claude Code asks for all


def test_a_clearing_point_stays_where_it_was_as_turns_go_on() -> None:
    msgs = _conversation()  # turns 1, 2 and 3 thought; turn 3 is in progress
    assert keep_for_clearing(msgs, 3) == 1  # clear turns 1 and 2
    assert keep_for_clearing(msgs, 2) == 2
    assert keep_for_clearing(msgs, 1) == "all"  # nothing before turn 1 to clear
    # a new prompt (turn 4) has not thought yet: keep >= 1 keeps turn 3's thinking, so the
    # point a policy can store is turn 3, and the same cleared part follows from it once
    # turn 4 has thought
    prompt = [*msgs, {"role": "assistant", "content": [_think()]}, {"role": "user", "content": "y"}]
    assert turns(prompt)[-1] == 4
    point = clearing_point(prompt, 4)
    assert point == 3
    with pytest.raises(ValueError, match="clearing_point"):
        keep_for_clearing(prompt, 4)
    before = [b.message for b in cleared_by_keep(prompt, keep_for_clearing(prompt, point), "x")]
    later = [*prompt, {"role": "assistant", "content": [_think(), _call(9)]}, _result(9)]
    assert keep_for_clearing(later, point) == 2
    after = [b.message for b in cleared_by_keep(later, keep_for_clearing(later, point), "x")]
    assert before == after == [1, 3, 5]
    assert clearing_point(msgs, 1) is None  # nothing before turn 1
    assert clearing_point([{"role": "user", "content": "hi"}], 2) is None  # nothing thought


def test_setting_the_keep_of_a_request() -> None:
    body = {
        "model": "claude-sonnet-4-6",
        "context_management": {
            "edits": [{"type": CLEAR_THINKING, "keep": "all"}, {"type": "clear_tool_uses_20250919"}]
        },
    }
    before = copy.deepcopy(body)
    out = with_clear_thinking(body, 2)
    assert body == before  # not changed in place
    assert out["context_management"]["edits"] == [
        {"type": CLEAR_THINKING, "keep": {"type": "thinking_turns", "value": 2}},
        {"type": "clear_tool_uses_20250919"},
    ]
    assert clear_thinking_keep(out) == 2
    added = with_clear_thinking({"model": "m", "context_management": {"edits": [{"type": "x"}]}}, 1)
    assert added["context_management"]["edits"][0]["type"] == CLEAR_THINKING  # listed first
    assert clear_thinking_keep(with_clear_thinking({}, "all")) == "all"
