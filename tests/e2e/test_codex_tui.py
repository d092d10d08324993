"""Codex CLI's interactive TUI through `ctxwrap codex` on a real pseudo-terminal (pexpect).

It comes up, answers a typed prompt (through the proxy: the server sees the request and the
proxy's session state appears), records the user's `/compact` as theirs, follows a resize,
and leaves (Ctrl+C twice) with exit status 0 and a sane terminal; and Codex's own approval
prompts show, run and refuse what the model asked, as under plain `codex`.
"""

from __future__ import annotations

import array
import contextlib
import fcntl
import json
import os
import re
import signal
import sqlite3
import termios
import time
from pathlib import Path

import pexpect
import pytest
from support import CTXWRAP, Xdg
from terminal import Terminal

from ctxwrap.testing.codex_home import MODEL, codex_env, find_codex
from ctxwrap.testing.model_server import ScriptedModelServer

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.serial,  # keystrokes typed after fixed pauses
    pytest.mark.skipif(
        find_codex() is None, reason="codex not installed (scripts/install-tools.sh)"
    ),
]

ROWS, COLS = 30, 100
ANSWER = "ANSWER-FROM-THE-SCRIPTED-MODEL"


def descendants(root: int) -> list[int]:
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        for stat in Path("/proc").glob("[0-9]*/stat"):
            with contextlib.suppress(OSError, ValueError, IndexError):
                if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(stat.parent.name))
                    todo.append(int(stat.parent.name))
    return found


def codex_process(root: int, timeout: float = 30) -> int:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        for pid in descendants(root):
            with contextlib.suppress(OSError):
                if Path(os.readlink(f"/proc/{pid}/exe")).name == "codex":
                    return pid
        time.sleep(0.1)
    raise AssertionError("no codex process")


def winsize(pid: int) -> tuple[int, int]:
    fd = os.open(f"/proc/{pid}/fd/0", os.O_RDONLY | os.O_NOCTTY | os.O_NONBLOCK)
    try:
        buf = array.array("H", [0, 0, 0, 0])
        fcntl.ioctl(fd, termios.TIOCGWINSZ, buf, True)
        return buf[0], buf[1]
    finally:
        os.close(fd)


def tui_env(xdg: Xdg, home: Path, work: Path, base_url: str) -> dict[str, str]:
    """A Codex home whose TUI opens on the prompt box: a model entry with no upgrade notice,
    the work dir trusted (no first-run question)."""
    env = codex_env(xdg.env(), home=home, base_url=base_url)
    config = home / ".codex" / "config.toml"
    text = config.read_text().replace(f'"{MODEL}"', '"gpt-6.2-sol"')
    config.write_text(text + f'\n[projects."{work}"]\ntrust_level = "trusted"\n')
    env["TERM"] = "xterm-256color"
    return env


def spawn(argv: list[str], env: dict[str, str], work: Path) -> tuple[pexpect.spawn, Terminal]:  # type: ignore[type-arg]
    child = pexpect.spawn(
        argv[0], argv[1:], env=env, cwd=str(work), dimensions=(ROWS, COLS), timeout=60
    )
    return child, Terminal(child, ROWS, COLS)


