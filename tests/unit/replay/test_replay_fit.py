"""Replay's plain against the bill each real transcript records (docs/accounting.md, "Plain
from the record"), and the per-session calibration it converts with.

The bill is read here on its own, from the raw JSON lines, not through replay's readers: the
input side (fresh input, cache reads, 5-minute and 1-hour cache writes) of every assistant
response, one per message id (Claude Code writes one line per content block), sub-agents
included, priced with ctxwrap's own price table so that only the modelling can differ.
Skipped without the corpus (`../shared/realdata` beside the clone)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ctxwrap.engine.cost import default_prices, price_tokens
from ctxwrap.replay import replay_paths, run_json
from ctxwrap.replay._calibrate import FAMILY_RATE, calibrate
from ctxwrap.replay._events import Header, Message
from tests.unit.replay.test_replay_formats import realdata

# The target: replay's plain within 5 % of the recorded bill, per file.
TOLERANCE = 0.05


def _lines(path: Path) -> Iterator[dict[str, Any]]:
    decoder = json.JSONDecoder()
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            line = line.strip()
            at = 0
            while at < len(line):  # two objects on one line, as two pi files have
                try:
                    d, at = decoder.raw_decode(line, at)
                except ValueError:
                    break
                if isinstance(d, dict):
                    yield d


def _weighted(model: str | None, *, read: int, write: int, write_1h: int, fresh: int) -> float:
    return price_tokens(
        default_prices(model),
        cache_read=read,
        cache_write=write - write_1h,
        uncached=fresh,
        cache_write_1h=write_1h,
    ).weighted_tokens


def claude_bill(path: Path) -> tuple[float, int]:
    last: dict[str, tuple[dict[str, Any], str | None]] = {}
    for d in _lines(path):
        m = d.get("message")
        if d.get("type") != "assistant" or not isinstance(m, dict):
            continue
        u = m.get("usage")
        if not isinstance(u, dict) or m.get("model") == "<synthetic>":
            continue
        last[str(m.get("id") or d.get("uuid"))] = (u, m.get("model"))  # the final counts
    total = 0.0
    for u, model in last.values():
        write = u.get("cache_creation_input_tokens") or 0
        split = u.get("cache_creation") if isinstance(u.get("cache_creation"), dict) else {}
        total += _weighted(
            model,
            read=u.get("cache_read_input_tokens") or 0,
            write=write,
            write_1h=min(split.get("ephemeral_1h_input_tokens") or 0, write),
            fresh=u.get("input_tokens") or 0,
        )
    return total, len(last)


def pi_bill(path: Path) -> tuple[float, int]:
    total, n = 0.0, 0
    for d in _lines(path):
        m = d.get("message")
        if not isinstance(m, dict) or m.get("role") != "assistant":
            continue
        u = m.get("usage")
        if not isinstance(u, dict) or not u:
            continue
        n += 1
        total += _weighted(
            m.get("model"),
            read=u.get("cacheRead") or 0,
            write=u.get("cacheWrite") or 0,
            write_1h=0,
            fresh=u.get("input") or 0,
        )
    return total, n


def codex_bill(path: Path) -> tuple[float, int]:
    total, n, seen, model = 0.0, 0, None, None
    for d in _lines(path):
        p = d.get("payload") if isinstance(d.get("payload"), dict) else {}
        if d.get("type") == "turn_context":
            model = p.get("model") or model
        info = p.get("info")
        if p.get("type") != "token_count" or not isinstance(info, dict):
            continue
        if info.get("total_token_usage") == seen:
            continue  # the same count, reported again
        seen = info.get("total_token_usage")
        u = info.get("last_token_usage") or {}
        n += 1
        cached = u.get("cached_input_tokens") or 0
        total += _weighted(
            model, read=cached, write=0, write_1h=0, fresh=(u.get("input_tokens") or 0) - cached
        )
    return total, n


BILLS = {"claude": claude_bill, "pi": pi_bill, "codex": codex_bill}


@pytest.mark.parametrize("agent", ["claude", "pi", "codex"])
def test_replay_prices_plain_as_every_real_session_was_billed(agent: str) -> None:
    """Every corpus file with usage: the recorded part of replay's plain is the bill (±5 %:
    every response found, none twice, each priced as billed), and plain as a whole, estimated
    calls included, stays within 5 % except where the file ends before a response's count."""
    checked = 0
    for path in realdata(agent):
        bill, responses = BILLS[agent](path)
        doc = run_json(replay_paths([path]))
        groups = doc["groups"]
        src = [g["plain_source"] for g in groups]
        if responses == 0:
            assert all(s["source"] == "estimated" and s["fit"] is None for s in src), path.name
            continue
        checked += 1
        recorded = sum(s["bill_weighted"] for s in src)
        assert recorded == pytest.approx(bill, rel=TOLERANCE), path.name
        assert sum(s["recorded_calls"] for s in src) == responses, path.name
        plain = sum(s["plain_weighted"] for s in src)
        unrecorded = sum(s["calls"] - s["recorded_calls"] for s in src)
        estimated = sum(s["estimated_weighted"] for s in src)
        assert estimated == pytest.approx(plain - recorded, abs=1.0), path.name
        if unrecorded == 0:
            assert plain == pytest.approx(bill, rel=TOLERANCE), path.name
            assert all(s["fit_ok"] for s in src), path.name
        else:
            # a response the file holds without its usage (a rollout cut before its
            # token_count): estimated, never more than one per file, and flagged when large
            assert unrecorded <= 1, path.name
            assert plain > recorded
            assert all(s["fit_ok"] == (abs(s["fit"] - 1) <= 0.10) for s in src), path.name
    assert checked >= 3


