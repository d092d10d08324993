"""`ctxwrap replay` recognises a session that the real pi ran under `ctxwrap pi` (our markers in
its file, its id in the daemon's database) and leaves a plain one alone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support import Xdg, ctxwrap, run_ctxwrap_pi

from ctxwrap.replay._events import ReadStats
from ctxwrap.replay._read import ctxwrap_known_sessions, read_session

pytestmark = pytest.mark.e2e

SCRIPT = [
    {"tool_calls": [{"name": "bash", "arguments": {"command": "seq 1 30000"}}]},
    {"text": "done"},
]


def test_a_session_run_under_ctxwrap_is_recognised(tmp_path: Path, xdg: Xdg) -> None:
    wrapped = run_ctxwrap_pi("pi", tmp_path / "wrapped", xdg, SCRIPT)
    plain = run_ctxwrap_pi("pi", tmp_path / "plain", xdg, SCRIPT, plain=True)
    assert wrapped.proc.returncode == 0, wrapped.proc.stderr
    assert plain.proc.returncode == 0, plain.proc.stderr
    [ours] = wrapped.session_files()
    [theirs] = plain.session_files()

    # from the transcript alone
    stats = ReadStats()
    list(read_session(ours, stats, known_sessions=()))
    assert stats.ctxwrap["digested outputs"] == 1, stats.ctxwrap
    stats = ReadStats()
    list(read_session(theirs, stats, known_sessions=()))
    assert stats.ran_under_ctxwrap is None, stats.ctxwrap

    # from the daemon's database alone
    known = ctxwrap_known_sessions(xdg.state / "ctxwrap" / "ctxwrap.db")
    sid = json.loads(ours.read_text().splitlines()[0])["id"]
    assert sid in known

    # what `ctxwrap replay --json` says of each
    out = ctxwrap(xdg, "replay", "--json", str(ours), str(theirs))
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    flags = {g["path"]: g["reader"]["ran_under_ctxwrap"] for g in doc["groups"]}
    assert flags[str(theirs)] is None
    assert "digested outputs" in flags[str(ours)], flags
    assert "ctxwrap's database" in flags[str(ours)], flags


GEN = "for i in range(30000):\n    print(f'line {i} of a long build log')\n"


def test_a_claude_code_session_run_under_ctxwrap_is_recognised(tmp_path: Path, xdg: Xdg) -> None:
    claude_home = pytest.importorskip("ctxwrap.testing.claude_home")
    if claude_home.find_claude() is None:
        pytest.skip("claude not installed (scripts/install-tools.sh)")
    from support import run_ctxwrap_claude

    from ctxwrap.testing.model_server import ScriptedModelServer

    steps = [
        {"tool_calls": [{"name": "Bash", "arguments": {"command": "python3 gen.py"}}]},
        {"text": "done"},
    ]
    work = tmp_path / "work"
    work.mkdir()
    (work / "gen.py").write_text(GEN)
    home = tmp_path / "home"
    with ScriptedModelServer(steps) as srv:
        env = claude_home.claude_env(xdg.env(), home=home, base_url=srv.root_url)
        run_ctxwrap_claude(claude_home.claude_print_args("go"), cwd=work, env=env)
    [transcript] = [
        p for p in (home / ".claude" / "projects").rglob("*.jsonl") if "subagents" not in p.parts
    ]
    stats = ReadStats()
    list(read_session(transcript, stats, known_sessions=()))
    assert stats.ctxwrap["digested outputs"] == 1, stats.ctxwrap
    stats = ReadStats()
    list(
        read_session(
            transcript,
            stats,
            known_sessions=ctxwrap_known_sessions(xdg.state / "ctxwrap" / "ctxwrap.db"),
        )
    )
    assert "its session is in ctxwrap's database" in stats.ctxwrap, stats.ctxwrap
