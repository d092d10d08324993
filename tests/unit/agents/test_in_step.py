"""Compaction in step with plain (agents/_proxy/in_step.py): the usage of the one response at
which plain would have compacted is reported at plain's size; every other byte passes."""

from __future__ import annotations

import itertools
import json

from hypothesis import given
from hypothesis import strategies as st

from ctxwrap.agents._proxy.in_step import NEAR_SHARE, SseUsageRewriter, plain_tokens, step_delta
from ctxwrap.agents.claude.anthropic_wire import add_input_tokens, stream_input_tokens


def _frame(event: dict[str, object]) -> bytes:
    return f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()


START = {
    "type": "message_start",
    "message": {
        "id": "msg_1",
        "usage": {
            "input_tokens": 10,
            "cache_read_input_tokens": 20_000,
            "cache_creation_input_tokens": 990,
            "output_tokens": 1,
        },
    },
}
STREAM = b"".join(
    _frame(e)
    for e in (
        START,
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "ok"}},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn"},
            "usage": {"output_tokens": 5},
        },
        {"type": "message_stop"},
    )
)


def _rewriter(delta: int) -> SseUsageRewriter:
    def decide(event: dict[str, object]) -> int | None:
        n = stream_input_tokens(event)
        return None if n is None else delta

    return SseUsageRewriter(decide, add_input_tokens)


def _events(raw: bytes) -> list[dict[str, object]]:
    return [json.loads(line[5:]) for line in raw.split(b"\n") if line.startswith(b"data:")]


@given(st.lists(st.integers(min_value=1, max_value=len(STREAM) - 1), max_size=8))
def test_the_rewritten_stream_differs_only_in_the_input_count(cuts: list[int]) -> None:
    bounds = [0, *sorted(set(cuts)), len(STREAM)]
    chunks = [STREAM[a:b] for a, b in itertools.pairwise(bounds) if b > a]
    for delta in (0, 19_000):
        rw = _rewriter(delta)
        out = b"".join(rw.rewrite(c) for c in chunks) + rw.flush()
        if delta == 0:
            assert out == STREAM  # byte for byte
            continue
        got, want = _events(out), _events(STREAM)
        assert got[1:] == want[1:]
        usage = got[0]["message"]["usage"]  # type: ignore[index]
        assert usage["input_tokens"] == 10 + delta
        assert usage["cache_read_input_tokens"] == 20_000


def test_plain_is_told_only_near_the_threshold_and_while_ctxwrap_is_under_it() -> None:
    assert plain_tokens(20_000, 160_000, 80_000) == 40_000
    assert plain_tokens(20_000, 80_000, 80_000) == 20_000  # nothing kept out
    t = 44_800
    assert step_delta(20_000, 40_000, t) == 20_000  # near: plain's size reported
    assert step_delta(20_000, int(NEAR_SHARE * t) - 1, t) == 0  # far from it: as counted
    assert step_delta(45_000, 90_000, t) == 0  # ctxwrap's own request is past it already
    assert step_delta(20_000, 40_000, None) == 0  # reactive only, or off


def test_a_stream_without_frame_ends_is_passed_on_not_held() -> None:
    """Hostile or odd upstream bytes: no frame end within the cap → everything passes as it
    came, nothing is held back any longer."""
    from ctxwrap.agents._proxy.in_step import MAX_FRAME_BYTES

    rw = _rewriter(19_000)
    blob = b"x" * (MAX_FRAME_BYTES + 1)
    assert rw.rewrite(blob) == blob
    assert rw.rewrite(b"data: more\n\n") == b"data: more\n\n" and rw.flush() == b""
