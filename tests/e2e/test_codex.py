"""The real Codex CLI (`codex exec`) through `ctxwrap codex` against the scripted Responses server.

Assertions are on what the server received: the proxy's frozen edits (a digest, a tombstone,
a stripped apply_patch body), the prefix property, usage in the stats, and that the key is
stored nowhere. The daemon is auto-started by `ctxwrap codex` inside the test's XDG dirs.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from support import CTXWRAP, ROUND_ONE_TAGS, Xdg

from ctxwrap.launch.exit_line import short_id
from ctxwrap.paths import ctxwrap_program
from ctxwrap.testing.codex_home import (
    CHATGPT_ACCOUNT_ID,
    TEST_API_KEY,
    codex_env,
    codex_exec_args,
    find_codex,
    write_chatgpt_login,
)
from ctxwrap.testing.model_server import RecordedRequest, ScriptedModelServer, ScriptStep

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        find_codex() is None, reason="codex not installed (scripts/install-tools.sh)"
    ),
]

DROP = {"task": "tag", "match": "DROP-ME-MARKER", "answer": {"decision": "DROP"}}
GEN_LOG = r"""
for i in range(4000):
    if i == 3950:  # Codex 0.171 keeps ~319 head and ~312 tail lines of this output
        print(f"2026-11-30T10:00:{i % 60:02d} ERROR worker-7 lost connection to db-primary")
    else:
        print(f"2026-11-30T10:00:{i % 60:02d} INFO request {i} served in {i % 97}ms status=200")
print("server shutdown complete: 4000 requests, 1 error")
"""
# what digests and tombstones tell Codex's model to run: this install, by its path
RECALL = f"`{ctxwrap_program()} recall r"
NOTES = "DROP-ME-MARKER meeting notes, unrelated to the task\n" + "".join(
    f"- item {i}: lunch options and the parking rota for week {i}\n" for i in range(60)
)
BIG_LINES = [f"row {i}: the quick brown fox jumps over the lazy dog" for i in range(200)]
PATCH = "*** Begin Patch\n*** Add File: big.txt\n" + "".join(f"+{x}\n" for x in BIG_LINES)
PATCH += "*** End Patch\n"


def inputs(req: RecordedRequest) -> list[dict[str, Any]]:
    return list(req.body["input"])


def outputs(req: RecordedRequest) -> dict[str, Any]:
    return {
        i["call_id"]: i["output"]
        for i in inputs(req)
        if i.get("type") in ("function_call_output", "custom_tool_call_output")
    }


def calls(req: RecordedRequest) -> dict[str, dict[str, Any]]:
    return {
        i["call_id"]: i
        for i in inputs(req)
        if i.get("type") in ("function_call", "custom_tool_call")
    }


def assert_prefix_chain(requests: Sequence[RecordedRequest]) -> None:
    """Each request's input starts with the previous request's input, item for item."""
    for before, after in itertools.pairwise(requests):
        a, b = inputs(before), inputs(after)
        assert len(b) > len(a)
        for i, item in enumerate(a):
            assert json.dumps(b[i]) == json.dumps(item), f"input item {i} changed"
        assert json.dumps(before.body.get("tools")) == json.dumps(after.body.get("tools"))


def assert_key_in_no_file(xdg: Xdg, key: str, *, edits: bool = True) -> None:
    needle = key.encode()
    checked = 0
    for root in (xdg.state, xdg.config, xdg.runtime):
        for path in root.rglob("*") if root.exists() else ():
            if path.is_file() and not path.is_socket():
                checked += 1
                assert needle not in path.read_bytes(), f"API key found in {path}"
    assert checked > 3
    state_files = list((xdg.state / "ctxwrap" / "codex").glob("*.jsonl"))
    assert bool(state_files) == edits and all(
        (p.stat().st_mode & 0o777) == 0o600 for p in state_files
    )


def assert_one_compaction_priced_as_its_call(
    xdg: Xdg, stats: subprocess.CompletedProcess[str]
) -> None:
    """Three calls, the middle one Codex's summarisation: one automatic compaction recorded
    after it, priced as that call on both sides; ctxwrap changed nothing, so both cost the
    same."""
    with sqlite3.connect(xdg.db) as db:
        (calls_recorded,) = db.execute("SELECT COUNT(*) FROM llm_calls").fetchone()
        comps = list(
            db.execute("SELECT reason, summary_chars > 0, priced_as_call FROM compactions")
        )
    assert calls_recorded == 3
    assert comps == [("auto", 1, 1)]
    assert stats.returncode == 0, stats.stderr
    cost = json.loads(stats.stdout)["totals"]["cost"]
    assert cost["compactions"] == cost["plain_compactions"] == 1
    assert cost["compaction_weighted"] == cost["plain_compaction_weighted"] == 0
    assert cost["total_weighted"] == pytest.approx(cost["total_plain_weighted"])


class CodexEnv:
    def __init__(self, tmp_path: Path, xdg: Xdg, server: ScriptedModelServer) -> None:
        self.work = tmp_path / "work"
        self.work.mkdir(exist_ok=True)
        self.home = tmp_path / "home"
        self.xdg = xdg
        self.env = codex_env(xdg.env(), home=self.home, base_url=server.base_url)
        self.stderr = ""

    def run(
        self,
        prompt: str = "go",
        *extra: str,
        timeout: float = 180,
        sandbox: str = "workspace-write",
    ) -> list[dict[str, Any]]:
        proc = subprocess.run(
            [*CTXWRAP, "codex", *codex_exec_args(prompt, *extra, sandbox=sandbox)],
            cwd=self.work,
            env=self.env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        self.stderr = proc.stderr
        return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]

    def login(self) -> None:
        """`ctxwrap codex login --with-api-key`: the built-in provider's API-key login."""
        proc = subprocess.run(
            [*CTXWRAP, "codex", "login", "--with-api-key"],
            input=TEST_API_KEY,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 0, proc.stderr

    def ctxwrap(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*CTXWRAP, *args], env=self.env, capture_output=True, text=True, timeout=30
        )


