"""Replay's readers on every real transcript format: pi's legacy v1 session files (migrated as pi
migrates them), Claude Code sub-agent transcripts, compactions and cache TTLs, Codex rollouts of
three generations, and sessions that already ran under ctxwrap.

Small hand-made fixtures per format in tests/fixtures/sessions/; the real public corpus in
../shared/realdata (beside the repository) when it is there.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from ctxwrap.replay import replay_paths, run_json
from ctxwrap.replay._read import (
    ClearedResults,
    Compaction,
    Event,
    Header,
    Message,
    ReadStats,
    claude_events,
    parse_line,
    read_session,
)

FIXTURES = Path(__file__).parents[1] / "fixtures" / "sessions"
PI_V1 = FIXTURES / "pi-v1-legacy.jsonl"
ROOT = Path(__file__).resolve().parents[2]


def _find_realdata() -> Path:
    """../shared/realdata beside the clone (CI); a worktree under <dir>/wt/<name> finds the one
    beside <dir>; CTXWRAP_REALDATA overrides."""
    if os.environ.get("CTXWRAP_REALDATA"):
        return Path(os.environ["CTXWRAP_REALDATA"])
    for up in (ROOT.parent, ROOT.parent.parent):
        if (up / "shared" / "realdata").is_dir():
            return up / "shared" / "realdata"
    return ROOT.parent / "shared" / "realdata"


REALDATA = _find_realdata()
PI_CONTEXT_JS = Path(__file__).parent / "pi_context.mjs"


def replay(*paths: Path) -> dict[str, Any]:
    return run_json(replay_paths(list(paths), per_call=True))


def events(path: Path) -> tuple[list[Event], ReadStats]:
    stats = ReadStats()
    return list(read_session(path, stats)), stats


def realdata(agent: str) -> list[Path]:
    if not (REALDATA / agent).is_dir():
        pytest.skip(f"the real-session corpus is not at {REALDATA} (shared/ beside the clone)")
    return sorted((REALDATA / agent).glob("*.jsonl"))


# -- pi: legacy v1 ------------------------------------------------------------------------------


def test_pi_v1_is_read_as_pi_migrates_it() -> None:
    evs, stats = events(PI_V1)
    [header] = [e for e in evs if isinstance(e, Header)]
    assert header.fmt == "pi" and header.version is None
    assert header.source is not None and header.source.startswith("pi v1")
    assert header.branched_from and header.branched_from.endswith("_0000.jsonl")
    msgs = [e for e in evs if isinstance(e, Message)]
    # ids and parents as migrateV1ToV2 gives them: one line, the previous entry as the parent
    assert msgs[0].entry_id == "v1-1" and msgs[0].parent_id is None
    assert msgs[1].parent_id == "v1-1"
    # the compaction keeps from the entry its firstKeptEntryIndex named (the header is 0)
    [comp] = [e for e in evs if isinstance(e, Compaction)]
    assert comp.first_kept_id == "v1-13"
    assert next(m for m in msgs if m.entry_id == "v1-13").role == "user"
    # the line with two objects yields both; it is noted, not skipped
    assert stats.skipped == {} and sum(stats.notes.values()) == 1
    assert stats.entries == 19 + 1
    # `!cmd` as the user text pi sends; `!!cmd` stays out of the context
    bash_runs = [m for m in msgs if m.role == "custom" and m.chars > 30]
    assert any(
        m.chars == len("Ran `git status`\n```\nOn branch main\nnothing to commit\n```")
        for m in bash_runs
    )
    assert not any(m.entry_id == "v1-8" for m in msgs)
    # hookMessage is v3's custom
    assert next(m for m in msgs if m.entry_id == "v1-16").role == "custom"
    # usage split kept as recorded
    first = next(m for m in msgs if m.role == "assistant")
    assert (first.usage_input_tokens, first.usage_cache_read_tokens) == (3, 0)
    assert first.usage_cache_write_tokens == 4000 and first.usage_prompt_tokens == 4003


def test_pi_v1_replays_every_call_and_resets_at_the_compaction() -> None:
    doc = replay(PI_V1)
    assert doc["skipped_files"] == {} and doc["skipped_entries"] == {}
    [s] = doc["groups"]
    assert s["format"] == "pi" and s["llm_calls"] == 6 and s["compactions"] == 1
    calls = s["calls"]
    k = next(i for i, c in enumerate(calls) if c["compaction"])
    assert k == 4 and calls[k]["messages_chars"] < calls[k - 1]["messages_chars"] / 10


def _pi_dist() -> Path | None:
    node, pi = shutil.which("node"), shutil.which("pi")
    if node is None or pi is None:
        return None
    m = re.search(r'"([^"]+)/cli\.js"', Path(pi).read_text(errors="replace"))
    dist = Path(m.group(1)) if m else Path(pi).resolve().parent
    return dist if (dist / "core" / "session-manager.js").is_file() else None


def _pi_context_sizes(path: Path, tmp_path: Path, every: int) -> list[int | None]:
    """What pi itself (its migration and context builder) sends before each assistant message."""
    dist = _pi_dist()
    if dist is None:
        pytest.skip("pi 1.x and node are not on PATH (scripts/install-tools.sh)")
    stats = ReadStats()
    entries: list[dict[str, Any]] = []
    for raw in path.read_bytes().splitlines():
        if raw.strip():
            entries += parse_line(raw, stats)
    data = tmp_path / "entries.json"
    data.write_text(json.dumps(entries))
    out = subprocess.run(
        ["node", str(PI_CONTEXT_JS), str(dist), str(data), str(every)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return list(json.loads(out.stdout))


def _agrees_with_pi(path: Path, tmp_path: Path, every: int = 1) -> None:
    want = _pi_context_sizes(path, tmp_path, every)
    [s] = replay(path)["groups"]
    got = [c["messages_chars"] for c in s["calls"]]
    assert len(got) == len(want)
    pairs = [(i, a, b) for i, (a, b) in enumerate(zip(got, want, strict=True)) if b is not None]
    assert len(pairs) >= len(got) // every
    assert [(i, a, b) for i, a, b in pairs if abs(a - b) > 2] == []


def test_pi_v1_context_matches_what_pi_builds(tmp_path: Path) -> None:
    _agrees_with_pi(PI_V1, tmp_path)


def test_real_pi_v1_sessions_match_what_pi_builds(tmp_path: Path) -> None:
    # every call of each session agrees (checked once by hand); a sample keeps the test fast
    for path in realdata("pi"):
        _agrees_with_pi(path, tmp_path, every=40)


# -- Claude Code: sub-agents, compactions, cleared results, cache TTLs --------------------------

CLAUDE_PROJECT = FIXTURES / "claude-project"
CLAUDE_SID = "4f0c2d1e-0000-4000-8000-000000000001"
CLAUDE_MAIN = CLAUDE_PROJECT / f"{CLAUDE_SID}.jsonl"
CLAUDE_SUB = CLAUDE_PROJECT / CLAUDE_SID / "subagents" / "agent-ab12cd3.jsonl"


def test_claude_subagent_transcript_is_its_own_session_under_its_parent() -> None:
    doc = replay(CLAUDE_PROJECT)
    assert doc["skipped_files"] == {} and doc["skipped_entries"] == {}
    by_id = {g["session_id"]: g for g in doc["groups"]}
    assert by_id[CLAUDE_SID]["llm_calls"] == 4  # the synthetic API error is no request
    assert by_id["agent-ab12cd3"]["llm_calls"] == 2  # one per response, parallel calls in one
    evs, _ = events(CLAUDE_SUB)
    [h] = [e for e in evs if isinstance(e, Header)]
    assert h.source == "claude sub-agent" and h.agent_id == "ab12cd3"
    assert h.parent_session_id == CLAUDE_SID


def test_a_lone_subagent_transcript_replays(tmp_path: Path) -> None:
    lone = tmp_path / "agent-ab12cd3.jsonl"  # kept flat, its parent elsewhere
    lone.write_bytes(CLAUDE_SUB.read_bytes())
    doc = replay(lone)
    assert doc["skipped_files"] == {} and doc["skipped_entries"] == {}
    assert [g["llm_calls"] for g in doc["groups"]] == [2]
    # renamed, it is still recognised by its entries
    other = tmp_path / "x.jsonl"
    other.write_bytes(CLAUDE_SUB.read_bytes())
    [h] = [e for e in events(other)[0] if isinstance(e, Header)]
    assert h.agent_id == "ab12cd3" and h.source == "claude sub-agent"


def test_sidechain_entries_inside_a_main_transcript_are_counted_apart(tmp_path: Path) -> None:
    mixed = tmp_path / "main.jsonl"
    mixed.write_bytes(CLAUDE_MAIN.read_bytes() + CLAUDE_SUB.read_bytes())
    doc = replay(mixed)
    assert doc["skipped_entries"] == {
        "Claude Code sub-agent entry inside the main transcript (its own context)": 5
    }
    assert [g["llm_calls"] for g in doc["groups"]] == [4]


def test_claude_compaction_carries_its_summary_and_cleared_results_are_reported() -> None:
    evs, stats = events(CLAUDE_MAIN)
    assert stats.skipped == {}
    [comp] = [e for e in evs if isinstance(e, Compaction)]
    assert comp.summary_chars > 100  # the summary the model gets, not a user prompt
    assert not any(
        isinstance(e, Message) and e.role == "user" and "being continued" in e.text for e in evs
    )
    [cleared] = [e for e in evs if isinstance(e, ClearedResults)]
    assert cleared.tool_call_ids == ("toolu_read",) and cleared.tokens_saved == 2900
    assert cleared.replacement_chars == len("[Old tool result content cleared]")
    [s] = [g for g in replay(CLAUDE_MAIN)["groups"]]
    last = s["calls"][-1]
    assert last["compaction"] and last["messages_chars"] == comp.summary_chars


def test_claude_one_hour_cache_writes_are_on_the_call_record() -> None:
    evs, _ = events(CLAUDE_MAIN)
    calls = {}
    for e in evs:
        if isinstance(e, Message) and e.role == "assistant":
            calls.setdefault(e.request_key, e)
    first, second, third = calls["msg_1"], calls["msg_2"], calls["msg_3"]
    assert (first.usage_cache_write_tokens, first.usage_cache_write_1h_tokens) == (20000, 20000)
    assert (second.usage_cache_read_tokens, second.usage_cache_write_1h_tokens) == (20000, 150)
    assert (third.usage_cache_write_tokens, third.usage_cache_write_1h_tokens) == (3000, 0)
    assert first.usage_prompt_tokens == 20003 and first.usage_input_tokens == 3
    # no split recorded (older Claude Code): unknown, not zero
    line = json.loads(CLAUDE_MAIN.read_text().splitlines()[2])
    del line["message"]["usage"]["cache_creation"]
    stats = ReadStats()
    [msg] = [e for e in claude_events(line, stats) if isinstance(e, Message)]
    assert msg.usage_cache_write_tokens == 20000 and msg.usage_cache_write_1h_tokens is None
