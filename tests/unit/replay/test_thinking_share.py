"""bench/thinking_share.py's arithmetic on a small synthetic Claude Code transcript: thinking
estimated from output less visible text, kept or dropped by the API as the recorded context
shows, carried thinking priced at what each request paid for it (issue 41, item 3)."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

import pytest

BENCH = Path(__file__).parents[3] / "bench"
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


def _kept_session(tmp_path: Path) -> Path:
    # two turns that think 2,000 tokens each, then two that do not; P1 = 10,000 written; each
    # later prompt grows by the previous output (thinking included: kept) and the 37 tokens of
    # the new prompt, and reads all but those from the cache
    return _write(
        tmp_path / "kept.jsonl",
        [
            _entry(0, "user", PROMPT),
            _assistant(1, "m1", [THINK, TEXT], read=0, write=10_000, output=2370),
            _entry(2, "user", PROMPT),
            _assistant(3, "m2", [THINK, TEXT], read=12_370, write=37, output=2370),
            _entry(4, "user", PROMPT),
            _assistant(5, "m3", [TEXT], read=14_777, write=37, output=370),
            _entry(6, "user", PROMPT),
            _assistant(7, "m4", [TEXT], read=15_184, write=37, output=370),
        ],
    )


def test_thinking_the_api_kept_is_priced_in_every_later_request(tmp_path: Path) -> None:
    [s] = ts.measure_file(_kept_session(tmp_path))
    assert (s.model, s.version, s.calls, s.thinking_responses) == (
        "claude-sonnet-4-6",
        "2.1.185",
        4,
        2,
    )
    assert s.rate == RATE and s.rate_source == "family"
    assert s.visible_residual == 0.0  # the responses without thinking: output = rate x text
    assert s.thinking_written == 2 * T1
    assert s.signature_chars == 800 and s.signature_chars_per_token == 0.2
    assert s.kept == 1.0 and s.boundaries == 2  # the two boundaries after a turn that thought
    # request 2 carries turn 1's thinking, requests 3 and 4 both turns': read at 0.1
    assert s.carried_tokens == 5 * T1 and s.earlier_tokens == 5 * T1
    assert s.carried_weighted == pytest.approx(5 * T1 * 0.1)
    bill = 10_000 * 1.25 + (12_370 + 14_777 + 15_184) * 0.1 + 3 * 37 * 1.25
    assert s.bill_weighted == pytest.approx(bill, abs=0.1)
    assert s.share_pct == pytest.approx(round(100 * 5 * T1 * 0.1 / bill, 2))
    # the API keeps the latest thinking turn (keep >= 1): turn 1's can go from request 3 on,
    # rewriting the cache after its block: 14,814 - 10,000 - 2,000 tokens, written at 1.25
    # instead of read at 0.1; it then saves 200 on requests 3 and 4
    rewrite = 2814 * (1.25 - 0.1)
    saved, cost, clears = s.policies["every"]
    assert (saved, clears) == (pytest.approx(2 * T1 * 0.1), 1)
    assert cost == pytest.approx(rewrite, abs=0.1)
    assert s.net_pct["every"] == pytest.approx(100 * (400 - rewrite) / bill, abs=0.01)
    # that does not pay back: the other rules leave it (no request went cold)
    for rule in ("cold", "payback", "oracle"):
        assert s.policies[rule] == (0.0, 0.0, 0) and s.net_pct[rule] == 0.0


def test_a_clearing_rule_is_asked_with_what_it_saves_and_costs(tmp_path: Path) -> None:
    f = _kept_session(tmp_path)
    [(_header, events)] = list(ts.split_sessions(f))
    rs = ts.responses(events)
    ts.estimate_thinking(rs, RATE)
    asked: list[ts.Decision] = []
    prices = ts.default_prices("claude-sonnet-4-6")
    ts.simulate_clearing(rs, prices, lambda d: asked.append(d) or False)
    first = asked[0]  # request 3: turn 1's thinking can go
    assert first.per_request == pytest.approx(200.0)
    assert (first.cold, first.so_far, first.remaining) == (False, 2, 2)
    assert first.rewrite == pytest.approx(2814 * 1.15, abs=0.1)
    # 200k window: compaction at 167,000; the context grew 2,407 a request
    assert first.to_compaction == pytest.approx((167_000 - 14_814) / 2407)
    assert len(asked) == 2  # and again at request 4, still unpaid
    payback = ts.RULES["payback"]
    assert not payback(first)  # 200 x 10 requests < 3,236
    assert payback(dataclasses.replace(first, so_far=40))  # 200 x 40/2 >= 3,236
    assert not payback(dataclasses.replace(first, so_far=40, to_compaction=5))  # compacts first
    assert payback(dataclasses.replace(first, cold=True))  # nothing to rewrite


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
