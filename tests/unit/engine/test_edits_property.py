"""The whole describe → decide → freeze → apply cycle over simulated pi conversations.

Each example plays pi's agent loop: user prompts, assistant rounds with single or parallel
calls, tool results (some errors), steering messages, repeated identical calls, compaction
between prompts. Before every LLM call it does what the bridge and the daemon do together and
records what would have been sent. The assertions are DESIGN invariants 3-5.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from typing import Any, Literal

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxwrap.engine.edits import (
    Edit,
    StripWriteEdit,
    apply_edits,
    decide_edits,
    describe_tail,
    dropped_signatures,
    tail_ids,
)

TOOLS = ["read", "grep", "find", "ls", "bash", "write", "edit"]
GOOD_TAGS = ["DROP", "RETAIN", "PENDING", None]
GARBAGE_TAGS = ["PENDING", None, "drop", "Drop ", 42, {"decision": "DROP"}, ""]
WRITE_MIN = 400


@dataclass
class Request:
    epoch: int  # bumps at each compaction
    prompt: int
    history: list[dict[str, Any]]
    sent: list[dict[str, Any]]
    new_edits: list[Edit]


@dataclass
class Sim:
    mode: Literal["tombstone", "silent"]
    tagger_fails: bool
    history: list[dict[str, Any]] = field(default_factory=list)
    frozen: list[Edit] = field(default_factory=list)
    seen: set[str] = field(default_factory=set)
    dropped: set[str] = field(default_factory=set)
    requests: list[Request] = field(default_factory=list)
    tag_at_decision: dict[str, object] = field(default_factory=dict)
    guarded: set[str] = field(default_factory=set)  # DROP but the call was dropped before
    epoch: int = 0
    prompt: int = 0
    ts: int = 0

    def stamp(self) -> int:
        self.ts += 1
        return 1_800_000_000_000 + self.ts

    def llm_call(self, data: st.DataObject) -> None:
        before = copy.deepcopy(self.history)
        tail = describe_tail(self.history, self.seen)
        assert tail.to_json() == describe_tail(self.history, self.seen).to_json()  # pure
        sig_of = {c.id: c.argsSig for m in tail.messages for c in m.toolCalls or ()}
        tags: dict[str, object] = {}
        for m in tail.messages:
            if m.toolCallId is None:
                continue
            pool = GARBAGE_TAGS if self.tagger_fails else GOOD_TAGS
            tag = data.draw(st.sampled_from(pool), label=f"tag {m.toolCallId}")
            if tag is not None:
                tags[m.toolCallId] = tag
            self.tag_at_decision[m.toolCallId] = tag
            if tag == "DROP" and sig_of.get(m.toolCallId) in self.dropped:
                self.guarded.add(m.toolCallId)
        new = decide_edits(
            tail, tags, mode=self.mode, dropped_sigs=self.dropped, write_min_bytes=WRITE_MIN
        )
        self.frozen += new
        self.dropped |= dropped_signatures(tail, new)
        sent = apply_edits(self.history, self.frozen)
        assert self.history == before, "apply_edits mutated its input"
        self.seen |= tail_ids(tail)
        self.requests.append(
            Request(self.epoch, self.prompt, copy.deepcopy(self.history), copy.deepcopy(sent), new)
        )


def result_text(data: st.DataObject) -> str:
    size = data.draw(st.sampled_from([0, 5, 120, 3000]), label="result size")
    return ("line of output\n" * (size // 15 + 1))[:size]


def make_args(name: str, data: st.DataObject, n: int) -> dict[str, Any]:
    path = data.draw(st.sampled_from(["a.py", "src/b.ts", "README.md", "é/ü.txt"]), label="path")
    if name == "write":
        size = data.draw(st.sampled_from([0, 10, 399, 400, 401, 2500]), label="write size")
        body = ("x = 1  # ünïcode 😀\n" * (size // 10 + 1))[:size]
        return {"path": path, "content": body}
    if name == "edit":
        return {"path": path, "oldText": "a", "newText": f"b{n}"}
    if name == "bash":
        return {"command": data.draw(st.sampled_from(["ls -la", "pytest -q", "git status"]))}
    if name in ("grep", "find"):
        return {"pattern": data.draw(st.sampled_from(["TODO", "*.py", "def main"])), "path": "."}
    return {"path": path, "offset": data.draw(st.sampled_from([1, 1.5, 100]))}


def simulate(data: st.DataObject, mode: Literal["tombstone", "silent"], fails: bool) -> Sim:
    sim = Sim(mode=mode, tagger_fails=fails)
    ids = iter(range(10_000))
    past_calls: list[tuple[str, dict[str, Any]]] = []
    for p in range(data.draw(st.integers(1, 3), label="prompts")):
        sim.prompt = p
        if p > 0 and data.draw(st.booleans(), label="compact"):
            # pi cuts at a user message and puts the summary first
            users = [i for i, m in enumerate(sim.history) if m["role"] == "user"]
            cut = data.draw(st.sampled_from(users), label="cut")
            summary = {
                "role": "compactionSummary",
                "summary": f"## Goal\nprompt {p}",
                "tokensBefore": 1234,
                "timestamp": sim.stamp(),
            }
            sim.history = [summary, *sim.history[cut:]]
            sim.epoch += 1
        if data.draw(st.integers(0, 4), label="bashExecution") == 0:
            sim.history.append(
                {
                    "role": "bashExecution",
                    "command": "make",
                    "output": "ok\n",
                    "exitCode": 0,
                    "cancelled": False,
                    "truncated": False,
                    "timestamp": sim.stamp(),
                }
            )
        sim.history.append(
            {
                "role": "user",
                "content": [{"type": "text", "text": f"task {p}"}],
                "timestamp": sim.stamp(),
            }
        )
        if data.draw(st.booleans(), label="custom"):
            sim.history.append(
                {
                    "role": "custom",
                    "customType": "ctxwrap",
                    "content": "<bridge-context/>",
                    "display": False,
                    "timestamp": sim.stamp(),
                }
            )
        for _ in range(data.draw(st.integers(0, 4), label="rounds")):
            sim.llm_call(data)
            blocks: list[dict[str, Any]] = []
            if data.draw(st.booleans(), label="thinking"):
                blocks.append({"type": "thinking", "thinking": "hmm", "thinkingSignature": "s"})
            if data.draw(st.booleans(), label="text"):
                blocks.append({"type": "text", "text": "Let me look."})
            calls: list[dict[str, Any]] = []
            for _ in range(data.draw(st.integers(1, 3), label="parallel calls")):
                n = next(ids)
                if past_calls and data.draw(st.integers(0, 3), label="repeat") == 0:
                    name, args = data.draw(st.sampled_from(past_calls), label="repeated call")
                    args = copy.deepcopy(args)
                else:
                    name = data.draw(st.sampled_from(TOOLS), label="tool")
                    args = make_args(name, data, n)
                    past_calls.append((name, args))
                calls.append(
                    {"type": "toolCall", "id": f"call_{n}", "name": name, "arguments": args}
                )
            blocks += calls
            sim.history.append(
                {
                    "role": "assistant",
                    "content": blocks,
                    "api": "openai-completions",
                    "provider": "mock",
                    "model": "mock",
                    "usage": {"input": 1, "output": 1},
                    "stopReason": "toolUse",
                    "timestamp": sim.stamp(),
                }
            )
            for c in calls:
                is_error = data.draw(st.integers(0, 9), label="error") == 0
                text = "Error: no such file" if is_error else result_text(data)
                sim.history.append(
                    {
                        "role": "toolResult",
                        "toolCallId": c["id"],
                        "toolName": c["name"],
                        "content": [{"type": "text", "text": text}],
                        "isError": is_error,
                        "timestamp": sim.stamp(),
                    }
                )
            if data.draw(st.integers(0, 5), label="steer") == 0:
                sim.history.append(
                    {
                        "role": "custom",
                        "customType": "steer",
                        "content": "also check tests",
                        "display": True,
                        "timestamp": sim.stamp(),
                    }
                )
        sim.llm_call(data)
        sim.history.append(
            {
                "role": "assistant",
                "content": [{"type": "text", "text": f"done {p}"}],
                "stopReason": "stop",
                "timestamp": sim.stamp(),
            }
        )
    return sim


def dumps(m: object) -> str:
    return json.dumps(m, sort_keys=False, ensure_ascii=False)


def check_pairing(sent: list[dict[str, Any]]) -> None:
    calls = [
        b["id"]
        for m in sent
        if m["role"] == "assistant"
        for b in m["content"]
        if b.get("type") == "toolCall"
    ]
    results = [m["toolCallId"] for m in sent if m["role"] == "toolResult"]
    assert sorted(calls) == sorted(results), "toolCall/toolResult pairing broken"


def check_invariants(sim: Sim) -> None:
    reqs = sim.requests
    first_sent: dict[str, str] = {}
    for k, req in enumerate(reqs):
        sent = req.sent
        check_pairing(sent)
        assert sent[-1]["role"] != "assistant", "a request may not end with an assistant turn"
        originals = {m["toolCallId"]: m for m in req.history if m["role"] == "toolResult"}
        for m in sent:
            if m["role"] != "toolResult":
                continue
            cid = m["toolCallId"]
            # invariant 3: once sent, a result is replayed identically while it exists
            first_sent.setdefault(cid, dumps(m))
            assert dumps(m) == first_sent[cid], f"{cid} changed after it was sent"
            # invariant 4: only a DROP can change a result; errors and loop-guarded never
            if (
                sim.tag_at_decision.get(cid) != "DROP"
                or originals[cid]["isError"]
                or cid in sim.guarded
            ):
                assert dumps(m) == dumps(originals[cid])
        # a result once sent never disappears later (unless compaction removed it from history)
        if k > 0:
            for m in reqs[k - 1].sent:
                if m["role"] == "toolResult" and m["toolCallId"] in originals:
                    assert any(
                        x["role"] == "toolResult" and x["toolCallId"] == m["toolCallId"]
                        for x in sent
                    ), "a sent result was removed later"
            prev = [dumps(m) for m in reqs[k - 1].sent]
            cur = [dumps(m) for m in sent]
            assert cur != prev, "a request repeated the previous one exactly"
            if req.epoch == reqs[k - 1].epoch:
                assert cur[: len(prev)] == prev, f"request {k} does not extend request {k - 1}"
    if sim.tagger_fails:
        assert all(isinstance(e, StripWriteEdit) for e in sim.frozen)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), mode=st.sampled_from(["tombstone", "silent"]), fails=st.booleans())
def test_cycle_keeps_cache_prefix_and_pairing(
    data: st.DataObject, mode: Literal["tombstone", "silent"], fails: bool
) -> None:
    check_invariants(simulate(data, mode, fails))


@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_large_writes_are_stripped_and_small_ones_kept(data: st.DataObject) -> None:
    sim = simulate(data, "tombstone", False)
    stripped = {e.toolCallId for e in sim.frozen if isinstance(e, StripWriteEdit)}
    last = sim.requests[-1]
    for m in last.history:
        for b in m.get("content") or []:
            if isinstance(b, dict) and b.get("type") == "toolCall" and b["name"] == "write":
                size = len(b["arguments"]["content"].encode())
                assert (b["id"] in stripped) == (size >= WRITE_MIN)
