"""One mask check for every adapter: the proxies' `acceptable_masks` (Python, on the neutral
shape) and the pi bridge's `acceptableMasks` (ctxwrap/_bridge/masking.ts) answer the same
cases alike (issue 42 item 4).

Each case goes to both: the Python function here, the TypeScript one through node. The one
rule the bridge does not have is "the id occurs once" (pi's messages carry one result per
call; a wire body can repeat an id): those cases carry `bridge`, the bridge's own answer.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from ctxwrap.agents._proxy.cache_state import acceptable_masks
from ctxwrap.agents.claude import anthropic_wire
from ctxwrap.agents.codex import responses_wire

MASKING_TS = Path(__file__).resolve().parents[3] / "ctxwrap" / "_bridge" / "masking.ts"
NODE_SCRIPT = """
import { acceptableMasks } from %s;
let raw = "";
process.stdin.on("data", (d) => (raw += d)).on("end", () => {
  const out = JSON.parse(raw).map((c) => [
    ...acceptableMasks(
      c.messages,
      c.candidates.map((id) => ({ toolCallId: id })),
      new Set(c.seen),
      new Set(c.edited),
    ),
  ].sort());
  process.stdout.write(JSON.stringify(out));
});
"""


def call(cid: str, name: str = "read") -> dict[str, Any]:
    return {"type": "toolCall", "id": cid, "name": name, "arguments": {}}


def assistant(*ids: str) -> dict[str, Any]:
    return {"role": "assistant", "content": [call(i) for i in ids]}


def result(cid: Any, *, error: bool = False) -> dict[str, Any]:
    return {
        "role": "toolResult",
        "toolCallId": cid,
        "toolName": "read",
        "content": [{"type": "text", "text": "x"}],
        "isError": error,
    }


USER = {"role": "user", "content": "go"}

CASES: list[dict[str, Any]] = [
    {
        "name": "every condition",
        "messages": [
            USER,
            assistant("ok"), result("ok"),
            assistant("err"), result("err", error=True),
            assistant("unseen"), result("unseen"),
            assistant("edited"), result("edited"),
            result("orphan"),
            result("early"), assistant("early"),
        ],
        "candidates": ["ok", "err", "unseen", "edited", "orphan", "early", "absent"],
        "seen": ["ok", "err", "edited", "orphan", "early", "absent"],
        "edited": ["edited"],
        "expected": ["ok"],
    },
    {
        "name": "no candidates",
        "messages": [USER, assistant("a"), result("a")],
        "candidates": [],
        "seen": ["a"],
        "edited": [],
        "expected": [],
    },
    {
        "name": "several calls of one message, results in order",
        "messages": [USER, assistant("a", "b", "c"), result("a"), result("b"), result("c")],
        "candidates": ["c", "a", "z"],
        "seen": ["a", "b", "c", "z"],
        "edited": [],
        "expected": ["a", "c"],
    },
    {
        "name": "odd shapes are skipped",
        "messages": [
            "not a message",
            {"role": "assistant", "content": "text, no blocks"},
            {"role": "assistant", "content": [{"type": "toolCall", "id": 7}, "x", call("a")]},
            result(7),
            result("a"),
            {"role": "toolResult"},
            {"role": "custom", "content": "note"},
        ],
        "candidates": ["a", "7"],
        "seen": ["a", "7"],
        "edited": [],
        "expected": ["a"],
    },
    {
        "name": "isError only when true",
        "messages": [USER, assistant("a", "b"), result("a"), {**result("b"), "isError": "yes"}],
        "candidates": ["a", "b"],
        "seen": ["a", "b"],
        "edited": [],
        "expected": ["a", "b"],
    },
    {
        "name": "an id that occurs twice (a wire body that repeats a result)",
        "messages": [USER, assistant("dup", "a"), result("dup"), result("a"), result("dup")],
        "candidates": ["dup", "a"],
        "seen": ["dup", "a"],
        "edited": [],
        "expected": ["a"],
        "bridge": ["a", "dup"],
    },
]  # fmt: skip


def _node() -> str:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not on PATH (scripts/install-tools.sh)")
    return node


def _bridge_answers(cases: list[dict[str, Any]]) -> list[list[str]]:
    script = NODE_SCRIPT % json.dumps(MASKING_TS.as_uri())
    out = subprocess.run(
        [_node(), "--input-type=module", "-e", script],
        input=json.dumps(cases),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return list(json.loads(out.stdout))


def _python(case: dict[str, Any]) -> list[str]:
    return sorted(
        acceptable_masks(
            case["messages"], case["candidates"], set(case["seen"]), set(case["edited"])
        )
    )


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_python_answers_each_case(case: dict[str, Any]) -> None:
    assert _python(case) == case["expected"]


def test_the_bridge_answers_every_case_as_python() -> None:
    got = _bridge_answers(CASES)
    for case, answer in zip(CASES, got, strict=True):
        assert answer == case.get("bridge", case["expected"]), case["name"]
        if "bridge" not in case:
            assert answer == _python(case), case["name"]


def test_both_wires_feed_the_one_check_their_neutral_shape() -> None:
    """Both proxies check masks on their wire's neutral view: the same history in Anthropic
    Messages and in OpenAI Responses gets the same answer."""
    messages = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "a", "name": "Read", "input": {"file_path": "/f"}},
            {"type": "tool_use", "id": "b", "name": "Read", "input": {"file_path": "/g"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "a", "content": "x"},
            {"type": "tool_result", "tool_use_id": "b", "content": "y", "is_error": True}]},
    ]  # fmt: skip
    items = [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]},
        {"type": "function_call", "call_id": "a", "name": "exec_command",
         "arguments": json.dumps({"cmd": "cat /f"})},
        {"type": "function_call", "call_id": "b", "name": "exec_command",
         "arguments": json.dumps({"cmd": "cat /g"})},
        {"type": "function_call_output", "call_id": "a",
         "output": "Process exited with code 0\nOutput:\nx"},
        {"type": "function_call_output", "call_id": "b",
         "output": "Process exited with code 1\nOutput:\ny"},
    ]  # fmt: skip
    for neutral in (
        anthropic_wire.to_neutral(messages).messages,
        responses_wire.to_neutral(items).messages,
    ):
        assert acceptable_masks(neutral, ["a", "b"], {"a", "b"}, set()) == {"a"}
    assert _bridge_answers(
        [
            {
                "messages": anthropic_wire.to_neutral(messages).messages,
                "candidates": ["a", "b"],
                "seen": ["a", "b"],
                "edited": [],
            }
        ]
    ) == [["a"]]
