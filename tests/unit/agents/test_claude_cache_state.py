"""The Claude Code proxy's cold-boundary rule and its check of the daemon's masks."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from ctxwrap.agents._proxy.cache_state import (
    MAX_CONVERSATIONS,
    CacheState,
    acceptable_masks,
    cold_reason,
    dump_states,
    head_key,
    load_states,
    shared_prefix_chars,
    tools_key,
    variant_key,
)
from ctxwrap.agents.claude import anthropic_wire as wire


def state(at: float, model: str = "m", tools: str = "t") -> CacheState:
    return CacheState(at, model, tools)


def test_cold_reasons() -> None:
    h = "head"
    prev = state(100.0)
    states = {variant_key(h, prev): prev}

    def reason(now: CacheState, sts: dict[str, CacheState] = states) -> str | None:
        return cold_reason(sts, h, now, ttl_s=300)

    assert reason(state(101.0)) is None
    assert reason(state(400.5)) == "idle"
    assert reason(state(101.0, model="n")) == "model"
    assert reason(state(101.0, tools="u")) == "tools"
    # going back to a prefix used within the TTL is warm: a fork that alternates with the
    # main conversation is one boundary, not one per switch
    both = {**states, variant_key(h, state(102.0, tools="u")): state(102.0, tools="u")}
    assert reason(state(103.0), both) is None
    assert reason(state(103.0, tools="u"), both) is None
    # a first message never sent before: compaction when the session had requests ...
    assert cold_reason(states, "other", state(101.0), ttl_s=300) == "compaction"
    # ... and unknown (not cold) for the first request of a session without recorded state
    assert cold_reason({}, h, state(101.0), ttl_s=300) is None


def test_keys_ignore_the_moving_cache_marker() -> None:
    a = [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    b = [{"role": "user", "content": [{"type": "text", "text": "hi",
                                         "cache_control": {"type": "ephemeral"}}]}]  # fmt: skip
    assert head_key(a) == head_key(b) != head_key([{"role": "user", "content": "other"}])
    tools = [{"name": "Read", "input_schema": {}}]
    assert tools_key(tools) == tools_key([{**tools[0], "cache_control": {"type": "ephemeral"}}])
    assert tools_key(tools) != tools_key([{"name": "Bash", "input_schema": {}}])
    system = [{"type": "text", "text": "You are Claude Code."}]
    assert tools_key(tools, system) != tools_key(tools, [{"type": "text", "text": "other"}])
    marked = [{**system[0], "cache_control": {"type": "ephemeral"}}]
    assert tools_key(tools, system) == tools_key(tools, marked)
    assert head_key([]) is None


def test_states_round_trip_bounded_and_tolerant() -> None:
    states = {f"h{i}": state(float(i), tools=f"t{i}") for i in range(MAX_CONVERSATIONS + 5)}
    loaded = load_states(dump_states(states))
    assert len(loaded) == MAX_CONVERSATIONS
    assert min(s.at for s in loaded.values()) == 5.0  # the oldest are forgotten
    assert loaded["h20"] == states["h20"]
    garbage: Any = {"heads": {"a": [1, 2], "b": ["x", None, None], "c": [True, "m", "t"],
                              "d": [3.5, 7, None]}}  # fmt: skip
    assert load_states(garbage) == {"d": CacheState(3.5, None, None)}
    assert load_states([1]) == {}


def use(cid: str) -> dict[str, Any]:
    return {"role": "assistant", "content": [{"type": "tool_use", "id": cid, "name": "Read",
                                              "input": {"file_path": "/f"}}]}  # fmt: skip


def res(cid: str, *, error: bool = False) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": cid, "content": "x" * 10}
    if error:
        block["is_error"] = True
    return {"role": "user", "content": [block]}


def test_acceptable_masks_checks_every_condition() -> None:
    messages = [
        {"role": "user", "content": "go"},
        use("ok"), res("ok"),
        use("err"), res("err", error=True),
        use("unseen"), res("unseen"),
        use("edited"), res("edited"),
        res("orphan"),  # no tool_use
        res("early"), use("early"),  # a result before its call
        use("dup"), res("dup"), res("dup"),
    ]  # fmt: skip
    wanted = ["ok", "err", "unseen", "edited", "orphan", "early", "dup", "absent"]
    seen = {"ok", "err", "edited", "orphan", "early", "dup", "absent"}
    assert acceptable_masks(wire.to_neutral(messages).messages, wanted, seen, {"edited"}) == {"ok"}
    assert acceptable_masks(wire.to_neutral(messages).messages, [], seen, set()) == set()


def test_reminders_with_tool_results_start_no_task_in_the_mask_history() -> None:
    messages = [
        {"role": "user", "content": "task"},
        use("a"),
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "a", "content": "r"},
            {"type": "text", "text": "<system-reminder>x</system-reminder>"}]},
        {"role": "user", "content": [{"type": "text", "text": "next task"}]},
    ]  # fmt: skip
    plain = [m["role"] for m in wire.to_neutral(messages).messages]
    masked = [m["role"] for m in wire.to_neutral(messages, notes_role="custom").messages]
    assert plain == ["user", "assistant", "toolResult", "user", "user"]
    assert masked == ["user", "assistant", "toolResult", "custom", "user"]


@given(
    st.lists(
        st.tuples(st.sampled_from(["a", "b", "c", "d"]), st.booleans(), st.booleans()),
        max_size=12,
    ),
    st.sets(st.sampled_from(["a", "b", "c", "d", "z"])),
    st.sets(st.sampled_from(["a", "b", "c", "d"])),
)
def test_accepted_masks_are_always_paired_seen_unedited_non_errors(
    items: list[tuple[str, bool, bool]], seen: set[str], edited: set[str]
) -> None:
    messages: list[Any] = []
    for cid, with_call, error in items:
        if with_call:
            messages.append(use(cid))
        messages.append(res(cid, error=error))
    ok = acceptable_masks(
        wire.to_neutral(messages).messages, ["a", "b", "c", "d", "z"], seen, edited
    )
    for cid in ok:
        assert cid in seen and cid not in edited
        positions = [
            (i, b)
            for i, m in enumerate(messages)
            for b in m["content"]
            if b.get("tool_use_id") == cid
        ]
        assert len(positions) == 1
        i, block = positions[0]
        assert not block.get("is_error")
        assert any(
            b.get("id") == cid
            for m in messages[:i]
            for b in m["content"]
            if b["type"] == "tool_use"
        )


def test_a_mask_applies_like_a_tombstone_and_only_once() -> None:
    from ctxwrap.engine.edits import MaskEdit, TombstoneEdit

    block = {"type": "tool_result", "tool_use_id": "a", "content": [{"type": "text", "text": "big"}],
             "cache_control": {"type": "ephemeral"}}  # fmt: skip
    body: dict[str, Any] = {"messages": [use("a"), {"role": "user", "content": [block]}]}
    mask = MaskEdit(toolCallId="a", text="[masked]", savedChars=1, reason="earlier_task")
    late = TombstoneEdit(toolCallId="a", text="[tomb]", savedChars=1)
    assert wire.apply_edits(body, {"a": [mask, late]}) == [mask]
    assert body["messages"][1]["content"][0] == {
        "type": "tool_result", "tool_use_id": "a", "content": "[masked]",
        "cache_control": {"type": "ephemeral"}}  # fmt: skip


def test_the_cache_lifetime_a_request_asked_for() -> None:
    def body(marker: dict[str, Any] | None) -> dict[str, Any]:
        block: dict[str, Any] = {"type": "text", "text": "hi"}
        if marker is not None:
            block["cache_control"] = marker
        result = {"type": "tool_result", "tool_use_id": "t1", "content": [dict(block)]}
        return {
            "system": [{"type": "text", "text": "sys"}],
            "messages": [{"role": "user", "content": [result]}],
        }

    # Claude Code 2.1 with a subscription login marks its blocks for the 1-hour cache
    assert wire.marked_ttl_s(body({"type": "ephemeral", "ttl": "1h"})) == 3600.0
    assert wire.marked_ttl_s(body({"type": "ephemeral", "ttl": "5m"})) == 300.0
    assert wire.marked_ttl_s(body({"type": "ephemeral"})) == 300.0  # Anthropic's default
    assert wire.marked_ttl_s(body(None)) is None
    assert wire.marked_ttl_s(body({"type": "ephemeral", "ttl": "24h"})) is None  # not known here
    assert wire.marked_ttl_s(body({"type": "ephemeral", "ttl": 3600})) is None
    # the longest marker wins: the system prompt's 1 hour, a message's default
    mixed = body({"type": "ephemeral"})
    mixed["system"][0]["cache_control"] = {"type": "ephemeral", "ttl": "1h"}
    assert wire.marked_ttl_s(mixed) == 3600.0
    assert wire.marked_ttl_s("not a body") is None
    # only the newest messages carry markers: an old one is not walked on every request
    old = body({"type": "ephemeral", "ttl": "1h"})
    old["messages"] += [{"role": "user", "content": "more"}] * 4
    assert wire.marked_ttl_s(old) is None


def test_the_prefix_two_requests_share_is_what_the_cache_reads() -> None:
    """`sent_prefix_chars` of the Claude Code proxy's llm_call: the leading blocks (tools,
    system, whole messages) equal to the previous request's, the moving marker ignored."""
    mark = {"type": "ephemeral"}
    tools = [{"name": "Bash", "input_schema": {"type": "object"}}]
    system = [{"type": "text", "text": "You are Claude Code.", "cache_control": mark}]

    def msg(role: str, text: str, marked: bool = False) -> dict[str, Any]:
        block: dict[str, Any] = {"type": "text", "text": text}
        if marked:
            block["cache_control"] = mark
        return {"role": role, "content": [block]}

    first = {"tools": tools, "system": system, "messages": [msg("user", "go " * 50, True)]}
    second = {
        **first,
        "messages": [msg("user", "go " * 50), msg("assistant", "ok"), msg("user", "more", True)],
    }
    a, b = wire.prefix_blocks(first), wire.prefix_blocks(second)
    size = wire.measure(second)
    # the first message lost its marker: still shared; the two new ones are not
    shared = shared_prefix_chars(a, b)
    assert shared == size.tools + size.system + len(
        json.dumps(second["messages"][0], separators=(",", ":"))
    )
    assert shared_prefix_chars(b, b) == sum(n for _, n in b)
    # an earlier message rewritten (a mask): only what comes before it is shared
    masked = {**second, "messages": [msg("user", "[masked]"), *second["messages"][1:]]}
    assert shared_prefix_chars(b, wire.prefix_blocks(masked)) == size.tools + size.system
    # another tool list: nothing is
    assert shared_prefix_chars(b, wire.prefix_blocks({**second, "tools": []})) == 0
    assert shared_prefix_chars([], b) == 0
