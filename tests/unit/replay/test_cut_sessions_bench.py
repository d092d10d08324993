"""bench/cut_sessions.py: a session cut after its Nth model request is that session's first N
requests, in each agent's format (issue 41: a session that ends early must not cost more)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

BENCH = Path(__file__).parents[3] / "bench"
sys.path.insert(0, str(BENCH))
import cut_sessions as cs  # noqa: E402

PI16 = Path(__file__).parents[2] / "fixtures" / "sessions" / "pi-compaction.jsonl"


def _write(path: Path, records: list[object]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + "not json\n")
    return path


def test_each_format_ends_a_request_where_its_last_record_is(tmp_path: Path) -> None:
    claude = _write(
        tmp_path / "c.jsonl",
        [
            {"type": "user", "message": {"role": "user", "content": "go"}},
            {"type": "assistant", "message": {"id": "m1", "content": [{"type": "thinking"}]}},
            {"type": "assistant", "message": {"id": "m1", "content": [{"type": "tool_use"}]}},
            {"type": "user", "message": {"role": "user", "content": []}},
            {"type": "assistant", "message": {"id": "m2", "content": []}},
        ],
    )
    assert cs.request_ends(claude, "claude") == [2, 4]  # one streamed message is one request
    codex = _write(
        tmp_path / "x.jsonl",
        [
            {"type": "response_item", "payload": {"type": "message"}},
            {"type": "event_msg", "payload": {"type": "token_count"}},
            {"type": "event_msg", "payload": {"type": "agent_message"}},
            {"type": "event_msg", "payload": {"type": "token_count"}},
        ],
    )
    assert cs.request_ends(codex, "codex") == [1, 3]
    pi = cs.request_ends(PI16, "pi")
    assistants = sum(
        1
        for line in PI16.read_text().splitlines()
        if json.loads(line).get("message", {}).get("role") == "assistant"
    )
    assert len(pi) == assistants


def test_a_cut_replays_only_the_requests_before_it() -> None:
    ends = cs.request_ends(PI16, "pi")
    point = cs.replay_cut((str(PI16), "pi", 3, ends[2], "default"))
    assert point["llm_calls"] == 3 and point["cost_saved_pct"] is not None


def test_a_turn_ends_at_a_request_whose_answer_calls_no_tool(tmp_path: Path) -> None:
    claude = _write(
        tmp_path / "c.jsonl",
        [
            {"type": "assistant", "message": {"id": "m1", "content": [{"type": "text"}]}},
            {"type": "assistant", "message": {"id": "m1", "content": [{"type": "tool_use"}]}},
            {"type": "assistant", "message": {"id": "m2", "content": [{"type": "text"}]}},
            {"type": "assistant", "message": {"id": "m3", "content": [{"type": "tool_use"}]}},
        ],
    )
    # m1 streamed its tool call in a later record; the session's last request always ends it
    assert cs.requests(claude, "claude") == [(1, False), (2, True), (3, True)]
    codex = _write(
        tmp_path / "x.jsonl",
        [
            {"type": "response_item", "payload": {"type": "custom_tool_call"}},
            {"type": "event_msg", "payload": {"type": "token_count"}},
            {"type": "response_item", "payload": {"type": "message"}},
            {"type": "event_msg", "payload": {"type": "token_count"}},
            {"type": "response_item", "payload": {"type": "function_call"}},
            {"type": "event_msg", "payload": {"type": "token_count"}},
            {"type": "event_msg", "payload": {"type": "token_count"}},
        ],
    )
    assert cs.requests(codex, "codex") == [(1, False), (3, True), (5, False), (6, True)]
    pi = _write(
        tmp_path / "p.jsonl",
        [
            {
                "type": "message",
                "message": {"role": "assistant", "content": [{"type": "toolCall"}]},
            },
            {"type": "message", "message": {"role": "toolResult", "content": []}},
            {"type": "message", "message": {"role": "assistant", "content": [{"type": "text"}]}},
            {"type": "message", "message": {"role": "user", "content": "more"}},
            {
                "type": "message",
                "message": {"role": "assistant", "content": [{"type": "toolCall"}]},
            },
        ],
    )
    assert cs.requests(pi, "pi") == [(0, False), (2, True), (4, True)]
