"""Replay on recorded session files (fixtures written by the real pi and Claude Code) and on
hostile input: every bad file or line is a counted skip with a reason, never a traceback."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from ctxwrap.engine.cost import SUMMARY_PROMPT_TOKENS
from ctxwrap.replay import MAX_LINE_BYTES, Thresholds, _pricing, replay_paths, run_json
from ctxwrap.replay._run import price_session
from ctxwrap.replay._sim import tokens

FIXTURES = Path(__file__).parents[2] / "fixtures" / "sessions"
PI16 = FIXTURES / "pi-compaction.jsonl"
PI073 = FIXTURES / "pi-0.73-compaction.jsonl"
CLAUDE = FIXTURES / "claude-2.1.197.jsonl"
CTXWRAP = [sys.executable, "-m", "ctxwrap"]


def replay(*paths: Path, **kw: Any) -> dict[str, Any]:
    return run_json(replay_paths(list(paths), per_call=True, **kw))


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CTXWRAP, *args],
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
        env=env,
    )


# -- recorded sessions --------------------------------------------------------------------------


@pytest.mark.parametrize("path", [PI16, PI073], ids=["pi-1.6", "pi-0.73"])
def test_pi_sessions_replay_every_call_with_each_mechanism(path: Path) -> None:
    doc = replay(path, thresholds=Thresholds(write=True))  # the write strip: off under pi
    assert doc["skipped_entries"] == {} and doc["skipped_files"] == {}
    [s] = doc["groups"]
    assert s["format"] == "pi" and s["compactions"] >= 1
    # one call per assistant message in the file
    assistants = sum(
        1
        for line in path.read_text().splitlines()
        if json.loads(line).get("message", {}).get("role") == "assistant"
    )
    assert s["llm_calls"] == assistants
    kinds = [i["kind"] for i in s["intervention_list"]]
    assert kinds.count("digest") == 1 and kinds.count("strip") == 1
    digest = next(i for i in s["intervention_list"] if i["kind"] == "digest")
    assert digest["tool"] == "bash" and digest["original_chars"] > 10 * digest["replacement_chars"]
    mech = {m["mechanism"]: m for m in s["mechanisms"]}
    # pi recalls through its bash (`ctxwrap recall`), and find_capability rides along only
    # where skills left the prompt: none of ctxwrap's tools costs this session anything
    assert mech["skills"]["saved_chars"] == 0 and mech["tools"]["saved_chars"] == 0
    assert mech["bash"]["saved_chars"] > 0 and mech["writes"]["saved_chars"] > 0
    # the totals are the sum of the mechanisms, and the tagger bound stays outside them
    assert s["saved_chars"] == sum(m["saved_chars"] for m in s["mechanisms"])
    assert s["plain_chars"] - s["sent_chars"] == s["saved_chars"]
    assert s["tagger_bound_tokens"] > 0
    # cost: ctxwrap is cheaper than plain on this session, and both are priced per call
    assert s["cost"]["ctxwrap"]["weighted_tokens"] < s["cost"]["plain"]["weighted_tokens"]
    assert len(s["calls"]) == s["llm_calls"]


def test_pi_compaction_resets_the_context() -> None:
    [s] = replay(PI16)["groups"]
    calls = s["calls"]
    k = next(i for i, c in enumerate(calls) if c["compaction"])
    assert calls[k]["messages_chars"] < calls[k - 1]["messages_chars"] / 2
    # after the compaction the digested output is gone from the context with its saving
    assert calls[k]["saved"]["bash"] == 0 and calls[k - 1]["saved"]["bash"] > 0


def test_pi_073_system_prompt_is_estimated_and_says_so() -> None:
    [s] = replay(PI073)["groups"]
    assert s["system_estimated"] is True and s["calls"][0]["system_chars"] > 1000
    [s16] = replay(PI16)["groups"]
    assert s16["system_estimated"] is False


def test_claude_code_transcript() -> None:
    doc = replay(CLAUDE, thresholds=Thresholds(write=True))  # the write strip: off by default
    assert doc["skipped_entries"] == {} and doc["skipped_files"] == {}
    [s] = doc["groups"]
    assert s["format"] == "claude" and s["llm_calls"] == 4  # one per response (message.id)
    assert s["model"] == "claude-opus-4-8"
    kinds = [i["kind"] for i in s["intervention_list"]]
    assert kinds.count("digest") == 1 and kinds.count("strip") == 1
    assert "tombstone-bound" in kinds  # the Read of the parallel round is in the context
    # what the scripted server received on each call (recorded with the transcript)
    received = [6370, 48940, 53994, 54129]
    for call, n in zip(s["calls"], received, strict=True):
        assert abs(call["messages_chars"] - n) <= 0.12 * n
    assert abs(s["calls"][0]["system_chars"] - (5812 + 64515)) <= 0.05 * (5812 + 64515)
    mech = {m["mechanism"]: m["saved_chars"] for m in s["mechanisms"]}
    assert mech["tools"] == 0  # ctxwrap's pi tools are not added to Claude Code


def _with_prompt_after(lines: list[str], pause_s: float) -> str:
    """The first prompt of the pi 1.6 fixture, then a second prompt `pause_s` later."""
    from datetime import UTC, datetime

    first = [ln for ln in lines[: next(i for i, ln in enumerate(lines) if '"compaction"' in ln)]]
    last = json.loads(first[-1])
    t = datetime.fromisoformat(last["timestamp"].replace("Z", "+00:00")).timestamp() + pause_s

    def iso(ts: float) -> str:
        return datetime.fromtimestamp(ts, UTC).isoformat().replace("+00:00", "Z")

    user = {
        "type": "message",
        "id": "later-u",
        "parentId": last["id"],
        "timestamp": iso(t),
        "message": {"role": "user", "content": [{"type": "text", "text": "next task"}]},
    }
    reply = {
        "type": "message",
        "id": "later-a",
        "parentId": "later-u",
        "timestamp": iso(t + 1),
        "message": {"role": "assistant", "content": [{"type": "text", "text": "ok"}]},
    }
    return "\n".join([*first, json.dumps(user), json.dumps(reply)]) + "\n"


@pytest.mark.parametrize(
    ("model", "masked"), [("claude-opus-5-5", False), ("claude-opus-4-8", True)]
)
def test_replay_keeps_what_a_checked_thinking_block_follows(
    tmp_path: Path, model: str, masked: bool
) -> None:
    """The idle gap below, with every response thinking first: on a model that checks its
    thinking blocks' prefix (Opus 5.5) each earlier result is in a later block's prefix, so
    the adapters keep it as sent and replay masks nothing either; on Opus 4.8 it masks."""
    entries = [
        json.loads(ln) for ln in _with_prompt_after(PI16.read_text().splitlines(), 600).splitlines()
    ]
    for e in entries:
        msg = e.get("message") if e.get("type") == "message" else None
        if isinstance(msg, dict) and msg.get("role") == "assistant":
            msg["model"] = model
            think = {"type": "thinking", "thinking": "plan", "thinkingSignature": "s"}
            msg["content"] = [think, *(msg.get("content") or [])]
    f = tmp_path / "thinking.jsonl"
    f.write_text("".join(json.dumps(e) + "\n" for e in entries))
    th = Thresholds(dedup=False, mask_warm=False, mask_earlier_tasks=True, mask_stale_reads=True,
                    mask_older_rounds=0, mask_read_idle_rounds=0)  # fmt: skip
    doc = replay(f, thresholds=th)
    [s] = doc["groups"]
    assert s["calls"][-1]["masked"] is masked
    assert any(i["kind"] == "mask" for i in s["intervention_list"]) is masked
    # what the user reads says why masking saved little there: replay's text, the report
    from ctxwrap.replay._view import render_text
    from ctxwrap.report._data import from_replay

    said = "history masking saves little on claude-opus-5-5"
    assert (said in render_text(doc, width=300)) is not masked
    notes = " ".join(from_replay(f).notes)
    assert (said in notes.lower()) is not masked


def test_idle_gap_masks_superseded_reads_and_earlier_prompts(tmp_path: Path) -> None:
    """A second prompt 10 minutes after the first: the cache is cold, so the superseded read
    and the earlier prompt's results become tombstones. 10 seconds later: nothing is masked."""
    lines = PI16.read_text().splitlines()
    paused, quick = tmp_path / "paused.jsonl", tmp_path / "quick.jsonl"
    paused.write_text(_with_prompt_after(lines, 600))
    quick.write_text(_with_prompt_after(lines, 10))
    # Re-read pointers off: the fixture's second read of NOTES.txt is unchanged and would be a
    # pointer (pinning the first read), see the next test.
    # The cold-boundary rules of earlier tasks and stale reads (off by default since issue 21).
    th = Thresholds(
        dedup=False,
        mask_warm=False,
        mask_earlier_tasks=True,
        mask_stale_reads=True,
        mask_older_rounds=0,
        mask_read_idle_rounds=0,
    )
    [s] = replay(paused, thresholds=th)["groups"]
    [q] = replay(quick, thresholds=th)["groups"]
    assert s["calls"][-1]["masked"] and not any(c["masked"] for c in q["calls"])
    assert {m["mechanism"]: m["saved_chars"] for m in q["mechanisms"]}["masking"] == 0
    masked = [i for i in s["intervention_list"] if i["kind"] == "mask"]
    reasons = {i["reason"] for i in masked}
    assert reasons == {"superseded", "earlier_task"}  # the daemon's own reasons (engine/masking.py)
    assert all(i["replacement_chars"] < i["original_chars"] for i in masked)
    # the bash output was already digested: masking only counts what is left of it
    assert sum(i["original_chars"] for i in masked) < sum(
        c["messages_chars"] for c in s["calls"][-1:]
    )
    assert s["calls"][-1]["saved"]["masking"] > 0


