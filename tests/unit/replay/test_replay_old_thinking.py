"""Replay models the Claude Code proxy's old-thinking clearing (mechanisms/thinking.py): on a
Claude Code 2.1 session whose turns think, an idle gap past the cache TTL leaves the earlier
turns' thinking out of ctxwrap's side from there on, priced as the provider bills it; not on
Claude Code 2.0 (it sent no edit to raise), not with `clear_old_thinking` off, and the
chain's own `thinking` object decides (a swapped one changes replay)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from ctxwrap.mechanisms.chain import default_mechanisms
from ctxwrap.mechanisms.thinking import ClearingChoice, OldThinking
from ctxwrap.replay._events import ReadStats
from ctxwrap.replay._pricing import default_prices
from ctxwrap.replay._run import price_session, replay_sessions
from ctxwrap.replay._sim import SessionReplay, SessionSimulator, Thresholds

THINK = {"type": "thinking", "thinking": "", "signature": "x" * 8000}
TEXT = {"type": "text", "text": "A" * 1000}
PROMPT = "p" * 40_000  # ~15k tokens a turn: a warm rewrite of it costs more than it saves


def _transcript(path: Path, version: str) -> Path:
    """Five turns that think ~2,000 tokens each, a pause past the cache, then three more."""
    entries: list[dict[str, Any]] = []
    read = 0
    t = 0
    for n in range(8):
        t += 3600 if n == 5 else 20
        for role, content in (("user", PROMPT), ("assistant", [THINK, TEXT])):
            i = len(entries)
            msg: dict[str, Any] = {"role": role, "content": content}
            if role == "assistant":
                write = 25_000 if n == 0 or n == 5 else 15_200
                msg.update(
                    id=f"m{n}",
                    model="claude-sonnet-4-6",
                    usage={
                        "input_tokens": 0,
                        "cache_read_input_tokens": 0 if n in (0, 5) else read,
                        "cache_creation_input_tokens": write + (read if n == 5 else 0),
                        "output_tokens": 2370,
                    },
                )
                read += write if n != 5 else 0
                read += 2370 if n else 0
            entries.append(
                {
                    "type": role,
                    "sessionId": "s1",
                    "version": version,
                    "uuid": f"u{i}",
                    "parentUuid": f"u{i - 1}" if i else None,
                    "timestamp": f"2026-06-01T{10 + t // 3600:02d}:{t % 3600 // 60:02d}:"
                    f"{t % 60:02d}Z",
                    "message": msg,
                }
            )
    path.write_text("".join(json.dumps(e) + "\n" for e in entries))
    return path


def _replay(path: Path, th: Thresholds | None = None, **kw: Any) -> SessionReplay:
    [r] = replay_sessions(path, th or Thresholds(), ReadStats(), **kw)
    return r


def _cost(r: SessionReplay) -> float:
    costs = price_session(r, default_prices(r.model), r.cache_ttl_s or 300.0)
    return sum(c.weighted_tokens for c in costs.ctxwrap)


def test_an_idle_gap_leaves_earlier_thinking_out_from_there_on(tmp_path: Path) -> None:
    r = _replay(_transcript(tmp_path / "s.jsonl", "2.1.185"))
    off = _replay(tmp_path / "s.jsonl", Thresholds(clear_old_thinking=False))
    cleared = [c.saved.get("thinking", 0) for c in r.calls]
    assert cleared[:5] == [0] * 5  # warm: a few turns' thinking does not pay a rewrite
    assert all(n > 0 for n in cleared[5:])  # cold: cleared, and held
    assert all(c.saved.get("thinking", 0) == 0 for c in off.calls)
    # the turns before the latest that thought: four of ~2,000 tokens at the gap
    assert 7000 < cleared[5] * r.rate < 9000
    assert all(c.thinking_rewrite_from is None for c in r.calls)  # cold: no extra rewrite
    assert _cost(r) < _cost(off)


def test_claude_code_2_0_sent_no_edit_to_raise(tmp_path: Path) -> None:
    r = _replay(_transcript(tmp_path / "s.jsonl", "2.0.76"))
    assert all(c.saved.get("thinking", 0) == 0 for c in r.calls)


class NeverClears(OldThinking):
    def pays(self, c: ClearingChoice) -> bool:
        return False


def test_replay_takes_the_chains_decision(tmp_path: Path) -> None:
    path = _transcript(tmp_path / "s.jsonl", "2.1.185")
    chain = dataclasses.replace(default_mechanisms(), thinking=NeverClears())
    sim = SessionSimulator(str(path), Thresholds(), None, None, mechanisms=chain)
    from ctxwrap.replay._read import read_session

    sim.feed(list(read_session(path, ReadStats())))
    r = sim.finish()
    assert all(c.saved.get("thinking", 0) == 0 for c in r.calls)


def test_the_replay_report_draws_it_kept_out_beside_what_was_sent(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """A 2.1 transcript keeps no thinking text: the thinking left out is drawn on top of what
    was sent, never taken from the messages' own characters (sent bars stay whole)."""
    from ctxwrap.report._data import from_replay

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    path = _transcript(tmp_path / "s.jsonl", "2.1.185")
    data = from_replay(path)
    monkeypatch.setenv("PI_CTX_CLEAR_OLD_THINKING", "0")
    off = from_replay(path)
    assert [c.sent for c in data.calls] == [c.sent for c in off.calls]
    assert [bool(c.kept.get("thinking")) for c in data.calls] == [False] * 5 + [True] * 3
    assert not any(c.kept.get("thinking") for c in off.calls)