def test_the_joined_transcript_is_its_sessions_and_they_add_up_to_its_bill() -> None:
    [path] = [p for p in realdata("claude") if p.name.startswith("allym-4")]
    bill, _ = claude_bill(path)
    doc = run_json(replay_paths([path]))
    mains = [g for g in doc["groups"] if not g["session_id"].startswith("agent-")]
    assert len(mains) == 5
    assert sum(g["plain_source"]["bill_weighted"] for g in doc["groups"]) == pytest.approx(
        bill, rel=0.001
    )


def test_each_session_converts_at_its_own_rate_fitted_on_its_usage() -> None:
    """Tool output tokenises denser than chars/4: every corpus session with enough tool rounds
    is fitted on its own usage, within the range the corpus shows (0.25-0.55 tokens a char),
    and Claude Code's and pi's (Anthropic tokenizer) denser than Codex's."""
    rates: dict[str, list[float]] = {}
    for agent in ("claude", "pi", "codex"):
        for path in realdata(agent):
            doc = run_json(replay_paths([path]))
            for g in doc["groups"]:
                src = g["plain_source"]
                if src["tokens_per_char_source"] == "fitted":
                    assert 0.25 <= src["tokens_per_char"] <= 0.55, (path.name, src)
                    rates.setdefault(agent, []).append(src["tokens_per_char"])
    assert len(rates["claude"]) >= 8 and len(rates["pi"]) >= 4 and len(rates["codex"]) >= 3
    median = {a: sorted(v)[len(v) // 2] for a, v in rates.items()}
    assert median["codex"] < median["pi"] <= median["claude"]


def test_calibration_falls_back_to_the_family_rate_without_usage() -> None:
    """A session without recorded usage (an export, an old pi file) converts at its provider
    family's rate, and says so; one whose usage does not describe its text is not fitted."""
    no_usage = [Header("claude", "s", None, 0.0)] + [
        Message(f"a{i}", None, "assistant", float(i), 100, request_key=f"r{i}", model="claude-x")
        for i in range(5)
    ]
    cal = calibrate(no_usage)
    assert (cal.rate, cal.source, cal.pairs) == (FAMILY_RATE["anthropic"], "family", 0)
    # growth of 10 tokens per 4,000 chars of results: not text as any tokenizer counts it
    odd: list[Any] = [Header("codex", "s", None, 0.0)]
    for i in range(6):
        odd.append(Message(f"t{i}", None, "tool_result", float(i), 4000, tool_call_id=f"c{i}"))
        odd.append(
            Message(
                f"a{i}", None, "assistant", i + 0.5, 10, request_key=f"r{i}",
                usage_prompt_tokens=1000 + 10 * i, model="gpt-5",
            )
        )  # fmt: skip
    cal = calibrate(odd)
    assert cal.source == "family" and cal.rate == FAMILY_RATE["openai"] and cal.pairs >= 3


# -- the modelling rules behind the fit -----------------------------------------------------------


def _claude_rounds(outputs: list[tuple[int, int]], *, first: int = 20_000) -> list[Any]:
    """A Claude Code session of bash rounds: (characters of the output the transcript holds,
    tokens the provider counted the request grow by)."""
    from ctxwrap.replay._events import ToolCall

    ev: list[Any] = [Header("claude", "s", "/w", 0.0, "2.1.197")]
    ev.append(Message("u", None, "user", 0.5, 40, text="run the build"))
    counted = first
    t = 1.0
    for i, (chars, grown) in enumerate(outputs):
        call = ToolCall(f"c{i}", "bash", {"command": f"make {i}"}, 30)
        ev.append(
            Message(
                f"a{i}", None, "assistant", t, 40, [call], request_key=f"r{i}",
                usage_prompt_tokens=counted, usage_input_tokens=10,
                usage_cache_read_tokens=counted - 10, usage_cache_write_tokens=0,
                output_tokens=5, model="claude-sonnet-4-6",
            )
        )  # fmt: skip
        text = "".join(f"src/mod{j}.c:{j}: warning: unused variable 'x{j}'\n" for j in range(9999))
        ev.append(
            Message(f"t{i}", None, "tool_result", t + 0.5, chars, [], f"c{i}", "bash",
                    text[:chars])
        )  # fmt: skip
        counted += grown
        t += 1.0
    ev.append(
        Message(
            "end", None, "assistant", t, 40, [], request_key="r-end",
            usage_prompt_tokens=counted, usage_input_tokens=10,
            usage_cache_read_tokens=counted - 10, usage_cache_write_tokens=0,
            model="claude-sonnet-4-6",
        )
    )  # fmt: skip
    return ev


def test_what_the_agent_cut_before_sending_is_not_counted_as_kept_out_whole() -> None:
    """A 40,000-character output the provider counted as 2,000 tokens (the agent truncated it
    before sending): what ctxwrap keeps out of it is at that request's own rate, not the
    session's — a digest cannot save more than was sent."""
    from ctxwrap.replay._sim import SessionSimulator, Thresholds

    rounds = [(4_000, 1_500)] * 4 + [(40_000, 2_000)]
    sim = SessionSimulator("s", Thresholds(mask=False), None, calibrate(_claude_rounds(rounds)))
    sim.feed(_claude_rounds(rounds))
    r = sim.finish()
    last = r.calls[-1]
    assert r.rate_source == "fitted" and r.rate > 0.3
    assert last.saved["bash"] > 30_000  # the digest's characters: the whole output, nearly
    # kept out in tokens: bounded by what the provider counted for that round
    grown = r.plain_tokens(last) - r.plain_tokens(r.calls[-2])
    assert 0 < last.kept_out_tokens - r.calls[-2].kept_out_tokens <= grown


def test_a_resumed_sessions_fixed_prefix_is_bounded_by_its_smallest_request() -> None:
    """A session resumed from another carries history its file does not hold on its first
    request: the fixed prefix is never taken above what any request of it counted."""
    from ctxwrap.replay._sim import SessionSimulator, Thresholds

    events = _claude_rounds([(4_000, 1_500)] * 3, first=150_000)
    # then a compaction: the next request is small
    from ctxwrap.replay._events import Compaction

    events.insert(-1, Compaction(9.0, 2_000, None, "auto", 155_000))
    last = events[-1]
    events[-1] = Message(
        "end", None, "assistant", 10.0, 40, [], request_key="r-end",
        usage_prompt_tokens=22_000, usage_input_tokens=10, usage_cache_read_tokens=0,
        usage_cache_write_tokens=21_990, model=last.model,
    )  # fmt: skip
    sim = SessionSimulator("s", Thresholds(mask=False), None, calibrate(events))
    sim.feed(events)
    r = sim.finish()
    assert r.head_tokens is not None and r.head_tokens <= 22_000


def _rollout_cut_before_its_last_count(path: Path) -> Path:
    """A Codex rollout whose tool output the provider counted far above the session's rate,
    then a request the file ends before counting (a rollout cut short, as two corpus rollouts
    and one outside it are)."""

    def line(ts: int, kind: str, payload: dict[str, Any]) -> str:
        stamp = f"2026-07-18T12:00:{ts:02d}.000Z"
        return json.dumps({"timestamp": stamp, "type": kind, "payload": payload})

    def count(total: int, cached: int) -> dict[str, Any]:
        usage = {"input_tokens": total, "cached_input_tokens": cached, "output_tokens": 50}
        info = {"total_token_usage": usage, "last_token_usage": usage}
        return {"type": "token_count", "info": info}

    def call(cid: str, cmd: str) -> dict[str, Any]:
        args = json.dumps({"cmd": cmd})
        return {"type": "function_call", "name": "exec_command", "arguments": args, "call_id": cid}

    def output(cid: str, text: str) -> dict[str, Any]:
        return {"type": "function_call_output", "call_id": cid, "output": text}

    user = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]}
    meta = {"id": "019f0000-0000-7000-8000-00000000c0de", "cli_version": "0.144.5"}
    rows = [
        line(0, "session_meta", meta),
        line(0, "turn_context", {"turn_id": "t1", "model": "gpt-5.5"}),
        line(0, "response_item", user),
        line(1, "response_item", call("c1", "make build")),
        line(1, "event_msg", count(10_000, 0)),
        line(2, "response_item", output("c1", "built module\n" * 3_000)),  # 39k chars
        line(3, "response_item", call("c2", "make check")),
        line(3, "event_msg", count(40_000, 9_984)),
        line(4, "response_item", output("c2", "ok\n" * 300)),
        line(5, "response_item", call("c3", "make test")),  # no count follows
    ]
    path.write_text("\n".join(rows) + "\n")
    return path