def test_an_unchanged_reread_is_a_pointer_and_pins_the_first_read(tmp_path: Path) -> None:
    """As the daemon decides (mechanisms/dedup.py): the repeat is a pointer counted under
    amnesia, and the read it points at is never masked, even after an idle gap."""
    paused = tmp_path / "paused.jsonl"
    paused.write_text(_with_prompt_after(PI16.read_text().splitlines(), 600))
    [s] = replay(paused)["groups"]
    [pointer] = [i for i in s["intervention_list"] if i["kind"] == "pointer"]
    assert pointer["label"] == "read NOTES.txt" and pointer["replacement_chars"] < 200
    assert {m["mechanism"]: m["saved_chars"] for m in s["mechanisms"]}["amnesia"] > 0
    masked = [i["label"] for i in s["intervention_list"] if i["kind"] == "mask"]
    assert "read NOTES.txt" not in masked


def test_thresholds_come_from_the_config() -> None:
    [low] = replay(PI16, thresholds=Thresholds(bash_min_tokens=10**9, write_min_bytes=10**9))[
        "groups"
    ]
    kinds = {i["kind"] for i in low["intervention_list"]}
    assert "digest" not in kinds and "strip" not in kinds


def test_since_keeps_only_later_calls(tmp_path: Path) -> None:
    doc = replay(PI16, since=time.time() + 3600)
    assert doc["sessions"] == 0  # the file was written before: nothing in the window


def test_replay_never_writes_the_agent_files(tmp_path: Path) -> None:
    copy = tmp_path / "s.jsonl"
    copy.write_bytes(PI16.read_bytes())
    os.chmod(copy, 0o444)
    before = (copy.read_bytes(), copy.stat().st_mtime_ns)
    out = cli("replay", "--json", str(tmp_path))
    assert out.returncode == 0, out.stderr
    assert (copy.read_bytes(), copy.stat().st_mtime_ns) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.jsonl"]


# -- bad input ----------------------------------------------------------------------------------


def test_truncated_lines_are_counted_and_the_rest_replayed(tmp_path: Path) -> None:
    lines = PI16.read_text().splitlines()
    lines[6] = lines[6][: len(lines[6]) // 2]  # a tool result cut mid-line
    cut = tmp_path / "cut.jsonl"
    cut.write_text("\n".join(lines) + "\n" + lines[-1][:20])  # and a last line cut short
    doc = replay(cut)
    assert doc["skipped_entries"] == {"line is not JSON (truncated or corrupt)": 2}
    assert doc["sessions"] == 1 and doc["groups"][0]["llm_calls"] > 3


def test_binary_empty_and_foreign_files_are_skipped_with_reasons(tmp_path: Path) -> None:
    (tmp_path / "bin.jsonl").write_bytes(os.urandom(8192) + b"\x00" * 100)
    (tmp_path / "empty.jsonl").write_bytes(b"")
    (tmp_path / "other.jsonl").write_text('{"hello": "world"}\n')
    (tmp_path / "good.jsonl").write_bytes(PI16.read_bytes())
    out = cli("replay", "--json", str(tmp_path))
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
    doc = json.loads(out.stdout)
    assert doc["sessions"] == 1
    assert doc["skipped_files"] == {
        "binary file": 1,
        "empty file": 1,
        "no pi session header, Claude Code entry or Codex rollout start": 1,
    }
    text = cli("replay", str(tmp_path)).stdout
    assert "1 file: binary file" in text and "skipped:" in text


def test_unknown_entry_types_and_shapes_are_counted(tmp_path: Path) -> None:
    lines = PI16.read_text().splitlines()
    odd = [
        '{"type": "from_the_future", "id": "x1", "parentId": null}',
        '{"type": "message", "id": "x2", "message": "not an object"}',
        '{"type": "message", "id": "x3", "message": {"role": "wizard", "content": []}}',
        "[1, 2, 3]",
        '{"type": "message", "id": "x4", "message": {"role": "user", "content": 42}}',
    ]
    f = tmp_path / "odd.jsonl"
    f.write_text("\n".join(lines[:5] + odd + lines[5:]) + "\n")
    doc = replay(f)
    assert doc["skipped_entries"] == {
        "unknown pi entry type 'from_the_future'": 1,
        "pi message without a message object": 1,
        "pi message of unknown role 'wizard'": 1,
        "line is not a JSON object": 1,
    }
    assert doc["groups"][0]["llm_calls"] == replay(PI16)["groups"][0]["llm_calls"]


def test_a_100_mb_line_is_skipped_without_loading_it(tmp_path: Path) -> None:
    lines = PI16.read_text().splitlines()
    huge = tmp_path / "huge.jsonl"
    with open(huge, "w") as fh:
        fh.write("\n".join(lines[:4]) + "\n")
        fh.write('{"type": "message", "id": "big", "message": {"role": "user", "content": "')
        chunk = "x" * (1 << 20)
        for _ in range(100):
            fh.write(chunk)
        fh.write('"}}\n')
        fh.write("\n".join(lines[4:]) + "\n")
    code = (
        "import json, re, sys\n"
        "from pathlib import Path\n"
        "from ctxwrap.replay import replay_paths, run_json\n"
        "doc = run_json(replay_paths([Path(sys.argv[1])]))\n"
        # VmHWM is this program's peak; ru_maxrss would include the forking pytest's
        "status = Path('/proc/self/status').read_text()\n"
        "peak = int(re.search(r'VmHWM:\\s+(\\d+)', status).group(1)) // 1024\n"
        "print(json.dumps({'doc': doc, 'peak_mb': peak}))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(huge)], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout)
    assert res["doc"]["skipped_entries"] == {f"line over {MAX_LINE_BYTES >> 20} MiB": 1}
    assert res["doc"]["sessions"] == 1
    assert res["peak_mb"] < 60 + 2 * (MAX_LINE_BYTES >> 20), res["peak_mb"]


def test_thousands_of_small_sessions(tmp_path: Path) -> None:
    root = tmp_path / "sessions"
    root.mkdir()
    header = '{"type":"session","version":3,"id":"s%d","timestamp":"2026-11-30T10:00:00.000Z","cwd":"/w"}\n'
    body = (
        '{"type":"message","id":"u","parentId":null,"timestamp":"2026-11-30T10:00:01.000Z",'
        '"message":{"role":"user","content":[{"type":"text","text":"hi"}]}}\n'
        '{"type":"message","id":"a","parentId":"u","timestamp":"2026-11-30T10:00:02.000Z",'
        '"message":{"role":"assistant","content":[{"type":"text","text":"hello"}],'
        '"usage":{"input":900,"output":2,"cacheRead":0,"cacheWrite":0}}}\n'
    )
    for i in range(4_000):
        sub = root / f"d{i % 50}"
        sub.mkdir(exist_ok=True)
        text = header % i + body
        if i % 1000 == 7:
            text += '{"type":"message", "id": trunc'  # a few with a truncated last line
        (sub / f"s{i}.jsonl").write_text(text)
    start = time.monotonic()
    out = cli("replay", "--json", str(root))
    elapsed = time.monotonic() - start
    assert out.returncode == 0 and out.stderr == "", out.stderr  # piped: no progress bar
    doc = json.loads(out.stdout)
    assert doc["files"] == doc["sessions"] == 4_000
    assert doc["totals"]["llm_calls"] == 4_000
    assert doc["skipped_entries"] == {"line is not JSON (truncated or corrupt)": 4}
    assert elapsed < 60


def test_missing_path_is_reported_not_raised(tmp_path: Path) -> None:
    out = cli("replay", "--json", str(tmp_path / "nope"))
    # nothing could be read: the document still says why, and the exit status is not 0
    # (issue 22), with the reason on stderr and no traceback
    assert out.returncode == 66, out.stderr
    assert "no session file found under" in out.stderr and "Traceback" not in out.stderr
    assert json.loads(out.stdout)["skipped_files"] == {f"path not found: {tmp_path / 'nope'}": 1}


def test_progress_bar_on_a_terminal_only(tmp_path: Path) -> None:
    import pexpect

    for i in range(40):
        (tmp_path / f"s{i}.jsonl").write_bytes(PI16.read_bytes())
    child = pexpect.spawn(
        sys.executable,
        ["-m", "ctxwrap", "replay", str(tmp_path)],
        env={**os.environ, "TERM": "xterm", "COLUMNS": "100"},
        encoding="utf-8",
        timeout=120,
    )
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    assert "replaying" in (child.before or "")  # the bar was drawn on the terminal
    piped = cli("replay", str(tmp_path))
    assert "replaying" not in piped.stdout + piped.stderr


# -- --tag --------------------------------------------------------------------------------------


def test_tag_asks_the_http_aux_backend_and_counts_its_tokens(tmp_path: Path) -> None:
    from ctxwrap.testing.model_server import ScriptedModelServer, estimate_prompt_tokens

    # a secret in a read result must not reach the aux model
    lines = PI16.read_text().splitlines()
    doc = [json.loads(line) for line in lines]
    for entry in doc:
        msg = entry.get("message", {})
        if msg.get("role") == "toolResult" and msg.get("toolName") == "read":
            msg["content"][0]["text"] = (
                "API_KEY=sk-abcdefghijklmnopqrstuvwx\n" + msg["content"][0]["text"]
            )
    f = tmp_path / "s.jsonl"
    f.write_text("\n".join(json.dumps(e) for e in doc) + "\n")
    rules = [{"task": "tag", "match": "long notes file", "answer": {"decision": "DROP"}}]
    with ScriptedModelServer([], aux_rules=rules) as srv:
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("PI_CTX_", "XDG_"))},
            "XDG_CONFIG_HOME": str(tmp_path / "config"),
            "PI_CTX_AUX_BACKEND": "http",
            "PI_CTX_AUX_BASE_URL": srv.base_url,
        }
        out = cli("replay", "--tag", "--json", "--per-call", str(f), env=env)
        assert out.returncode == 0, out.stderr
        aux = srv.aux_requests
    [s] = json.loads(out.stdout)["groups"]
    assert s["tagged_by_aux"] is True and s["tagger_bound_tokens"] == 0
    assert len(aux) >= 1 and all(r.aux_task == "tag" for r in aux)
    sent = "".join(json.dumps(r.body) for r in aux)
    assert "sk-abcdefghijklmnop" not in sent and "[REDACTED" in sent
    mech = {m["mechanism"]: m for m in s["mechanisms"]}
    assert mech["amnesia"]["saved_chars"] > 0
    assert mech["amnesia"]["aux_calls_estimated"] == len(aux)
    assert mech["amnesia"]["aux_tokens_estimated"] >= sum(
        estimate_prompt_tokens(r.body) for r in aux
    )
    assert any(i["kind"] == "tombstone" for i in s["intervention_list"])
    # without the backend configured, --tag says what is missing
    bare = {k: v for k, v in env.items() if not k.startswith("PI_CTX_AUX")}
    refused = cli("replay", "--tag", str(f), env=bare)
    assert refused.returncode != 0 and "--tag needs the http aux backend" in refused.stderr
    assert "Traceback" not in refused.stderr


