"""Focused checks of decide_edits' rules and the edit JSON round trip."""

from __future__ import annotations

from typing import Any

from ctxwrap.engine.edits import (
    Edit,
    RemoveEdit,
    StripEditEdit,
    StripWriteEdit,
    Tail,
    TailMessage,
    TailToolCall,
    TombstoneEdit,
    args_sig,
    decide_edits,
    describe_tail,
    edit_from_json,
    edit_to_json,
    parse_edits,
)


def round_(cid: str, name: str = "read", *, text: bool = False, **args: Any) -> list[Any]:
    blocks: list[dict[str, Any]] = [{"type": "text", "text": "Reading."}] if text else []
    blocks.append({"type": "toolCall", "id": cid, "name": name, "arguments": args})
    return [
        {"role": "assistant", "content": blocks},
        {"role": "toolResult", "toolCallId": cid, "toolName": name,
         "content": [{"type": "text", "text": "x" * 500}], "isError": False},
    ]  # fmt: skip


def test_only_explicit_drop_hides() -> None:
    msgs = [{"role": "user", "content": []}, *round_("a", path="1"), *round_("b", path="2")]
    tail = describe_tail(msgs, set())
    for tag in ["RETAIN", "PENDING", "drop", None, 1, {"decision": "DROP"}]:
        assert decide_edits(tail, {"a": tag, "b": tag}) == []
    assert [e.toolCallId for e in decide_edits(tail, {"a": "DROP"})] == ["a"]


def test_seen_results_are_never_edited() -> None:
    msgs = [*round_("a", path="1"), *round_("b", path="2")]
    tail = describe_tail(msgs, {"a"})
    assert tail.start == 2
    assert [e.toolCallId for e in decide_edits(tail, {"a": "DROP", "b": "DROP"})] == ["b"]


def test_loop_guard_retains_a_repeated_call() -> None:
    tail = describe_tail(round_("b", path="same"), set())
    sig = args_sig("read", {"path": "same"})
    assert tail.messages[0].toolCalls is not None
    assert tail.messages[0].toolCalls[0].argsSig == sig
    assert decide_edits(tail, {"b": "DROP"}, dropped_sigs={sig}) == []


def test_tombstone_mode_keeps_structure_and_counts_savings() -> None:
    (edit,) = decide_edits(describe_tail(round_("a", path="1"), set()), {"a": "DROP"})
    assert isinstance(edit, TombstoneEdit)
    assert "\n" not in edit.text
    assert edit.savedChars == 500 - len(edit.text)


def test_silent_never_repeats_the_previous_request_nor_ends_on_assistant() -> None:
    for text in (False, True):
        tail = describe_tail(round_("a", text=text, path="1"), set())
        edits = decide_edits(tail, {"a": "DROP"}, mode="silent")
        assert [type(e) for e in edits] == [TombstoneEdit]


def test_silent_suffix_always_contains_the_last_round() -> None:
    # Even with other new messages in the tail, the suffix holds the last assistant message
    # and everything after it, so removing it would repeat the previous request: tombstones.
    call = TailToolCall(id="a", name="read", argsSig="s", argsChars=7)
    tail = Tail(
        start=0,
        messages=[
            TailMessage(role="assistant", toolCalls=[], hasText=True),
            TailMessage(role="user"),
            TailMessage(role="assistant", toolCalls=[call], hasText=False),
            TailMessage(role="toolResult", toolCallId="a", toolName="read", chars=90,
                        isError=False),
        ],
    )  # fmt: skip
    silent = decide_edits(tail, {"a": "DROP"}, mode="silent")
    assert silent == decide_edits(tail, {"a": "DROP"}, mode="tombstone")
    assert [type(e) for e in silent] == [TombstoneEdit]


def test_write_threshold_is_in_utf8_bytes() -> None:
    body = "é" * 200  # 200 chars, 400 bytes
    msgs = round_("w", "write", path="f", content=body)
    (edit,) = decide_edits(describe_tail(msgs, set()), {}, write_min_bytes=400)
    assert isinstance(edit, StripWriteEdit)
    assert "400 bytes, 1 lines" in edit.text
    assert decide_edits(describe_tail(msgs, set()), {}, write_min_bytes=401) == []


def test_an_edit_is_stripped_only_with_its_result_applied_in_the_tail() -> None:
    old = "old line of text that the edit replaces\n" * 10  # 400 chars
    msgs = round_("e", "edit", path="f", oldText=old, newText="new\n")
    (edit,) = decide_edits(describe_tail(msgs, set()), {}, edit_min_chars=300)
    assert isinstance(edit, StripEditEdit) and edit.minChars == 300
    assert edit.savedChars == 400 - len(edit.text)
    assert decide_edits(describe_tail(msgs, set()), {}) == []  # off by default
    assert decide_edits(describe_tail(msgs, set()), {}, edit_min_chars=401) == []
    # the call without its result (an aborted round): nothing is known to have changed
    assert decide_edits(describe_tail(msgs[:1], set()), {}, edit_min_chars=300) == []
    # a minimum below the marker's length is raised to it: a strip never grows a call
    tiny = round_("t", "edit", path="f", oldText="x" * 50, newText="y")
    assert decide_edits(describe_tail(tiny, set()), {}, edit_min_chars=1) == []


def test_an_edit_strip_with_a_bad_minimum_is_ignored() -> None:
    base = {"kind": "strip_edit", "toolCallId": "e", "text": "m"}
    assert edit_from_json({**base, "minChars": 300.0}) == StripEditEdit(
        toolCallId="e", text="m", minChars=300
    )
    for bad in (None, "300", 0, -5, True, 1.5):
        assert edit_from_json({**base, "minChars": bad}) is None


def test_edit_json_round_trip_and_leniency() -> None:
    edits: list[Edit] = [
        TombstoneEdit(toolCallId="a", text="t", savedChars=3),
        RemoveEdit(toolCallId="b", savedChars=-1),
        StripWriteEdit(toolCallId="c", text="m", savedChars=9),
    ]
    raw = [edit_to_json(e) for e in edits]
    assert raw[0] == {"kind": "tombstone", "toolCallId": "a", "text": "t", "savedChars": 3}
    assert parse_edits(raw) == edits
    assert parse_edits([None, {"kind": "tombstone", "toolCallId": "x"}, {"kind": "x"}]) == []
    assert parse_edits("nope") == []
    five = edit_from_json({"kind": "remove", "toolCallId": "a", "savedChars": 5.0})
    assert five == RemoveEdit(toolCallId="a", savedChars=5)
    odd = edit_from_json({"kind": "remove", "toolCallId": "a", "savedChars": "5"})
    assert odd == RemoveEdit(toolCallId="a", savedChars=0)
