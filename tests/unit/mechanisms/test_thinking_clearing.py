"""The old-thinking mechanism's rule (mechanisms/thinking.py) and the proxy's billed view of a
request whose edit it raised (agents/claude/session.billed_body)."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from ctxwrap.agents.claude.session import billed_body
from ctxwrap.engine.thinking import cleared_by_keep, thinking_blocks, with_clear_thinking
from ctxwrap.mechanisms.thinking import ClearingChoice, ClearingState, OldThinking, plan
from ctxwrap.testing.model_server import anthropic_prompt_tokens
from ctxwrap.testing.model_server_thinking import model_view

RULE = OldThinking()


def choice(**kw: Any) -> ClearingChoice:
    base: dict[str, Any] = {
        "per_request": 100.0,
        "rewrite": 5000.0,
        "cold": False,
        "so_far": 3,
        "to_compaction": math.inf,
    }
    return ClearingChoice(**{**base, **kw})


def test_the_payback_rule() -> None:
    assert RULE.pays(choice(cold=True))  # rewritten anyway
    assert not RULE.pays(choice())  # 100 x 10 requests < 5000
    assert RULE.pays(choice(so_far=100))  # a long context runs on: 100 x 50
    assert not RULE.pays(choice(so_far=100, to_compaction=20))  # the agent compacts first
    assert RULE.pays(choice(per_request=500.0))  # 500 x 10 pays the rewrite


def turn(n: int, thinking_chars: int, *, tool: bool = False) -> list[dict[str, Any]]:
    """A human prompt and the answer that thought (a tool loop: two answers)."""
    think = {"type": "thinking", "thinking": "t" * thinking_chars, "signature": f"sig{n}"}
    if not tool:
        return [
            {"role": "user", "content": f"prompt {n}"},
            {"role": "assistant", "content": [think, {"type": "text", "text": f"done {n}"}]},
        ]
    call = {"type": "tool_use", "id": f"toolu_{n}", "name": "Bash", "input": {"command": "ls"}}
    result = {"type": "tool_result", "tool_use_id": f"toolu_{n}", "content": "x" * 200}
    return [
        {"role": "user", "content": f"prompt {n}"},
        {"role": "assistant", "content": [think, call]},
        {"role": "user", "content": [result]},
        {"role": "assistant", "content": [dict(think), {"type": "text", "text": f"done {n}"}]},
    ]


def conversation(
    turns: int, thinking_chars: int, *, first: int | None = None
) -> list[dict[str, Any]]:
    """`turns` answered prompts and a new one; `first`: the first answer's thinking, if not
    `thinking_chars`."""
    out: list[dict[str, Any]] = []
    for n in range(1, turns + 1):
        chars = first if n == 1 and first is not None else thinking_chars
        out += turn(n, chars, tool=n % 2 == 0)
    return [*out, {"role": "user", "content": f"prompt {turns + 1}"}]


def test_little_old_thinking_in_a_warm_cache_is_kept() -> None:
    state = ClearingState()
    for n in range(1, 6):
        keep = plan(
            RULE,
            state,
            conversation(n, 40),
            cold=False,
            tokens_per_char=0.25,
            threshold=167_000,
        )
        assert keep is None
    assert state.point is None and state.requests == 5


def test_a_cold_boundary_clears_the_turns_before_the_latest_that_thought() -> None:
    state = ClearingState()
    messages = conversation(3, 40)
    keep = plan(RULE, state, messages, cold=True, tokens_per_char=0.25, threshold=None)
    assert keep == 1 and state.point == 3
    gone = cleared_by_keep(messages, keep, "claude-sonnet-4-6")
    assert {b.turn for b in gone} == {1, 2}  # the latest turn that thought keeps its own


def test_heavy_thinking_pays_back_while_warm() -> None:
    state = ClearingState()
    # ~25k tokens of thinking in the first answer, little after it: reading it on ten more
    # requests costs more than writing what follows it once
    messages = conversation(2, 40, first=100_000)
    keep = plan(RULE, state, messages, cold=False, tokens_per_char=0.25, threshold=None)
    assert keep == 1 and state.point == 2
    # the same thinking followed by as much again to rewrite does not pay back
    heavy = ClearingState()
    messages = conversation(2, 100_000)
    assert plan(RULE, heavy, messages, cold=False, tokens_per_char=0.25, threshold=None) is None


def test_the_point_is_held_so_the_cleared_part_stays_the_same() -> None:
    state = ClearingState()
    messages = conversation(3, 40)
    plan(RULE, state, messages, cold=True, tokens_per_char=0.25, threshold=None)
    first = {(b.message, b.block) for b in cleared_by_keep(messages, 1, "claude-sonnet-4-6")}
    for n in range(4, 8):  # later turns, warm: no new clearing pays back, the old one stays
        longer = conversation(n, 40)
        keep = plan(RULE, state, longer, cold=False, tokens_per_char=0.25, threshold=None)
        assert keep == n - 2  # the turns from the point on that thought
        gone = {(b.message, b.block) for b in cleared_by_keep(longer, keep, "claude-sonnet-4-6")}
        assert gone == first
    assert state.point == 3


def test_nothing_to_leave_out_sends_the_agents_own_edit() -> None:
    state = ClearingState()
    one = conversation(1, 40)  # one turn thought: it keeps its thinking
    assert plan(RULE, state, one, cold=True, tokens_per_char=0.25, threshold=None) is None
    assert plan(RULE, state, [], cold=True, tokens_per_char=0.25, threshold=None) is None


@pytest.mark.parametrize("keep", [1, 2, 3])
def test_the_billed_view_is_what_the_provider_counts(keep: int) -> None:
    body = {
        "model": "claude-sonnet-4-6",
        "messages": conversation(4, 300),
        "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
    }
    sent = with_clear_thinking(body, keep)
    billed = billed_body(sent, keep)
    view = model_view(sent, anthropic_prompt_tokens)
    assert billed["messages"] == view.body["messages"]
    assert sent["messages"] == body["messages"]  # the request itself is not touched
    left = len(thinking_blocks(billed["messages"]))
    assert left == len(thinking_blocks(body["messages"])) - len(view.cleared)
    assert view.response is not None
    cleared = view.response["applied_edits"][0]["cleared_input_tokens"]
    assert cleared == anthropic_prompt_tokens(sent) - anthropic_prompt_tokens(billed)


def test_a_resumed_session_keeps_its_clearing_points(tmp_path: Any) -> None:
    from ctxwrap.agents.claude.session import _load_clearings, _save_clearings

    path = tmp_path / "s.thinking.json"
    _save_clearings(path, {"a": ClearingState(point=3), "b": ClearingState()})
    loaded = _load_clearings(path)
    assert {k: s.point for k, s in loaded.items()} == {"a": 3}
    path.write_text("{not json")
    assert _load_clearings(path) == {}  # damaged: decided again, never an error
    path.write_text('{"a": "3", "b": true, "c": 2}')
    assert {k: s.point for k, s in _load_clearings(path).items()} == {"c": 2}


def test_a_rewrite_inside_an_earlier_one_starts_where_that_one_did() -> None:
    from ctxwrap.mechanisms.thinking import rewrite_start

    # the current content began at the request of 10 messages, written anew from message 4:
    # a change at 12 finds that request's entry before it; one at 6 finds no entry of the new
    # content before it (the entries of requests 5..9 hold the old one)
    assert rewrite_start(12, 10, 4) == 12
    assert rewrite_start(6, 10, 4) == 4
    assert rewrite_start(6, 10, 0) == 0  # after a cold boundary: everything
    # a change before what that write began with: from there (it once said 4, and a clearing
    # of earlier thinking looked free where it rewrote the whole conversation since)
    assert rewrite_start(2, 10, 4) == 2


def test_a_cold_boundary_resets_the_cache_view() -> None:
    state = ClearingState(view_from=3, view_rewritten=2)
    plan(RULE, state, conversation(2, 40), cold=True, tokens_per_char=0.25, threshold=None)
    assert (state.view_from, state.view_rewritten) == (len(conversation(2, 40)), 0)


def _claude_request(turns: int) -> dict[str, Any]:
    return {
        "model": "claude-sonnet-4-6",
        "tools": [{"name": "Bash"}],
        "messages": conversation(turns, 40, first=100_000),  # the first turn thought at length
        "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
    }


def test_the_proxy_stops_clearing_where_the_provider_counts_turns_otherwise() -> None:
    """The response says how many thinking turns the edit cleared; where that is not what
    the proxy's keep meant, a held keep would clear a different part at every request (a
    cache rewrite each time): the proxy sends the agent's own edit from then on."""
    from ctxwrap.agents.claude import anthropic_wire as wire
    from ctxwrap.agents.claude.session import ClaudeSession
    from ctxwrap.engine.thinking import CONTEXT_MANAGEMENT_BETA
    from tests.unit.agents.test_claude_adapter import FakeDaemon

    # (the account's bound on a warm rewrite off: this is about the provider's count)
    daemon = FakeDaemon({"rewrite_within_savings": False})
    sess = ClaudeSession("s", daemon=daemon, state_file=None, aux=None, start_info={})
    sess.betas = CONTEXT_MANAGEMENT_BETA
    first = _claude_request(3)
    sess.prepare(first)  # the first turn's thinking pays its rewrite back: cleared
    keep = sess.thinking_keep()
    assert keep == 1 and first["context_management"]["edits"][0]["keep"]["value"] == 1

    # the provider's answer, as the stream carries it: it cleared 2 turns, as meant
    reader = wire.UsageReader(True, "")
    delta = {
        "type": "message_delta",
        "usage": {"output_tokens": 5},
        "context_management": {
            "applied_edits": [
                {"type": "clear_thinking_20251015", "cleared_thinking_turns": 2},
            ]
        },
    }
    reader.feed(f"event: message_delta\ndata: {json.dumps(delta)}\n\n".encode())
    assert reader.cleared_thinking_turns == 2
    sess.check_cleared(first, keep, reader.cleared_thinking_turns)
    later = _claude_request(4)
    sess.prepare(later)
    assert sess.thinking_keep() == 2  # still clearing, the same turns

    # an answer that cleared 3 where 2 were meant: the API counts otherwise
    sess.check_cleared(later, 2, 3)
    assert sess.thinking_mismatch is not None
    again = _claude_request(5)
    sess.prepare(again)
    assert sess.thinking_keep() is None
    assert again["context_management"]["edits"][0]["keep"] == "all"


