"""One session, one answer (issue 22): after a live pi session and a live Claude Code session
against the scripted server, every view shows the same headline — `ctxwrap stats` text and
--json, /ctx-stats and the totals the daemon sends pi's footer and the shell prompt, the
headline function the report calls — and names the agent that ran."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from support import CTXWRAP, PI_VERSIONS, Xdg, client, ctxwrap, run_ctxwrap_pi, wait_ready

from ctxwrap.headline import pct_text
from ctxwrap.protocol import SessionTotals
from ctxwrap.state.store import connect
from ctxwrap.stats.compute import session_headline
from ctxwrap.statusline import prompt_segment_text
from ctxwrap.testing.claude_home import claude_env, claude_print_args, find_claude
from ctxwrap.testing.model_server import ScriptedModelServer

pytestmark = pytest.mark.e2e

BIG_READ = "".join(f"irrelevant line {i} of a vendored license\n" for i in range(400))
BODY = "".join(f"value_{i} = {i}\n" for i in range(300))
PI_SCRIPT = [
    {"tool_calls": [{"name": "bash", "arguments": {"command": "seq 1 30000"}}]},
    {"tool_calls": [{"name": "read", "arguments": {"path": "VENDOR_LICENSE"}}]},
    {"tool_calls": [{"name": "write", "arguments": {"path": "values.py", "content": BODY}}]},
    {"tool_calls": [{"name": "bash", "arguments": {"command": "echo ok"}}]},
    {"text": "done"},
]
CLAUDE_SCRIPT = [
    {"tool_calls": [{"name": "Bash", "arguments": {"command": "seq 1 40000"}}]},
    {"tool_calls": [{"name": "Bash", "arguments": {"command": "echo ok"}}]},
    {"text": "done"},
]
RULES = [{"task": "tag", "match": "vendored license", "answer": '{"decision": "DROP"}'}]


def only_session(xdg: Xdg) -> tuple[str, str]:
    sessions = json.loads(ctxwrap(xdg, "sessions", "--all", "--json").stdout)["sessions"]
    assert len(sessions) == 1, sessions
    return sessions[0]["session_id"], sessions[0]["agent"]


def check_every_view(xdg: Xdg, sid: str, agent_words: str) -> dict[str, Any]:
    """The same headline in every view of the session; returns the stats JSON totals."""
    out = ctxwrap(xdg, "stats", "--session", sid, "--json")
    assert out.returncode == 0, out.stderr
    totals = json.loads(out.stdout)["totals"]
    head = totals["headline"]["text"]
    assert head.startswith("cost "), totals["headline"]
    assert totals["headline"]["saved_pct"] == round(totals["cost"]["total_saved_pct"] or 0) or (
        abs(totals["headline"]["saved_pct"] - totals["cost"]["total_saved_pct"]) <= 0.5
    )

    text = ctxwrap(xdg, "stats", "--session", sid).stdout
    assert head in text, text
    assert f"plain {agent_words}" in text, text
    other = "Claude Code" if agent_words == "pi" else "pi"
    assert f"plain {other}" not in text
    assert "estimated" in text  # chars/4 sizes say what they are

    # the report's source: the headline function over the same store
    conn = connect(xdg.state / "ctxwrap" / "ctxwrap.db", readonly=True)
    try:
        assert session_headline(conn, sid).short() == head
    finally:
        conn.close()

    # /ctx-stats and the totals pi's footer and the prompt segment are drawn from
    if ctxwrap(xdg, "status").stdout.find("ready") < 0:
        assert ctxwrap(xdg, "daemon", "start").returncode == 0
    wait_ready(xdg)
    with client(xdg) as c:
        r = c.get("/v1/stats", params={"session": sid, "width": "100"})
        assert r.status_code == 200, r.text
        reply = r.json()
    assert head in reply["text"], reply["text"]
    daemon_totals = reply["totals"]
    assert daemon_totals["headline"] == head
    seg = prompt_segment_text(SessionTotals(**daemon_totals))
    assert seg.endswith(f"cost {pct_text(daemon_totals['headline_pct'])}")
    assert f"cost {pct_text(daemon_totals['headline_pct'])}" in head
    # the token figures behind the footer are the stats figures
    assert daemon_totals["saved_tokens"] == totals["saved_tokens"]
    assert daemon_totals["net_tokens"] == totals["net_tokens"]
    return dict(totals)


@pytest.mark.parametrize("pi", PI_VERSIONS[:1])
def test_live_pi_session_one_headline(pi: str, tmp_path: Path, xdg: Xdg) -> None:
    run = run_ctxwrap_pi(
        pi,
        tmp_path,
        xdg,
        PI_SCRIPT,
        aux_rules=RULES,
        files={"VENDOR_LICENSE": BIG_READ},
    )
    assert run.proc.returncode == 0, run.proc.stderr[-3000:]
    sid, agent = only_session(xdg)
    assert agent == "pi"
    totals = check_every_view(xdg, sid, "pi")
    assert totals["saved_tokens"] > 0
    # replaying the same session file lists it apart: it already ran under ctxwrap
    files = run.session_files()
    assert files
    rep = subprocess.run(
        [*CTXWRAP, "replay", *map(str, files)],
        env=xdg.env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert rep.returncode == 0, rep.stderr
    assert "already run under ctxwrap" in rep.stdout, rep.stdout
    assert re.search(r"ctxwrap replay — 0 sessions", rep.stdout), rep.stdout


@pytest.mark.skipif(find_claude() is None, reason="claude not installed")
def test_live_claude_session_one_headline(tmp_path: Path, xdg: Xdg) -> None:
    with ScriptedModelServer(CLAUDE_SCRIPT) as srv:
        work = tmp_path / "work"
        work.mkdir()
        env = claude_env(xdg.env(), home=tmp_path / "home", base_url=srv.root_url)
        proc = subprocess.run(
            [*CTXWRAP, "claude", *claude_print_args("go")],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
    sid, agent = only_session(xdg)
    assert agent == "claude"
    totals = check_every_view(xdg, sid, "Claude Code")
    assert totals["saved_tokens"] > 0