def test_codex_exec_digest_tombstone_patch_strip(tmp_path: Path, xdg: Xdg) -> None:
    steps = [
        {"tool_calls": [{"name": "exec_command", "arguments": {"cmd": "python3 gen_log.py"}}]},
        {"tool_calls": [{"name": "exec_command", "arguments": {"cmd": "cat notes.txt"}}]},
        {"tool_calls": [{"name": "apply_patch", "arguments": PATCH}]},
        {"text": "all done"},
    ]
    with ScriptedModelServer(steps, aux_rules=[DROP]) as srv:
        ce = CodexEnv(tmp_path, xdg, srv)
        ce.env["PI_CTX_WRITE"] = "1"  # the added file's strip (off under Codex by default)
        (ce.work / "gen_log.py").write_text(GEN_LOG)
        (ce.work / "notes.txt").write_text(NOTES)
        events = ce.run("summarise the server log")
        assert events[-1]["type"] == "turn.completed"
        assert any(e.get("item", {}).get("text") == "all done" for e in events)
        reqs = srv.main_requests
        assert len(reqs) == 4
        assert all(r.path == "/v1/responses" for r in reqs)
        log_id, notes_id, patch_id = "call_0_0", "call_1_0", "call_2_0"

        # the long output: Codex's header, then the daemon's digest of what Codex kept
        for req in reqs[1:]:
            out = outputs(req)[log_id]
            assert out.startswith("Chunk ID: ") and "Process exited with code 0\n" in out
            assert " digested by ctxwrap · " in out
            assert "ERROR worker-7 lost connection" in out
            assert "ctxwrap recall r" in out and len(out) < 6000
            assert "request 2000 served" not in out
        # the irrelevant read: a tombstone under Codex's header
        for req in reqs[2:]:
            out = outputs(req)[notes_id]
            assert "judged not needed" in out and "read cat notes.txt" in out
            assert "DROP-ME-MARKER" not in json.dumps(inputs(req))
        # the large added file: one line instead of its body; the file is whole on disk
        for req in reqs[3:]:
            patch = calls(req)[patch_id]["input"]
            assert patch.startswith("*** Begin Patch\n*** Add File: big.txt\n[content stripped")
            assert "quick brown fox" not in patch and patch.endswith("*** End Patch\n")
            assert "] [Wrote " in patch
        assert (ce.work / "big.txt").read_text() == "".join(f"{x}\n" for x in BIG_LINES)
        assert_prefix_chain(reqs)
        # the simulated cache reads the whole previous request every time
        for before, after in itertools.pairwise(reqs):
            assert before.usage is not None and after.usage is not None
            cached = after.usage["input_tokens_details"]["cached_tokens"]
            assert cached >= before.usage["input_tokens"] - 1

        # stats: agent codex, the provider's own usage
        sessions = json.loads(ce.ctxwrap("sessions", "--all", "--json").stdout)["sessions"]
        assert [s["agent"] for s in sessions] == ["codex"]
        by_agent = json.loads(ce.ctxwrap("stats", "--by", "agent", "--json").stdout)["groups"]
        assert [g["key"] for g in by_agent] == ["codex"]
        totals = json.loads(ce.ctxwrap("stats", "--json").stdout)["totals"]
        provider = totals["provider"]
        assert provider["turns"] == len(reqs)
        assert provider["cache_read_tokens"] == sum(
            r.usage["input_tokens_details"]["cached_tokens"] for r in reqs if r.usage
        )
        # each usage names its request (turn_end call_index): priced on what the cache read
        with sqlite3.connect(xdg.db) as db:
            linked = db.execute(
                """SELECT c.call_index FROM turns t JOIN llm_calls c ON c.id = t.llm_call_id
                   ORDER BY t.id"""
            ).fetchall()
        assert linked == [(i,) for i in range(len(reqs))]
        # and each call says what it shares with the one before (the chain is append-only
        # here: about the whole previous request); the first is unknown
        with sqlite3.connect(xdg.db) as db:
            rows = db.execute(
                """SELECT sent_system + sent_messages + sent_tools, sent_prefix_chars
                   FROM llm_calls ORDER BY id"""
            ).fetchall()
        assert rows[0][1] is None
        for (before, _), (_, shared) in itertools.pairwise(rows):
            assert 0.95 * before <= shared <= before, rows
        by_mech = {m["mechanism"]: m for m in totals["mechanisms"]}
        for mech in ("bash", "amnesia", "writes"):
            assert by_mech[mech]["saved_chars"] > 0, mech
        aux = srv.aux_requests
        assert {r.aux_task for r in aux} >= {"tag", "fact"}
        assert all(r.headers.get("authorization") == f"Bearer {TEST_API_KEY}" for r in aux)
        assert_key_in_no_file(xdg, TEST_API_KEY)

        # the exit line: what the thread saved, how to resume it through ctxwrap, its stats
        tid = sessions[0]["session_id"]
        lines = [x for x in ce.stderr.splitlines() if x.startswith("ctxwrap")]
        assert re.fullmatch(
            r"ctxwrap: cost −\d+% · [\d,]+ tokens kept out(?: · |\nctxwrap: )"
            rf"details: ctxwrap stats --session {short_id(tid)}\n"
            rf"ctxwrap: resume through ctxwrap with:\nctxwrap codex exec resume {tid}",
            "\n".join(lines),
        ), ce.stderr[-2000:]

        # resume as the line says: the same view of the old calls, the chain goes on; quiet
        srv.steps = (*srv.steps, ScriptStep.from_json({"text": "again"}, len(srv.steps)))
        ce.run("and now?", "--ctxwrap-quiet", "resume", tid)
        assert "ctxwrap: " not in ce.stderr
        more = srv.main_requests[len(reqs) :]
        assert len(more) == 1
        for cid in (log_id, notes_id):
            assert outputs(more[0])[cid] == outputs(reqs[-1])[cid]
        assert calls(more[0])[patch_id] == calls(reqs[-1])[patch_id]
        assert_prefix_chain([reqs[-1], *more])


