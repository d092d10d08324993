"""The wrappers' lifecycle (issue 20, item 3): the exit line, the Claude Code status line and
its settings, the `--ctxwrap-quiet` flag."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ctxwrap import protocol as P
from ctxwrap.agents.claude import launcher
from ctxwrap.launch import exit_line
from ctxwrap.launch.exit_line import Savings, render, take_quiet_flag
from ctxwrap.statusline import WAITING, main, status_text, write_status

SID = "3f2a9c1e-0b7d-4c55-9e11-2a6f0d8b7c41"


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("CLAUDE_CONFIG_DIR", raising=False)
    for var in ("PI_CTX_EXIT_LINE", "PI_CTX_STATS_WIDGET"):
        monkeypatch.delenv(var, raising=False)
    return tmp_path / "state" / "ctxwrap"


# -- the quiet flag -----------------------------------------------------------------------------


def test_quiet_flag_is_taken_out_before_the_agent_sees_it() -> None:
    assert take_quiet_flag(["-p", "--ctxwrap-quiet", "hi"]) == (["-p", "hi"], True)
    assert take_quiet_flag(["-p", "hi"]) == (["-p", "hi"], False)
    # after `--` it is the agent's argument, untouched
    assert take_quiet_flag(["--", "--ctxwrap-quiet"]) == (["--", "--ctxwrap-quiet"], False)


# -- the exit line ------------------------------------------------------------------------------


def test_exit_line_says_savings_resume_and_stats() -> None:
    line = render("claude", SID, ["--resume", SID], Savings(6, 23.4, 41200), columns=100)
    assert line.splitlines() == [
        "ctxwrap: cost −23% · 41,200 tokens kept out · details: ctxwrap stats --session 3f2a9c1e",
        "ctxwrap: resume through ctxwrap with:",
        f"ctxwrap claude --resume {SID}",  # alone on its line: copied whole, never wrapped
    ]
    pi = render("pi", SID, ["--session", "/home/u/my sessions/s.jsonl"], Savings(2, -3.2, -150))
    assert "ctxwrap: cost +3% · 150 tokens added" in pi
    assert pi.splitlines()[-1] == "ctxwrap pi --session '/home/u/my sessions/s.jsonl'"  # pasteable


def test_exit_line_rounds_like_every_other_view() -> None:
    """Issue 44 item 10: 22.5 % is `−23%` here as in the headline (half away from zero), not
    the `22%` of Python's round-half-to-even."""
    from ctxwrap.headline import pct_text

    for pct in (22.5, 0.5, -22.5, 59.5, 12.25):
        assert f"cost {pct_text(pct)} ·" in render("pi", SID, None, Savings(3, pct, 10))
    assert "cost −23% ·" in render("pi", SID, None, Savings(3, 22.5, 10))
    t = P.SessionTotals(llm_calls=3, net_tokens=10, cost_saved_pct=22.5)
    assert status_text(t).startswith("ctxwrap: cost −23% ·")


@pytest.mark.parametrize("columns", [60, 80, 100])
def test_exit_line_fits_the_terminal(columns: int) -> None:
    """Issue 44 item 13: no line over COLUMNS but the resume command itself (60 for Claude
    Code's and Codex's ids), which stands alone so that a terminal's wrap never splits it."""
    behind = Savings(40, 12.0, -12_345_678, compactions_behind=1)
    for agent, resume in (("claude", ["--resume", SID]), ("codex", ["resume", SID])):
        lines = render(agent, SID, resume, behind, columns=columns).splitlines()
        assert all(len(line) <= columns for line in lines), lines
        assert lines[-1] == f"ctxwrap {agent} {' '.join(resume)}"
        assert lines[-2] == "ctxwrap: resume through ctxwrap with:"
        assert sum(SID[:8] in line for line in lines) == 2  # details and resume, both whole


@pytest.mark.parametrize("columns", [60, 200])
def test_an_adapters_note_is_a_line_of_its_own_before_the_resume_command(columns: int) -> None:
    note = (
        "Claude Code refused the model's `ctxwrap recall` twice: to let it get back what ctxwrap "
        'hid, add "Bash(ctxwrap recall:*)" to permissions.allow in ~/.claude/settings.json'
    )
    lines = render(
        "claude", SID, ["--resume", SID], Savings(6, 23.4, 41200), columns=columns, notes=[note]
    ).splitlines()
    assert lines[0].startswith("ctxwrap: cost −23%") and "refused" not in lines[0]
    assert lines[-2:] == ["ctxwrap: resume through ctxwrap with:", f"ctxwrap claude --resume {SID}"]
    # after the figures (however they wrapped), on lines of its own
    starts = [i for i, line in enumerate(lines) if line.startswith("ctxwrap: Claude Code refused")]
    assert len(starts) == 1 and "details: ctxwrap stats" in lines[starts[0] - 1]
    said = lines[starts[0] : -2]
    assert all(line.startswith("ctxwrap: ") and len(line) <= columns for line in said)
    assert " ".join(line.removeprefix("ctxwrap: ") for line in said) == note