class Asked(OldThinking):
    """The chain's rule, recording each warm clearing it decides (the rewrite it expected)."""

    def __init__(self) -> None:
        self.asked: list[ClearingChoice] = []

    def pays(self, c: ClearingChoice) -> bool:
        ok = super().pays(c)
        if ok and not c.cold:
            self.asked.append(c)
        return ok


class ClearsLate(OldThinking):
    """Clears once the conversation has run `after` requests, recording what it was told."""

    def __init__(self, after: int) -> None:
        self.after = after
        self.asked: list[ClearingChoice] = []

    def pays(self, c: ClearingChoice) -> bool:
        if c.so_far < self.after:
            return False
        self.asked.append(c)
        return True

    def within(self, c: ClearingChoice, savings: Any, request: Any = None) -> bool:
        return True


def _tool_turns(path: Path) -> Path:
    """Two prompts; every response thinks ~6,000 tokens and calls a tool, the last of each
    prompt answers: the second prompt's thinking builds up over four requests."""
    entries: list[dict[str, Any]] = []
    read, t, n = 0, 0, 0

    def add(role: str, content: Any, **msg: Any) -> None:
        nonlocal t
        t += 10
        i = len(entries)
        entries.append({
            "type": role, "sessionId": "s1", "version": "2.1.185", "uuid": f"u{i}",
            "parentUuid": f"u{i - 1}" if i else None,
            "timestamp": f"2026-06-01T10:{t // 60:02d}:{t % 60:02d}Z",
            "message": {"role": role, "content": content, **msg}})  # fmt: skip

    for prompt, rounds in (("fix the parser", 2), ("now the lexer", 5)):
        add("user", prompt * 20)
        for k in range(rounds):
            last = k == rounds - 1
            call = {"type": "tool_use", "id": f"t{n}", "name": "Bash", "input": {"command": "ls"}}
            write = 20_000 if n == 0 else 6_500
            add("assistant", [THINK, TEXT if last else call], id=f"m{n}",
                model="claude-sonnet-4-6", usage={
                    "input_tokens": 0, "cache_read_input_tokens": read,
                    "cache_creation_input_tokens": write, "output_tokens": 6_300})  # fmt: skip
            read += write
            if not last:
                add("user", [{"type": "tool_result", "tool_use_id": f"t{n}", "content": "ok"}])
            n += 1
    path.write_text("".join(json.dumps(e) + "\n" for e in entries))
    return path