def test_the_proxy_clears_while_warm_only_as_far_as_the_sessions_account_allows() -> None:
    """A warm clearing is a cache rewrite: with nothing saved yet and little paid by plain, the
    session that ended right after it would cost more than plain (mechanisms/budget.py). It
    waits; once the daemon's turn_end totals show the session ahead by the rewrite's cost, the
    same request clears."""
    from ctxwrap.agents.claude.session import ClaudeSession
    from ctxwrap.engine.thinking import CONTEXT_MANAGEMENT_BETA
    from tests.unit.agents.test_claude_adapter import FakeDaemon

    sess = ClaudeSession("s", daemon=FakeDaemon(), state_file=None, aux=None, start_info={})
    sess.betas = CONTEXT_MANAGEMENT_BETA
    waits = _claude_request(3)
    sess.prepare(waits)
    assert sess.thinking_keep() is None
    assert waits["context_management"]["edits"][0]["keep"] == "all"  # the agent's own edit

    sess._took_totals({"totals": {"plain_cost_weighted": 2_000_000.0, "cost_weighted": 0.0}})
    assert sess.savings.free == 2_000_000.0
    goes = _claude_request(3)
    sess.prepare(goes)
    assert sess.thinking_keep() == 1
    charged = sess.savings.charged
    assert 0 < charged <= 2_000_000.0  # charged until totals hold its request
    # totals of an earlier request, arriving after this one was sent: still charged
    sess._took_totals({"totals": {"plain_cost_weighted": 2_000_000.0, "cost_weighted": 9.0}})
    assert sess.savings.charged == charged
    # the totals it was recorded with hold it
    totals = {"totals": {"plain_cost_weighted": 2_000_000.0, "cost_weighted": 9.0}}
    sess._took_totals(totals, sess._request_key())
    assert sess.savings.charged == 0.0
    # a reply without usable totals (no daemon, an old one, a number that is not one) leaves
    # the account as it was: it never opens a bet
    for reply in (None, {"totals": None}, {"totals": {"plain_cost_weighted": "1e9"}},
                  {"totals": {"plain_cost_weighted": float("inf"), "cost_weighted": 0.0}},
                  {"totals": {"plain_cost_weighted": float("nan"), "cost_weighted": 0.0}}):  # fmt: skip
        sess._took_totals(reply)
        assert (sess.savings.ahead, sess.savings.plain) == (2_000_000.0 - 9.0, 2_000_000.0)