@pytest.mark.timeout(180)
def test_tui_answers_resizes_and_exits_cleanly(tmp_path: Path, xdg: Xdg) -> None:
    work = tmp_path / "work"
    work.mkdir()
    home = tmp_path / "home"
    with ScriptedModelServer([{"text": ANSWER}] * 4) as srv:
        env = tui_env(xdg, home, work, srv.base_url)
        command = " ".join(f"'{a}'" for a in [*CTXWRAP, "codex"]) + "; echo EXIT=$?; stty -a"
        child, screen = spawn(["bash", "--norc", "-c", command], env, work)
        try:
            screen.wait_for("Ask Codex to do anything", timeout=60, blanks=False)
            pid = codex_process(child.pid)
            assert os.readlink(f"/proc/{pid}/fd/0") != os.readlink(f"/proc/{child.pid}/fd/0")
            assert winsize(pid) == (ROWS, COLS)
            screen.resize(41, 133)
            end = time.monotonic() + 20
            while winsize(pid) != (41, 133) and time.monotonic() < end:
                time.sleep(0.05)
            assert winsize(pid) == (41, 133)

            screen.submit("please answer", lambda: asked_for(srv, "please answer"))
            screen.wait_for(ANSWER, timeout=60)
            asked = [r for r in srv.main_requests if "please answer" in str(r.body["input"])]
            assert asked and asked[0].headers["authorization"].startswith("Bearer sk-codex-test")
            # through the proxy: it kept the thread's cache state in our state dir — for the
            # user's thread only, not for the TUI's title thread
            assert len(list((xdg.state / "ctxwrap" / "codex").glob("*.cache.json"))) == 1

            # the user's /compact: Codex says so in its turn metadata (trigger "manual"), and it
            # is recorded as the user's, which the plain session runs too
            child.send("/compact")
            time.sleep(1.0)
            child.send("\r")
            end = time.monotonic() + 60
            rows: list[tuple[str, int]] = []
            while not rows and time.monotonic() < end:
                time.sleep(0.2)
                with contextlib.suppress(sqlite3.Error), sqlite3.connect(xdg.db) as db:
                    rows = list(db.execute("SELECT reason, priced_as_call FROM compactions"))
            kinds = [
                json.loads(r.headers.get("x-codex-turn-metadata", "{}")) for r in srv.main_requests
            ]
            assert [
                m["compaction"]["trigger"] for m in kinds if m.get("request_kind") == "compaction"
            ] == ["manual"]
            assert rows == [("manual", 1)]

            # Ctrl+C quits (a second one only if the first merely cleared something): a
            # second one sent blindly could reach the shell after Codex is gone
            child.sendcontrol("c")
            try:
                child.expect(r"EXIT=(\d+)", timeout=5)
            except pexpect.TIMEOUT:
                child.sendcontrol("c")
                child.expect(r"EXIT=(\d+)", timeout=30)
            assert child.match.group(1) == b"0"
            # after Codex's own hint, ours: resume through ctxwrap, in Codex's TUI form
            said = child.before.decode(errors="replace")
            tid = r"[0-9a-f]{8}-[0-9a-f-]{27}"
            found = re.search(
                rf"ctxwrap: .*details: ctxwrap stats --session ([0-9a-f-]{{8,18}})\r?\n"
                rf"ctxwrap: resume through ctxwrap with:\r?\nctxwrap codex resume ({tid})\r?\n",
                said,
            )
            assert found and found.group(2).startswith(found.group(1)), said[-1500:]
            child.expect(pexpect.EOF, timeout=30)
            stty = child.before.decode(errors="replace")
            assert " icanon" in stty and " echo" in stty  # cooked mode is back
        finally:
            if child.isalive():
                child.kill(signal.SIGKILL)
            child.close(force=True)
        # no shared background server was installed or left running for this CODEX_HOME
        assert not (home / ".codex" / "packages").exists()


# The error is the output's last line on the same stream: on stderr it raced stdout's last
# block-buffered flush through Codex's two pipes, and landed in the middle Codex truncates.
LONG_LOG = (
    "for i in range(4000):\n"
    "    print(f'INFO request {i} served in {i % 97}ms status=200')\n"
    "print('ERROR worker-7 lost connection to db-primary')\n"
)


def asked_for(srv: ScriptedModelServer, text: str) -> bool:
    """Whether a request of the user's thread carries `text` (the prompt was submitted)."""
    return any(text in str(r.body.get("input")) for r in srv.main_requests)


def escalated(cmd: str, why: str) -> dict[str, object]:
    """A model's exec_command that asks to run outside the sandbox (Codex asks the user)."""
    args = {"cmd": cmd, "sandbox_permissions": "require_escalated", "justification": why}
    return {"tool_calls": [{"name": "exec_command", "arguments": args}]}


