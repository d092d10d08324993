"""The real Claude Code (`claude -p`) through `ctxwrap claude` against the scripted Anthropic server.

Each test asserts on what the server received: the proxy's edits, the hook's digests, the
cache-safe prefix property, and that nothing of ours breaks Claude Code when our side dies.
The daemon is auto-started by `ctxwrap claude` inside the test's own XDG dirs.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import signal
import sqlite3
import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from support import CTXWRAP, ROUND_ONE_TAGS, Xdg, task_step, wait_ready

from ctxwrap.agents.claude.anthropic_wire import is_compaction_request
from ctxwrap.testing.claude_home import TEST_API_KEY, claude_env, claude_print_args, find_claude
from ctxwrap.testing.model_server import RecordedRequest, ScriptedModelServer

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        find_claude() is None, reason="claude not installed (scripts/install-tools.sh)"
    ),
]

DROP = {"task": "tag", "match": "DROP-ME-MARKER", "answer": {"decision": "DROP"}}

# A failing run: Claude Code keeps only "Exit code N" and the first 10,000 chars of a failing
# command's output (for its hooks and its model alike); this one fits, at ~9,300 chars.
GEN_PYTEST = r"""
import sys
print("============================= test session starts ==============================")
print("collected 122 items")
for i in range(120):
    print(f"tests/test_bulk.py::test_case_{i:05d} PASSED" + " " * 20 + f"[{i * 100 // 122:3d}%]")
print("tests/test_core.py::test_parse_header FAILED")
print("tests/test_core.py::test_round_trip FAILED")
print("=================================== FAILURES ===================================")
print("___________________________ test_parse_header ___________________________")
print("E       AssertionError: header mismatch: expected b'CTX1' got b'CTX0'")
print("___________________________ test_round_trip ___________________________")
print("E       ValueError: bad checksum 0xdeadbeef")
print("=========================== short test summary info ============================")
print("FAILED tests/test_core.py::test_parse_header - AssertionError: header mismatch")
print("FAILED tests/test_core.py::test_round_trip - ValueError: bad checksum 0xdeadbeef")
print("================= 2 failed, 120 passed in 41.17s =================")
sys.exit(1)
"""

GEN_LOG = r"""
for i in range(60000):
    if i == 31337:
        print(f"2026-11-30T10:00:{i % 60:02d} ERROR worker-7 lost connection to db-primary: timeout after 30s")
    else:
        print(f"2026-11-30T10:00:{i % 60:02d} INFO request {i} served in {i % 97}ms status=200")
