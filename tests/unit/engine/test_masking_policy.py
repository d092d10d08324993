"""The masking policy: golden cases shared with tests/node/masking.test.ts, and unit cases."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ctxwrap.engine.edits import (
    MaskEdit,
    TombstoneEdit,
    apply_edits,
    describe_tail,
    edit_from_json,
    parse_edits,
)
from ctxwrap.engine.masking import (
    MaskPolicy,
    call_paths,
    plan_masks,
    rewrite_cost_tokens,
    suffix_tokens_estimate,
    warm_rewrite_pays,
)

CASES = sorted((Path(__file__).parents[2] / "fixtures" / "masking").glob("*.json"))


def load(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(path.read_text())
    return doc


def plan_of(case: dict[str, Any]) -> list[list[str]]:
    frozen = parse_edits(case["frozen"])
    plan = plan_masks(
        describe_tail(case["messages"], ()).messages,
        paths=call_paths(case["messages"]),
        protected=set(case["protected"]),
        edited={e.toolCallId for e in frozen},
        late_drops=set(case["lateDrops"]),
        policy=MaskPolicy(
            keep_rounds=case["policy"]["keepRounds"], min_chars=case["policy"]["minChars"]
        ),
    )
    return [[c.toolCallId, c.reason] for c in plan]


def test_enough_cases() -> None:
    assert len(CASES) >= 3


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.stem)
def test_golden(path: Path) -> None:
    case = load(path)
    assert call_paths(case["messages"]) == case["paths"]
    assert plan_of(case) == case["plan"]
    sent = apply_edits(case["messages"], parse_edits(case["frozen"] + case["edits"]))
    assert json.dumps(sent, ensure_ascii=False) == json.dumps(case["expected"], ensure_ascii=False)


def test_golden_plans_cover_every_reason_and_guard() -> None:
    plans = {p.stem: load(p)["plan"] for p in CASES}
    assert plans["earlier_task"] == [["a1", "earlier_task"], ["a2", "earlier_task"]]
    assert plans["superseded"] == [["s1", "superseded"]]
    # guards: only the unprotected earlier-task read and the late DROP outside the kept rounds
    assert plans["guards"] == [["g2", "earlier_task"], ["h1", "dropped"]]


def test_mask_edit_round_trips_and_applies_like_a_tombstone() -> None:
    raw = {"kind": "mask", "toolCallId": "c", "text": "[m]", "savedChars": 5, "reason": "x"}
    assert edit_from_json(raw) == MaskEdit(toolCallId="c", text="[m]", savedChars=5, reason="x")
    assert edit_from_json({**raw, "reason": 3}) == MaskEdit(
        toolCallId="c", text="[m]", savedChars=5
    )
    assert edit_from_json({**raw, "text": None}) is None
    msgs = [
        {"role": "assistant", "content": [{"type": "toolCall", "id": "c", "name": "read"}]},
        {"role": "toolResult", "toolCallId": "c", "content": [{"type": "text", "text": "body"}]},
    ]
    masked = apply_edits(msgs, [MaskEdit(toolCallId="c", text="[m]")])
    tomb = apply_edits(msgs, [TombstoneEdit(toolCallId="c", text="[m]")])
    assert masked == tomb and masked[1]["content"] == [{"type": "text", "text": "[m]"}]
    # the first edit of a result wins: a later mask never rewrites a tombstone already sent
    both = apply_edits(
        msgs, [TombstoneEdit(toolCallId="c", text="[t]"), MaskEdit(toolCallId="c", text="[m]")]
    )
    assert both[1]["content"] == [{"type": "text", "text": "[t]"}]


def _session(rounds_in_current: int) -> list[dict[str, Any]]:
    big = "x" * 3000
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "t1"}]
    msgs += [
        {"role": "assistant", "content": [{"type": "toolCall", "id": "old", "name": "read",
                                           "arguments": {"path": "a"}}]},
        {"role": "toolResult", "toolCallId": "old", "toolName": "read",
         "content": [{"type": "text", "text": big}], "isError": False},
        {"role": "user", "content": "t2"},
    ]  # fmt: skip
    for i in range(rounds_in_current):
        msgs += [
            {"role": "assistant", "content": [{"type": "toolCall", "id": f"r{i}", "name": "read",
                                               "arguments": {"path": "a"}}]},
            {"role": "toolResult", "toolCallId": f"r{i}", "toolName": "read",
             "content": [{"type": "text", "text": big}], "isError": False},
        ]  # fmt: skip
    return msgs


def test_current_task_is_kept_except_superseded_reads_outside_the_kept_rounds() -> None:
    msgs = _session(4)
    plan = plan_masks(describe_tail(msgs, ()).messages, paths=call_paths(msgs))
    # old: earlier task (and superseded); r0, r1: superseded by the identical read r3;
    # r2, r3: the last two rounds of the current task stay whole
    assert [(c.toolCallId, c.reason) for c in plan] == [
        ("old", "superseded"),
        ("r0", "superseded"),
        ("r1", "superseded"),
    ]
    one = plan_masks(
        describe_tail(msgs, ()).messages, paths=call_paths(msgs), policy=MaskPolicy(keep_rounds=1)
    )
    assert [c.toolCallId for c in one] == ["old", "r0", "r1", "r2"]


def test_a_repeat_of_a_hidden_call_is_kept_whole() -> None:
    msgs = _session(0)
    described = describe_tail(msgs, ()).messages
    sig = next(c.argsSig for m in described for c in m.toolCalls or ())
    assert plan_masks(described, paths=call_paths(msgs), hidden_sigs={sig}) == []
    assert [c.toolCallId for c in plan_masks(described, paths=call_paths(msgs))] == ["old"]


def test_maskable_and_min_chars() -> None:
    msgs = _session(0)
    described = describe_tail(msgs, ()).messages
    assert plan_masks(described, paths={}, maskable=lambda c: False) == []
    assert plan_masks(described, paths={}, policy=MaskPolicy(min_chars=3001)) == []


def test_warm_rewrite_cost_model() -> None:
    assert rewrite_cost_tokens(1000, warm=False) == 0
    assert rewrite_cost_tokens(1000, warm=True) == pytest.approx(1150)
    # 2,000 cached tokens fewer per call (200 input-equivalent) against 10,000 rewritten
    # (11,500): pays only beyond 57.5 more calls
    assert not warm_rewrite_pays(2000, 10_000, 57)
    assert warm_rewrite_pays(2000, 10_000, 58)


def _rounds(*calls: tuple[str, str, dict[str, Any]], size: int = 3000) -> list[dict[str, Any]]:
    """One user prompt, then one round per (id, tool, args), each result `size` chars."""
    msgs: list[dict[str, Any]] = [{"role": "user", "content": [{"type": "text", "text": "go"}]}]
    for cid, name, args in calls:
        msgs += [
            {"role": "assistant", "content": [{"type": "toolCall", "id": cid, "name": name,
                                               "arguments": args}]},
            {"role": "toolResult", "toolCallId": cid, "toolName": name,
             "content": [{"type": "text", "text": "x" * size}], "isError": False},
        ]  # fmt: skip
    return msgs


def _plan(msgs: list[dict[str, Any]], **policy: Any) -> list[tuple[str, str]]:
    plan = plan_masks(
        describe_tail(msgs, ()).messages, paths=call_paths(msgs), policy=MaskPolicy(**policy)
    )
    return [(c.toolCallId, c.reason) for c in plan]


def test_a_read_is_masked_once_its_file_is_untouched_for_n_rounds() -> None:
    steps = [("a", "read", {"path": "a.py"})] + [
        (f"b{i}", "bash", {"command": f"echo {i}"}) for i in range(4)
    ]
    msgs = _rounds(*steps)
    assert _plan(msgs, read_idle_rounds=5) == []  # 4 rounds since: still in use
    assert _plan(msgs, read_idle_rounds=4) == [("a", "untouched")]
    # an edit of the file (or any call naming it) is activity: the read stays
    touched = _rounds(*steps[:3], ("e", "edit", {"path": "a.py"}), *steps[3:])
    assert ("a", "untouched") not in _plan(touched, read_idle_rounds=3)


def test_a_file_read_again_and_again_is_a_reference_masked_only_when_superseded() -> None:
    """Measured on real pi sessions (docs/accounting.md): a file read five times or more is
    read again after a quiet spell more often than not, so idleness alone does not mask it."""
    parts = [(f"p{i}", "read", {"path": "big.ts", "offset": 100 * i}) for i in range(3)]
    quiet = [(f"b{i}", "bash", {"command": f"echo {i}"}) for i in range(4)]
    msgs = _rounds(*parts, *quiet)
    untouched = [(f"p{i}", "untouched") for i in range(3)]
    assert _plan(msgs, read_idle_rounds=3) == untouched  # off: idle is enough
    assert _plan(msgs, read_idle_rounds=3, reference_reads=4) == untouched  # read 3 times only
    assert _plan(msgs, read_idle_rounds=3, reference_reads=3) == []
    # a failed read returned nothing to come back to: it does not count
    failed = _rounds(*parts[:2], ("p9", "read", {"path": "big.ts", "offset": 900}), *quiet)
    failed[6]["isError"] = True
    assert _plan(failed, read_idle_rounds=3, reference_reads=3) == untouched[:2]
    # supersession still applies: the same read again leaves the earlier one stale
    again = _rounds(*parts, ("p3", "read", {"path": "big.ts", "offset": 0}), *quiet)
    assert _plan(again, read_idle_rounds=3, reference_reads=3) == [("p0", "superseded")]


def test_other_results_are_masked_some_rounds_after_they_were_seen() -> None:
    msgs = _rounds(*[(f"b{i}", "bash", {"command": f"echo {i}"}) for i in range(4)])
    # b3 and b2 are the current task's last two rounds (keep_rounds): never
    assert _plan(msgs, older_after_rounds=1) == [("b0", "older"), ("b1", "older")]
    assert _plan(msgs, older_after_rounds=3) == [("b0", "older")]
    assert _plan(msgs) == []  # off by default in the policy object


def test_stale_reads_and_earlier_tasks_can_be_turned_off() -> None:
    msgs = _rounds(
        ("a", "read", {"path": "a.py"}),
        ("w", "write", {"path": "a.py", "content": "new"}),
        ("b0", "bash", {"command": "ls"}),
        ("b1", "bash", {"command": "ls -l"}),
    )
    assert _plan(msgs) == [("a", "superseded")]
    assert _plan(msgs, stale_reads=False) == []
    later = [*msgs, {"role": "user", "content": [{"type": "text", "text": "next"}]}]
    assert ("w", "earlier_task") in _plan(later, stale_reads=False)
    assert _plan(later, stale_reads=False, earlier_tasks=False) == []


def test_the_suffix_of_a_rewrite_is_scaled_to_what_was_really_sent() -> None:
    assert suffix_tokens_estimate(1000, 4000, None) == 1000
    assert suffix_tokens_estimate(1000, 4000, 3000) == 1000  # never below the description
    assert suffix_tokens_estimate(1000, 4000, 8000) == 2000  # assistant text doubles it


def test_a_rewrite_is_judged_from_the_latest_cache_entry_left_before_it() -> None:
    """What a warm rewrite writes anew starts at the latest entry that still holds the
    conversation as it is: not one a provider miss showed gone, nor one a rewrite changed."""
    from ctxwrap.engine.masking import UNCACHED_MIN_CALLS, CacheEntries

    c = CacheEntries()
    for call, messages in enumerate((4, 8, 12)):
        c.usage(call, 10, 1_000 * call, 500)  # each read the one before and wrote its own
        c.add(call, messages)
    assert (c.rewrite_start(10), c.rewrite_start(12), c.rewrite_start(3)) == (8, 12, 0)
    c.rewritten(6)  # a rewrite from message 6: the entries ending after it hold old content
    assert c.rewrite_start(10) == 4
    c.add(3, 14)
    assert c.rewrite_start(14) == 14
    # call 4 read nothing from a cache that had served before: the entries before it are gone
    c.add(4, 16)
    c.usage(4, 16_000, 0, 16_000)
    assert c.rewrite_start(15) == 0 and c.rewrite_start(16) == 16
    c.usage(5, 0, 0, 0)  # cut off before it was counted: says nothing
    assert c.rewrite_start(16) == 16
    c.add(6, 9)  # shorter than an entry (a compaction, a branch): that entry is gone
    assert c.rewrite_start(16) == 9
    c.cold()
    assert c.rewrite_start(16) == 0
    # a provider that counts input and never a cached token does not cache
    u = CacheEntries()
    for call in range(UNCACHED_MIN_CALLS):
        assert not u.uncached
        u.usage(call, 5_000, 0, 0)
    assert u.uncached
