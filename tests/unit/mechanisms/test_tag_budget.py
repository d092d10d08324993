"""The tagger's budget (invariant 10): a tag call goes out only while the session is ahead of
plain by at least its cost, so a session in which nothing else saves never pays for tags.

The daemon is the real one on a real store; the budget comes from the totals its own
turn_end computes (the figures of `ctxwrap stats`), not from a value set by hand.
"""

from __future__ import annotations

import os
from pathlib import Path

from ctxwrap import protocol as P
from ctxwrap.config import load_config
from ctxwrap.daemon.service import Daemon
from ctxwrap.mechanisms.amnesia import TagState, tag_cost
from ctxwrap.mechanisms.budget import Savings, aux_within

SID = "budget-1"
SOURCE = "def parse_config(path):\n" + "".join(f"    # detail {i}: keep me\n" for i in range(120))


def _daemon(tmp_path: Path, **env: str) -> Daemon:
    loaded = load_config(tmp_path / "absent.toml", environ=env)
    return Daemon(loaded, socket=tmp_path / "s.sock", state_dir=tmp_path / "state")


def _start(d: Daemon) -> None:
    model = P.ModelRef(provider="anthropic", id="claude-sonnet-4-5", api="anthropic-messages")
    d.session_start(
        P.SessionStart(session_id=SID, cwd="/w", pid=os.getpid(), agent="claude", model=model)
    )
    d.prompt_start(P.PromptStart(session_id=SID, prompt="fix the parser"))


def _call(d: Daemon, i: int, saved_bash: int) -> P.SessionTotals:
    """One LLM call with what the bash digest kept out of it, and its turn_end."""
    d.llm_call(
        P.LlmCall(
            session_id=SID,
            call_index=i,
            message_count=2 + i,
            sent_chars=P.SizeBreakdown(system=400, messages=4000 * (i + 1)),
            saved_chars=P.SavedBreakdown(bash=saved_bash),
            prompt_index=0,
            model="anthropic/claude-sonnet-4-5",
        )
    )
    return d.turn_end(P.TurnEnd(session_id=SID, turn_index=i, input_tokens=1000)).totals


def _batch(d: Daemon, *cids: str) -> P.TagBatchReply:
    items = [
        P.TagItem(tool_call_id=c, tool_name="read", input={"path": f"{c}.py"}, text=SOURCE)
        for c in cids
    ]
    return d.tag_batch(P.TagBatch(session_id=SID, results=items))


def test_a_session_that_has_saved_nothing_asks_no_tag(tmp_path: Path) -> None:
    d = _daemon(tmp_path)  # the pi-style delegated backend: a tag would be handed back
    try:
        _start(d)
        _call(d, 0, saved_bash=0)
        reply = _batch(d, "r1")
        assert reply.aux is None  # no aux call: nothing saved yet to pay for it
        assert reply.handles.get("r1")  # still stored: masking may hide it later
        assert d.sessions[SID].part(TagState).tags["r1"] == "RETAIN"
        assert not d.store.query("SELECT * FROM aux_calls")
    finally:
        d.store.close()


def test_savings_pay_for_tags_until_they_are_spent(tmp_path: Path) -> None:
    d = _daemon(tmp_path)
    try:
        _start(d)
        totals = _call(d, 0, saved_bash=40_000)  # ~10k tokens kept out of the request
        ahead = totals.plain_cost_weighted - totals.cost_weighted
        assert ahead > 0
        first = _batch(d, "r1")
        assert first.aux is not None  # the session is ahead: the tag goes out
        st = d.sessions[SID].part(Savings)
        assert 0 < st.charged <= ahead and "r1" in st.in_flight
        # batches in the same round draw on what is left; one that does not fit waits
        n = 1
        while _batch(d, f"more{n}").aux is not None:
            n += 1
            assert n < 100, "the budget never ran out"
        assert st.charged <= ahead  # never more than the session was ahead by
        assert d.sessions[SID].part(TagState).tags[f"more{n}"] == "RETAIN"
    finally:
        d.store.close()


def test_the_daemon_keeps_a_rewrite_charged_until_a_turn_end_through_its_request(
    tmp_path: Path,
) -> None:
    """A warm mask charged on call 2 (as `masking.decide` charges it, by the request's
    call_index), then call 1's turn_end, late: the account still holds the charge; call 2's
    turn_end holds the rewritten request, and the charge goes."""
    from ctxwrap.mechanisms import budget

    d = _daemon(tmp_path)
    try:
        _start(d)
        _call(d, 0, saved_bash=40_000)
        rt = d.sessions[SID]
        st = rt.part(Savings)
        budget.charge(rt, 3_000.0, request=2)
        late = P.TurnEnd(session_id=SID, turn_index=1, input_tokens=1000, call_index=1)
        d.turn_end(late)
        assert st.charged == 3_000.0
        d.turn_end(P.TurnEnd(session_id=SID, turn_index=2, input_tokens=1000, call_index=2))
        assert st.charged == 0.0
        # in order: the turn_end of the rewritten request itself holds it at once
        budget.charge(rt, 2_000.0, request=3)
        d.turn_end(P.TurnEnd(session_id=SID, turn_index=3, input_tokens=1000, call_index=3))
        assert st.charged == 0.0
    finally:
        d.store.close()


def test_switched_off_the_tagger_runs_from_the_first_round(tmp_path: Path) -> None:
    d = _daemon(tmp_path, PI_CTX_TAG_WITHIN_SAVINGS="false")
    try:
        _start(d)
        assert _batch(d, "r1").aux is not None
    finally:
        d.store.close()


def test_the_rule_replay_applies_is_the_daemons() -> None:
    cost = tag_cost(500, 24)
    assert cost > 500  # the output counted, at its most
    assert aux_within(free=cost, cost=cost)
    assert not aux_within(free=cost - 1.0, cost=cost)
    assert not aux_within(free=0.0, cost=cost)
