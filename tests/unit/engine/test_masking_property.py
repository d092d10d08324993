"""Masking over generated multi-task conversations: the whole bridge+daemon cycle, in Python.

Each example plays pi's loop over several user tasks with idle gaps between requests, re-reads
of the same file, writes and edits after reads, error results, parallel rounds and compactions
(the head changes: a cold request). Before each
LLM call it decides tail edits (tags drawn at random) and, when the request is cold, history
masks (`plan_masks`), freezes them and applies the whole frozen set, as the bridge does.

Checked: pairing intact; errors never masked; the current task's latest round never masked;
between two cold boundaries every request extends the previous one byte for byte; a result
whose call repeats a masked one (the model asked again) is never masked.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from typing import Any, cast

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxwrap.engine.edits import (
    Edit,
    MaskEdit,
    StripWriteEdit,
    apply_edits,
    args_sig,
    decide_edits,
    describe_tail,
    dropped_signatures,
    tail_ids,
)
from ctxwrap.engine.masking import MaskPolicy, call_paths, plan_masks

TOOLS = ["read", "read", "read", "grep", "bash", "write", "edit", "ls"]
PATHS = ["a.py", "src/b.ts", "README.md"]
POLICY = MaskPolicy(keep_rounds=2, min_chars=1000)


@dataclass
class Request:
    cold: bool
    sent: list[dict[str, Any]]
    masks: list[MaskEdit]
    latest_round: set[str]  # the current task's latest round when this request was decided


@dataclass
class Sim:
    history: list[dict[str, Any]] = field(default_factory=list)
    frozen: list[Edit] = field(default_factory=list)
    seen: set[str] = field(default_factory=set)
    dropped: set[str] = field(default_factory=set)
    late_drops: set[str] = field(default_factory=set)
    requests: list[Request] = field(default_factory=list)
    masked_sig_at: dict[str, int] = field(default_factory=dict)  # sig → request it was masked
    call_first_request: dict[str, int] = field(default_factory=dict)  # call id → first request
    ts: int = 0
    archive: list[dict[str, Any]] = field(default_factory=list)  # every message, compacted or not

    def stamp(self) -> int:
        self.ts += 1
        return 1_800_000_000_000 + self.ts

    def llm_call(self, data: st.DataObject, cold: bool) -> None:
        tail = describe_tail(self.history, self.seen)
        tags = {
            m.toolCallId: data.draw(st.sampled_from(["DROP", "RETAIN", "PENDING"]), label="tag")
            for m in tail.messages
            if m.toolCallId is not None
        }
        new = decide_edits(tail, tags, dropped_sigs=self.dropped, write_min_bytes=400)
        self.frozen += new
        self.dropped |= dropped_signatures(tail, new)
        for cid, tag in tags.items():  # a tag that came too late may say DROP afterwards
            if tag == "PENDING" and data.draw(st.booleans(), label="late drop"):
                self.late_drops.add(cid)
        k = len(self.requests)
        for c in (c for m in tail.messages for c in m.toolCalls or ()):
            self.call_first_request.setdefault(c.id, k)
        history = describe_tail(self.history, ()).messages
        latest = latest_round(history)
        masks: list[MaskEdit] = []
        if cold:
            edited = {e.toolCallId for e in self.frozen if not isinstance(e, StripWriteEdit)}
            sig = {c.id: c.argsSig for m in history for c in m.toolCalls or ()}
            plan = plan_masks(
                history,
                paths=call_paths(self.history),
                protected=tail_ids(tail),
                edited=edited,
                hidden_sigs=self.dropped | {sig[i] for i in edited if i in sig},
                late_drops=self.late_drops,
                maskable=lambda c: c.name in ("read", "grep", "bash", "ls"),
                policy=POLICY,
            )
            masks = [
                MaskEdit(toolCallId=c.toolCallId, text=f"[masked {c.reason}]", reason=c.reason)
                for c in plan
            ]
            for c in plan:
                self.masked_sig_at.setdefault(c.call.argsSig, k)
            # As mechanisms/masking.py does (`rt.dropped_sigs |= ...`): a masked call's signature
            # is kept for the session, not re-derived from a history a compaction may cut.
            self.dropped |= {c.call.argsSig for c in plan}
            self.frozen += masks
        before = copy.deepcopy(self.history)
        sent = apply_edits(self.history, self.frozen)
        assert self.history == before, "apply_edits mutated its input"
        self.seen |= tail_ids(tail)
        self.requests.append(Request(cold, copy.deepcopy(sent), masks, latest))


def latest_round(history: list[Any]) -> set[str]:
    """Call ids of the last assistant round after the last user message."""
    last_user = max((i for i, m in enumerate(history) if m.role == "user"), default=-1)
    rounds = [m for m in history[last_user + 1 :] if m.role == "assistant" and m.toolCalls]
    return {c.id for c in rounds[-1].toolCalls or ()} if rounds else set()


def result_text(data: st.DataObject, name: str) -> str:
    size = data.draw(st.sampled_from([30, 1500, 4000]), label="result size")
    return (f"{name} output line\n" * (size // 15 + 1))[:size]


def make_args(name: str, data: st.DataObject, n: int) -> dict[str, Any]:
    path = data.draw(st.sampled_from(PATHS), label="path")
    if name == "write":
        return {"path": path, "content": "x = 1\n" * data.draw(st.sampled_from([2, 100]))}
    if name == "edit":
        return {"path": path, "oldText": "a", "newText": f"b{n}"}
    if name == "bash":
        return {"command": data.draw(st.sampled_from(["ls -la", "pytest -q"]), label="cmd")}
    if name == "grep":
        return {"pattern": "TODO", "path": "."}
    if name == "ls":
        return {"path": "."}
    return {"path": path}


def simulate(data: st.DataObject) -> Sim:
    sim = Sim()
    ids = iter(range(10_000))
    compacted = False
    for p in range(data.draw(st.integers(1, 4), label="tasks")):
        if p > 0 and data.draw(st.integers(0, 3), label="compact") == 0:
            # pi cuts at a user message and puts a summary first: the head changes (cold)
            users = [i for i, m in enumerate(sim.history) if m["role"] == "user"]
            cut = data.draw(st.sampled_from(users), label="cut")
            summary = {"role": "compactionSummary", "summary": f"goal {p}", "tokensBefore": 99,
                       "timestamp": sim.stamp()}  # fmt: skip
            sim.history = [summary, *sim.history[cut:]]
            compacted = True
        sim.history.append(
            {"role": "user", "content": [{"type": "text", "text": f"task {p}"}],
             "timestamp": sim.stamp()}
        )  # fmt: skip
        for _ in range(data.draw(st.integers(0, 4), label="rounds")):
            idle = data.draw(st.integers(0, 3), label="idle gap") == 0
            sim.llm_call(data, cold=idle or compacted)
            compacted = False
            calls = []
            for _ in range(data.draw(st.integers(1, 3), label="parallel calls")):
                n = next(ids)
                name = data.draw(st.sampled_from(TOOLS), label="tool")
                calls.append(
                    {"type": "toolCall", "id": f"call_{n}", "name": name,
                     "arguments": make_args(name, data, n)}
                )  # fmt: skip
            sim.history.append(
                {"role": "assistant", "content": calls, "stopReason": "toolUse",
                 "timestamp": sim.stamp()}
            )  # fmt: skip
            sim.archive.append(sim.history[-1])
            for c in calls:
                error = data.draw(st.integers(0, 6), label="error") == 0
                text = result_text(data, c["name"])  # errors can be long (a failing build)
                sim.history.append(
                    {"role": "toolResult", "toolCallId": c["id"], "toolName": c["name"],
                     "content": [{"type": "text", "text": text}], "isError": error,
                     "timestamp": sim.stamp()}
                )  # fmt: skip
                sim.archive.append(sim.history[-1])
        sim.llm_call(data, cold=compacted or data.draw(st.integers(0, 2), label="idle gap") == 0)
        compacted = False
        sim.history.append(
            {"role": "assistant", "content": [{"type": "text", "text": f"done {p}"}],
             "stopReason": "stop", "timestamp": sim.stamp()}
        )  # fmt: skip
    return sim


def dumps(m: object) -> list[str]:
    assert isinstance(m, list)
    return [json.dumps(x, ensure_ascii=False) for x in m]


def check(sim: Sim) -> None:
    results = {m["toolCallId"]: m for m in sim.archive if m["role"] == "toolResult"}
    for k, req in enumerate(sim.requests):
        sent = req.sent
        calls = [b["id"] for m in sent if m["role"] == "assistant" for b in m["content"]
                 if b.get("type") == "toolCall"]  # fmt: skip
        assert sorted(calls) == sorted(m["toolCallId"] for m in sent if m["role"] == "toolResult")
        for e in req.masks:
            assert results[e.toolCallId]["isError"] is False, "an error result was masked"
            assert e.toolCallId not in req.latest_round, "the latest round was masked"
        if k and not req.cold:
            prev = dumps(sim.requests[k - 1].sent)
            assert dumps(sent)[: len(prev)] == prev, f"request {k} rewrote a warm prefix"
    # loop guard: no result of a call issued after its signature was masked is ever masked
    call_of = {
        b["id"]: b
        for m in sim.archive
        if m["role"] == "assistant"
        for b in m["content"]
        if b.get("type") == "toolCall"
    }
    for cid in {e.toolCallId for q in sim.requests for e in q.masks}:
        call = call_of[cid]
        s = args_sig(call["name"], call["arguments"])
        first_masked = sim.masked_sig_at[s]
        if cid in {e.toolCallId for e in sim.requests[first_masked].masks}:
            continue  # masked together with the first one
        assert sim.call_first_request[cid] <= first_masked, f"{cid} re-requested, then masked"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_masking_invariants(data: st.DataObject) -> None:
    check(simulate(data))


def test_generated_sessions_exercise_every_reason() -> None:
    seen: set[str] = set()

    @settings(max_examples=300, deadline=None, database=None)
    @given(st.data())
    def collect(data: st.DataObject) -> None:
        sim = simulate(data)
        seen.update(e.reason for q in sim.requests for e in q.masks)

    collect()
    assert seen == {"superseded", "dropped", "earlier_task"}, seen


class _Replay:
    """Plays back recorded hypothesis draws, in order, for a deterministic regression case."""

    def __init__(self, values: list[Any]) -> None:
        self.values = list(values)

    def draw(self, strategy: object, label: object = None) -> Any:
        return self.values.pop(0)


# CI counterexample (tasks/masking-failure.txt): a large read of a.py is masked as
# `earlier_task`, a compaction then cuts its call out of the history, and the model reads a.py
# again in a later task. Its signature was only derived from the (now compacted) history, so the
# repeat was masked as `superseded` at the next cold boundary: invariant 5 broken.
_READ_MASKED_THEN_COMPACTED = [
    4, 4, 0, 1, "read", "a.py", 0, 30, 0, "DROP", 3, "read", "a.py", "read", "a.py", "read",
    "a.py", 0, 30, 0, 30, 0, 30, 0, "DROP", "DROP", "DROP", 1, "read", "a.py", 1, 1500, 0,
    "RETAIN", 1, "read", "a.py", 0, 30, 0, "DROP", 0, 0, 2, 0, 1, "read", "a.py", 0, 30, 0,
    "DROP", 1, "read", "a.py", 0, 30, 0, "DROP", 0, 13, 2, 0, 1, "read", "a.py", 0, 30, 0,
    "DROP", 1, "read", "a.py", 0, 30, 0, "DROP", 0, 1, 3, 0, 1, "read", "a.py", 1, 1500, 0,
    "RETAIN", 3, "read", "a.py", "read", "a.py", "read", "a.py", 0, 30, 0, 30, 1, 30, 0, "DROP",
    "DROP", "RETAIN", 1, "read", "a.py", 0, 30, 0, "DROP",
]  # fmt: skip


def test_repeat_of_a_masked_call_stays_whole_after_compaction() -> None:
    replay = _Replay(_READ_MASKED_THEN_COMPACTED)
    sim = simulate(cast(st.DataObject, replay))
    assert replay.values == []  # every recorded draw used: the scenario did not drift
    masked = [(e.toolCallId, e.reason) for q in sim.requests for e in q.masks]
    assert ("call_4", "earlier_task") in masked
    # the compaction really removed the masked call from what later requests carry
    assert not any("call_4" in line for q in sim.requests[8:] for line in dumps(q.sent))
    check(sim)
