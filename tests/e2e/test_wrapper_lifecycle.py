"""The wrappers' lifecycle with the real agents (issue 20, item 3): the exit line and its resume
hint, `ctxwrap claude` listed while idle at its prompt, Claude Code's status line."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
from pathlib import Path

import pexpect
import pytest
from support import CTXWRAP, PI_VERSIONS, Xdg, ctxwrap, run_ctxwrap_pi
from terminal import Terminal

from ctxwrap.launch.exit_line import short_id
from ctxwrap.testing.claude_home import (
    claude_env,
    claude_print_args,
    find_claude,
    seed_claude_home,
)
from ctxwrap.testing.model_server import ScriptedModelServer

pytestmark = pytest.mark.e2e
needs_claude = pytest.mark.skipif(find_claude() is None, reason="claude not installed")

BIG = {"tool_calls": [{"name": "bash", "arguments": {"command": "seq 1 30000"}}]}
# The figures (wrapped at 80 columns between their parts), then the resume command alone.
EXIT_LINE = re.compile(
    r"^ctxwrap: cost −(\d+)% · ([\d,]+) tokens kept out(?: · |\nctxwrap: )"
    r"details: ctxwrap stats --session (\S+)\n"
    r"ctxwrap: resume through ctxwrap with:\n"
    r"ctxwrap (pi|claude) (--session|--resume) (\S+)$",
    re.M,
)


@pytest.mark.parametrize("pi", PI_VERSIONS)
def test_pi_exit_line_matches_stats_and_resumes_through_ctxwrap(
    pi: str, tmp_path: Path, xdg: Xdg
) -> None:
    run = run_ctxwrap_pi(pi, tmp_path, xdg, [BIG, {"text": "done"}])
    assert run.proc.returncode == 0, run.proc.stderr
    (line,) = EXIT_LINE.findall(run.proc.stderr)
    print(f"\n{pi}: {run.proc.stderr.strip().splitlines()[-1]}")
    pct, tokens, sid, agent, flag, resume = line
    assert (agent, flag) == ("pi", "--session")
    assert len(sid) in (8, 18)  # exit_line.short_id
    (session_file,) = run.session_files()
    assert Path(resume) == session_file  # pi's own session file: resumes from anywhere
    stats = json.loads(ctxwrap(xdg, "stats", "--session", sid, "--json").stdout)  # a prefix
    totals = stats["totals"]
    assert int(tokens.replace(",", "")) == totals["net_tokens"] > 1000
    cost = totals["cost"]
    assert int(pct) == round(cost.get("total_saved_pct", cost.get("saved_pct")))

    # the hint works: the same session goes on through ctxwrap (the bridge loaded again)
    again = run_ctxwrap_pi(pi, tmp_path, xdg, [{"text": "again"}], args=("--session", resume))
    assert again.proc.returncode == 0, again.proc.stderr
    assert "seq 1 30000" in json.dumps(again.main_bodies()[0]["messages"])
    # the same tools as before the exit: the resumed session's cached prefix still holds
    assert again.main_bodies()[0].get("tools") == run.main_bodies()[0].get("tools")
    assert f"--session {resume}" in again.proc.stderr


def test_pi_quiet_flag_and_setting(tmp_path: Path, xdg: Xdg) -> None:
    run = run_ctxwrap_pi("pi", tmp_path, xdg, [{"text": "done"}], args=("--ctxwrap-quiet",))
    assert run.proc.returncode == 0 and run.proc.stdout.strip() == "done", run.proc.stderr
    assert "ctxwrap:" not in run.proc.stderr
    run = run_ctxwrap_pi(
        "pi", tmp_path, xdg, [{"text": "done"}], extra_env={"PI_CTX_EXIT_LINE": "0"}
    )
    assert run.proc.returncode == 0 and "ctxwrap:" not in run.proc.stderr
    run = run_ctxwrap_pi("pi", tmp_path, xdg, [{"text": "done"}])
    assert "ctxwrap: resume through ctxwrap with:\nctxwrap pi --session" in run.proc.stderr


def test_pi_exit_line_keeps_pis_exit_status(tmp_path: Path, xdg: Xdg) -> None:
    run = run_ctxwrap_pi("pi", tmp_path, xdg, [{"status": 400, "text": "bad request"}])
    assert run.proc.returncode != 0
    plain = run_ctxwrap_pi("pi", tmp_path, xdg, [{"status": 400, "text": "bad"}], plain=True)
    assert run.proc.returncode == plain.proc.returncode


@needs_claude
def test_claude_exit_line_names_the_session_claude_ran(tmp_path: Path, xdg: Xdg) -> None:
    work = tmp_path / "work"
    work.mkdir()
    steps: list[object] = [
        {"tool_calls": [{"name": "Bash", "arguments": {"command": "seq 1 30000"}}]},
        {"text": "done"},
        {"text": "quiet"},
    ]
    with ScriptedModelServer(steps) as srv:
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
        sid = srv.main_requests[0].headers["x-claude-code-session-id"]
        quiet = subprocess.run(
            [*CTXWRAP, "claude", *claude_print_args("go"), "--ctxwrap-quiet"],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
        )
    assert json.loads(proc.stdout)["session_id"] == sid
    (line,) = EXIT_LINE.findall(proc.stderr)
    print(f"\nclaude: {proc.stderr.strip().splitlines()[-1]}")
    assert line[2:] == (short_id(sid), "claude", "--resume", sid)
    assert quiet.returncode == 0 and json.loads(quiet.stdout)["result"] == "quiet"
    assert "ctxwrap:" not in quiet.stderr


@pytest.mark.serial
@needs_claude
@pytest.mark.timeout(240)
def test_claude_is_listed_at_launch_shows_its_status_line_and_says_how_to_resume(
    tmp_path: Path, xdg: Xdg
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    home = tmp_path / "home"
    seed_claude_home(home, work)
    steps = [{"text": "ANSWER-ONE"}] * 4
    with ScriptedModelServer(steps) as srv:
        env = claude_env(xdg.env(), home=home, base_url=srv.root_url)
        env["TERM"] = "xterm-256color"
        command = " ".join(f"'{a}'" for a in [*CTXWRAP, "claude"]) + "; echo EXIT=$?"
        child = pexpect.spawn(
            "bash", ["--norc", "-c", command], env=env, cwd=str(work), dimensions=(30, 120)
        )
        try:
            child.expect_exact("Claude Code", timeout=90)
            # Idle at its prompt, nothing asked yet: already listed as live.
            live: list[dict[str, object]] = []
            end = time.monotonic() + 30
            while not live and time.monotonic() < end:
                listed = json.loads(ctxwrap(xdg, "sessions", "--json").stdout)["sessions"]
                live = [s for s in listed if s.get("live")]
                time.sleep(0.3)
            assert len(live) == 1, listed
            assert not [r for r in srv.main_requests if r.body.get("tools")]
            sid = str(live[0]["session_id"])
            # Our status line (no statusLine of the user's): placeholder, then the savings.
            screen = Terminal(child, 30, 120)
            screen.adopt()
            screen.wait_for("ctxwrap: nothing saved yet", 30)
            screen.submit(
                "please answer", lambda: any(r.body.get("tools") for r in srv.main_requests)
            )
            screen.wait_for("ANSWER-ONE", 90)
            status_file = xdg.state / "ctxwrap" / "status" / sid
            end = time.monotonic() + 30
            while "tokens" not in (status := status_file.read_text().strip()):
                assert time.monotonic() < end, status
                time.sleep(0.2)
            assert status.startswith("ctxwrap: ")
            screen.wait_for(status, 30)  # Claude Code ran our command: shown
            child.sendcontrol("c")
            time.sleep(0.3)
            child.sendcontrol("c")
            child.expect(r"EXIT=(\d+)", timeout=30)
            assert child.match.group(1) == b"0"
            tail = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", " ", child.before.decode(errors="replace"))
            assert f"ctxwrap claude --resume {sid}" in tail, tail[-2000:]
        finally:
            if child.isalive():
                child.kill(signal.SIGKILL)
            child.close(force=True)
    assert not (xdg.state / "ctxwrap" / "status" / sid).exists()


@needs_claude
@pytest.mark.timeout(240)
def test_claude_quit_before_the_first_prompt_offers_no_resume(tmp_path: Path, xdg: Xdg) -> None:
    """Issue 44 item 15: Claude Code writes its transcript with the first prompt; quit before
    it and `claude --resume ID` says "No conversation found", so the exit line must not
    offer it. After a prompt it does (test above)."""
    work = tmp_path / "work"
    work.mkdir()
    home = tmp_path / "home"
    seed_claude_home(home, work)
    with ScriptedModelServer([{"text": "unused"}]) as srv:
        env = claude_env(xdg.env(), home=home, base_url=srv.root_url)
        env["TERM"] = "xterm-256color"
        command = " ".join(f"'{a}'" for a in [*CTXWRAP, "claude"]) + "; echo EXIT=$?"
        child = pexpect.spawn(
            "bash", ["--norc", "-c", command], env=env, cwd=str(work), dimensions=(30, 100)
        )
        try:
            child.expect_exact("Claude Code", timeout=90)
            end = time.monotonic() + 30
            live: list[dict[str, object]] = []
            while not live and time.monotonic() < end:  # its SessionStart reached us
                listed = json.loads(ctxwrap(xdg, "sessions", "--json").stdout)["sessions"]
                live = [s for s in listed if s.get("live")]
                time.sleep(0.3)
            assert live, listed
            child.sendcontrol("c")
            time.sleep(0.3)
            child.sendcontrol("c")
            child.expect(r"EXIT=(\d+)", timeout=30)
            assert child.match.group(1) == b"0"
            said = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", " ", child.before.decode(errors="replace"))
        finally:
            if child.isalive():
                child.kill(signal.SIGKILL)
            child.close(force=True)
    assert not list(home.rglob("projects/*/*.jsonl"))  # Claude Code wrote no transcript
    assert "ctxwrap claude --resume" not in said and "resume through" not in said, said[-1500:]