def test_a_clearing_counts_the_thinking_it_keeps_in_the_rewrite(tmp_path: Path) -> None:
    """A clearing rewrites everything after the first thinking it leaves out, and that holds
    the latest turn's thinking so far, which a transcript stores as a signature only. The rule
    was asked the rewrite without it: a bet of ~8,000 tokens billed ~28,000 (pv-case-review
    cut at 6 requests cost 21.5 % more than plain). The proxy measures it in the messages."""
    from ctxwrap.replay._read import read_session

    path = _tool_turns(tmp_path / "s.jsonl")
    rule = ClearsLate(after=5)
    chain = dataclasses.replace(default_mechanisms(), thinking=rule)
    sim = SessionSimulator(str(path), Thresholds(), None, None, mechanisms=chain)
    sim.feed(list(read_session(path, ReadStats())))
    r = sim.finish()
    costs = price_session(r, default_prices(r.model), r.cache_ttl_s or 300.0)
    [i] = [c.index for c in r.calls if c.thinking_rewrite_from is not None]
    [choice] = rule.asked
    # what the provider writes beyond plain's request: the rewrite, as it bills it
    billed = costs.ctxwrap[i].cache_write_tokens - costs.plain[i].cache_write_tokens
    assert billed > 10_000  # the latest prompt's thinking, cached since, is most of it
    assert choice.rewrite / (1.25 - 0.1) >= 0.8 * billed, (i, choice, billed)


REALDATA = Path(__file__).resolve().parents[3].parent / "shared" / "realdata"


@pytest.mark.parametrize(
    ("name", "policy"),
    [
        ("pv-case-review", {}),
        ("jgive", {}),
        # masking that shrinks the conversation between the thinking and the clearing
        ("allym-4", {"mask_read_idle_rounds": 3, "mask_min_chars": 500}),
    ],
)
def test_a_clearing_expects_the_rewrite_the_provider_bills(
    name: str, policy: dict[str, Any]
) -> None:
    """The rule is asked the rewrite the provider will bill: the conversation as it is now
    from where the provider writes anew. It was asked a size from an earlier request less the
    thinking, which after a mask came out at 0 where 33,000 tokens were written (and a
    change before the last rewrite's start was taken to rewrite from that start)."""
    from ctxwrap.config import Settings
    from ctxwrap.replay._calibrate import calibrate
    from ctxwrap.replay._read import read_session
    from ctxwrap.replay._run import _by_session

    found = sorted(p for p in REALDATA.rglob(f"*{name}*") if p.is_file())
    if not found:
        pytest.skip(f"no {name} session in {REALDATA}")
    th = dataclasses.replace(Thresholds.from_settings(Settings()), **policy)
    checked = 0
    for events in _by_session(read_session(found[0], ReadStats())):
        rule = Asked()
        chain = dataclasses.replace(default_mechanisms(), thinking=rule)
        sim = SessionSimulator(str(found[0]), th, None, calibrate(events), mechanisms=chain)
        sim.feed(events)
        r = sim.finish()
        if len(r.calls) < 40:
            continue
        costs = price_session(r, default_prices(r.model), r.cache_ttl_s or 300.0)
        at = [c.index for c in r.calls if c.thinking_rewrite_from is not None]
        assert len(at) == len(rule.asked)
        for i, choice in zip(at, rule.asked, strict=True):
            expected = choice.rewrite / (1.25 - 0.1)
            written = costs.ctxwrap[i].cache_write_tokens
            # the request's own new content is written too: a margin for it
            assert expected + 10_000 >= 0.5 * written, (i, expected, written)
            checked += 1
    assert checked or name == "allym-4"  # the two thinking sessions clear while warm