@pytest.mark.timeout(240)
def test_approval_prompts_show_and_run_what_the_model_asked(tmp_path: Path, xdg: Xdg) -> None:
    """How people run Codex: a read-only sandbox, `-a on-request`. A command the model asks to
    escalate brings up Codex's own approval prompt, showing the command and the model's reason
    as asked; approved, it runs outside the sandbox; declined, it does not run and the turn
    ends (Codex asks the model nothing more). In the same session ctxwrap digests a long
    output (it is in the path, not in the way)."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "gen_log.py").write_text(LONG_LOG)
    home = tmp_path / "home"
    steps = [
        escalated("touch approved.txt", "create the marker file"),
        {"tool_calls": [{"name": "exec_command", "arguments": {"cmd": "python3 gen_log.py"}}]},
        {"text": ANSWER},
        escalated("touch declined.txt", "create another marker"),
    ]
    with ScriptedModelServer(steps, side_text="Marker files") as srv:
        env = tui_env(xdg, home, work, srv.base_url)
        child, screen = spawn([*CTXWRAP, "codex", "-s", "read-only", "-a", "on-request"], env, work)
        try:
            screen.wait_for("Ask Codex to do anything", timeout=60, blanks=False)
            screen.submit("make the marker", lambda: asked_for(srv, "make the marker"))
            shown = screen.wait_for("Would you like to run the following command?", timeout=60)
            assert "$ touch approved.txt" in shown
            assert "Reason: create the marker file" in shown
            assert not (work / "approved.txt").exists()
            child.send("y")
            screen.wait_for(ANSWER, timeout=60)
            assert (work / "approved.txt").exists()  # outside the read-only sandbox

            screen.submit("one more", lambda: asked_for(srv, "one more"))
            shown = screen.wait_for("$ touch declined.txt", timeout=60)
            assert "Reason: create another marker" in shown
            child.send("\x1b")  # "No, and tell Codex what to do differently"
            screen.wait_for("You canceled the request to run touch declined.txt", timeout=30)
            screen.wait_for("Conversation interrupted", timeout=30)
            assert not (work / "declined.txt").exists()

            reqs = srv.main_requests
            assert len(reqs) == 4
            assert [r.kind for r in srv.requests].count("side") == 1  # the title thread
            outs = {
                i["call_id"]: str(i["output"])
                for i in reqs[2].body["input"]
                if i.get("type") == "function_call_output"
            }
            assert "Process exited with code 0" in outs["call_0_0"]
            assert " digested by ctxwrap · " in outs["call_1_0"]
            assert "ERROR worker-7 lost connection" in outs["call_1_0"]
            sent = [
                json.loads(i["arguments"])
                for i in reqs[2].body["input"]
                if i.get("type") == "function_call"
            ]
            # the escalation reaches the model as it asked it, reason included
            assert sent[0] == {
                "cmd": "touch approved.txt",
                "sandbox_permissions": "require_escalated",
                "justification": "create the marker file",
            }
        finally:
            if child.isalive():
                child.kill(signal.SIGKILL)
            child.close(force=True)


@pytest.mark.timeout(180)
def test_tui_launch_adds_no_codex_warning(tmp_path: Path, xdg: Xdg) -> None:
    """Issue 44 item 18: the proxy's `-c` override put Codex in embedded mode, and every
    `ctxwrap codex` launch showed "⚠ 1 warning" (running without the shared background server,
    "-c … requires embedded mode") that plain `codex` does not; `--no-daemon` says so
    explicitly and Codex is quiet. Other warnings (a missing bubblewrap) are the machine's."""
    work = tmp_path / "work"
    work.mkdir()
    home = tmp_path / "home"
    with ScriptedModelServer([{"text": ANSWER}] * 2) as srv:
        env = tui_env(xdg, home, work, srv.base_url)
        child, screen = spawn([*CTXWRAP, "codex"], env, work)
        try:
            screen.wait_for("Ask Codex", 60)
            end = time.monotonic() + 4  # startup warnings arrive after the prompt box
            while time.monotonic() < end:
                screen.pump(0.3)
            found = re.search(r"⚠ (\d+) warnings?", screen.display)
            count = int(found.group(1)) if found else 0
            seen = [screen.display]
            if count:
                child.send("\x1bOQ")  # F2: the warnings, one at a time
                screen.wait_for("Warnings", 30)
                seen.append(screen.display)
                for _ in range(count - 1):
                    child.send("\x1b[C")  # →: the next one
                    time.sleep(0.5)
                    screen.pump(0.5)
                    seen.append(screen.display)
        finally:
            if child.isalive():
                child.kill(signal.SIGKILL)
            child.close(force=True)
    text = "\n".join(seen)
    assert "embedded mode" not in text and "shared background server" not in text, text
    assert not (home / ".codex" / "packages").exists()  # and no background server started
