"""The Messages wire's fast tail (issue 43 item 3): `anthropic_wire.tail_of` converts only
what follows the last message that references a seen id, and must describe exactly the tail
and the length that the whole neutral view gives."""

from __future__ import annotations

from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from ctxwrap.agents.claude import anthropic_wire as wire
from ctxwrap.engine.edits import describe_tail

IDS = ["a", "b", "c", "d", "e"]


def _block(kind: str, cid: str, name: str) -> Any:
    if kind == "use":
        return {"type": "tool_use", "id": cid, "name": name, "input": {"file_path": "/f"}}
    if kind == "result":
        return {"type": "tool_result", "tool_use_id": cid, "content": f"out {cid}"}
    if kind == "text":
        return {"type": "text", "text": "<system-reminder>x</system-reminder>"}
    return "not a block"


blocks = st.lists(
    st.builds(
        _block,
        st.sampled_from(["use", "result", "text", "junk"]),
        st.sampled_from(IDS),
        st.sampled_from(["Read", "Bash", "Write", "Grep"]),
    ),
    max_size=4,
)
messages = st.lists(
    st.one_of(
        st.builds(lambda c: {"role": "assistant", "content": c}, blocks),
        st.builds(lambda c: {"role": "user", "content": c}, blocks),
        st.just({"role": "user", "content": "a prompt"}),
        st.just({"role": "assistant", "content": "plain text"}),
        st.just("not a message"),
    ),
    max_size=14,
)


@settings(max_examples=400, deadline=None)
@given(messages, st.sets(st.sampled_from(IDS)))
@example(  # a tool_use in a user message names no call: the result's name is the earlier call's
    [
        {"role": "assistant", "content": [_block("use", "a", "Read")]},
        {
            "role": "user",
            "content": [
                _block("use", "a", "Read"),
                _block("result", "b", ""),
                _block("result", "a", ""),
            ],
        },
    ],
    {"b"},
)
def test_the_fast_tail_is_the_whole_views_tail(items: list[Any], seen: set[str]) -> None:
    whole = wire.to_neutral(items).messages
    tail, count, built = wire.tail_of(items, seen)
    assert tail == describe_tail(whole, seen)
    assert count == len(whole)
    assert built is None or built.messages == whole


def test_a_request_that_adds_a_round_converts_only_that_round() -> None:
    history: list[Any] = [{"role": "user", "content": "go"}]
    for i in range(50):
        cid = f"t{i}"
        history.append({"role": "assistant", "content": [_block("use", cid, "Read")]})
        history.append({"role": "user", "content": [_block("result", cid, "")]})
    seen = {f"t{i}" for i in range(49)}
    tail, count, built = wire.tail_of(history, seen)
    assert built is None  # the whole view was not built
    assert count == 101 and tail.start == 99
    assert [m.role for m in tail.messages] == ["assistant", "toolResult"]
    assert tail.messages[1].toolName == "read"