print("server shutdown complete: 60000 requests, 1 error")
"""


@dataclass
class Run:
    proc: subprocess.CompletedProcess[str]
    result: dict[str, Any]


def strip_cache_control(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: strip_cache_control(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [strip_cache_control(v) for v in value]
    return value


def tool_results(req: RecordedRequest) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for m in req.body.get("messages", []):
        for b in m.get("content") if isinstance(m.get("content"), list) else []:
            if isinstance(b, dict) and b.get("type") == "tool_result":
                out[b["tool_use_id"]] = b.get("content")
    return out


def result_blocks(req: RecordedRequest) -> list[dict[str, Any]]:
    return [
        b
        for m in req.body.get("messages", [])
        for b in (m.get("content") if isinstance(m.get("content"), list) else [])
        if isinstance(b, dict) and b.get("type") == "tool_result"
    ]


def tool_uses(req: RecordedRequest) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for m in req.body.get("messages", []):
        for b in m.get("content") if isinstance(m.get("content"), list) else []:
            if isinstance(b, dict) and b.get("type") == "tool_use":
                out[b["id"]] = b["input"]
    return out


def assert_prefix_chain(requests: Sequence[RecordedRequest]) -> None:
    """Ignoring cache_control, each request's messages start with the previous ones'."""
    for before, after in itertools.pairwise(requests):
        a = strip_cache_control(before.body["messages"])
        b = strip_cache_control(after.body["messages"])
        assert len(b) >= len(a)
        for i, msg in enumerate(a):
            assert json.dumps(b[i]) == json.dumps(msg), f"message {i} changed between requests"
        assert json.dumps(before.body) != json.dumps(after.body), "a request repeated exactly"


class ClaudeEnv:
    def __init__(self, tmp_path: Path, xdg: Xdg, server: ScriptedModelServer) -> None:
        self.work = tmp_path / "work"
        self.work.mkdir(exist_ok=True)
        self.xdg = xdg
        self.server = server
        self.env = claude_env(xdg.env(), home=tmp_path / "home", base_url=server.root_url)

    def run(self, prompt: str = "go", *extra: str, timeout: float = 120) -> Run:
        proc = subprocess.run(
            [*CTXWRAP, "claude", *claude_print_args(prompt, *extra)],
            cwd=self.work,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        return Run(proc, json.loads(proc.stdout))

    def ctxwrap(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*CTXWRAP, *args], env=self.env, capture_output=True, text=True, timeout=30
        )


def test_big_outputs_reach_the_model_as_digests(tmp_path: Path, xdg: Xdg) -> None:
    steps = [
        {"tool_calls": [{"name": "Bash", "arguments": {"command": "python3 gen_pytest.py"}}]},
        {"tool_calls": [{"name": "Bash", "arguments": {"command": "python3 gen_log.py"}}]},
        {"tool_calls": [{"name": "Bash", "arguments": {"command": "echo small-fail; exit 2"}}]},
        {"text": "done"},
    ]
    with ScriptedModelServer(steps) as srv:
        ce = ClaudeEnv(tmp_path, xdg, srv)
        (ce.work / "gen_pytest.py").write_text(GEN_PYTEST)
        (ce.work / "gen_log.py").write_text(GEN_LOG)
        ce.run()
        reqs = srv.main_requests
        assert len(reqs) == 4
        results = tool_results(reqs[-1])
        tests_digest, log_digest = results["toolu_0_0"], results["toolu_1_0"]
        assert isinstance(tests_digest, str) and isinstance(log_digest, str)
        # the failing run: failing tests, the summary, the exit status — and still an error
        assert " digested by ctxwrap · " in tests_digest.split("\n", 1)[0]
        assert "exit code 1" in tests_digest
        assert "test_parse_header" in tests_digest and "test_round_trip" in tests_digest
        assert "2 failed, 120 passed" in tests_digest
        flags = {b["tool_use_id"]: b.get("is_error") for b in result_blocks(reqs[-1])}
        assert flags == {"toolu_0_0": True, "toolu_1_0": False, "toolu_2_0": True}
        # a small failing command: Claude Code's own error, untouched (issue 20)
        assert results["toolu_2_0"] == "Exit code 2\nsmall-fail"
        # the commands ran as the model asked: no wrapper, no marker of ours anywhere
        assert tool_uses(reqs[-1])["toolu_0_0"] == {"command": "python3 gen_pytest.py"}
        assert "CTXWRAP-EXIT" not in json.dumps([r.body for r in reqs])
        # the log above Claude Code's own cap: digested from the whole saved file
        assert re.match(r"\$ .* · 60,00\d lines \(", log_digest)
        assert "exit code 0" in log_digest
        assert "lost connection to db-primary" in log_digest
        assert "server shutdown complete" in log_digest
        for text in (tests_digest, log_digest):
            assert len(text) < 8000
            assert "ctxwrap recall r" in text and "ctx_recall" not in text
        for req in reqs:
            sent = json.dumps(req.body)
            assert "persisted-output" not in sent and "tool-results" not in sent
            assert not re.search(r"(test_case_\d{5} PASSED.*\\n){20}", sent), "raw run of lines"
            assert not re.search(r"(INFO request \d+.*\\n){20}", sent), "raw run of lines"
        # the model's recall command works and stays bounded
        handle = re.search(r"ctxwrap recall (r[0-9a-f]+)", tests_digest)
        assert handle is not None
        recall = ce.ctxwrap("recall", handle.group(1), "bad checksum")
        assert recall.returncode == 0, recall.stderr
        assert "bad checksum 0xdeadbeef" in recall.stdout
        assert "PASSED" not in recall.stdout


def _amnesia_write_script(work: Path) -> list[object]:
    return [
        {"tool_calls": [{"name": "Read", "arguments": {"file_path": str(work / "notes.txt")}}]},
        {
            "tool_calls": [
                {
                    "name": "Write",
                    "arguments": {"file_path": str(work / "big.txt"), "content": BIG_WRITE},
                }
            ]
        },
        {"tool_calls": [{"name": "Bash", "arguments": {"command": "wc -c big.txt"}}]},
        {"text": "done"},
    ]


BIG_WRITE = "".join(
    f"line {i:04d}: the quick brown fox jumps over the lazy dog\n" for i in range(110)
)
NOTES = "DROP-ME-MARKER\n" + "".join(
    f"note {i}: nothing relevant here at all\n" for i in range(200)
)


def test_read_drop_tombstone_write_stub_and_prefix_property(tmp_path: Path, xdg: Xdg) -> None:
    assert 5500 < len(BIG_WRITE.encode()) < 7000  # a 6 KB write
    with ScriptedModelServer([], aux_rules=[DROP]) as srv:
        ce = ClaudeEnv(tmp_path, xdg, srv)
        ce.env.update(ROUND_ONE_TAGS)  # the tagger's DROPs from the first round
        ce.env["PI_CTX_WRITE"] = "1"  # the write strip (off by default)
        srv.steps = tuple(srv.steps) + _steps(_amnesia_write_script(ce.work))
        (ce.work / "notes.txt").write_text(NOTES)
        ce.run()
        reqs = srv.main_requests
        assert len(reqs) == 4
        read_id, write_id = "toolu_0_0", "toolu_1_0"
        for req in reqs[1:]:
            content = tool_results(req)[read_id]
            assert isinstance(content, str) and content.startswith("[ctxwrap: read ")
            assert "judged not needed" in content and "ctxwrap recall r" in content
            assert "DROP-ME-MARKER" not in json.dumps(req.body["messages"])
        for req in reqs[2:]:
            stub = tool_uses(req)[write_id]["content"]
            assert stub.startswith("[content stripped by ctxwrap: 6,050 bytes, 110 lines")
            assert "] [Wrote " in stub and "\n" not in stub  # the one-line fact
            assert "the quick brown fox" not in json.dumps(req.body["messages"])
        assert (ce.work / "big.txt").read_text() == BIG_WRITE
        assert_prefix_chain(reqs)

        # stats: the session ran claude; provider cache figures are the server's own
        sessions = json.loads(ce.ctxwrap("sessions", "--all", "--json").stdout)["sessions"]
        assert [s["agent"] for s in sessions] == ["claude"]
        by_agent = json.loads(ce.ctxwrap("stats", "--by", "agent", "--json").stdout)["groups"]
        assert [g["key"] for g in by_agent] == ["claude"]
        stats = json.loads(ce.ctxwrap("stats", "--json").stdout)["totals"]
        provider = stats["provider"]
        assert provider["turns"] == len(reqs)
        assert provider["cache_read_tokens"] == sum(
            r.usage["cache_read_input_tokens"] for r in reqs
        )
        assert provider["cache_write_tokens"] == sum(
            r.usage["cache_creation_input_tokens"] for r in reqs
        )
        assert provider["input_tokens"] == sum(r.usage["input_tokens"] for r in reqs)
        assert provider["cache_read_tokens"] > 0
        aux = srv.aux_requests
        assert {r.aux_task for r in aux} == {"tag", "fact"}
        assert stats["aux_tokens"] == sum(
            r.usage["input_tokens"] + r.usage["output_tokens"] for r in aux
        )
        by_mech = {m["mechanism"]: m for m in stats["mechanisms"]}
        assert by_mech["amnesia"]["saved_chars"] > 0 and by_mech["writes"]["saved_chars"] > 0

        with sqlite3.connect(xdg.state / "ctxwrap" / "ctxwrap.db") as db:
            backends = {b for (b,) in db.execute("SELECT backend FROM aux_calls")}
        assert backends == {"upstream"}  # run on Claude Code's own upstream, not pi's providers
        # aux calls went upstream with the session's own key; the key is in no ctxwrap file
        assert all(r.headers.get("x-api-key") == TEST_API_KEY for r in aux)
        assert_key_in_no_file(xdg, TEST_API_KEY)

        # --continue: the same view of the old rounds, and the chain goes on
        srv.steps = tuple(srv.steps) + _steps([{"text": "again"}])
        ce.run("and now?", "--continue")
        more = srv.main_requests[len(reqs) :]
        assert len(more) == 1
        assert tool_results(more[0])[read_id] == tool_results(reqs[-1])[read_id]
        assert tool_uses(more[0])[write_id] == tool_uses(reqs[-1])[write_id]
        assert_prefix_chain([reqs[-1], *more])


def _steps(raw: list[object]) -> tuple[Any, ...]:
    from ctxwrap.testing.model_server import ScriptStep

    return tuple(ScriptStep.from_json(s, i) for i, s in enumerate(raw))


def assert_key_in_no_file(xdg: Xdg, key: str) -> None:
    needle = key.encode()
    checked = 0
    for root in (xdg.state, xdg.config, xdg.runtime):
        for path in root.rglob("*") if root.exists() else ():
            if path.is_file() and not path.is_socket():
                checked += 1
                assert needle not in path.read_bytes(), f"API key found in {path}"
    assert checked > 3
    state_files = list((xdg.state / "ctxwrap" / "claude").glob("*.jsonl"))
    assert state_files and all((p.stat().st_mode & 0o777) == 0o600 for p in state_files)


def test_daemon_killed_mid_session_keeps_frozen_edits(tmp_path: Path, xdg: Xdg) -> None:
    with ScriptedModelServer([], aux_rules=[DROP]) as srv:
        ce = ClaudeEnv(tmp_path, xdg, srv)
        ce.env.update(ROUND_ONE_TAGS)  # the tagger's DROPs from the first round
        ce.env["PI_CTX_WRITE"] = "1"  # the write strip (off by default)
        srv.steps = _steps(_amnesia_write_script(ce.work))
        (ce.work / "notes.txt").write_text(NOTES)

        pid = 0

        def kill_after_third_request() -> None:
            nonlocal pid
            srv.wait_for_requests(3, kind="main", timeout=60)
            pid = xdg.daemon_pid() or 0
            assert pid
            os.kill(pid, signal.SIGKILL)

        killer = threading.Thread(target=kill_after_third_request)
        killer.start()
        ce.run()
        killer.join()
        reqs = srv.main_requests
        assert len(reqs) == 4
        # decided before the kill, replayed after it
        assert tool_results(reqs[-1])["toolu_0_0"].startswith("[ctxwrap: read ")
        assert tool_uses(reqs[-1])["toolu_1_0"]["content"].startswith("[content stripped")
        assert_prefix_chain(reqs)
        # the proxy found nobody listening and started a new daemon, as the pi bridge does
        killed = pid
        health = wait_ready(xdg, timeout=20)
        assert health["pid"] != killed


def test_unreachable_daemon_means_plain_claude_code(tmp_path: Path, xdg: Xdg) -> None:
    with ScriptedModelServer([], aux_rules=[DROP]) as srv:
        ce = ClaudeEnv(tmp_path, xdg, srv)
        srv.steps = _steps(_amnesia_write_script(ce.work))
        (ce.work / "notes.txt").write_text(NOTES)

        def kill_at_probe() -> None:
            # Claude Code's HEAD / arrives before any model call: our side goes away then,
            # and cannot come back (its database path is now a directory).
            end = time.monotonic() + 60
            while time.monotonic() < end and not srv.all_requests:
                time.sleep(0.01)
            pid = xdg.daemon_pid()
            if pid:
                os.kill(pid, signal.SIGKILL)
            for f in xdg.db.parent.glob("ctxwrap.db*"):
                f.unlink()
            xdg.db.mkdir()

        killer = threading.Thread(target=kill_at_probe)
        killer.start()
        run = ce.run()
        killer.join()
        assert run.result["result"] == "done"
        reqs = srv.main_requests
        assert len(reqs) == 4
        # nothing edited: the read and the write body reach the model whole
        assert "DROP-ME-MARKER" in json.dumps(tool_results(reqs[-1])["toolu_0_0"])
        assert tool_uses(reqs[-1])["toolu_1_0"]["content"] == BIG_WRITE
        assert_prefix_chain(reqs)


def test_ctxwrap_off_runs_plain_claude(tmp_path: Path, xdg: Xdg) -> None:
    with ScriptedModelServer([], aux_rules=[DROP]) as srv:
        ce = ClaudeEnv(tmp_path, xdg, srv)
        srv.steps = _steps(_amnesia_write_script(ce.work))
        (ce.work / "notes.txt").write_text(NOTES)
        ce.run("go", "--ctxwrap-off")
        reqs = srv.main_requests
        assert tool_uses(reqs[-1])["toolu_1_0"]["content"] == BIG_WRITE
        assert srv.aux_requests == []
        assert not (xdg.state / "ctxwrap" / "claude").exists()
        assert not xdg.socket.exists()  # no daemon was started for a plain run


AGREE_BODY = "".join(f"value_{i} = compute({i})  # a line of generated code\n" for i in range(400))
AGREE_NOTES = "".join(
    f"note {i}: something about the design of the parser module\n" for i in range(900)
)


def _agree_steps(work: Path) -> list[dict[str, Any]]:
    bash = [
        {"tool_calls": [{"name": "Bash", "arguments": {"command": f"echo step {i}"}}]}
        for i in range(14)
    ]
    return [
        {"tool_calls": [{"name": "Bash", "arguments": {"command": "seq 1 6000"}}]},
        {"tool_calls": [{"name": "Read", "arguments": {"file_path": str(work / "N.txt")}}]},
        {
            "tool_calls": [
                {
                    "name": "Write",
                    "arguments": {"file_path": str(work / "v.py"), "content": AGREE_BODY},
                }
            ]
        },
        *bash,
        {"text": "done"},
    ]


WRITE_ON = {"PI_CTX_WRITE": "1"}


def _plain_and_wrapped(
    tmp_path: Path, xdg: Xdg, losses: dict[int, str]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The same scripted session under plain Claude Code and under ctxwrap claude, the cache
    losing entries at the same steps (`losses`): (the replay of the plain transcript, the
    wrapped session's live stats), both as --json."""
    sessions: dict[str, str] = {}
    for mode in ("plain", "wrapped"):
        work = tmp_path / mode / "work"
        work.mkdir(parents=True)
        (work / "N.txt").write_text(AGREE_NOTES)
        with ScriptedModelServer(_agree_steps(work), cache_losses=losses) as srv:
            # every mechanism drawn: the write strip too (off by default)
            env = claude_env(
                {**xdg.env(), **WRITE_ON}, home=tmp_path / mode / "home", base_url=srv.root_url
            )
            argv = [str(find_claude())] if mode == "plain" else [*CTXWRAP, "claude"]
            proc = subprocess.run(
                [*argv, *claude_print_args("go")],
                cwd=work,
                env=env,
                capture_output=True,
                text=True,
                timeout=240,
            )
            assert proc.returncode == 0, proc.stderr[-3000:]
            sessions[mode] = json.loads(proc.stdout)["session_id"]
            assert len(srv.main_requests) == 18
    [transcript] = sorted((tmp_path / "plain" / "home" / ".claude" / "projects").rglob("*.jsonl"))
    env = {**xdg.env(), **WRITE_ON}  # replay with the settings the wrapped run had
    out = subprocess.run(
        [*CTXWRAP, "replay", "--json", str(transcript)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    live = subprocess.run(
        [*CTXWRAP, "stats", "--session", sessions["wrapped"], "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0 and live.returncode == 0, out.stderr + live.stderr
    return json.loads(out.stdout), json.loads(live.stdout)


def _assert_agree(replay_doc: dict[str, Any], live_doc: dict[str, Any]) -> None:
    replay, real = replay_doc["totals"], live_doc["totals"]
    assert replay["llm_calls"] == real["llm_calls"] == 18
    by_replay = {m["mechanism"]: m["saved_chars"] for m in replay["mechanisms"]}
    by_real = {m["mechanism"]: m["saved_chars"] for m in real["mechanisms"]}
    # history masking apart from the tagger's tombstones, live and in replay
    for mech in ("bash", "writes", "masking"):
        assert by_real[mech] > 0, mech
        assert abs(by_replay[mech] - by_real[mech]) <= 0.05 * by_real[mech], (
            mech,
            by_replay[mech],
            by_real[mech],
        )
    cost = replay["cost"]
    plain_w, ctx_w = cost["plain"]["weighted_tokens"], cost["ctxwrap"]["weighted_tokens"]
    replay_pct = 100 * (plain_w - ctx_w - replay["aux_tokens_estimated"]) / plain_w
    assert real["cost"]["saved_pct"] > 10
    # replay converts what ctxwrap keeps out at the session's own tokens per character, fitted
    # on its usage (here the scripted server's chars/4 of JSON: ~0.27 of the characters ctxwrap
    # measures); live stats still at chars/4 — the gap a calibrated live cost model would close
    assert abs(replay_pct - real["cost"]["saved_pct"]) <= 4.0, (replay_pct, real["cost"])
    # what ctxwrap sent, priced: the same cache on both sides (the provider's, as recorded)
    live_w = real["cost"]["sent_weighted"]
    print(f"saved: live {real['cost']['saved_pct']}%, replayed {replay_pct:.1f}%;"
          f" as sent: live {live_w}, replayed {ctx_w}")  # fmt: skip
    assert abs(ctx_w - live_w) <= 0.05 * live_w, (ctx_w, live_w)


def test_replay_of_the_plain_transcript_agrees_with_live_stats(tmp_path: Path, xdg: Xdg) -> None:
    """The same scripted session under plain Claude Code and under ctxwrap claude: replaying
    the plain transcript (the daemon's own policy code) says what live stats say — per
    mechanism, and the cache-priced saving net of aux calls. A digest, a write strip and a read
    masked while the cache is warm once its file is untouched for long enough. Then again with
    a provider that misses: both price the cache entries the provider's usage says it read."""
    ideal_replay, ideal_live = _plain_and_wrapped(tmp_path / "ideal", xdg, {})
    _assert_agree(ideal_replay, ideal_live)
    # the request that first carried the mask shares only what came before the masked read
    # with the previous one as sent; as Claude Code sent it, everything
    with sqlite3.connect(xdg.db) as db:
        rows = db.execute(
            """SELECT sent_prefix_chars, plain_prefix_chars, saved_masking FROM llm_calls
               WHERE session_id = ? ORDER BY id""",
            (ideal_live["filter"]["session"],),
        ).fetchall()
    [masked] = [i for i in range(1, len(rows)) if rows[i][2] > rows[i - 1][2]]
    assert rows[masked][0] < 0.8 * rows[masked][1], rows
    # before it the two differ by the digested output only (plain had it whole)
    assert all(sent and plain and sent <= plain for sent, plain, _ in rows[1:masked]), rows
    [session] = ideal_replay["groups"]
    assert session["recorded_cache"]["nothing"] == session["recorded_cache"]["older_entry"] == 0
    losses = {3: "older", 5: "none", 12: "none", 15: "older"}
    lossy_replay, lossy_live = _plain_and_wrapped(tmp_path / "lossy", xdg, losses)
    [session] = lossy_replay["groups"]
    assert session["recorded_cache"]["nothing"] >= 2, session["recorded_cache"]
    assert session["recorded_cache"]["older_entry"] >= 1, session["recorded_cache"]
    _assert_agree(lossy_replay, lossy_live)
    provider = lossy_live["totals"]["provider"]
    assert provider["cache_nothing"] >= 2 and provider["cache_older_entry"] >= 1, provider
    assert ideal_live["totals"]["provider"]["cache_nothing"] == 0
    # live stats priced the misses (an ideal cache would write about what it did above)
    ideal_w = ideal_live["totals"]["cost"]["cache_write_tokens"]
    assert lossy_live["totals"]["cost"]["cache_write_tokens"] > 1.3 * ideal_w


def test_the_main_conversation_after_a_sub_agent_is_priced_on_its_own_entry(
    tmp_path: Path, xdg: Xdg
) -> None:
    """Claude Code's Task sub-agent sends its requests between two of the main conversation's;
    the provider keeps both entries, so the main one's next request reads its own. The proxy
    measures it against the main conversation's previous request (`prefix_of`), and live
    stats price the session as the provider's usage bills it (before, that request was priced
    as rewriting everything past the system prompt)."""
    notes = "".join(f"note {i}: the parser keeps the cache stable\n" for i in range(600))
    steps = [
        task_step("Run wc -l on notes.txt and report"),
        {"tool_calls": [{"name": "Bash", "arguments": {"command": "wc -l notes.txt"}}]},
        {"text": "notes.txt has 600 lines"},
        {"text": "done: 600 lines"},
    ]
    with ScriptedModelServer(steps) as srv:
        ce = ClaudeEnv(tmp_path, xdg, srv)
        (ce.work / "notes.txt").write_text(notes)
        result = ce.run("how long is notes.txt? ask a sub-agent").result
        assert result["result"] == "done: 600 lines"
        stats = ce.ctxwrap("stats", "--session", result["session_id"], "--json")
    assert stats.returncode == 0, stats.stderr
    with sqlite3.connect(xdg.db) as db:
        rows = db.execute(
            """SELECT call_index, prefix_of, sent_prefix_chars,
                      sent_system + sent_messages + sent_tools
               FROM llm_calls ORDER BY id"""
        ).fetchall()
        usage = db.execute(
            "SELECT cache_read_tokens, cache_write_tokens, input_tokens FROM turns ORDER BY id"
        ).fetchall()
    assert len(rows) == len(srv.main_requests) == 4, rows
    # the main conversation's second request: measured against its first, nearly all shared
    assert rows[3][1] == 0 and rows[3][2] >= 0.9 * rows[0][3], rows
    assert rows[1][1] is None and rows[2][1] is None  # the sub-agent's: against the one before
    # it read the main conversation's entry (the provider's usage) ...
    assert usage[3][0] >= 0.9 * (usage[0][0] + usage[0][1]), usage
    # ... and live stats price what the provider billed, within 10 % (a provider's entry ends
    # at the request's last cache marker, the model's at its end: measured 44.1k vs 47.4k;
    # priced as a rewrite, that request alone would add about 23k)
    bill = sum(read * 0.1 + write * 1.25 + fresh for read, write, fresh in usage)
    totals = json.loads(stats.stdout)["totals"]
    ours = totals["cost"]["total_weighted"] - totals["cost"]["aux_weighted"]
    assert abs(ours - bill) <= 0.1 * bill, (ours, bill)
    # and no request is reported as the cache's miss: each read what its content had it read
    provider = totals["provider"]
    assert provider["cache_older_entry"] == provider["cache_nothing"] == 0, provider


SUMMARY = "<analysis>read it</analysis><summary>1. Primary Request: read big.txt.</summary>"


def test_claude_codes_own_compaction_is_recorded_beside_the_plain_one(
    tmp_path: Path, xdg: Xdg
) -> None:
    """Claude Code 2.1.197 compacts (here ahead of the limit: a 100k compaction window at 30 %,
    by its own variables) and says so in its PostCompact hook: the session shows the
    compaction, its summarisation request is priced as the call it was, and the plain model
    compacts at the same threshold."""
    big = tmp_path / "work" / "big.txt"  # ClaudeEnv's working directory
    steps = [
        {"tool_calls": [{"name": "Read", "arguments": {"file_path": str(big)}}]},
        {"text": "read it"},
        {"text": SUMMARY},  # Claude Code's summarisation request, under the same tools
        {"text": "after compaction"},
    ]
    with ScriptedModelServer(steps) as srv:
        ce = ClaudeEnv(tmp_path, xdg, srv)
        big.write_text("".join(f"line {i} of a big file\n" for i in range(3000)))
        ce.env.update(
            CLAUDE_CODE_AUTO_COMPACT_WINDOW="100000", CLAUDE_AUTOCOMPACT_PCT_OVERRIDE="30"
        )
        first = ce.run("read big.txt")
        assert first.result["result"] == "read it"
        again = ce.run("next", "--continue")
        assert again.result["result"] == "after compaction"
        reqs = srv.main_requests
        assert len(reqs) == 4 and reqs[2].body.get("tools"), "no summarisation request"
        # the proxy tells it apart (frozen edits only there) from the agent's own requests
        assert [is_compaction_request(r.body["messages"]) for r in reqs] == [
            False,
            False,
            True,
            False,
        ]
        assert "line 1999 of a big file" in json.dumps(reqs[1].body["messages"])  # the read
        assert "line 1999 of a big file" not in json.dumps(reqs[3].body["messages"])
        sid = again.result["session_id"]
        stats = ce.ctxwrap("stats", "--session", sid, "--json")
    assert stats.returncode == 0, stats.stderr
    with sqlite3.connect(xdg.db) as db:
        comps = list(db.execute("SELECT reason, summary_chars, priced_as_call FROM compactions"))
        calls = db.execute("SELECT COUNT(*) FROM llm_calls").fetchone()[0]
        (reserve,) = db.execute(
            "SELECT reserve_tokens FROM session_models WHERE reserve_tokens IS NOT NULL"
            " ORDER BY id DESC LIMIT 1"
        ).fetchone()
    assert comps == [("auto", len(SUMMARY), 1)]
    assert calls == 4  # the summarisation request is one of the session's calls
    # the plain session's threshold is Claude Code's: 30 % of (100k less 20k), on the 200k
    # window (--continue) or the 1M one
    assert reserve in (200_000 - 24_000, 1_000_000 - 24_000)
    cost = json.loads(stats.stdout)["totals"]["cost"]
    assert cost["compactions"] == 1 and cost["compaction_weighted"] == 0
    # plain compacts once: at its threshold (the same), not again with the session's
    assert cost["plain_compactions"] == 1
    # ctxwrap kept nothing out here: its requests are priced as the provider billed them, the
    # misses its usage records included (the resumed process's summarisation request and the
    # one after the compaction read nothing), within 5 %; plain's model misses with them
    with sqlite3.connect(xdg.db) as db:
        usage = db.execute(
            "SELECT cache_read_tokens, cache_write_tokens, input_tokens FROM turns ORDER BY id"
        ).fetchall()
    assert [u[0] == 0 for u in usage] == [True, False, True, True], usage
    bill = sum(read * 0.1 + write * 1.25 + fresh for read, write, fresh in usage)
    ours = cost["total_weighted"] - cost["aux_weighted"]
    assert abs(ours - bill) <= 0.05 * bill, (ours, bill)
    assert cost["plain_cache_read_tokens"] < 0.5 * cost["plain_cache_write_tokens"], cost
    # the transcript 2.1.197 wrote (session metadata such as `mode` entries, the compaction)
    # replays with nothing unread
    from ctxwrap.replay import replay_paths, run_json

    doc = run_json(
        replay_paths(sorted((tmp_path / "home" / ".claude" / "projects").rglob("*.jsonl")))
    )
    assert doc["skipped_files"] == {} and doc["skipped_entries"] == {}
    assert doc["groups"][0]["compactions"] == 1


def _notes(name: str) -> str:
    """~37k chars the tagger drops (a Read returns them whole: under its 2,000-line cap)."""
    return f"DROP-ME-MARKER {name}\n" + "".join(
        f"{name} note {i:03d}: nothing in here matters to the task\n" for i in range(750)
    )


def test_claude_code_compacts_where_plain_did_not_later(tmp_path: Path, xdg: Xdg) -> None:
    """Four reads the tagger hides, one after another (a 100k compaction window at 56 %:
    44.8k tokens). Plain Claude Code, whose context holds them all, compacts on its own
    mid-run. Under ctxwrap its context stays small, so on its own it would compact later and
    carry meanwhile what plain's compaction dropped; the proxy reports plain's size in the
    usage of the response at which plain's count crossed the threshold, and Claude Code
    compacts at the same request as plain — by its own rule, with its own summary request and
    transcript entry. Its own statistics keep the provider's counts."""
    names = ("a", "b", "c", "d")
    reads = [
        {"tool_calls": [{"name": "Read", "arguments": {"file_path": str(tmp_path / "work" / n)}}]}
        for n in names
    ]
    compact = {"CLAUDE_CODE_AUTO_COMPACT_WINDOW": "100000", "CLAUDE_AUTOCOMPACT_PCT_OVERRIDE": "56"}
    (tmp_path / "work").mkdir()
    for n in names:
        (tmp_path / "work" / n).write_text(_notes(n))
    steps = [*reads[:3], {"text": SUMMARY}, reads[3], {"text": "done"}]

    # plain Claude Code, same run: its summarisation request comes before the fourth read
    with ScriptedModelServer(steps) as srv:
        env = claude_env(xdg.env(), home=tmp_path / "plain-home", base_url=srv.root_url)
        env.update(compact)
        proc = subprocess.run(
            [env["CTXWRAP_CLAUDE"], *claude_print_args("read a to d")],
            cwd=tmp_path / "work",
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        plain = [is_compaction_request(r.body["messages"]) for r in srv.main_requests]
    assert plain == [False, False, False, True, False, False], plain

    with ScriptedModelServer(steps, aux_rules=[DROP]) as srv:
        ce = ClaudeEnv(tmp_path, xdg, srv)
        ce.env.update(compact)
        run = ce.run("read a to d")
        assert run.result["result"] == "done", run.proc.stderr[-2000:]
        reqs = srv.main_requests
        ours = [is_compaction_request(r.body["messages"]) for r in reqs]
        # what ctxwrap sent was under the threshold: only plain's size made it compact there
        assert reqs[2].usage is not None
        sent = sum(
            reqs[2].usage[k]
            for k in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
        )
        assert sent < 44_800, reqs[2].usage
        sid = run.result["session_id"]
        stats = json.loads(ce.ctxwrap("stats", "--session", sid, "--json").stdout)["totals"]
    assert ours == plain, ours
    assert "plain Claude Code would have compacted by now" not in run.proc.stderr
    # the session compacted once, as plain did; the provider's counts are what it records
    assert stats["cost"]["compactions"] == 1 and stats["cost"]["plain_compactions"] == 1
    with sqlite3.connect(xdg.db) as db:
        recorded = [
            r[0]
            for r in db.execute(
                "SELECT input_tokens + cache_read_tokens + cache_write_tokens FROM turns"
                " ORDER BY id"
            )
        ]
    assert recorded[2] == sent


def test_compact_in_step_off_leaves_claude_code_to_compact_on_its_own(
    tmp_path: Path, xdg: Xdg
) -> None:
    """`compact_in_step = false`: the usage passes as the provider sent it; Claude Code's
    smaller context does not compact where plain did, and the exit line says plain would
    have compacted by now."""
    names = ("a", "b", "c", "d")
    reads = [
        {"tool_calls": [{"name": "Read", "arguments": {"file_path": str(tmp_path / "work" / n)}}]}
        for n in names
    ]
    (tmp_path / "work").mkdir()
    for n in names:
        (tmp_path / "work" / n).write_text(_notes(n))
    with ScriptedModelServer([*reads, {"text": "done"}], aux_rules=[DROP]) as srv:
        ce = ClaudeEnv(tmp_path, xdg, srv)
        ce.env.update(ROUND_ONE_TAGS)  # the tagger's DROPs from the first round
        ce.env.update(
            CLAUDE_CODE_AUTO_COMPACT_WINDOW="100000",
            CLAUDE_AUTOCOMPACT_PCT_OVERRIDE="56",
            PI_CTX_COMPACT_IN_STEP="0",
        )
        run = ce.run("read a to d")
        assert run.result["result"] == "done"
        assert not any(is_compaction_request(r.body["messages"]) for r in srv.main_requests)
    assert "plain Claude Code would have compacted by now" in run.proc.stderr


def test_the_hooks_with_nothing_to_say_leave_no_trace_in_the_transcript(
    tmp_path: Path, xdg: Xdg
) -> None:
    """A Read whose output ctxwrap leaves as it is: its HTTP hook answers an empty body, so
    Claude Code records no hook output — whose entry would carry the hook's URL, the proxy's
    per-launch secret in it — in the transcript."""
    small = tmp_path / "work" / "small.txt"
    steps = [
        {"tool_calls": [{"name": "Read", "arguments": {"file_path": str(small)}}]},
        {"text": "read it"},
    ]
    with ScriptedModelServer(steps) as srv:
        ce = ClaudeEnv(tmp_path, xdg, srv)
        small.write_text("a small file\n")
        run = ce.run("read small.txt")
        assert run.result["result"] == "read it"
    transcripts = list((tmp_path / "home" / ".claude" / "projects").rglob("*.jsonl"))
    assert transcripts
    text = "".join(p.read_text() for p in transcripts)
    assert "a small file" in text  # the Read is there …
    assert "_ctxwrap/hook" not in text and "127.0.0.1" not in text  # … the hook's URL is not


def test_a_hook_that_answers_leaves_no_secret_in_the_transcript(tmp_path: Path, xdg: Xdg) -> None:
    """A Bash output the hook digests: Claude Code 2.1.197 records the URL of an HTTP hook that
    answered something in its transcript. That URL is the launch's hook port, with no secret;
    neither the proxy's secret nor the hook's (sent in a header) is in any transcript file."""
    seen = tmp_path / "seen.json"
    spy = tmp_path / "claude-spy"  # what `ctxwrap claude` gave Claude Code, then the real one
    spy.write_text(
        "#!/bin/sh\n"
        f'settings=""; prev=""; for a in "$@"; do [ "$prev" = --settings ] && settings="$a"; prev="$a"; done\n'
        '[ -n "$settings" ] && '  # not `claude --version`, run for the version alone
        f'printf \'{{"base": "%s", "settings": %s}}\' "$ANTHROPIC_BASE_URL" "$(cat "$settings")" > {seen}\n'
        f'exec "$REAL_CLAUDE" "$@"\n'
    )
    spy.chmod(0o755)
    steps = [
        {"tool_calls": [{"name": "Bash", "arguments": {"command": "python3 gen_log.py"}}]},
        {"text": "done"},
    ]
    with ScriptedModelServer(steps) as srv:
        ce = ClaudeEnv(tmp_path, xdg, srv)
        ce.env.update(REAL_CLAUDE=ce.env["CTXWRAP_CLAUDE"], CTXWRAP_CLAUDE=str(spy))
        (ce.work / "gen_log.py").write_text(GEN_LOG)
        ce.run()
        digest = tool_results(srv.main_requests[-1])["toolu_0_0"]
        assert " digested by ctxwrap · " in digest.split("\n", 1)[0]  # the hook answered
    given = json.loads(seen.read_text())
    proxy_secret = given["base"].rstrip("/").rsplit("/", 1)[1]
    [entry] = given["settings"]["hooks"]["PostToolUse"][0]["hooks"]
    hook_secret = entry["headers"]["x-ctxwrap-hook"]
    assert entry["type"] == "http" and hook_secret not in entry["url"]
    assert len(proxy_secret) >= 32 and len(hook_secret) >= 32
    transcripts = list((tmp_path / "home" / ".claude").rglob("*.jsonl"))
    assert transcripts
    text = "".join(p.read_text() for p in transcripts)
    assert entry["url"] in text  # Claude Code did record the hook that answered …
    assert proxy_secret not in text and hook_secret not in text  # … and no secret with it


def test_exit_status_is_claude_codes_own(tmp_path: Path, xdg: Xdg) -> None:
    codes = []
    for extra in ((), ("--ctxwrap-off",)):
        with ScriptedModelServer([{"status": 400, "text": "bad request"}]) as srv:
            ce = ClaudeEnv(tmp_path, xdg, srv)
            proc = subprocess.run(
                [*CTXWRAP, "claude", *claude_print_args("go", *extra)],
                cwd=ce.work,
                env=ce.env,
                capture_output=True,
                text=True,
                timeout=120,
            )
            codes.append(proc.returncode)
            assert len(srv.main_requests) == 1
    assert codes[0] == codes[1] != 0


def test_grep_and_glob_results_tagged_drop_become_tombstones(tmp_path: Path, xdg: Xdg) -> None:
    drop_listing = {
        "task": "tag",
        "match": "module_with_a_long_name",
        "answer": {"decision": "DROP"},
    }
    with ScriptedModelServer([], aux_rules=[drop_listing]) as srv:
        ce = ClaudeEnv(tmp_path, xdg, srv)
        ce.env.update(ROUND_ONE_TAGS)  # the tagger's DROPs from the first round
        src = ce.work / "src"
        src.mkdir()
        for i in range(120):
            (src / f"module_with_a_long_name_{i:03d}.py").write_text(
                f"# DROP-ME-MARKER {i}\nvalue_{i} = {i}\n"
            )
        srv.steps = _steps(
            [
                {"tool_calls": [{"name": "Glob", "arguments": {"pattern": "src/*.py"}}]},
                {
                    "tool_calls": [
                        {
                            "name": "Grep",
                            "arguments": {"pattern": "DROP-ME", "output_mode": "content"},
                        }
                    ]
                },
                {"text": "done"},
            ]
        )
        ce.run()
        reqs = srv.main_requests
        assert len(reqs) == 3
        results = tool_results(reqs[-1])
        assert results["toolu_0_0"].startswith("[ctxwrap: find src/*.py")
        assert results["toolu_1_0"].startswith("[ctxwrap: grep DROP-ME")
        assert "module_with_a_long_name_077" not in json.dumps(reqs[-1].body["messages"])
        assert_prefix_chain(reqs)


APP_OLD = "".join(
    f"    legacy_step_{i} = run_legacy({i})  # old-only line {i}\n" for i in range(12)
)
APP_NEW = "".join(f"    step_{i} = run({i})\n" for i in range(12))
APP = "def main():\n" + APP_OLD + "    return 0\n"
MISSING = "".join(f"    never_in_the_file_{i} = 1  # failing-edit line\n" for i in range(12))


def test_an_applied_edits_old_string_leaves_later_requests(tmp_path: Path, xdg: Xdg) -> None:
    """Claude Code's Edit, allowed by a scoped rule as users allow it: it runs as asked, and
    from the next request on its old_string is a marker (that text left the file); new_string
    stays. A failed Edit keeps its old_string. The frozen strip survives --continue."""
    with ScriptedModelServer([]) as srv:
        ce = ClaudeEnv(tmp_path, xdg, srv)
        app = ce.work / "src" / "app.py"
        app.parent.mkdir()
        app.write_text(APP)
        srv.steps = _steps(
            [
                {"tool_calls": [{"name": "Read", "arguments": {"file_path": str(app)}}]},
                {
                    "tool_calls": [
                        {
                            "name": "Edit",
                            "arguments": {
                                "file_path": str(app),
                                "old_string": APP_OLD,
                                "new_string": APP_NEW,
                            },
                        }
                    ]
                },
                {
                    "tool_calls": [
                        {
                            "name": "Edit",
                            "arguments": {
                                "file_path": str(app),
                                "old_string": MISSING,
                                "new_string": "x = 1\n",
                            },
                        }
                    ]
                },
                {"text": "done"},
            ]
        )
        ce.run("go", "--allowedTools", "Edit(src/**)")
        assert app.read_text() == "def main():\n" + APP_NEW + "    return 0\n"
        reqs = srv.main_requests
        assert len(reqs) == 4
        edit_id, failed_id = "toolu_1_0", "toolu_2_0"
        assert_prefix_chain(reqs)
        for req in reqs[2:]:
            call = tool_uses(req)[edit_id]
            assert call["old_string"].startswith("[ctxwrap: the replaced text is left out here")
            assert call["new_string"] == APP_NEW and call["file_path"] == str(app)
        # the Read result still holds the old lines: only the call's copy of them goes
        assert "old-only line" not in json.dumps(tool_uses(reqs[3]))
        assert tool_uses(reqs[3])[failed_id]["old_string"] == MISSING
        assert result_blocks(reqs[3])[-1].get("is_error") is True
        stats = json.loads(ce.ctxwrap("stats", "--json").stdout)
        assert stats["needed_again"]["mechanisms"]["edits"]["interventions"] == 1
        srv.steps = tuple(srv.steps) + _steps([{"text": "again"}])
        ce.run("and now?", "--continue", "--allowedTools", "Edit(src/**)")
        more = srv.main_requests[len(reqs) :]
        assert len(more) == 1
        assert tool_uses(more[0])[edit_id] == tool_uses(reqs[-1])[edit_id]
        assert_prefix_chain([reqs[-1], *more])