def js_exec(cmd: str) -> dict[str, Any]:
    """A call of the additional_tools JS `exec` tool running one shell command."""
    return {
        "name": "exec",
        "arguments": f"const r = await tools.exec_command({{cmd: {cmd!r}}});\ntext(r);",
    }


def test_the_model_recalls_a_digested_line_through_codexs_own_shell(
    tmp_path: Path, xdg: Xdg
) -> None:
    """Codex runs the model's commands in a snapshot of the login shell, whose start-up resets
    PATH here as on Debian and Ubuntu: `ctxwrap` by name was "command not found" for any install
    off that PATH (a venv, `make demo`). The digest names this install by its path, and the
    model's own command, run by Codex in its sandbox, answers the line the digest left out."""
    steps = [
        {"tool_calls": [{"name": "exec_command", "arguments": {"cmd": "python3 gen_log.py"}}]},
        {
            "tool_calls": [
                {"name": "exec_command", "arguments": {"cmd": "{fill} 'request 200 served'"}}
            ],
            "fill": r"shell command `([^`]+) PATTERN`",
        },
        {"text": "done"},
    ]
    with ScriptedModelServer(steps) as srv:
        ce = CodexEnv(tmp_path, xdg, srv)
        (ce.work / "gen_log.py").write_text(GEN_LOG)
        ce.run("what did request 200 do?")
        reqs = srv.main_requests
    assert len(reqs) == 3
    digest, answer = outputs(reqs[-1])["call_0_0"], outputs(reqs[-1])["call_1_0"]
    assert RECALL in digest and "request 200 served" not in digest
    ran = calls(reqs[-1])["call_1_0"]
    assert json.loads(ran["arguments"])["cmd"].startswith(RECALL.strip("`"))
    assert "Process exited with code 0" in answer, answer
    assert "INFO request 200 served in 6ms" in answer and "[1 of " in answer
    assert " digested by ctxwrap" not in answer  # what the model asked for, whole


def test_codex_additional_tools_exec_shape(tmp_path: Path, xdg: Xdg) -> None:
    """Newer model entries get no top-level tools, only an `additional_tools` item with a JS
    `exec` tool; its outputs are content lists holding the nested call's JSON result."""
    steps = [
        {"tool_calls": [js_exec("python3 gen_log.py")]},
        {"tool_calls": [js_exec("cat notes.txt")]},
        {"text": "all done"},
    ]
    with ScriptedModelServer(steps, aux_rules=[DROP]) as srv:
        ce = CodexEnv(tmp_path, xdg, srv)
        (ce.work / "gen_log.py").write_text(GEN_LOG)
        (ce.work / "notes.txt").write_text(NOTES)
        ce.run("summarise the server log", "-m", "gpt-5.6-sol")
        reqs = srv.main_requests
        assert len(reqs) == 3
        assert not reqs[0].body.get("tools")
        assert any(i.get("type") == "additional_tools" for i in inputs(reqs[0]))
        assert calls(reqs[1])["call_0_0"]["type"] == "custom_tool_call"
        for req in reqs[1:]:
            out = outputs(req)["call_0_0"]
            assert isinstance(out, list) and len(out) == 1
            text = out[0]["text"]
            assert text.startswith("Script completed") and " digested by ctxwrap · " in text
            assert "ERROR worker-7 lost connection" in text
        notes = outputs(reqs[2])["call_1_0"]
        assert "judged not needed" in notes[0]["text"]
        assert "DROP-ME-MARKER" not in json.dumps(inputs(reqs[2]))
        assert_prefix_chain(reqs)
        assert_key_in_no_file(xdg, TEST_API_KEY)


def test_builtin_openai_provider_is_redirected_per_launch(tmp_path: Path, xdg: Xdg) -> None:
    """The built-in `openai` provider: `-c openai_base_url=<proxy>` for this launch; its own
    WebSocket attempt is refused with 426 and Codex streams over HTTPS; config.toml unchanged."""
    with ScriptedModelServer([{"text": "hello"}]) as srv:
        ce = CodexEnv(tmp_path, xdg, srv)
        config = ce.home / ".codex" / "config.toml"
        config.write_text(f'model = "gpt-5.5"\nopenai_base_url = "{srv.base_url}"\n')
        before = config.read_bytes()
        ce.login()  # a plain subcommand: runs as `codex login` would
        events = ce.run("hi")
        assert any(e.get("item", {}).get("text") == "hello" for e in events)
        assert not any(e.get("item", {}).get("type") == "error" for e in events)
        assert [r.path for r in srv.main_requests] == ["/v1/responses"]
        assert srv.main_requests[0].headers["authorization"] == f"Bearer {TEST_API_KEY}"
        assert [r.method for r in srv.all_requests] == ["POST"]  # no WebSocket reached it
        assert config.read_bytes() == before
        sessions = json.loads(ce.ctxwrap("sessions", "--all", "--json").stdout)["sessions"]
        assert [s["agent"] for s in sessions] == ["codex"]
        assert_key_in_no_file(xdg, TEST_API_KEY, edits=False)