def test_since_cuts_inside_a_session(tmp_path: Path) -> None:
    from datetime import datetime

    paused = tmp_path / "paused.jsonl"
    paused.write_text(_with_prompt_after(PI16.read_text().splitlines(), 600))
    last = json.loads(paused.read_text().splitlines()[-1])
    ts = datetime.fromisoformat(last["timestamp"].replace("Z", "+00:00")).timestamp()
    [whole] = replay(paused)["groups"]
    [late] = replay(paused, since=ts - 60)["groups"]
    assert late["llm_calls"] == 1 < whole["llm_calls"]
    # the kept call still carries what the earlier calls put in its context
    assert late["calls"][0]["messages_chars"] == whole["calls"][-1]["messages_chars"]
    out = cli(
        "replay", "--json", "--since", datetime.fromtimestamp(ts - 60).isoformat(), str(paused)
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["totals"]["llm_calls"] == 1


def _needed_session(edit_line: str) -> list[Any]:
    """A read of a.py, three small rounds, then after an idle gap a prompt whose answer edits
    a.py quoting a line (or not)."""
    from ctxwrap.replay._events import Header, Message, ToolCall

    body = "".join(f"def function_number_{i}(): pass\n" for i in range(80))
    ev: list[Any] = [Header("pi", "s", "/w", 0.0), Message("u1", None, "user", 1.0, 2)]
    calls = [ToolCall("c0", "read", {"path": "a.py"}, 30)] + [
        ToolCall(f"c{i}", "bash", {"command": f"echo {i}"}, 30) for i in range(1, 4)
    ]
    t = 2.0
    for i, c in enumerate(calls):
        text = body if i == 0 else f"{i}\n"
        ev.append(Message(f"a{i}", None, "assistant", t, 40, [c], request_key=f"q{i}"))
        ev.append(Message(f"t{i}", None, "tool_result", t + 1, len(text), [], c.call_id,
                          c.name, text))  # fmt: skip
        t += 2
    edit = ToolCall("c9", "edit", {"path": "a.py", "old_string": edit_line, "new_string": "x"}, 60)
    ev.append(Message("u2", None, "user", t + 600, 12))  # idle past the TTL: a cold boundary
    ev.append(Message("a9", None, "assistant", t + 610, 80, [edit], request_key="q9"))
    ev.append(Message("a10", None, "assistant", t + 700, 10, [], request_key="q10"))
    return ev


@pytest.mark.parametrize(
    ("line", "needed"),
    [("def function_number_7(): pass", "copied"), ("def something_else(): pass", None)],
)
def test_a_masked_read_quoted_by_a_later_edit_is_needed_again(
    line: str, needed: str | None
) -> None:
    from ctxwrap.replay._run import needed_again
    from ctxwrap.replay._sim import SessionSimulator

    sim = SessionSimulator("s", Thresholds(mask_read_idle_rounds=2, mask_warm=False))
    sim.feed(_needed_session(line))
    r = sim.finish()
    [mask] = [i for i in r.interventions if i.kind == "mask"]
    assert (mask.tool, mask.reason) == ("read", "untouched")
    assert mask.needed_again == needed
    figures = needed_again(r, _pricing.default_prices(None))["mechanisms"]["masking"]
    assert figures["needed_again"] == (1 if needed else 0) and figures["interventions"] == 1
    assert (figures["share_pct"] == 100.0) is bool(needed)


TWO_LINES = "def function_number_7(): pass\ndef function_number_8(): pass"


@pytest.mark.parametrize(
    ("answer", "earlier", "needed"),
    [
        (f"It is defined so:\n```\n{TWO_LINES}\n```", "", "copied"),
        ("Only `def function_number_7(): pass` matters.\ndef function_number_7(): pass", "", None),
        # what the model wrote itself, still in view, is not taken from the masked read
        (f"As before:\n{TWO_LINES}", f"I see:\n{TWO_LINES}", None),
        ("Nothing of it.", "", None),
    ],
)
def test_a_masked_read_the_answer_quotes_is_needed_again(
    answer: str, earlier: str, needed: str | None
) -> None:
    """The model's own text counts as a copy, as an edit does: an answer written from a masked
    read needed it (research sessions quote what they read and edit nothing). One short line
    is any file's idiom; the model's earlier words in view are its own."""
    from ctxwrap.replay._events import Message
    from ctxwrap.replay._sim import SessionSimulator

    ev = _needed_session("def something_else(): pass")
    [first] = [i for i, m in enumerate(ev) if getattr(m, "entry_id", "") == "a1"]
    ev[first].text = earlier
    [last] = [i for i, m in enumerate(ev) if getattr(m, "entry_id", "") == "a9"]
    ev[last] = Message("a9", None, "assistant", ev[last].ts, 80, [], request_key="q9", text=answer)
    sim = SessionSimulator("s", Thresholds(mask_read_idle_rounds=2, mask_warm=False))
    sim.feed(ev)
    [mask] = [i for i in sim.finish().interventions if i.kind == "mask"]
    assert mask.needed_again == needed


@pytest.mark.parametrize(("reference_reads", "masked"), [(5, 0), (6, 5), (0, 5)])
def test_replay_keeps_a_reference_file_as_the_daemon_does(
    reference_reads: int, masked: int
) -> None:
    """A file read in five parts, quiet for three rounds, then a prompt after an idle gap:
    replay masks its reads as `engine.masking.plan_masks` decides, `mask_reference_reads`
    (the setting's default: 5) included."""
    from ctxwrap.config import Settings
    from ctxwrap.mechanisms.masking import mask_policy
    from ctxwrap.replay._events import ToolCall
    from ctxwrap.replay._sim import SessionSimulator
    from tests.replay_events import pi_rounds

    # one policy: replay's defaults are the daemon's settings
    assert Thresholds() == Thresholds.from_settings(Settings())
    assert mask_policy(Thresholds()) == mask_policy(Settings())
    assert mask_policy(Settings()).reference_reads == 5
    part = "".join(f"const line_{i} = {i};\n" for i in range(60))
    calls = [ToolCall(f"r{i}", "read", {"path": "big.ts", "offset": 60 * i}, 40) for i in range(5)]
    calls += [ToolCall(f"b{i}", "bash", {"command": f"echo {i}"}, 30) for i in range(3)]
    th = Thresholds(mask_read_idle_rounds=2, mask_warm=False, mask_reference_reads=reference_reads)
    sim = SessionSimulator("s", th)
    sim.feed(pi_rounds(calls, dict.fromkeys(range(5), part), idle_s=600.0))
    masks = [i for i in sim.finish().interventions if i.kind == "mask" and i.tool == "read"]
    assert len(masks) == masked
    assert all(i.reason == "untouched" for i in masks)


@pytest.mark.parametrize(
    ("idle_rounds", "masked"),
    [
        (10, [("bash ls -la src", "older")]),
        (3, [("bash cat a.py", "untouched"), ("bash ls -la src", "older")]),
    ],
)
def test_a_file_read_through_the_shell_is_masked_as_a_read_a_listing_as_a_log(
    idle_rounds: int, masked: list[tuple[str, str]]
) -> None:
    """As the daemon does (`mechanisms/masking.decide`): a command's output too short to digest
    is kept for recall and masked once old; a file's content printed through the shell is
    masked by the read rules — once its file has been left alone `mask_read_idle_rounds`
    rounds — where a listing goes a round after it was seen."""
    from ctxwrap.replay._events import Header, Message, ToolCall
    from ctxwrap.replay._sim import SessionSimulator

    body = "".join(f"def function_number_{i}(): pass\n" for i in range(80))
    listing = "".join(f"-rw-r--r-- 1 dev dev 120 Jan 1 module_{i:03d}.py\n" for i in range(40))
    ev: list[Any] = [Header("pi", "s", "/w", 0.0), Message("u1", None, "user", 1.0, 2)]
    commands = ["cat a.py", "ls -la src", "echo 1", "echo 2", "echo 3"]
    t = 2.0
    for i, command in enumerate(commands):
        c = ToolCall(f"c{i}", "bash", {"command": command}, 30)
        text = {0: body, 1: listing}.get(i, f"{i}\n")
        ev.append(Message(f"a{i}", None, "assistant", t, 40, [c], request_key=f"q{i}"))
        ev.append(Message(f"t{i}", None, "tool_result", t + 1, len(text), [], c.call_id,
                          "bash", text))  # fmt: skip
        t += 2
    ev.append(Message("u2", None, "user", t + 600, 12))  # idle past the TTL: a cold boundary
    ev.append(Message("a9", None, "assistant", t + 610, 10, [], request_key="q9"))
    sim = SessionSimulator("s", Thresholds(mask_warm=False, mask_read_idle_rounds=idle_rounds))
    sim.feed(ev)
    got = [(i.label, i.reason) for i in sim.finish().interventions if i.kind == "mask"]
    assert got == masked


@pytest.mark.parametrize("how", ["copied", "reread"])
def test_a_copy_is_charged_the_request_that_asks_for_it_again_a_reread_is_not(how: str) -> None:
    """An agent that copies from what it no longer sees must ask for it first: one more
    request, which reads ctxwrap's whole context from the cache, before the re-read result is
    written and carried. A re-read is in the transcript: its request was paid on both sides."""
    from ctxwrap.engine.cost import weights
    from ctxwrap.replay._run import needed_again
    from ctxwrap.replay._sim import CallFigures, Intervention, SessionReplay

    r = SessionReplay("s", "claude", "s")
    for i in range(5):
        c = CallFigures(i, 100.0 * i, 4_000, 0, 400_000 + 4_000 * i, {}, 0, 50)
        c.tokens_sent = 101_000 + 1_000 * i  # as priced (price_session)
        r.calls.append(c)
    r.interventions.append(
        Intervention("mask", 1, "read", "read a.py", 8_000, 200, needed_again=how, needed_at=3)
    )
    prices = _pricing.default_prices("claude-opus-4-5")
    w = weights(prices)
    # at the session's own rate (replay/_calibrate.py)
    carried = r.to_tokens(8_000) * (w.write + w.read * 1)  # written once, read by the last call
    asking = r.calls[3].tokens_sent * w.read  # the extra request reads the context as priced
    figures = needed_again(r, prices)
    expected = carried + asking if how == "copied" else carried
    assert figures["reread_charge_weighted"] == pytest.approx(expected, abs=0.1)
    assert figures["copy_charge_weighted"] == pytest.approx(
        expected if how == "copied" else 0.0, abs=0.1
    )


@pytest.mark.parametrize(
    ("content", "needed"),
    [
        ("def function_number_7(): pass\nprint('new')\n", None),  # one shared line: chance
        ("def function_number_7(): pass\ndef function_number_8(): pass\n", "copied"),
    ],
)
def test_a_new_files_body_counts_as_copied_from_two_hidden_lines(
    content: str, needed: str | None
) -> None:
    """A write's body is new text: one line shared with a hidden result (an import, `return
    result;`) is no evidence it was copied from it; two are. An edit's old text (above) must
    match the file, so one line counts there."""
    from ctxwrap.replay._events import ToolCall
    from ctxwrap.replay._sim import SessionSimulator

    ev = _needed_session("unused")
    write = ToolCall("c9", "write", {"path": "b.py", "content": content}, 60)
    ev[-2] = dataclasses.replace(ev[-2], calls=[write])
    sim = SessionSimulator("s", Thresholds(mask_read_idle_rounds=2, mask_warm=False))
    sim.feed(ev)
    [mask] = [i for i in sim.finish().interventions if i.kind == "mask"]
    assert mask.needed_again == needed


@pytest.mark.parametrize(
    ("call", "needed"),
    [
        # an edit's old text is its own file's: a line of a.py quoted in an edit of b.py
        # came from b.py, whatever else held it
        (("edit", {"path": "b.py", "old_string": "def function_number_7(): pass"}), None),
        # the same file, written absolute where the read named it relative to the cwd
        (("edit", {"path": "/w/a.py", "old_string": "def function_number_7(): pass"}), "copied"),
        # one file's hunks of a Codex patch (`_read_codex` splits a patch per file)
        (
            (
                "edit",
                {
                    "path": "a.py",
                    "op": "update",
                    "patch": "@@\n def function_number_7(): pass\n-x\n+y",
                },
            ),
            "copied",
        ),
    ],
)
def test_an_edit_counts_as_copied_from_what_showed_its_own_file(
    call: tuple[str, dict[str, Any]], needed: str | None
) -> None:
    from ctxwrap.replay._events import ToolCall
    from ctxwrap.replay._sim import SessionSimulator

    ev = _needed_session("unused")
    ev[-2] = dataclasses.replace(ev[-2], calls=[ToolCall("c9", call[0], call[1], 60)])
    sim = SessionSimulator("s", Thresholds(mask_read_idle_rounds=2, mask_warm=False))
    sim.feed(ev)
    [mask] = [i for i in sim.finish().interventions if i.kind == "mask"]
    assert mask.needed_again == needed


@pytest.mark.parametrize(
    ("content", "needed"),
    [
        # lines both files hold: the project's idiom, evidence for neither
        ("def function_number_7(): pass\ndef function_number_8(): pass\n", (None, None)),
        # lines only c.py held
        ("def helper_of_c_number_1(): pass\ndef helper_of_c_number_2(): pass\n", (None, "copied")),
    ],
)
def test_a_new_body_sharing_lines_with_several_hidden_results_copied_none_of_them(
    content: str, needed: tuple[str | None, str | None]
) -> None:
    """Codex wrote a new form component whose `if (error) {` and `type="submit"` eight
    masked components held too; each of the eight was counted as needed again."""
    from ctxwrap.replay._events import Message, ToolCall
    from ctxwrap.replay._sim import SessionSimulator

    ev = _needed_session("unused")
    c_body = _BODY + "".join(f"def helper_of_c_number_{i}(): pass\n" for i in range(5))
    read_c = ToolCall("c0b", "read", {"path": "c.py"}, 30)
    at = next(i for i, e in enumerate(ev) if getattr(e, "entry_id", "") == "t0") + 1
    ev[at:at] = [
        Message("a0b", None, "assistant", 2.5, 40, [read_c], request_key="q0b"),
        Message("t0b", None, "tool_result", 2.6, len(c_body), [], "c0b", "read", c_body),
    ]
    write = ToolCall("c9", "write", {"path": "b.py", "content": content}, 60)
    ev[-2] = dataclasses.replace(ev[-2], calls=[write])
    sim = SessionSimulator("s", Thresholds(mask_read_idle_rounds=2, mask_warm=False))
    sim.feed(ev)
    masks = {i.label: i.needed_again for i in sim.finish().interventions if i.kind == "mask"}
    assert (masks["read a.py"], masks["read c.py"]) == needed


def _reread_session(args: dict[str, Any], text: str) -> list[Any]:
    """`_needed_session`, but the answer after the idle gap reads a.py again (`args`), and
    the read returns `text`."""
    from ctxwrap.replay._events import Message, ToolCall

    ev = _needed_session("unused")[:-3]
    t = ev[-1].ts + 2
    again = ToolCall("c9", "read", {"path": "a.py", **args}, 40)
    ev.append(Message("u2", None, "user", t + 600, 12))  # idle past the TTL: a cold boundary
    ev.append(Message("a9", None, "assistant", t + 610, 80, [again], request_key="q9"))
    ev.append(Message("t9", None, "tool_result", t + 611, len(text), [], "c9", "read", text))
    ev.append(Message("a10", None, "assistant", t + 700, 10, [], request_key="q10"))
    return ev


_BODY = "".join(f"def function_number_{i}(): pass\n" for i in range(80))


@pytest.mark.parametrize(
    ("args", "text", "needed"),
    [
        ({}, _BODY, "reread"),  # the same file again
        ({"offset": 10, "limit": 5}, _BODY.splitlines(keepends=True)[10:15], "reread"),  # a part
        # another range of the file (lines the hidden read never had): a new question
        ({"offset": 81}, "".join(f"class Other{i}: pass\n" for i in range(40)), None),
        # the file rewritten since: the hidden content is not what came back
        ({}, "".join(f"async def renamed_{i}(): pass\n" for i in range(80)), None),
    ],
)
def test_a_reread_counts_only_when_it_returns_what_was_hidden(
    args: dict[str, Any], text: str | list[str], needed: str | None
) -> None:
    from ctxwrap.replay._sim import SessionSimulator

    sim = SessionSimulator("s", Thresholds(mask_read_idle_rounds=2, mask_warm=False))
    sim.feed(_reread_session(args, "".join(text)))
    [mask] = [i for i in sim.finish().interventions if i.kind == "mask"]
    assert mask.reason == "untouched"
    assert mask.needed_again == needed


def test_a_reread_of_what_a_later_read_still_shows_did_not_need_the_hidden_one() -> None:
    """A read masked as superseded by the same read later: a third read returns lines the
    context still holds (the later read), so the masked one was not needed again — as a copy
    of a visible line is not. Without the later read in view, the same re-read is."""
    from ctxwrap.replay._events import Header, Message, ToolCall
    from ctxwrap.replay._sim import SessionSimulator

    ev: list[Any] = [Header("pi", "s", "/w", 0.0), Message("u1", None, "user", 1.0, 2)]
    calls = [ToolCall("c0", "read", {"path": "a.py"}, 30)]
    calls += [ToolCall(f"c{i}", "bash", {"command": f"echo {i}"}, 30) for i in range(1, 4)]
    calls += [ToolCall("c4", "read", {"path": "a.py"}, 30)]
    calls += [ToolCall(f"c{i}", "bash", {"command": f"echo {i}"}, 30) for i in range(5, 8)]
    t = 2.0
    for i, c in enumerate(calls):
        text = _BODY if c.name == "read" else f"{i}\n"
        ev.append(Message(f"a{i}", None, "assistant", t, 40, [c], request_key=f"q{i}"))
        ev.append(Message(f"t{i}", None, "tool_result", t + 1, len(text), [], c.call_id,
                          c.name, text))  # fmt: skip
        t += 2
    again = ToolCall("c9", "read", {"path": "a.py"}, 40)
    ev.append(Message("u2", None, "user", t + 600, 12))  # idle past the TTL: a cold boundary
    ev.append(Message("a9", None, "assistant", t + 610, 80, [again], request_key="q9"))
    ev.append(Message("t9", None, "tool_result", t + 611, len(_BODY), [], "c9", "read", _BODY))
    ev.append(Message("a10", None, "assistant", t + 700, 10, [], request_key="q10"))
    # no re-read pointer (dedup): the later read stays whole, as under Claude Code and Codex
    th = Thresholds(mask_read_idle_rounds=0, mask_warm=False, dedup=False)
    sim = SessionSimulator("s", th)
    sim.feed(ev)
    [mask] = [i for i in sim.finish().interventions if i.kind == "mask"]
    assert (mask.reason, mask.label) == ("superseded", "read a.py")
    assert mask.needed_again is None


def test_asks_again_compares_the_smaller_side() -> None:
    from ctxwrap.mechanisms.needed_again import asks_again, distinctive_lines

    whole = distinctive_lines(_BODY)
    assert asks_again(whole, whole[3:6])  # a narrower range of what was hidden
    assert asks_again(whole[3:6], whole)  # a wider read around it
    assert not asks_again(whole[:40], whole[40:])  # the next page of the file
    # Claude Code's numbered Read lines compare equal to pi's plain ones
    numbered = "".join(f"{i:>6}→{line}" for i, line in enumerate(_BODY.splitlines(True), 1))
    assert distinctive_lines(numbered) == whole
    assert asks_again([], ["anything at all"])  # nothing to compare: any re-read counts


def _compacting_session(trigger: str | None, tokens_before: int | None) -> list[Any]:
    """A pi session: ten rounds each writing a 20,000-char file (stripped by ctxwrap), a
    compaction keeping the last two rounds, then twelve answers of 20,000 chars (the same on
    both sides) — enough for ctxwrap's smaller context to reach the size plain compacted at."""
    from ctxwrap.replay._events import Compaction, Header, Message, ToolCall

    body = "".join(f"line {i} of a generated module\n" for i in range(650))  # ~20k chars
    ev: list[Any] = [Header("pi", "s", "/w", 0.0), Message("u1", None, "user", 1.0, 20)]
    t = 2.0
    for i in range(10):
        args = {"path": f"m{i}.py", "content": body}
        call = ToolCall(f"w{i}", "write", args, len("write") + len(json.dumps(args)))
        ev.append(Message(f"a{i}", None, "assistant", t, call.chars + 60, [call],
                          request_key=f"q{i}"))  # fmt: skip
        ev.append(Message(f"t{i}", None, "tool_result", t + 1, 30, [], f"w{i}", "write", "ok"))
        t += 2
    ev.append(Compaction(t, 4000, "a8", trigger, tokens_before))
    for i in range(10, 22):
        ev.append(Message(f"a{i}", None, "assistant", t, 20000, [], request_key=f"q{i}"))
        t += 2
    ev.append(Message("end", None, "assistant", t, 10, [], request_key="q-end"))
    return ev


@pytest.mark.parametrize(
    ("trigger", "tokens_before", "timing", "deferred"),
    [
        (None, 184_000, True, True),  # pi at its threshold: the agent's own compaction
        ("auto", None, True, True),  # Claude Code records the trigger
        ("manual", None, True, False),  # the user's /compact happens whatever the size
        (None, 120_000, True, False),  # pi far under its threshold: the user's /compact
        (None, 184_000, False, False),  # as recorded: both sides compact where the agent did
    ],
)
def test_ctxwrap_compacts_later_when_its_context_is_smaller(
    trigger: str | None, tokens_before: int | None, timing: bool, deferred: bool
) -> None:
    from ctxwrap.replay._run import MESSAGE_MECHANISMS
    from ctxwrap.replay._sim import SessionSimulator

    sim = SessionSimulator("s", Thresholds(mask=False, compaction_timing=timing, write=True))
    events = _compacting_session(trigger, tokens_before)
    cut = next(i for i, e in enumerate(events) if type(e).__name__ == "Compaction")
    sim.feed(events[:cut])
    # what ctxwrap sent of the prompt and rounds 0-7: what plain's compaction drops
    keep = next(i for i, it in enumerate(sim.items) if it.entry_id == "a8")
    carried = sum(
        it.chars - sum(it.saved.get(m, 0) for m in MESSAGE_MECHANISMS) for it in sim.items[:keep]
    )
    sim.feed(events[cut:])
    r = sim.finish()
    at = next(c.index for c in r.calls if c.compaction)
    before, after = r.calls[at - 1], r.calls[at]
    assert r.compactions == 1 and before.sent_chars < before.plain_chars
    assert r.compactions_deferred == int(deferred)
    sides = [side for _, side, _, _, _ in r.summarisations]
    if not deferred:
        assert after.ours_compaction and after.saved["compaction"] == 0
        assert sides == ["plain", "ctxwrap"]  # both summarise there
        return
    # plain drops rounds 0-7 for a 4,000-char summary; ctxwrap keeps them as it sent them
    # (stripped writes) and has no summary: the difference is the "compaction" figure
    assert not after.ours_compaction
    assert 0 < carried < 8 * 1000 and after.saved["compaction"] == 4000 - carried
    # ctxwrap compacts once its context reaches what plain's was at the compaction
    own = next(c for c in r.calls[at + 1 :] if c.ours_compaction)
    assert r.calls[own.index - 1].sent_chars < before.plain_chars <= own.sent_chars + carried
    assert own.saved["compaction"] == 0 and r.compactions_own == 1
    assert sides == ["plain", "ctxwrap"]
    assert [a for a, side, _, _, _ in r.summarisations if side == "ctxwrap"] == [own.index]
    # the summarisations are priced with the call they precede
    costs = price_session(r, _pricing.default_prices("claude-opus-4-5"), 300.0)
    assert costs.ctxwrap[own.index].uncached_input_tokens >= SUMMARY_PROMPT_TOKENS


@pytest.mark.parametrize("cached_call", [None, 5])
def test_a_provider_that_never_cached_is_priced_uncached(
    tmp_path: Path, cached_call: int | None
) -> None:
    """Usage recorded on every call with no cache read or write (a provider without prompt
    caching): replay bills every input token fresh on both sides, instead of simulating a
    cache the provider did not have (which made masking's rewrites look like a loss)."""
    from ctxwrap.replay._run import _replay_one

    lines = [{"type": "session", "version": 3, "id": "s", "timestamp": "2026-04-27T08:00:00Z",
              "cwd": "/w"}]  # fmt: skip
    parent = None
    for i in range(12):
        read = 4000 if i == cached_call else 0
        for eid, msg in (
            (f"u{i}", {"role": "user", "content": [{"type": "text", "text": f"step {i}"}]}),
            (f"a{i}", {"role": "assistant", "content": [{"type": "text", "text": "ok " * 50}],
                       "model": "kimi-k2.5", "usage": {"input": 1000 + 100 * i - read,
                       "output": 20, "cacheRead": read, "cacheWrite": 0}}),
        ):  # fmt: skip
            lines.append({"type": "message", "id": eid, "parentId": parent,
                          "timestamp": f"2026-04-27T08:{i:02d}:0{eid[0] == 'a'}Z", "message": msg})  # fmt: skip
            parent = eid
    path = tmp_path / "s.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    res = _replay_one((path, path.stat().st_size, Thresholds(), None, False, None))
    assert res.sessions
    session = res.sessions[0].session
    cost = session["cost"]["plain"]
    if cached_call is None:
        assert cost["cache_read_tokens"] == cost["cache_write_tokens"] == 0
        assert cost["uncached_input_tokens"] > 0
        # no cache, no entry to miss: its reads of 0 are not counted as misses
        assert session["recorded_cache"]["nothing"] == 0
    else:  # one cached call is enough: the provider caches, the cache is simulated
        assert cost["cache_read_tokens"] > 0


def test_write_idle_rounds_strips_a_write_once_its_file_is_left_alone() -> None:
    """The study policy `write_idle_rounds` (bench/real_sessions.py write-idle*): the write
    body stays while the file is worked on, and is stripped at a cold boundary once no call
    has named the file for that many rounds."""
    from ctxwrap.replay._events import Header, Message, ToolCall
    from ctxwrap.replay._sim import SessionSimulator

    body = "".join(f"def generated_{i}(): return {i}\n" for i in range(200))
    args = {"path": "gen.py", "content": body}
    ev: list[Any] = [Header("pi", "s", "/w", 0.0), Message("u1", None, "user", 1.0, 10)]
    calls = [ToolCall("w", "write", args, len("write") + len(json.dumps(args)))]
    calls += [ToolCall(f"e{i}", "bash", {"command": f"echo {i}"}, 30) for i in range(4)]
    t = 2.0
    for i, c in enumerate(calls):
        if i:  # a prompt after an idle gap: every request is a cold boundary
            ev.append(Message(f"u{i + 1}", None, "user", t - 10, 10))
        ev.append(Message(f"a{i}", None, "assistant", t, c.chars + 40, [c], request_key=f"q{i}"))
        ev.append(Message(f"t{i}", None, "tool_result", t + 1, 3, [], c.call_id, c.name, "ok\n"))
        t += 700
    ev.append(Message("u9", None, "user", t - 10, 10))
    ev.append(Message("end", None, "assistant", t, 10, [], request_key="q-end"))
    sim = SessionSimulator("s", Thresholds(write_idle_rounds=3, write=True))
    sim.feed(ev)
    r = sim.finish()
    [strip] = [i for i in r.interventions if i.kind == "strip"]
    # written at call 0; calls 1-3 name other things; the first request 3 rounds on strips it
    assert strip.call_index == 3
    assert [c.saved["writes"] > 0 for c in r.calls] == [False, False, False, True, True, True]


@pytest.mark.parametrize(
    ("fmt", "like_plain", "with_plain", "in_step"),
    [
        ("pi", True, False, True),
        ("pi", False, False, True),
        ("claude", True, False, False),
        ("claude", True, False, True),
        ("claude", True, True, False),
    ],
)
def test_compact_like_plain_compacts_at_the_next_prompt_on_pi_only(
    fmt: str, like_plain: bool, with_plain: bool, in_step: bool
) -> None:
    """With compact_like_plain the bridge asks pi to compact when the run ends: replay
    compacts ctxwrap's side before the next user prompt. Claude Code compacts at plain's very
    request where the proxy reports plain's size (`compact_in_step`, agents/_proxy/in_step.py),
    as the study `compact_with_plain` models every agent; without it, later."""
    from ctxwrap.replay._events import Header, Message
    from ctxwrap.replay._sim import SessionSimulator

    events = _compacting_session(None if fmt == "pi" else "auto", 184_000)
    events[0] = Header(fmt, "s", "/w", 0.0)
    at = next(i for i, e in enumerate(events) if type(e).__name__ == "Compaction")
    # the run goes on two calls after plain's compaction, then the user's next prompt
    ts = events[at].ts
    events.insert(at + 3, Message("u2", None, "user", ts + 5, 20))
    th = Thresholds(
        mask=False,
        write=True,  # the session's context grows by a write body (pi's default keeps it)
        compact_like_plain=like_plain,
        compact_with_plain=with_plain,
        compact_in_step=in_step,
    )
    sim = SessionSimulator("s", th)
    sim.feed(events)
    r = sim.finish()
    first = next(c.index for c in r.calls if c.compaction)
    own = [c.index for c in r.calls if c.ours_compaction]
    if with_plain or (
        in_step and fmt == "claude"
    ):  # both sides summarise at plain's compaction; nothing carried after it
        assert r.compactions_deferred == 0 and own == [first]
        assert [a for a, _, _, _, _ in r.summarisations] == [first, first]
        assert all(c.saved["compaction"] == 0 for c in r.calls)
        return
    assert r.compactions_deferred == 1
    if fmt == "pi" and like_plain:
        assert own == [first + 2]  # the first call after the prompt
    else:
        assert own and own[0] > first + 2  # only once its own context reached plain's size


@pytest.mark.parametrize("kinds", ["", "recall", "all"])
def test_the_study_mask_at_plain_compaction_tombstones_what_ctxwrap_carries(kinds: str) -> None:
    """The study `mask_at_plain_compaction` (bench/real_sessions.py mask-at-plain*): where
    Claude Code's plain session compacts and ctxwrap's smaller context does not, what ctxwrap
    carries of the results plain dropped is tombstoned: reads (a recall path) under "recall",
    every result under "all"; an Edit result has no recall path."""
    from ctxwrap.replay._events import Compaction, Header, Message, ToolCall
    from ctxwrap.replay._sim import SessionSimulator

    body = "".join(f"line {i} of a module read long ago\n" for i in range(600))
    ev: list[Any] = [Header("claude", "s", "/w", 0.0), Message("u1", None, "user", 1.0, 20)]
    t = 2.0
    for i in range(10):
        # the first round writes a file (stripped: ctxwrap's context is the smaller one when
        # the agent compacts), then Read and Edit results alternate
        name = "write" if i == 0 else "read" if i % 2 else "edit"  # as the reader names them
        args = {"file_path": f"m{i}.py"} | ({"content": body} if name == "write" else {})
        call = ToolCall(f"c{i}", name, args, len(name) + len(json.dumps(args)))
        ev.append(Message(f"a{i}", None, "assistant", t, call.chars + 60, [call],
                          request_key=f"q{i}"))  # fmt: skip
        out = "ok" if name == "write" else body
        ev.append(Message(f"t{i}", None, "tool_result", t + 1, len(out), [], f"c{i}", name,
                          out))  # fmt: skip
        t += 2
    ev.append(Compaction(t, 4000, "a8", "auto", None))  # plain drops rounds 0-7
    for i in range(10, 14):
        ev.append(Message(f"a{i}", None, "assistant", t, 200, [], request_key=f"q{i}"))
        t += 2
    sim = SessionSimulator(
        "s",
        Thresholds(mask=False, mask_at_plain_compaction=kinds, compact_in_step=False, write=True),
    )
    sim.feed(ev)
    r = sim.finish()
    assert r.compactions_deferred == 1
    after = next(c for c in r.calls if c.compaction)
    # what ctxwrap sends beyond plain right after plain's compaction: what it still carries
    # of rounds 0-7 (four Read results, three Edit results) less the summary it lacks
    extra = after.sent_chars - after.plain_chars
    n = len(body)
    if kinds == "":
        assert 6 * n < extra < 7 * n
    elif kinds == "recall":  # the reads are tombstoned, the Edit results stay
        assert 2 * n < extra < 3 * n
    else:
        assert extra < n // 10


@pytest.mark.parametrize(
    ("version", "cached"), [("2.1.197", True), ("2.1.210", True), ("2.0.76", False), (None, False)]
)
def test_claude_codes_summarisation_reads_its_prefix_from_the_cache(
    version: str | None, cached: bool
) -> None:
    """Claude Code 2.1.197 sends its summarisation on the conversation's own prefix (system,
    tools, messages) and reads it from the cache while warm, as live `ctxwrap stats` prices it;
    an older or unknown version is priced as pi's (all fresh: not verified)."""
    from ctxwrap.replay._events import Header
    from ctxwrap.replay._sim import SessionSimulator

    events = _compacting_session("manual", None)  # the user's /compact: both sides, there
    events[0] = Header("claude", "s", "/w", 0.0, version)
    sim = SessionSimulator("s", Thresholds(mask=False))
    sim.feed(events)
    r = sim.finish()
    assert [side for _, side, _, _, _ in r.summarisations] == ["plain", "ctxwrap"]
    at = r.summarisations[0][0]
    for _, side, fresh, _, read in r.summarisations:
        before = r.calls[at - 1]
        # the context as the provider would count it (replay/_calibrate.py)
        context = round(r.plain_tokens(before) - (0 if side == "plain" else before.kept_out_tokens))
        if cached:  # the whole request read, the instruction new
            assert (fresh, read) == (SUMMARY_PROMPT_TOKENS, context)
        else:
            assert read == 0 and fresh > SUMMARY_PROMPT_TOKENS
    prices = _pricing.default_prices("claude-opus-4-5")
    costs = price_session(r, prices, 300.0)
    plain_at = costs.plain[at]
    if cached:
        assert plain_at.cache_read_tokens >= round(r.plain_tokens(r.calls[at - 1])) - 1
    else:
        assert plain_at.uncached_input_tokens > SUMMARY_PROMPT_TOKENS


_OLD = "".join(f"    legacy_value_{i} = compute_legacy({i})\n" for i in range(12))


def _edit_session(later: list[Any], *, error: bool = False) -> list[Any]:
    """pi edits a.py (old text `_OLD`, ~500 chars), then answers with the `later` calls."""
    from ctxwrap.replay._events import Header, Message, ToolCall

    ev: list[Any] = [Header("pi", "s", "/w", 0.0), Message("u1", None, "user", 1.0, 2)]
    edit = ToolCall("e1", "edit", {"path": "a.py", "oldText": _OLD, "newText": "x = 1\n"}, 560)
    ev.append(Message("a1", None, "assistant", 2.0, 600, [edit], request_key="q1"))
    out = "Could not find the text." if error else "Successfully replaced text in a.py."
    ev.append(Message("t1", None, "tool_result", 3.0, len(out), [], "e1", "edit", out, error))
    t = 4.0
    for i, (call, text) in enumerate(later):
        ev.append(Message(f"a{i + 2}", None, "assistant", t, call.chars + 10, [call],
                          request_key=f"q{i + 2}"))  # fmt: skip
        ev.append(Message(f"t{i + 2}", None, "tool_result", t + 1, len(text), [], call.call_id,
                          call.name, text))  # fmt: skip
        t += 2
    ev.append(Message("a99", None, "assistant", t, 10, [], request_key="q99"))
    return ev


def test_an_applied_edits_old_text_leaves_the_context_as_the_daemon_decides() -> None:
    from ctxwrap.engine.edits import EDIT_STRIP_MARKER
    from ctxwrap.replay._events import ToolCall
    from ctxwrap.replay._sim import SessionSimulator

    bash = ToolCall("b1", "bash", {"command": "make"}, 30)
    sim = SessionSimulator("s", Thresholds())
    sim.feed(_edit_session([(bash, "ok\n")]))
    r = sim.finish()
    [strip] = [i for i in r.interventions if i.kind == "strip_edit"]
    assert strip.original_chars == len(json.dumps(_OLD)) - 2
    assert strip.replacement_chars == len(EDIT_STRIP_MARKER)
    # not in the request that produced it; left out of every one after
    assert [c.saved.get("writes", 0) for c in r.calls] == [0] + [strip.saved_chars] * 2
    assert strip.needed_again is None
    # a failed edit keeps its old text; so does a small one, and the switch turns it off
    for th, kw in ((Thresholds(), {"error": True}), (Thresholds(edit_min_chars=600), {}),
                   (Thresholds(edit_strip=False), {})):  # fmt: skip
        sim = SessionSimulator("s", th)
        sim.feed(_edit_session([(bash, "ok\n")], **kw))
        assert not [i for i in sim.finish().interventions if i.kind == "strip_edit"]


@pytest.mark.parametrize(
    ("call", "text", "needed"),
    [
        # the agent writes the removed lines back (a revert): it needed the old text
        (("edit", {"path": "a.py", "oldText": "x = 1\n", "newText": _OLD}), "ok", "copied"),
        # the old text is in the file again (git checkout) and an edit quotes it
        (("edit", {"path": "a.py", "oldText": _OLD[:80], "newText": "y"}), "ok", "copied"),
        # a read after the edit returns the new file: not what was left out
        (("read", {"path": "a.py"}), "x = 1\nprint('new')\n", None),
        # a read of the file with the old text back (reverted outside the agent's edits)
        (("read", {"path": "a.py"}), _OLD, "reread"),
    ],
)
def test_a_stripped_edits_old_text_is_needed_again_only_when_it_comes_back(
    call: tuple[str, dict[str, Any]], text: str, needed: str | None
) -> None:
    from ctxwrap.replay._events import ToolCall
    from ctxwrap.replay._sim import SessionSimulator

    later = ToolCall("c2", call[0], call[1], 100)
    sim = SessionSimulator("s", Thresholds())
    sim.feed(_edit_session([(later, text)]))
    [strip] = [i for i in sim.finish().interventions if i.kind == "strip_edit"]
    assert strip.needed_again == needed


def _recorded_cache_session(reads: list[int], writes: list[int]) -> list[Any]:
    """A Claude Code session of len(reads) calls, seconds apart, each reading a 6,000-char
    file; the usage of call i records `reads[i]` tokens read from the cache, `writes[i]`
    written."""
    from ctxwrap.replay._events import Header, Message, ToolCall

    ev: list[Any] = [Header("claude", "s", "/w", 0.0, "2.1.197")]
    ev.append(Message("u1", None, "user", 1.0, 40))
    t = 2.0
    for i, (read, write) in enumerate(zip(reads, writes, strict=True)):
        args = {"file_path": f"/w/m{i}.py"}
        call = ToolCall(f"r{i}", "read", args, len("Read") + len(json.dumps(args)), "Read")
        ev.append(
            Message(f"a{i}", None, "assistant", t, call.chars + 40, [call], request_key=f"q{i}",
                    model="claude-sonnet-4-5", usage_prompt_tokens=read + write + 10,
                    usage_input_tokens=10, usage_cache_read_tokens=read,
                    usage_cache_write_tokens=write)
        )  # fmt: skip
        text = "x = 1\n" * 1000
        ev.append(
            Message(f"t{i}", None, "tool_result", t + 1, len(text), [], f"r{i}", "read", text)
        )
        t += 5
    ev.append(Message("end", None, "assistant", t, 10, [], request_key="q-end"))
    return ev


def test_replay_prices_the_cache_entry_the_provider_recorded_on_both_sides() -> None:
    """Real caches miss and serve older entries (docs/accounting.md, "The cache as recorded"):
    a request whose recorded read names an older entry, or none, is priced so on plain's side
    and on ctxwrap's, whose request would have gone the same way."""
    from ctxwrap.replay._run import recorded_hits
    from ctxwrap.replay._sim import SessionSimulator

    # entries end at read + written: 27,934 · 29,534 · 31,000 · 32,534 · 34,000 · 32,000
    reads = [0, 27934, 0, 29534, 20000, 31000]
    writes = [27934, 1600, 31000, 3000, 14000, 1000]
    sim = SessionSimulator("s", Thresholds(mask=False))
    sim.feed(_recorded_cache_session(reads, writes))
    r = sim.finish()
    # call 1 read call 0's entry; call 2 none, seconds later; call 3 call 1's (not call 2's);
    # call 4 the system prompt and tools alone; call 5 call 2's; the last call no usage
    assert recorded_hits(r.calls) == [None, 0, "none", 1, "head", 2, None]
    costs = price_session(r, _pricing.default_prices("claude-sonnet-4-5"), 300.0)
    # plain's recorded requests are priced as the provider recorded them (the bill)
    for i, (read, write) in enumerate(zip(reads, writes, strict=True)):
        assert (costs.plain[i].cache_read_tokens, costs.plain[i].cache_write_tokens) == (
            read,
            write,
        )
    # nothing kept out: ctxwrap's requests went the same way, the older entries included
    assert [c.cache_read_tokens for c in costs.ctxwrap] == [
        c.cache_read_tokens for c in costs.plain
    ]
    from ctxwrap.replay._run import session_json

    doc = session_json(r, costs, per_call=True)
    assert doc["recorded_cache"] == {"recorded": 6, "older_entry": 2, "head_only": 1, "nothing": 1}
    assert [c["cache_read_from"] for c in doc["calls"]] == [
        "previous", 0, "none", 1, "head", 2, "previous"
    ]  # fmt: skip


def test_a_recorded_read_its_own_content_explains_does_not_bind_ctxwrap() -> None:
    """Plain compacted (its messages changed: the recorded read is the system prompt and
    tools); ctxwrap's smaller context did not, and its request reads its own previous prefix."""
    from ctxwrap.replay._events import Header, SystemPrompt
    from ctxwrap.replay._sim import SessionSimulator

    events = _compacting_session("auto", None)
    # an older Claude Code: its summarisation is priced apart from the prefix (all fresh)
    events[0:1] = [Header("claude", "s", "/w", 0.0, "2.0.76"), SystemPrompt(0.5, 8000, 4000, 0)]
    first = next(i for i, e in enumerate(events) if getattr(e, "entry_id", "") == "a0")
    events[first] = dataclasses.replace(
        events[first], usage_cache_read_tokens=0, usage_cache_write_tokens=20000
    )
    after = next(i for i, e in enumerate(events) if getattr(e, "entry_id", "") == "a10")
    events[after] = dataclasses.replace(
        events[after], usage_cache_read_tokens=3000, usage_cache_write_tokens=9000
    )
    sim = SessionSimulator("s", Thresholds(mask=False, compact_in_step=False, write=True))
    sim.feed(events)
    r = sim.finish()
    at = next(c.index for c in r.calls if c.compaction)
    assert r.compactions_deferred == 1 and not r.calls[at].ours_compaction
    costs = price_session(r, _pricing.default_prices("claude-sonnet-4-5"), 300.0)
    prev = costs.ctxwrap[at - 1]
    assert costs.ctxwrap[at].cache_read_tokens == prev.cache_read_tokens + prev.cache_write_tokens
    head = tokens(r.calls[at].system_chars) + tokens(r.calls[at].tools_chars)
    assert head == 3000 and costs.plain[at].cache_read_tokens == head


def test_a_session_that_costs_more_says_why() -> None:
    """Invariant 10: a session costing more than plain says which effect made it so — here
    the history ctxwrap carried past plain's compaction (compaction in step turned off) — and
    one that costs less says nothing."""
    from ctxwrap.replay._events import Header
    from ctxwrap.replay._run import session_json
    from ctxwrap.replay._sim import SessionSimulator

    reasons = {}
    for in_step in (False, True):
        events = _compacting_session("auto", None)
        events[0] = Header("claude", "s", "/w", 0.0)
        # the first round's write stripped: ctxwrap's context the smaller one at compaction
        sim = SessionSimulator("s", Thresholds(mask=False, compact_in_step=in_step, write=True))
        sim.feed(events)
        r = sim.finish()
        prices = _pricing.default_prices("claude-opus-4-5")
        doc = session_json(r, price_session(r, prices, 300.0), per_call=False, prices=prices)
        plain, ours = (doc["cost"][k]["weighted_tokens"] for k in ("plain", "ctxwrap"))
        reasons[in_step] = (ours > plain, doc["costs_more_because"])
    more, why = reasons[False]
    assert more and why is not None and why.startswith("carried ") and "plain's compaction" in why
    assert reasons[True] == (False, None)


def test_what_leaves_the_context_before_any_request_carried_it_keeps_nothing_out() -> None:
    """An item dropped (a branch, a compaction) before the request that would first carry it
    is never rated: nothing of it counts as kept out afterwards."""
    from ctxwrap.replay._events import Message
    from ctxwrap.replay._sim import SessionSimulator, _Item

    sim = SessionSimulator("s", Thresholds())
    sim._add(_Item("kept", "tool_result", 2_000, {"bash": 1_500}, 0, "bash"))
    sim._add(_Item("gone", "tool_result", 9_000, {"bash": 8_000}, 0, "bash"))
    sim._uncredit_all(sim.items.pop())
    sim._rate_tail(Message("a", None, "assistant", 1.0, 10, request_key="r"))
    assert sim.saved["bash"] == 1_500
    assert sim.saved_tok["bash"] == pytest.approx(1_500 * sim.r.rate)


def _tag_budget_session() -> list[Any]:
    """A read before anything was saved, a 20,000-line build log (digested), two small
    rounds, then another read: the tagger's budget allows the second tag only."""
    from ctxwrap.replay._events import ToolCall
    from tests.replay_events import pi_rounds

    body = "".join(f"def function_number_{i}(): pass  # with a comment\n" for i in range(120))
    log = "".join(f"[{i:05d}] compiling unit {i} ... ok\n" for i in range(20_000))
    calls = [
        ToolCall("c0", "read", {"path": "a.py"}, 30),
        ToolCall("c1", "bash", {"command": "make"}, 30),
        ToolCall("c2", "bash", {"command": "echo 2"}, 30),
        ToolCall("c3", "bash", {"command": "echo 3"}, 30),
        ToolCall("c4", "read", {"path": "b.py"}, 30),
    ]
    return pi_rounds(calls, {0: body, 1: log, 4: body.replace("function", "method")})


def test_replays_tag_budget_charges_each_rounds_tags_once_as_the_daemon_does() -> None:
    """Until the next turn_end's totals hold them, the daemon charges a round's tag calls at
    their most (`mechanisms.budget.charge`), once; replay counted them twice (charged and
    spent), so a second batch the daemon makes was taken back. Once recorded, each counts at
    what it cost."""
    from types import SimpleNamespace

    from ctxwrap.mechanisms.amnesia import tag_cost
    from ctxwrap.replay._run import gate_tags

    cost = tag_cost(1_000, 24)
    w = SimpleNamespace  # priced calls: only their weighted tokens matter here
    costs: Any = SimpleNamespace(
        plain=[w(weighted_tokens=2_500.0), w(weighted_tokens=0.0)],
        ctxwrap=[w(weighted_tokens=0.0), w(weighted_tokens=0.0)],
    )
    tag = ("amnesia", "tag", 1_000, 10)
    r: Any = SimpleNamespace(
        aux_real=False,
        calls=[SimpleNamespace(index=0), SimpleNamespace(index=1)],
        aux_events=[(1, *tag), (1, *tag), (2, *tag)],
        aux={"amnesia": {"calls": 3, "input_tokens": 3_000, "output_tokens": 30}},
    )
    assert 2_500 - cost >= cost  # both of the first round fit, counted once
    gate_tags(r, costs, Thresholds())
    # the third comes after both were recorded (2 x 1,080 of 2,500): no longer covered
    assert [e[0] for e in r.aux_events] == [1, 1]
    assert r.aux["amnesia"] == {"calls": 2, "input_tokens": 2_000, "output_tokens": 20}


@pytest.mark.parametrize("within", [True, False])
def test_replay_tags_only_within_what_the_session_saved(within: bool) -> None:
    """The daemon's budget rule (`mechanisms.budget.aux_within`) on the priced calls: the
    first read comes before anything was saved, so no tag is paid for it; the second comes
    after the digest of the build log, and is tagged. Switched off, both are."""
    from ctxwrap.replay._run import gate_tags
    from ctxwrap.replay._sim import SessionSimulator

    th = Thresholds(tag_within_savings=within)
    sim = SessionSimulator("s", th)
    sim.feed(_tag_budget_session())
    r = sim.finish()
    assert [e[0] for e in r.aux_events if e[2] == "tag"] == [1, 5]  # before calls 1 and 5
    prices = _pricing.default_prices("anthropic/claude-sonnet-4-5")
    gate_tags(r, price_session(r, prices, 300.0, prices), th)
    tags = [e[0] for e in r.aux_events if e[2] == "tag"]
    assert tags == ([5] if within else [1, 5])
    assert r.aux["amnesia"]["calls"] == len(tags)


def test_replay_judges_a_warm_mask_on_the_cache_entries_the_daemon_knows() -> None:
    """As the daemon (mechanisms/masking.decide with engine/masking.CacheEntries): a warm
    mask is judged from the latest cache entry left before its first change. After a rewrite
    from the first output, the entries of the requests in between hold the old content, so
    the next mask, of an output inside that rewrite, writes the whole conversation anew; a
    request the provider recorded as a miss leaves no entry before it."""
    from ctxwrap.mechanisms.chain import default_mechanisms
    from ctxwrap.mechanisms.masking import Masking
    from ctxwrap.replay._events import ToolCall
    from ctxwrap.replay._sim import SessionSimulator
    from tests.replay_events import pi_rounds

    class Asked(Masking):
        def __init__(self) -> None:
            self.asked: dict[int, tuple[int, int, bool]] = {}

        def pays(self, removed: int, suffix: int, calls: int, ttl_s: float | None) -> bool:
            ok = super().pays(removed, suffix, calls, ttl_s)
            self.asked[calls] = (removed, suffix, ok)
            return ok

    out = "".join(f"step line {i}: output nobody reads again\n" for i in range(300))
    calls = [ToolCall(f"b{i}", "bash", {"command": f"make step{i}"}, 30) for i in range(40)]

    def run(cache_entries: bool, miss_at: int | None = None) -> tuple[Asked, SessionSimulator]:
        ev = pi_rounds(calls, dict.fromkeys(range(40), out))
        prompt = 3_000
        for i, m in enumerate(e for e in ev if getattr(e, "role", "") == "assistant"):
            read, write = (0, prompt) if i == miss_at else (prompt - 3_000 if i else 0, 3_000)
            m.usage_prompt_tokens, m.usage_input_tokens = prompt, 0
            m.usage_cache_read_tokens, m.usage_cache_write_tokens = read, write
            prompt += 3_000
        rule = Asked()
        chain = dataclasses.replace(default_mechanisms(), masking=rule)
        # every output maskable, none digested; the payback rule alone (no account)
        th = Thresholds(bash=False, mask_kinds="all", rewrite_within_savings=False,
                        cache_entries=cache_entries)  # fmt: skip
        sim = SessionSimulator("s", th, mechanisms=chain)
        sim.feed(ev)
        sim.finish()
        return rule, sim

    ours, _ = run(True)
    before, _ = run(False)
    first = min(k for k, (_, _, ok) in ours.asked.items() if ok)
    assert first == min(k for k, (_, _, ok) in before.asked.items() if ok)
    one = len(out) // 4  # an output's tokens
    # the first mask rewrites from the first output on (and the call before it), judged alike
    assert before.asked[first][1] <= ours.asked[first][1] < before.asked[first][1] + 50
    assert before.asked[first][1] > 10 * one
    # the next: from inside what that rewrite wrote anew, so from the start again ...
    assert ours.asked[first + 1][1] > 10 * one
    # ... where it was judged from its own output on, a rewrite the provider bills in full
    assert before.asked[first + 1][1] < 4 * one
    # a request recorded as a miss: the daemon, and replay, know no entry before it
    _, sim = run(True, miss_at=35)
    assert sim.cache.entries and all(r >= 35 for r, _ in sim.cache.entries)


def test_the_cache_ages_from_the_previous_request_as_the_adapters_measure_it() -> None:
    """A response that took 400 s, then the next request a second after it: the provider wrote
    its entry when the previous request came, 401 s before, past the 300 s lifetime. The
    adapters (pi's bridge, the proxies) call that request cold and mask; replay measured from
    the response's end, called it warm and masked nothing (a Codex rollout under a 2 s TTL
    showed it: the proxy masked, its replay did not)."""
    from ctxwrap.replay._events import Header, Message, ToolCall
    from ctxwrap.replay._sim import SessionSimulator

    listing = "".join(f"-rw-r--r-- 1 dev dev 120 Jan 1 module_{i:03d}.py\n" for i in range(40))

    def bash(n: int, command: str) -> ToolCall:
        return ToolCall(f"c{n}", "bash", {"command": command}, 30)

    ev: list[Any] = [
        Header("pi", "s", "/w", 0.0),
        Message("u1", None, "user", 1.0, 2),
        Message("a0", None, "assistant", 2.0, 40, [bash(0, "ls -la src")], request_key="q0"),
        Message("t0", None, "tool_result", 3.0, len(listing), [], "c0", "bash", listing),
        Message("a1", None, "assistant", 4.0, 40, [bash(1, "echo 1")], request_key="q1"),
        Message("t1", None, "tool_result", 5.0, 2, [], "c1", "bash", "1\n"),
        # requested at 5 s, answered at 405 s
        Message("a2", None, "assistant", 405.0, 40, [bash(2, "echo 2")], request_key="q2"),
        Message("t2", None, "tool_result", 406.0, 2, [], "c2", "bash", "2\n"),
        Message("end", None, "assistant", 407.0, 10, [], request_key="qend"),
    ]  # fmt: skip
    sim = SessionSimulator("s", Thresholds(mask_warm=False))
    sim.feed(ev)
    masks = [(i.call_index, i.reason) for i in sim.finish().interventions if i.kind == "mask"]
    assert masks == [(3, "older")]


def test_a_shell_read_the_daemon_does_not_store_names_no_file() -> None:
    """The daemon knows a shell read's file from the command its output was stored with; a
    `cat` too short to store names none, so it does not keep the file's earlier read active.
    Replay decides the same (it counted every shell read's file before)."""
    from ctxwrap.replay._events import ToolCall
    from ctxwrap.replay._sim import SessionSimulator
    from tests.replay_events import pi_rounds

    body = "".join(f"const line_{i} = {i};\n" for i in range(60))
    calls = [ToolCall("r0", "read", {"path": "a.ts"}, 30)]
    calls += [ToolCall(f"b{i}", "bash", {"command": f"echo {i}"}, 30) for i in (1, 2, 3)]
    calls += [ToolCall("c4", "bash", {"command": "cat a.ts | head -3"}, 30)]
    calls += [ToolCall(f"b{i}", "bash", {"command": f"echo {i}"}, 30) for i in (5, 6)]
    th = Thresholds(mask_read_idle_rounds=3, mask_warm=False)
    sim = SessionSimulator("s", th)
    sim.feed(pi_rounds(calls, {0: body, 4: body[:60]}, idle_s=600.0))
    masks = [(i.label, i.reason) for i in sim.finish().interventions if i.kind == "mask"]
    assert masks == [("read a.ts", "untouched")]


@pytest.mark.parametrize(
    ("tool", "masked"), [("task", True), ("edit", True), ("ctx_recall", False)]
)
def test_replay_masks_a_result_of_a_tool_no_mechanism_takes_as_the_daemon_keeps_it(
    tool: str, masked: bool
) -> None:
    """The adapters give the daemon such a result to keep (`mechanisms.keeps_result_of`), so
    masking may take it; ctxwrap's own recall answer is never kept."""
    from ctxwrap.replay._events import ToolCall
    from ctxwrap.replay._sim import SessionSimulator

    ev = _needed_session("unused")
    first = next(i for i, e in enumerate(ev) if getattr(e, "entry_id", "") == "a0")
    ev[first] = dataclasses.replace(ev[first], calls=[ToolCall("c0", tool, {"x": 1}, 30)])
    ev[first + 1] = dataclasses.replace(ev[first + 1], tool_name=tool)
    sim = SessionSimulator("s", Thresholds(mask_warm=False))
    sim.feed(ev)
    masks = [i for i in sim.finish().interventions if i.kind == "mask"]
    assert [(m.tool, m.reason) for m in masks] == ([(tool, "older")] if masked else [])