def test_an_uncounted_request_grows_from_the_last_count_and_reads_its_cache(
    tmp_path: Path,
) -> None:
    """The whole context at the session's rate came out below the last recorded request, so
    the estimate looked like a compaction and was priced uncached: on a real rollout outside
    the corpus (gildore-arena) that one request was a third of plain and the fit 1.55."""
    f = _rollout_cut_before_its_last_count(tmp_path / "rollout-cut.jsonl")
    g = run_json(replay_paths([f], per_call=True))["groups"][0]
    calls = g["calls"]
    assert len(calls) == 3 and g["plain_source"]["recorded_calls"] == 2
    last, previous = calls[-1], calls[-2]
    assert last["cost_plain"]["cache_read_tokens"] >= 39_000  # the prefix the last one wrote
    assert last["cost_plain"]["uncached_input_tokens"] < 1_000  # ~900 chars of new output
    # what is estimated is one request reading ~40k from the cache on top of a bill of two
    # (~41k weighted): about a tenth more, where the uncached estimate made it half again
    assert 1.0 < g["plain_source"]["fit"] < 1.15
    assert last["cost_plain"]["weighted_tokens"] < previous["cost_plain"]["weighted_tokens"]
    # what was estimated is that request, said apart from the bill
    src = g["plain_source"]
    assert src["estimated_weighted"] == pytest.approx(last["cost_plain"]["weighted_tokens"], 0.01)
    assert src["plain_weighted"] == pytest.approx(src["bill_weighted"] + src["estimated_weighted"])


def test_the_text_says_a_fit_above_one_is_what_was_estimated(tmp_path: Path) -> None:
    """`1.13!` read as replay mispricing the bill; it is the share replay had to estimate."""
    f = _rollout_cut_before_its_last_count(tmp_path / "rollout-cut.jsonl")
    out = subprocess.run(
        [sys.executable, "-m", "ctxwrap", "replay", str(f)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert out.returncode == 0, out.stderr
    legend = out.stdout[out.stdout.index("plain ÷ bill:") :]
    assert "calls the transcript did not count, estimated" in legend
    assert "1 session with more than 10 % estimated (!)" in legend  # its fit is over 1.10
    assert "% off" not in legend