def test_ctxwrap_off_and_missing_codex(tmp_path: Path, xdg: Xdg) -> None:
    with ScriptedModelServer([{"text": "plain"}]) as srv:
        ce = CodexEnv(tmp_path, xdg, srv)
        events = ce.run("hi", "--ctxwrap-off")
        assert any(e.get("item", {}).get("text") == "plain" for e in events)
        assert len(srv.main_requests) == 1
        assert not (xdg.state / "ctxwrap" / "codex").exists()  # no proxy, no session of ours
        env = {**ce.env, "CTXWRAP_CODEX": str(tmp_path / "no-such-codex")}
        proc = subprocess.run(
            [*CTXWRAP, "codex", "exec", "hi"], env=env, capture_output=True, text=True, timeout=30
        )
        assert proc.returncode == 127
        assert "ctxwrap: error: CTXWRAP_CODEX=" in proc.stderr and "hint:" in proc.stderr


OLD = "# task one module\n" + "".join(
    f"def old_helper_{i}(): return {i}  # old-marker\n" for i in range(150)
)
NEW = "# task two module\n" + "".join(
    f"def new_helper_{i}(): return {i}  # new-marker\n" for i in range(150)
)


@pytest.mark.serial
def test_idle_gap_masks_the_earlier_task_on_resume(tmp_path: Path, xdg: Xdg) -> None:
    """After a gap past the cache TTL (2 s here) the first request of `codex exec resume` is
    cold: the earlier task's read and digest become tombstones with recall handles, once, and
    every later request extends that view."""
    steps = [
        {"tool_calls": [{"name": "exec_command", "arguments": {"cmd": "cat old.py"}}]},
        {"tool_calls": [{"name": "exec_command", "arguments": {"cmd": "python3 gen_log.py"}}]},
        {"text": "task one done"},
        {"tool_calls": [{"name": "exec_command", "arguments": {"cmd": "cat new.py"}}]},
        {"text": "task two done"},
    ]
    with ScriptedModelServer(steps) as srv:
        ce = CodexEnv(tmp_path, xdg, srv)
        # the earlier-task rule with warm masking off (the defaults before issue 21's policies)
        ce.env.update(
            PI_CTX_CACHE_TTL_S="2",
            PI_CTX_MASK_MIN_CHARS="400",
            PI_CTX_MASK_EARLIER_TASKS="1",
            PI_CTX_MASK_WARM="0",
            PI_CTX_MASK_STALE_READS="1",
            PI_CTX_MASK_OLDER_ROUNDS="0",
            PI_CTX_MASK_READ_IDLE_ROUNDS="0",
        )
        (ce.work / "old.py").write_text(OLD)
        (ce.work / "new.py").write_text(NEW)
        (ce.work / "gen_log.py").write_text(GEN_LOG)
        ce.run("task one: look at old.py")
        n_one = len(srv.main_requests)
        assert n_one == 3
        time.sleep(2.5)
        ce.run("task two: look at new.py", "resume", "--last")
        two = srv.main_requests[n_one:]
        assert len(two) == 2
        old_id, log_id, new_id = "call_0_0", "call_1_0", "call_3_0"
        assert "old-marker" in json.dumps(inputs(srv.main_requests[n_one - 1]))
        tomb = outputs(two[0])[old_id]
        assert tomb.startswith("Chunk ID: ") and "read cat old.py" in tomb
        assert "earlier task" in tomb and RECALL in tomb
        log_tomb = outputs(two[0])[log_id]
        assert "earlier task" in log_tomb and "gen_log.py" in log_tomb
        for req in two:
            assert "old-marker" not in json.dumps(inputs(req))
            assert outputs(req)[old_id] == tomb and outputs(req)[log_id] == log_tomb
        assert "new-marker" in outputs(two[1])[new_id]
        assert_prefix_chain(two)


APP = "# the app\n" + "".join(f"def handler_{i}(): return {i}  # app-marker\n" for i in range(80))
APP_PATCH = (
    "*** Begin Patch\n*** Update File: app.py\n@@\n-def handler_0(): return 0  # app-marker\n"
    "+def handler_0(): return 100  # patched\n*** End Patch\n"
)


@pytest.mark.serial
def test_a_shell_read_read_again_is_masked_as_superseded(tmp_path: Path, xdg: Xdg) -> None:
    """Codex reads through the shell and edits with apply_patch: the proxy tells masking which
    file each read printed and each patch touched, so at a cold boundary within the task the
    read of a file read again since is a tombstone (`superseded`), as replay counts it. Before,
    a shell read had no path live: it stayed whole while replay credited its mask."""
    read = {"name": "exec_command", "arguments": {"cmd": "sed -n '1,200p' app.py"}}
    steps = [
        {"tool_calls": [read]},
        {"tool_calls": [{"name": "apply_patch", "arguments": APP_PATCH}]},
        {"tool_calls": [read]},
        # answered after the cache's lifetime: the request after it is cold
        {"tool_calls": [{"name": "exec_command", "arguments": {"cmd": "echo ok"}}], "delay_s": 2.5},
        {"text": "patched"},
    ]
    with ScriptedModelServer(steps) as srv:
        ce = CodexEnv(tmp_path, xdg, srv)
        ce.env.update(PI_CTX_CACHE_TTL_S="2")
        (ce.work / "app.py").write_text(APP)
        ce.run("fix handler_0 in app.py")
        reqs = srv.main_requests
        assert len(reqs) == 5
        first, again = "call_0_0", "call_2_0"
        assert "handler_79(): return 79  # app-marker" in outputs(reqs[1])[first]  # seen whole
        assert "return 100  # patched" in (ce.work / "app.py").read_text()  # the patch applied
        tomb = outputs(reqs[4])[first]
        assert "app-marker" not in tomb and tomb.startswith("Chunk ID: ")
        assert "read sed -n '1,200p' app.py" in tomb  # the command: which lines it printed
        assert "the file was read again or changed after it" in tomb and RECALL in tomb
        assert "return 100  # patched" in outputs(reqs[4])[again]  # the latest read stays whole
        assert_prefix_chain(reqs[4:])