def test_exit_line_says_when_plain_would_have_compacted() -> None:
    """A `-p` run or a Codex user sees no status line: the exit line carries the hint, for the
    agents no proxy can ask to compact (pi's bridge asks pi itself)."""
    behind = Savings(40, 12.0, 90_000, compactions_behind=1)
    line = render("claude", SID, ["--resume", SID], behind, columns=200)
    assert (
        "90,000 tokens kept out · plain Claude Code would have compacted by now: /compact" in line
    )
    assert "plain Codex would have compacted by now" in render("codex", SID, None, behind)
    assert "compacted" not in render("pi", SID, None, behind)
    assert "compacted" not in render("claude", SID, None, Savings(40, 12.0, 90_000))


def test_exit_line_without_figures_still_says_how_to_resume() -> None:
    assert render("pi", SID, ["--session", "/s.jsonl"], None) == (
        "ctxwrap: resume through ctxwrap with:\nctxwrap pi --session /s.jsonl"
    )
    assert render("pi", SID, None, None) == ""  # --no-session and no daemon: nothing to say


def test_resume_only_offered_for_a_session_the_agent_wrote(
    state: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 44 item 15: pi and Claude Code write nothing before the first prompt; a resume
    offered then fails. The real agents are driven in tests/e2e/test_exit_line_resume.py."""
    from ctxwrap.agents.claude.launcher import resume_args as claude_resume
    from ctxwrap.agents.pi.launcher import resume_args as pi_resume

    file = tmp_path / "s.jsonl"
    assert pi_resume(str(file)) is None
    file.write_text("{}\n")
    assert pi_resume(str(file)) == ["--session", str(file)]
    assert pi_resume(None) is None  # --no-session
    assert claude_resume(SID) is None
    transcript = tmp_path / "home" / ".claude" / "projects" / "-tmp-proj" / f"{SID}.jsonl"
    transcript.parent.mkdir(parents=True)
    transcript.write_text("{}\n")
    assert claude_resume(SID) == ["--resume", SID]
    assert claude_resume("../*") is None
    assert claude_resume("*") is None  # a glob would match any transcript
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "elsewhere"))
    assert claude_resume(SID) is None  # Claude Code reads only its config dir
    # Codex's launcher offers one only for a thread that ran (test_codex_adapter.py)


def test_exit_line_reads_the_same_figures_as_stats(
    state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from ctxwrap.stats.compute import load_report

    db_session = _recorded_session(state)
    report = load_report(session=db_session, since=None, by="mechanism")
    assert report is not None and report.totals.llm_calls == 2
    from ctxwrap.agents.claude.launcher import resume_args

    exit_line.print_exit_line("claude", db_session, resume_args(db_session))
    err = capsys.readouterr().err
    assert "resume" not in err  # no transcript: no resume offered, figures only
    assert f"{report.totals.net_tokens:,} tokens kept out" in err
    assert f"details: ctxwrap stats --session {db_session[:8]}" in err


def test_short_id_outlives_a_uuid7_minute() -> None:
    """pi's and Codex's ids are UUIDv7: their first 8 hex digits are a timestamp that two
    sessions a minute apart share, and `stats --session PREFIX` would be ambiguous."""
    from ctxwrap.launch.exit_line import short_id

    assert short_id(SID) == "3f2a9c1e"  # a random (v4) id: 8 characters, as stats shows
    v7 = "01a24b0e-1234-7abc-8def-0123456789ab"
    assert short_id(v7) == "01a24b0e-1234-7abc"
    assert short_id("short") == "short"


def _transcript(state: Path) -> None:
    """Claude Code's transcript of SID: the session is resumable."""
    home = state.parent.parent / "home"
    (home / ".claude" / "projects" / "-tmp").mkdir(parents=True, exist_ok=True)
    (home / ".claude" / "projects" / "-tmp" / f"{SID}.jsonl").write_text("{}\n")


def test_exit_line_fails_open(state: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _transcript(state)
    resume = f"ctxwrap: resume through ctxwrap with:\nctxwrap claude --resume {SID}\n"
    # no database at all
    exit_line.print_exit_line("claude", SID, ["--resume", SID])
    assert capsys.readouterr().err == resume
    # a database that is garbage
    state.mkdir(parents=True, exist_ok=True)
    (state / "ctxwrap.db").write_bytes(b"not sqlite" * 100)
    exit_line.print_exit_line("claude", SID, ["--resume", SID])
    assert capsys.readouterr().err == resume


def test_exit_line_is_bounded_in_time(
    state: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def stuck(_sid: str) -> Savings:
        time.sleep(5)
        return Savings(1, 50.0, 1)

    monkeypatch.setattr(exit_line, "session_savings", stuck)
    file = state.parent.parent / "s.jsonl"
    file.write_text("{}\n")
    began = time.monotonic()
    exit_line.print_exit_line("pi", SID, ["--session", str(file)], timeout_s=0.3)
    assert time.monotonic() - began < 2
    assert capsys.readouterr().err == (
        f"ctxwrap: resume through ctxwrap with:\nctxwrap pi --session {file}\n"
    )


def test_exit_line_setting(
    state: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PI_CTX_EXIT_LINE", "0")
    exit_line.print_exit_line("pi", SID, ["--session", "/s"])
    assert capsys.readouterr().err == ""
    monkeypatch.delenv("PI_CTX_EXIT_LINE")
    config = state.parent.parent / "config" / "ctxwrap" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text("exit_line = false\n")
    exit_line.print_exit_line("pi", SID, ["--session", "/s"])
    assert capsys.readouterr().err == ""
    from ctxwrap.config import load_config

    assert load_config(config, environ={}).settings.exit_line is False  # a known setting


def _recorded_session(state: Path) -> str:
    """A session with two LLM calls in a real store, written through the daemon's code."""
    from ctxwrap.config import load_config
    from ctxwrap.daemon.service import Daemon

    loaded = load_config(state / "absent.toml", environ={})
    d = Daemon(loaded, socket=state / "x.sock", state_dir=state, systemd=False)
    try:
        model = P.ModelRef(provider="anthropic", id="claude-sonnet-4-5", api="anthropic-messages")
        d.session_start(
            P.SessionStart(session_id=SID, cwd="/tmp", pid=0, agent="claude", model=model)
        )
        for i in range(2):
            d.llm_call(
                P.LlmCall(
                    session_id=SID,
                    call_index=i,
                    message_count=2 + i,
                    sent_chars=P.SizeBreakdown(system=400, messages=4000 * (i + 1)),
                    saved_chars=P.SavedBreakdown(bash=20000 * (i + 1)),
                    prompt_index=0,
                    model="anthropic/claude-sonnet-4-5",
                )
            )
            d.turn_end(P.TurnEnd(session_id=SID, turn_index=i, input_tokens=1000))
        d.store.conn.commit()
    finally:
        d.store.close()
    return SID


# -- the status line ----------------------------------------------------------------------------


def test_status_text_is_the_sessions_savings() -> None:
    t = P.SessionTotals(llm_calls=3, net_tokens=41200, cost_saved_pct=23.4)
    assert status_text(t) == "ctxwrap: cost −23% · 41,200 tokens saved"
    worse = P.SessionTotals(llm_calls=1, net_tokens=-90, cost_saved_pct=-2.0)
    assert status_text(worse) == "ctxwrap: cost +2% · 90 tokens added"
    assert status_text(P.SessionTotals()) == ""


def test_status_text_says_when_plain_would_have_compacted() -> None:
    """Past the point where the plain model compacted and Claude Code (its context smaller)
    did not, the line says so; once the session has compacted as often, it does not."""
    ahead = P.SessionTotals(llm_calls=9, net_tokens=41200, cost_saved_pct=23.4, plain_compactions=1)
    assert status_text(ahead) == (
        "ctxwrap: cost −23% · 41,200 tokens saved"
        " · plain Claude Code would have compacted by now: /compact"
    )
    caught_up = ahead.model_copy(update={"compactions": 1})
    assert status_text(caught_up) == "ctxwrap: cost −23% · 41,200 tokens saved"
    unpriced = ahead.model_copy(update={"cost_saved_pct": None})
    assert status_text(unpriced).endswith(
        "saved · plain Claude Code would have compacted by now: /compact"
    )
    assert len(status_text(ahead.model_copy(update={"net_tokens": -12_345_678}))) < 120


def test_status_command_prints_its_sessions_file(state: Path) -> None:
    write_status(SID, "ctxwrap: cost −23% · 41,200 tokens saved")
    out = io.StringIO()
    assert main(io.StringIO(json.dumps({"session_id": SID, "model": {}})), out) == 0
    assert out.getvalue() == "ctxwrap: cost −23% · 41,200 tokens saved\n"
    for stdin in ('{"session_id": "other"}', "garbage", '{"session_id": "../../etc/passwd"}'):
        out = io.StringIO()
        assert main(io.StringIO(stdin), out) == 0
        assert out.getvalue() == WAITING + "\n"


def test_the_daemon_keeps_the_claude_status_file(state: Path) -> None:
    _recorded_session(state)
    text = (state / "status" / SID).read_text()
    assert text.startswith("ctxwrap: cost −") and "tokens saved" in text
    from ctxwrap.config import load_config
    from ctxwrap.daemon.service import Daemon

    d = Daemon(
        load_config(state / "absent.toml", environ={}),
        socket=state / "x.sock",
        state_dir=state,
        systemd=False,
    )
    try:
        d.session_shutdown(P.SessionShutdown(session_id=SID, reason="quit"))
    finally:
        d.store.close()
    assert not (state / "status" / SID).exists()  # ended: nothing stale shown


def test_status_command_starts_without_the_cli_framework(state: Path) -> None:
    write_status(SID, "ctxwrap: cost −5% · 10 tokens saved")
    code = (
        "import sys, runpy; sys.argv = ['ctxwrap', 'statusline', 'claude'];"
        "import ctxwrap.entry as e\n"
        "try:\n    e.main()\nexcept SystemExit:\n    pass\n"
        "print('click' in sys.modules, 'pydantic' in sys.modules, file=sys.stderr)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        input=json.dumps({"session_id": SID}),
        capture_output=True,
        text=True,
        env=dict(os.environ),
        timeout=30,
        check=True,
    )
    assert done.stdout == "ctxwrap: cost −5% · 10 tokens saved\n"
    assert done.stderr.strip() == "False False"


# -- the per-launch settings --------------------------------------------------------------------


def test_our_status_line_only_without_one_of_the_users(
    state: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = tmp_path / "proj" / "sub"
    project.mkdir(parents=True)
    (tmp_path / "proj" / ".git").mkdir()
    monkeypatch.chdir(project)
    base = launcher.hook_settings("HOOK")
    ours = launcher.lifecycle_settings(base, None)
    assert ours["statusLine"]["command"].endswith("-m ctxwrap statusline claude")
    assert ours["hooks"]["SessionStart"][0]["hooks"][0]["command"] == launcher.hook_command()
    assert ours["hooks"]["PostToolUse"] == base["hooks"]["PostToolUse"]  # theirs untouched
    mine = {"type": "command", "command": "my-line"}
    # their --settings (JSON text or a file)
    assert "statusLine" not in launcher.lifecycle_settings(base, json.dumps({"statusLine": mine}))
    # each settings file Claude Code reads
    home_settings = tmp_path / "home" / ".claude" / "settings.json"
    for where in (
        home_settings,
        tmp_path / "proj" / ".claude" / "settings.json",
        tmp_path / "proj" / ".claude" / "settings.local.json",
        project / ".claude" / "settings.local.json",
    ):
        where.parent.mkdir(parents=True, exist_ok=True)
        where.write_text(json.dumps({"statusLine": mine}))
        assert "statusLine" not in launcher.lifecycle_settings(base, None), where
        where.write_text(json.dumps({"model": "x"}))
        assert "statusLine" in launcher.lifecycle_settings(base, None), where
    # above the repository root: not this project's
    (tmp_path / ".claude").mkdir()
    (tmp_path / ".claude" / "settings.json").write_text(json.dumps({"statusLine": mine}))
    assert "statusLine" in launcher.lifecycle_settings(base, None)
    # CLAUDE_CONFIG_DIR moves the user settings
    other = tmp_path / "cfg"
    other.mkdir()
    (other / "settings.json").write_text(json.dumps({"statusLine": mine}))
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(other))
    assert "statusLine" not in launcher.lifecycle_settings(base, None)
    monkeypatch.delenv("CLAUDE_CONFIG_DIR")
    # unreadable: never risk replacing theirs
    home_settings.write_text("{not json")
    assert "statusLine" not in launcher.lifecycle_settings(base, None)
    home_settings.unlink()
    monkeypatch.setenv("PI_CTX_STATS_WIDGET", "0")
    assert "statusLine" not in launcher.lifecycle_settings(base, None)
