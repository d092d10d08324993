"""bench/thinking_share.py's arithmetic on a small synthetic Claude Code transcript: thinking
estimated from output less visible text, kept or dropped by the API as the recorded context
shows, carried thinking priced at what each request paid for it (issue 41, item 3)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

BENCH = Path(__file__).parents[2] / "bench"
sys.path.insert(0, str(BENCH))
import thinking_share as ts  # noqa: E402

RATE = 0.37  # the Anthropic family's rate: the transcript has no clean tool-round pair to fit
T1 = 2000  # the first response's thinking: output 2370 less 1000 visible chars at RATE


def _entry(n: int, kind: str, content: Any, **msg: Any) -> dict[str, Any]:
    return {
        "type": kind,
        "sessionId": "s1",
        "version": "2.1.185",
        "uuid": f"u{n}",
        "parentUuid": f"u{n - 1}" if n else None,
        "timestamp": f"2026-06-01T10:00:{n:02d}Z",
        "message": {"role": kind, "content": content, **msg},
    }


def _assistant(
    n: int, mid: str, content: list[Any], *, read: int, write: int, output: int
) -> dict[str, Any]:
    usage = {
        "input_tokens": 0,
        "cache_read_input_tokens": read,
        "cache_creation_input_tokens": write,
        "output_tokens": output,
    }
    return _entry(n, "assistant", content, id=mid, model="claude-sonnet-4-6", usage=usage)


THINK = {"type": "thinking", "thinking": "", "signature": "x" * 400}
TEXT = {"type": "text", "text": "A" * 1000}
PROMPT = "p" * 100  # 37 tokens at RATE


def _write(path: Path, entries: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(e) + "\n" for e in entries))
    return path


def test_thinking_the_api_kept_is_priced_in_every_later_request(tmp_path: Path) -> None:
    # P1 = 10,000 written; each later prompt grows by the previous output (thinking included:
    # kept) and the 37 tokens of the new prompt, and reads all but those from the cache
    f = _write(
        tmp_path / "kept.jsonl",
        [
            _entry(0, "user", PROMPT),
            _assistant(1, "m1", [THINK, TEXT], read=0, write=10_000, output=2370),
            _entry(2, "user", PROMPT),
            _assistant(3, "m2", [TEXT], read=12_370, write=37, output=370),
            _entry(4, "user", PROMPT),
            _assistant(5, "m3", [TEXT], read=12_777, write=37, output=370),
        ],
    )
    [s] = ts.measure_file(f)
    assert (s.model, s.version, s.calls, s.thinking_responses) == (
        "claude-sonnet-4-6",
        "2.1.185",
        3,
        1,
    )
    assert s.rate == RATE and s.rate_source == "family"
    assert s.visible_residual == 0.0  # the responses without thinking: output = rate x text
    assert s.thinking_written == T1
    assert s.signature_chars == 400 and s.signature_chars_per_token == 0.2
    assert s.kept == 1.0 and s.boundaries == 1  # the one boundary after a turn that thought
    # requests 2 and 3 carry the first turn's 2,000 tokens, read from the cache at 0.1
    assert s.carried_tokens == 2 * T1 and s.earlier_tokens == 2 * T1
    assert s.carried_weighted == pytest.approx(2 * T1 * 0.1)
    bill = 10_000 * 1.25 + (12_370 + 12_777) * 0.1 + 2 * 37 * 1.25
    assert s.bill_weighted == pytest.approx(bill, abs=0.1)
    assert s.share_pct == pytest.approx(round(100 * 400 / bill, 2))
    # clearing the first turn's thinking at request 2 (what `every` and `payback` do) leaves
    # it out of requests 2 and 3, and rewrites what followed it: the 407 tokens after its
    # first block (12,407 - 10,000 - 2,000), written at 1.25 instead of read at 0.1
    rewrite = 407 * (1.25 - 0.1)
    for rule in ("every", "payback"):
        saved, cost, clears = s.policies[rule]
        assert saved == pytest.approx(2 * T1 * 0.1) and clears == 1
        assert cost == pytest.approx(rewrite, abs=0.1)
        assert s.net_pct[rule] == pytest.approx(100 * (400 - rewrite) / bill, abs=0.01)
    # no request went cold; with hindsight two requests left do not pay the rewrite back
    assert s.policies["cold"] == (0.0, 0.0, 0) and s.policies["oracle"] == (0.0, 0.0, 0)


def test_thinking_the_api_dropped_counts_only_within_its_own_turn(tmp_path: Path) -> None:
    # the same first turn, now with a tool round: its second request carries the thinking
    # (the current turn's is always kept); after the next prompt the context is 2,000 tokens
    # smaller than the outputs explain: the API dropped it (Sonnet 4.5 and earlier)
    call = {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "ls"}}
    result = [{"type": "tool_result", "tool_use_id": "t1", "content": "r" * 1000}]
    visible = 1000 + len("Bash") + len('{"command":"ls"}')
    out1 = round(T1 + RATE * visible)
    p2 = 10_000 + out1 + 370
    p3 = p2 + 370 - T1 + 37
    f = _write(
        tmp_path / "dropped.jsonl",
        [
            _entry(0, "user", PROMPT),
            _assistant(1, "m1", [THINK, TEXT, call], read=0, write=10_000, output=out1),
            _entry(2, "user", result),
            _assistant(3, "m2", [TEXT], read=10_000 + out1, write=370, output=370),
            _entry(4, "user", PROMPT),
            _assistant(5, "m3", [TEXT], read=p3 - 37, write=37, output=370),
        ],
    )
    [s] = ts.measure_file(f)
    assert s.kept == 0.0 and s.boundaries == 1
    assert s.carried_tokens == T1  # request 2 only: within the turn that thought
    assert s.earlier_tokens == 0 and s.earlier_weighted == 0.0
    assert all(p == (0.0, 0.0, 0) for p in s.policies.values())
    assert s.carried_weighted == pytest.approx(T1 * 0.1)


def test_summary_takes_the_median_and_the_worst_over_long_sessions(tmp_path: Path) -> None:
    rows = []
    for i, share in enumerate((1.0, 5.0, 30.0, 80.0)):
        row = ts.SessionShare(
            file=f"f{i}",
            session=f"s{i}",
            source="claude",
            model="m",
            version="v",
            calls=50 if i < 3 else 10,
            thinking_responses=1,
            rate=0.4,
            rate_source="fitted",
            visible_residual=None,
            kept=1.0,
            boundaries=1,
            thinking_written=1,
            signature_chars=0,
            signature_chars_per_token=None,
            carried_tokens=1,
            earlier_tokens=1,
            bill_weighted=100.0,
            bill_usd=None,
            carried_weighted=share,
            carried_usd=None,
            earlier_weighted=share,
            policies={"every": (share, 1.0, 1)},
        ).finish()
        rows.append(row)
    s = ts.summarise(rows, 40)
    assert s["sessions"] == 3  # the 10-call session is under the bar
    assert s["median_share_pct"] == 5.0
    assert s["worst"]["file"] == "f2" and s["worst"]["share_pct"] == 30.0
    assert s["median_net_pct"]["every"] == 4.0  # 5 left out less 1 of rewrites
    assert "median share of the input bill 5.0%" in ts.render(rows, s)