# a command whose output goes over a 20k window, then Codex's summary, then an answer
COMPACTING_STEPS = [
    {"tool_calls": [{"name": "exec_command", "arguments": {"cmd": "python3 gen_log.py"}}]},
    {"text": "SUMMARY: ran gen_log.py; one ERROR at request 3950"},  # the compaction's
    {"text": "after the compaction"},
]


def test_codexs_own_compaction_request_gets_nothing_new_decided(tmp_path: Path, xdg: Xdg) -> None:
    """Codex 0.171 compacts locally with a custom provider: a request that ends in its
    checkpoint instruction (without tools for this model). It is summarised from what the agent
    has been shown: frozen edits only — the output that first appears in it is not digested
    there, nothing is masked at its tool-list change — and it is priced as one of the
    session's calls; the compaction is recorded, and the plain session compacts with it."""
    with ScriptedModelServer(COMPACTING_STEPS) as srv:
        ce = CodexEnv(tmp_path, xdg, srv)
        config = ce.home / ".codex" / "config.toml"
        # a window of 20k: Codex compacts at 18k (90 %), right after the 10k-token output
        config.write_text("model_context_window = 20000\n" + config.read_text())
        (ce.work / "gen_log.py").write_text(GEN_LOG)
        ce.run("run gen_log.py")
        reqs = srv.main_requests
        assert [bool(r.body.get("tools")) for r in reqs] == [True, False, True]
        summarise = json.dumps(inputs(reqs[1]))
        assert "CONTEXT CHECKPOINT COMPACTION" in summarise
        assert "INFO request 3" in summarise and "ctxwrap" not in summarise
        after = json.dumps(inputs(reqs[2]))
        assert "SUMMARY: ran gen_log.py" in after and "INFO request 3" not in after
        stats = ce.ctxwrap("stats", "--json")
    # recorded after its call; plain Codex compacts with it (it compacts on its own view)
    assert_one_compaction_priced_as_its_call(xdg, stats)


def test_remote_compaction_through_the_builtin_provider_is_recorded(
    tmp_path: Path, xdg: Xdg
) -> None:
    """The built-in OpenAI provider (every Codex user's, API key or ChatGPT login) compacts
    remotely: Codex 0.171 sends a `…/responses` request ending in a `compaction_trigger` item
    and replaces the history with the one `compaction` item that comes back. That request gets
    the frozen edits only (the output first seen in it is not digested there), is priced as a
    call, and the compaction is recorded; plain Codex compacts there too."""
    with ScriptedModelServer(COMPACTING_STEPS) as srv:
        ce = CodexEnv(tmp_path, xdg, srv)
        config = ce.home / ".codex" / "config.toml"
        config.write_text(
            f'model = "gpt-5.5"\nopenai_base_url = "{srv.base_url}"\n'
            "model_context_window = 20000\n[analytics]\nenabled = false\n"
        )
        ce.login()
        (ce.work / "gen_log.py").write_text(GEN_LOG)
        events = ce.run("run gen_log.py")
        assert not any(e.get("type") in ("error", "turn.failed") for e in events), events
        reqs = srv.main_requests
        assert len(reqs) == 3
        assert inputs(reqs[1])[-1] == {"type": "compaction_trigger"}
        summarise = json.dumps(inputs(reqs[1]))
        assert "INFO request 3" in summarise and "ctxwrap" not in summarise
        after = inputs(reqs[2])
        assert [i["type"] for i in after][-1] == "compaction"
        assert "INFO request 3" not in json.dumps(after)
        stats = ce.ctxwrap("stats", "--json")
    # plain Codex crosses its own threshold (18k of the 20k window) at the very request that
    # is Codex's summarisation: that request is plain's compaction too, priced as a call on
    # both sides (before: +61 %, a compaction of the model's priced on top and the
    # summarisation request priced small)
    assert_one_compaction_priced_as_its_call(xdg, stats)
    assert_key_in_no_file(xdg, TEST_API_KEY, edits=False)  # nothing was decided


def test_a_chatgpt_login_compresses_its_requests_and_ctxwrap_still_works(
    tmp_path: Path, xdg: Xdg
) -> None:
    """Codex 0.171 with a ChatGPT login (most Codex users) compresses every request body with
    zstd (`enable_request_compression`, on by default). The proxy passed such bodies on as
    they were: no digest, no stats — ctxwrap did nothing for those users. It now reads them
    decoded and sends an edited one compressed as it came; the login's token is kept nowhere."""
    steps = [
        {"tool_calls": [{"name": "exec_command", "arguments": {"cmd": "python3 gen_log.py"}}]},
        {"text": "all done"},
    ]
    with ScriptedModelServer(steps) as srv:
        ce = CodexEnv(tmp_path, xdg, srv)
        config = ce.home / ".codex" / "config.toml"
        config.write_text(
            f'model = "gpt-5.5"\nopenai_base_url = "{srv.base_url}"\n'
            f'chatgpt_base_url = "{srv.base_url}"\n[analytics]\nenabled = false\n'
        )
        token = write_chatgpt_login(ce.home / ".codex")
        (ce.work / "gen_log.py").write_text(GEN_LOG)
        events = ce.run("run gen_log.py")
        assert any(e.get("item", {}).get("text") == "all done" for e in events)
        reqs = srv.main_requests
        assert len(reqs) == 2
        for req in reqs:  # compressed upstream as Codex sent it, with the login's headers
            assert req.headers["content-encoding"] == "zstd"
            assert req.headers["chatgpt-account-id"] == CHATGPT_ACCOUNT_ID
            assert req.headers["authorization"] == f"Bearer {token}"
        [out] = outputs(reqs[1]).values()
        assert " digested by ctxwrap · " in out and "ERROR worker-7 lost connection" in out
        assert "request 2000 served" not in out
        stats = json.loads(ce.ctxwrap("stats", "--json").stdout)["totals"]
    assert stats["llm_calls"] == 2
    bash = next(m for m in stats["mechanisms"] if m["mechanism"] == "bash")
    assert bash["saved_chars"] > 10_000
    assert_key_in_no_file(xdg, token)


