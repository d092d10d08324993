"""`ctxwrap replay` on session files the real pi wrote against the scripted model server.

Each test records a session with plain pi (1.6 and 0.73), then replays the file: the per-call
sizes must match what the model server really received, and on a session that also ran under
`ctxwrap pi`, replay's figures must agree with what ctxwrap really saved (`ctxwrap stats`).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from support import PI_VERSIONS, Xdg, ctxwrap, pi_path, run_ctxwrap_pi

from ctxwrap.replay import Thresholds, replay_paths, run_json
from ctxwrap.replay._sim import CAPABILITY_TOOL_CHARS
from ctxwrap.testing.model_server import ScriptedModelServer
from ctxwrap.testing.pi_home import make_pi_agent_dir, pi_command, pi_env
from ctxwrap.testing.recount import message_chars, tools_chars

pytestmark = pytest.mark.e2e

FIXTURES = Path(__file__).parents[1] / "fixtures" / "sessions"
BIG_READ = "".join(f"line {i} of a long notes file\n" for i in range(700))
BODY = "".join(f"value_{i} = {i}\n" for i in range(300))
# a parallel round (bash + read), a write, a re-read of the same file, a bash timeout
SESSION = [
    {
        "tool_calls": [
            {"name": "bash", "arguments": {"command": "seq 1 30000"}},
            {"name": "read", "arguments": {"path": "NOTES.txt"}},
        ]
    },
    {"tool_calls": [{"name": "write", "arguments": {"path": "values.py", "content": BODY}}]},
    {"tool_calls": [{"name": "read", "arguments": {"path": "NOTES.txt"}}]},
    {"tool_calls": [{"name": "bash", "arguments": {"command": "sleep 5", "timeout": 1}}]},
    {"text": "first task done"},
]
SUMMARY = "## Goal\nreplay test summary"


def keep_fixture(src: Path, name: str) -> None:
    """CTXWRAP_UPDATE_FIXTURES=1 refreshes tests/fixtures/sessions from this run."""
    if os.environ.get("CTXWRAP_UPDATE_FIXTURES") == "1":
        FIXTURES.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, FIXTURES / name)


def run_plain_pi(pi: str, home: Path, srv: ScriptedModelServer, prompt: str, *args: str) -> int:
    """Plain pi with a small context window (so a resumed run compacts), in ``home``."""
    exe = pi_path(pi)
    work = home / "work"
    work.mkdir(parents=True, exist_ok=True)
    (work / "NOTES.txt").write_text(BIG_READ)
    compaction = {"reserveTokens": 8000, "keepRecentTokens": 2000}
    agent_dir = make_pi_agent_dir(
        home, srv.base_url, context_window=24000, settings={"compaction": compaction}
    )
    proc = subprocess.run(
        pi_command(exe, prompt, *args),
        env=pi_env(agent_dir, home),
        cwd=work,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return proc.returncode


@pytest.mark.parametrize("pi", PI_VERSIONS)
def test_replay_matches_what_the_server_received(pi: str, tmp_path: Path) -> None:
    # pi's compaction summary is answered by the server's summary_text, not from the script
    steps = [*SESSION, {"text": "after resume"}, {"status": 400, "text": "bad"}]
    home = tmp_path / "home"
    with ScriptedModelServer(steps, summary_text=SUMMARY) as srv:
        assert run_plain_pi(pi, home, srv, "go") == 0
        assert run_plain_pi(pi, home, srv, "again", "--continue") == 0  # compacts first
        # a provider error ends the third prompt: an errored (aborted) turn in the file
        assert run_plain_pi(pi, home, srv, "once more", "--continue") != 0
        bodies = [r.body for r in srv.main_requests]
    [session] = sorted((home / ".pi" / "agent" / "sessions").rglob("*.jsonl"))
    keep_fixture(session, f"{pi}-compaction.jsonl")
    before = session.read_bytes()
    # every mechanism on (the write strip is off under pi by default: `write = "auto"`)
    doc = run_json(replay_paths([session], per_call=True, thresholds=Thresholds(write=True)))
    assert session.read_bytes() == before  # replay never writes to the agent's file
    assert doc["skipped_entries"] == {} and doc["skipped_files"] == {}
    [s] = doc["groups"]
    assert s["format"] == "pi" and s["compactions"] >= 1
    # pi's summary requests (their own system prompt) are not calls of the conversation; every
    # other request is one call, the one answered with an error included
    conv = [b for b in bodies if b["messages"][0] == bodies[0]["messages"][0]]
    assert s["llm_calls"] == len(conv), (s["llm_calls"], len(conv))
    for call, body in zip(s["calls"], conv, strict=False):
        msgs = [m for m in body["messages"] if m.get("role") != "system"]
        received = sum(message_chars(m) for m in msgs)
        assert abs(call["messages_chars"] - received) <= max(300, 0.02 * received), (
            call["index"],
            call["messages_chars"],
            received,
        )
        if pi == "pi":  # 1.6 records its system prompt and tools; 0.73 does not
            system = sum(message_chars(m) for m in body["messages"] if m.get("role") == "system")
            assert abs(call["system_chars"] - system) <= 0.02 * system
            assert abs(call["tools_chars"] - tools_chars(body)) <= 0.02 * tools_chars(body)
    assert [c["compaction"] for c in s["calls"]].count(True) == s["compactions"]
    kinds = {i["kind"] for i in s["intervention_list"]}
    assert {"digest", "strip", "tombstone-bound"} <= kinds
    digest = next(i for i in s["intervention_list"] if i["kind"] == "digest")
    assert digest["replacement_chars"] < digest["original_chars"] / 10


def _stats(xdg: Xdg) -> dict[str, Any]:
    sessions = json.loads(ctxwrap(xdg, "sessions", "--all", "--json").stdout)["sessions"]
    out = ctxwrap(xdg, "stats", "--session", sessions[0]["session_id"], "--json")
    assert out.returncode == 0, out.stderr
    return dict(json.loads(out.stdout)["totals"])


def make_skill(home: Path) -> None:
    d = home / ".pi" / "agent" / "skills" / "pdf-tools"
    d.mkdir(parents=True)
    (d / "SKILL.md").write_text(
        "---\nname: pdf-tools\ndescription: Extract text and tables from PDF files with "
        "pdfplumber; fill forms; merge and split documents.\n---\n# PDF\n"
    )


@pytest.mark.parametrize("pi", PI_VERSIONS)
def test_replay_agrees_with_what_ctxwrap_saved(pi: str, tmp_path: Path, xdg: Xdg) -> None:
    files = {"NOTES.txt": BIG_READ}
    make_skill(tmp_path / "plain" / "home")
    make_skill(tmp_path / "wrapped" / "home")
    plain = run_ctxwrap_pi(pi, tmp_path / "plain", xdg, SESSION, files=files, plain=True)
    wrapped = run_ctxwrap_pi(pi, tmp_path / "wrapped", xdg, SESSION, files=files)
    assert plain.proc.returncode == 0 and wrapped.proc.returncode == 0, wrapped.proc.stderr
    [session] = plain.session_files()
    out = ctxwrap(xdg, "replay", "--json", str(session))
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    replay = doc["totals"]
    real = _stats(xdg)
    assert replay["llm_calls"] == real["llm_calls"] == 5
    by_replay = {m["mechanism"]: m["saved_chars"] for m in replay["mechanisms"]}
    by_real = {m["mechanism"]: m["saved_chars"] for m in real["mechanisms"]}
    # The tagger kept everything (scripted default RETAIN; replay's tagger bound is separate):
    # amnesia is the re-read of NOTES.txt, the same file unchanged — a pointer, both counted.
    assert by_real["amnesia"] > 0 and by_replay["masking"] == 0
    assert abs(by_replay["amnesia"] - by_real["amnesia"]) <= 0.02 * by_real["amnesia"]
    assert [g["interventions"]["pointer"] for g in doc["groups"]] == [1]
    # the skill left the prompt, so find_capability rode in every request (ctx_recall in none:
    # pi's bash recalls)
    assert by_real["tools"] == -CAPABILITY_TOOL_CHARS * real["llm_calls"]
    if pi == "pi":
        # pi 1.x records the skills section of its system prompt; ctxwrap strips that block
        assert by_real["skills"] > 0
        assert abs(by_replay["skills"] - by_real["skills"]) <= 0.10 * by_real["skills"]
        mechs: tuple[str, ...] = ("bash", "writes", "tools")
        unseen = 0
    else:
        # pi 0.73 records no system prompt: replay cannot see its skills block, nor therefore
        # whether find_capability rode along (said in docs)
        assert by_replay["skills"] == 0 and by_replay["tools"] == 0
        real["saved_chars"] -= by_real["skills"]
        mechs = ("bash", "writes")
        unseen = by_real["tools"]  # what the tool cost: in live's saving, not replay's
    for mech in mechs:
        assert abs(by_replay[mech] - by_real[mech]) <= 0.10 * abs(by_real[mech]), (
            mech,
            by_replay[mech],
            by_real[mech],
        )
    saved = real["saved_chars"] - unseen
    assert abs(replay["saved_chars"] - saved) <= 0.10 * saved
    real_plain = real["sent_chars"] + real["saved_chars"]
    assert abs(replay["plain_chars"] - real_plain) <= 0.10 * real_plain


# Warm masking with activity awareness (the defaults since issue 21): a big read, then rounds
# that never touch its file again. Live, the daemon masks it while the cache is warm once the
# file is untouched for `mask_read_idle_rounds` rounds and the rewrite pays back; replay of the
# plain session runs the same policy code and must agree.
BIG_NOTES = "".join(f"entry {i}: a line of a long design note\n" for i in range(900))
WARM_SESSION = [
    {"tool_calls": [{"name": "read", "arguments": {"path": "DESIGN.txt"}}]},
    *[
        {"tool_calls": [{"name": "bash", "arguments": {"command": f"echo step {i}"}}]}
        for i in range(22)
    ],
    {"text": "done"},
]


def _warm_replay(
    tmp_path: Path, xdg: Xdg, env: dict[str, str]
) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
    """WARM_SESSION run plain and through ctxwrap on a provider that caches (the account of
    mechanisms/budget.py is priced on it, live and in replay alike), the plain session
    replayed: (its group, its masks, the live mask events)."""
    files = {"DESIGN.txt": BIG_NOTES}
    kw: dict[str, Any] = {"files": files, "cache_simulation": True}
    plain = run_ctxwrap_pi("pi", tmp_path / "plain", xdg, WARM_SESSION, plain=True, **kw)
    wrapped = run_ctxwrap_pi("pi", tmp_path / "wrapped", xdg, WARM_SESSION, extra_env=env, **kw)
    assert plain.proc.returncode == 0 and wrapped.proc.returncode == 0, wrapped.proc.stderr
    [session] = plain.session_files()
    out = ctxwrap(xdg, "replay", "--json", "--per-call", str(session), env={**xdg.env(), **env})
    assert out.returncode == 0, out.stderr
    [group] = json.loads(out.stdout)["groups"]
    masks = [i for i in group["intervention_list"] if i["kind"] == "mask"]
    events = [json.loads(line) for line in (xdg.state / "ctxwrap" / "events.jsonl").open()]
    return group, masks, [e for e in events if e["event"] == "mask"]


def test_replay_agrees_on_warm_activity_aware_masking(tmp_path: Path, xdg: Xdg) -> None:
    # (the account's bound on a warm rewrite off: a session that saves nothing else can
    # afford no bet; the next test)
    group, masks, events = _warm_replay(tmp_path, xdg, {"PI_CTX_REWRITE_WITHIN_SAVINGS": "false"})
    assert [(i["tool"], i["reason"]) for i in masks] == [("read", "untouched")]
    real = _stats(xdg)
    by_replay = {m["mechanism"]: m["saved_chars"] for m in group["mechanisms"]}
    by_real = {m["mechanism"]: m["saved_chars"] for m in real["mechanisms"]}
    # history masking apart from the tagger's tombstones, live and in replay
    assert by_real["masking"] > 0 and by_replay["masking"] > 0
    assert abs(by_replay["masking"] - by_real["masking"]) <= 0.10 * by_real["masking"], (
        by_replay,
        by_real,
    )
    # the same request masked first, live and in replay
    first_replay = next(c["index"] for c in group["calls"] if c["masked"])
    [mask] = events
    assert mask["trigger"] == "warm" and mask["masks"][0][1] == "untouched"
    assert group["needed_again"]["mechanisms"]["masking"]["needed_again"] == 0
    assert first_replay > 10


def test_replay_agrees_that_a_session_which_saved_nothing_bets_on_no_rewrite(
    tmp_path: Path, xdg: Xdg
) -> None:
    """The defaults: the same warm mask would put at risk more than a tenth of what plain has
    paid, with nothing saved to cover it (mechanisms/budget.py). Neither the daemon nor
    replay makes it."""
    group, masks, events = _warm_replay(tmp_path, xdg, {})
    assert masks == [] and events == []
    assert not any(c["masked"] for c in group["calls"])