def test_codex_exit_status_passes_through(tmp_path: Path, xdg: Xdg) -> None:
    with ScriptedModelServer([{"status": 400, "text": "scripted refusal"}]) as srv:
        ce = CodexEnv(tmp_path, xdg, srv)
        proc = subprocess.run(
            [*CTXWRAP, "codex", *codex_exec_args("hi")],
            cwd=ce.work,
            env=ce.env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 1
        assert "scripted refusal" in proc.stdout + proc.stderr
        assert len(srv.main_requests) == 1


def test_daemon_killed_mid_session_keeps_frozen_edits(tmp_path: Path, xdg: Xdg) -> None:
    steps = [
        {"tool_calls": [{"name": "exec_command", "arguments": {"cmd": "python3 gen_log.py"}}]},
        {"tool_calls": [{"name": "exec_command", "arguments": {"cmd": "cat notes.txt"}}]},
        {"tool_calls": [{"name": "exec_command", "arguments": {"cmd": "python3 gen_log.py"}}]},
        {"text": "all done"},
    ]
    with ScriptedModelServer(steps, aux_rules=[DROP]) as srv:
        ce = CodexEnv(tmp_path, xdg, srv)
        (ce.work / "gen_log.py").write_text(GEN_LOG)
        (ce.work / "notes.txt").write_text(NOTES)
        pid = 0

        def kill_after_third_request() -> None:
            nonlocal pid
            srv.wait_for_requests(3, kind="main", timeout=90)
            pid = xdg.daemon_pid() or 0
            assert pid
            os.kill(pid, signal.SIGKILL)

        killer = threading.Thread(target=kill_after_third_request)
        killer.start()
        ce.run()
        killer.join()
        reqs = srv.main_requests
        assert len(reqs) == 4
        # decided before the kill, replayed after it (the next output: whatever the proxy
        # got in time, the original or a revived daemon's digest)
        assert " digested by ctxwrap · " in outputs(reqs[-1])["call_0_0"]
        assert "judged not needed" in outputs(reqs[-1])["call_1_0"]
        assert_prefix_chain(reqs)


def test_a_read_asked_again_is_kept(tmp_path: Path, xdg: Xdg) -> None:
    """Invariant 5: the same command issued again after its output was dropped is kept whole."""
    steps = [
        {"tool_calls": [{"name": "exec_command", "arguments": {"cmd": "cat notes.txt"}}]},
        {"tool_calls": [{"name": "exec_command", "arguments": {"cmd": "cat notes.txt"}}]},
        {"text": "done"},
    ]
    with ScriptedModelServer(steps, aux_rules=[DROP]) as srv:
        ce = CodexEnv(tmp_path, xdg, srv)
        ce.env.update(ROUND_ONE_TAGS)  # the first read's DROP
        (ce.work / "notes.txt").write_text(NOTES)
        ce.run("read the notes")
        last = srv.main_requests[-1]
        assert "judged not needed" in outputs(last)["call_0_0"]
        assert "DROP-ME-MARKER" in outputs(last)["call_1_0"]
        assert_prefix_chain(srv.main_requests)


def test_a_provider_the_proxy_cannot_serve_runs_plain_codex(tmp_path: Path, xdg: Xdg) -> None:
    """One warning, then Codex exactly as `codex …` (here it refuses the config itself)."""
    with ScriptedModelServer([]) as srv:
        ce = CodexEnv(tmp_path, xdg, srv)
        config = ce.home / ".codex" / "config.toml"
        config.write_text(config.read_text().replace('"responses"', '"chat"'))
        proc = subprocess.run(
            [*CTXWRAP, "codex", *codex_exec_args("hi")],
            cwd=ce.work,
            env=ce.env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.stderr.count("ctxwrap: warning:") == 1
        assert "does not speak the Responses API; running plain codex" in proc.stderr
        assert '`wire_api = "chat"` is no longer supported' in proc.stderr  # Codex's own words
        assert proc.returncode == 1 and srv.all_requests == []
        assert xdg.daemon_pid() is None  # nothing of ours started


MCP_SERVER = Path(__file__).resolve().parents[1] / "mcp_many_tools.py"


def test_mcp_tools_found_by_tool_search_pass_through(tmp_path: Path, xdg: Xdg) -> None:
    """How Codex 0.171 offers MCP tools: deferred behind its client-side `tool_search`. The
    model's `tool_search_call`, Codex's `tool_search_output` (the loaded schemas), the
    namespaced MCP call and its content-list output all reach the model unchanged, request
    after request, and ctxwrap still digests the long output that follows them."""
    steps = [
        {"tool_calls": [{"name": "tool_search", "arguments": {"query": "record 3", "limit": 2}}]},
        {"tool_calls": [{"name": "probe_tool_03", "arguments": {"record_id": "r3"}}]},
        {"tool_calls": [{"name": "exec_command", "arguments": {"cmd": "python3 gen_log.py"}}]},
        {"text": "record 3 found"},
    ]
    with ScriptedModelServer(steps) as srv:
        ce = CodexEnv(tmp_path, xdg, srv)
        config = ce.home / ".codex" / "config.toml"
        # a server the user trusts, as `codex mcp add` plus an approval default sets it up
        config.write_text(
            config.read_text() + "[mcp_servers.many]\n"
            f"command = {json.dumps(sys.executable)}\n"
            f'args = [{json.dumps(str(MCP_SERVER))}, "40"]\n'
            'default_tools_approval_mode = "approve"\n'
        )
        (ce.work / "gen_log.py").write_text(GEN_LOG)
        events = ce.run("look up record 3")
        assert any(e.get("item", {}).get("text") == "record 3 found" for e in events)
        reqs = srv.main_requests
        assert len(reqs) == 4
        # the MCP tools are deferred: only tool_search is offered up front
        assert any(t.get("type") == "tool_search" for t in reqs[0].body["tools"])
        assert "probe_tool_03" not in json.dumps(reqs[0].body["tools"])

        by_type = {i["type"]: i for i in inputs(reqs[3]) if i.get("type") != "message"}
        found = by_type["tool_search_output"]
        assert found["call_id"] == by_type["tool_search_call"]["call_id"] == "call_0_0"
        assert found["execution"] == "client" and found["status"] == "completed"
        assert by_type["tool_search_call"]["arguments"] == {"query": "record 3", "limit": 2}
        assert found["tools"][0]["name"] == "mcp__many"
        schemas = {t["name"]: t for t in found["tools"][0]["tools"]}
        assert schemas["probe_tool_03"]["parameters"]["required"] == ["record_id"]
        assert schemas["probe_tool_03"]["description"].startswith("Probe tool number 3:")
        assert calls(reqs[3])["call_1_0"]["namespace"] == "mcp__many"
        answer = outputs(reqs[3])["call_1_0"]
        assert isinstance(answer, list) and answer[0]["text"].startswith("Wall time: ")
        assert '"tool": "probe_tool_03"' in answer[-1]["text"] and '"r3"' in answer[-1]["text"]
        log = outputs(reqs[3])["call_2_0"]
        assert " digested by ctxwrap · " in log and "ERROR worker-7 lost connection" in log
        assert_prefix_chain(reqs)
        totals = json.loads(ce.ctxwrap("stats", "--json").stdout)["totals"]
        assert totals["provider"]["turns"] == 4


def test_the_users_exec_rules_and_sandbox_decide_as_under_plain_codex(
    tmp_path: Path, xdg: Xdg
) -> None:
    """Invariant 9 under Codex: its execpolicy rules (`$CODEX_HOME/rules/*.rules`) and its
    sandbox see the command the model asked for. A `forbidden` rule still refuses `rm` (the
    file survives), an `allow` rule still lets `touch` past a read-only sandbox, a command no
    rule names still runs sandboxed, and in the same run ctxwrap still digests a long output.
    Were the proxy to rewrite or wrap a command, the prefix rules would stop matching."""
    asked = ["rm -f keep.txt", "touch allowed.txt", "mkdir sandboxed", "python3 gen_log.py"]
    steps: list[dict[str, Any]] = [
        {"tool_calls": [{"name": "exec_command", "arguments": {"cmd": cmd}}]} for cmd in asked
    ]
    steps.append({"text": "done"})
    with ScriptedModelServer(steps) as srv:
        ce = CodexEnv(tmp_path, xdg, srv)
        rules = ce.home / ".codex" / "rules"
        rules.mkdir(parents=True, exist_ok=True)
        (rules / "default.rules").write_text(
            'prefix_rule(pattern=["rm"], decision="forbidden")\n'
            'prefix_rule(pattern=["touch"], decision="allow")\n'
        )
        (ce.work / "keep.txt").write_text("keep me\n")
        (ce.work / "gen_log.py").write_text(GEN_LOG)
        # as a user runs it: read-only sandbox, Codex asks before escalating
        ce.run("tidy up", "-c", 'approval_policy="on-request"', sandbox="read-only")
        reqs = srv.main_requests
        assert len(reqs) == 5
        assert (ce.work / "keep.txt").read_text() == "keep me\n"
        assert (ce.work / "allowed.txt").exists()
        assert not (ce.work / "sandboxed").exists()
        out = outputs(reqs[-1])
        assert "rejected: policy forbids commands starting with `rm`" in out["call_0_0"]
        assert "'rm -f keep.txt'" in out["call_0_0"]  # the command as the model wrote it
        assert "Process exited with code 0" in out["call_1_0"]
        assert "Process exited with code 0" not in out["call_2_0"]  # "Read-only file system"
        assert " digested by ctxwrap · " in out["call_3_0"]
        # every call reaches Codex and the model as it was asked
        sent = [json.loads(c["arguments"])["cmd"] for c in calls(reqs[-1]).values()]
        assert sent == asked
        assert_prefix_chain(reqs)


@pytest.mark.parametrize("in_step", [True, False])
def test_codex_compacts_where_plain_codex_did_not_later(
    tmp_path: Path, xdg: Xdg, in_step: bool
) -> None:
    """Three long command outputs (digested by ctxwrap), a 40k window: plain Codex, which holds
    them whole, compacts on its own before the fourth request. Under ctxwrap its context stays
    small, so on its own it would compact later; the proxy reports plain's size in the usage of
    `response.completed` near the threshold, and Codex compacts at the same request — its own
    local compaction, recorded as such."""
    cmd = {"tool_calls": [{"name": "exec_command", "arguments": {"cmd": "python3 gen_log.py"}}]}
    steps = [cmd, cmd, cmd, {"text": "SUMMARY: three runs, one ERROR each"}, {"text": "done"}]

    def run(wrapped: bool) -> list[bool]:
        with ScriptedModelServer(steps) as srv:
            root = tmp_path / ("wrapped" if wrapped else "plain")
            root.mkdir()
            ce = CodexEnv(root, xdg, srv)
            config = ce.home / ".codex" / "config.toml"
            config.write_text("model_context_window = 40000\n" + config.read_text())
            (ce.work / "gen_log.py").write_text(GEN_LOG)
            if wrapped:
                ce.env["PI_CTX_COMPACT_IN_STEP"] = "1" if in_step else "0"
                ce.run("run gen_log.py three times")
            else:
                proc = subprocess.run(
                    [ce.env["CTXWRAP_CODEX"], *codex_exec_args("run gen_log.py three times")],
                    cwd=ce.work,
                    env=ce.env,
                    stdin=subprocess.DEVNULL,
                    capture_output=True,
                    text=True,
                    timeout=180,
                )
                assert proc.returncode == 0, proc.stderr[-3000:]
            reqs = srv.main_requests
            kinds = ["CONTEXT CHECKPOINT COMPACTION" in json.dumps(inputs(r)) for r in reqs]
            if wrapped and in_step:
                at = kinds.index(True)
                counted = [(r.usage or {}).get("input_tokens", 0) for r in reqs]
                # what ctxwrap sent before it was well under Codex's 36k limit …
                assert counted[at - 1] < 36_000 * 0.5, counted
                # … but Codex was told plain's size there (its rollout records what it read)
                told = [
                    e["payload"]["info"]["last_token_usage"]["input_tokens"]
                    for f in (ce.home / ".codex" / "sessions").rglob("rollout-*.jsonl")
                    for e in map(json.loads, f.read_text().splitlines())
                    if e.get("type") == "event_msg"
                    and e["payload"].get("type") == "token_count"
                    and e["payload"].get("info")
                ]
                assert any(t > 2 * counted[at - 1] for t in told), (told, counted)
                assert counted[0] in told  # far from the threshold: as the provider counted
        return kinds

    plain = run(False)
    assert plain.count(True) == 1 and plain.index(True) >= 2, plain
    ours = run(True)
    if in_step:
        assert ours == plain
    else:  # on its own, Codex under ctxwrap compacts later, or not at all
        assert True not in ours[: plain.index(True) + 1], ours


def test_an_mcp_lookup_in_code_mode_is_stored_and_masked_once_old(tmp_path: Path, xdg: Xdg) -> None:
    """Code mode (a model entry with the JS `exec` tool): a script of one MCP call is a lookup,
    its answer data the model reads once, as it reads a file. ctxwrap stores it behind a recall
    handle, and after a gap past the cache TTL it is masked as older (a result other than a
    read, seen a round ago); `ctxwrap recall` gives it back. Before, it stayed whole."""
    lookup = (
        "const r = await tools.mcp__many__probe_tool_03({record_id: 'r3', pages: 400});\ntext(r);"
    )
    steps = [
        {"tool_calls": [{"name": "exec", "arguments": lookup}]},
        {"tool_calls": [js_exec("echo checked")]},
        {"text": "task one done"},
        {"text": "task two done"},
    ]
    with ScriptedModelServer(steps) as srv:
        ce = CodexEnv(tmp_path, xdg, srv)
        ce.env.update(PI_CTX_CACHE_TTL_S="2")
        config = ce.home / ".codex" / "config.toml"
        config.write_text(
            config.read_text() + "[mcp_servers.many]\n"
            f"command = {json.dumps(sys.executable)}\n"
            f'args = [{json.dumps(str(MCP_SERVER))}, "5"]\n'
            'default_tools_approval_mode = "approve"\n'
        )
        ce.run("look up record 3", "-m", "gpt-5.6-sol")
        assert len(srv.main_requests) == 3
        answer = outputs(srv.main_requests[1])["call_0_0"]
        assert "section 399: details of the record" in json.dumps(answer)  # seen whole once
        time.sleep(2.5)
        ce.run("and now?", "resume", "--last", "-m", "gpt-5.6-sol")
        last = srv.main_requests[-1]
        tomb = json.dumps(outputs(last)["call_0_0"])
        assert "section 399" not in tomb
        assert "mcp__many__probe_tool_03(" in tomb and "seen several requests ago" in tomb
        handle = re.search(r"ctxwrap recall (r[0-9a-f]{8})", tomb)
        assert handle is not None
        back = ce.ctxwrap("recall", handle.group(1), "section 250:")
        assert back.returncode == 0 and "section 250: details of the record" in back.stdout


def test_a_short_command_output_is_kept_for_recall_and_masked_once_old(
    tmp_path: Path, xdg: Xdg
) -> None:
    """A command output too short to digest reaches the model whole, is stored behind a recall
    handle off the request path, and after a gap past the cache TTL is masked as older under
    Codex's own header; before, only a digested output could be masked."""
    gen = "for i in range(60):\n    print(f'module_{i:03d}  ok  0.{i:02d}s')\n"
    steps = [
        {"tool_calls": [{"name": "exec_command", "arguments": {"cmd": "python3 gen.py"}}]},
        {"tool_calls": [{"name": "exec_command", "arguments": {"cmd": "echo checked"}}]},
        {"text": "task one done"},
        {"text": "task two done"},
    ]
    with ScriptedModelServer(steps) as srv:
        ce = CodexEnv(tmp_path, xdg, srv)
        ce.env.update(PI_CTX_CACHE_TTL_S="2")
        (ce.work / "gen.py").write_text(gen)
        ce.run("run the module checks")
        assert "module_059  ok" in json.dumps(inputs(srv.main_requests[1]))  # seen whole
        time.sleep(2.5)
        ce.run("and now?", "resume", "--last")
        tomb = outputs(srv.main_requests[-1])["call_0_0"]
        assert "module_059  ok" not in tomb
        assert tomb.startswith("Chunk ID: ") and "python3 gen.py" in tomb
        assert "seen several requests ago" in tomb and RECALL in tomb
