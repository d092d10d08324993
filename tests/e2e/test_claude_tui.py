"""Claude Code's interactive TUI through `ctxwrap claude` on a real pseudo-terminal (pexpect).

It comes up, answers a typed prompt (through the proxy: the server sees the request), follows
a resize, and leaves (Ctrl+C twice) with exit status 0 and a sane terminal.
"""

from __future__ import annotations

import array
import contextlib
import fcntl
import os
import signal
import termios
import time
from pathlib import Path

import pexpect
import pytest
from support import CTXWRAP, Xdg
from terminal import Terminal

from ctxwrap.testing.claude_home import claude_env, find_claude, seed_claude_home
from ctxwrap.testing.model_server import ScriptedModelServer

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.serial,  # keystrokes typed after fixed pauses
    pytest.mark.skipif(
        find_claude() is None, reason="claude not installed (scripts/install-tools.sh)"
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


def claude_process(root: int, timeout: float = 30) -> int:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        for pid in descendants(root):
            with contextlib.suppress(OSError):
                if Path(os.readlink(f"/proc/{pid}/exe")).name.startswith("claude"):
                    return pid
        time.sleep(0.1)
    raise AssertionError("no claude process")


def winsize(pid: int) -> tuple[int, int]:
    fd = os.open(f"/proc/{pid}/fd/0", os.O_RDONLY | os.O_NOCTTY | os.O_NONBLOCK)
    try:
        buf = array.array("H", [0, 0, 0, 0])
        fcntl.ioctl(fd, termios.TIOCGWINSZ, buf, True)
        return buf[0], buf[1]
    finally:
        os.close(fd)


@pytest.mark.timeout(300)
def test_tui_answers_resizes_and_exits_cleanly(tmp_path: Path, xdg: Xdg) -> None:
    work = tmp_path / "work"
    work.mkdir()
    home = tmp_path / "home"
    seed_claude_home(home, work)
    # The interactive session also asks for a title (a side request without tools).
    with ScriptedModelServer([{"text": ANSWER}] * 3) as srv:
        env = claude_env(xdg.env(), home=home, base_url=srv.root_url)
        env["TERM"] = "xterm-256color"
        command = " ".join(f"'{a}'" for a in [*CTXWRAP, "claude"]) + "; echo EXIT=$?; stty -a"
        child = pexpect.spawn(
            "bash",
            ["--norc", "-c", command],
            env=env,
            cwd=str(work),
            dimensions=(ROWS, COLS),
            timeout=60,
        )
        try:
            screen = Terminal(child, ROWS, COLS)
            screen.wait_for("Claude Code", timeout=60)
            pid = claude_process(child.pid)
            assert os.readlink(f"/proc/{pid}/fd/0") != os.readlink(f"/proc/{child.pid}/fd/0")
            assert winsize(pid) == (ROWS, COLS)
            screen.resize(41, 133)
            end = time.monotonic() + 20
            while winsize(pid) != (41, 133) and time.monotonic() < end:
                time.sleep(0.05)
            assert winsize(pid) == (41, 133)

            def asked() -> bool:
                return any(r.body.get("tools") for r in srv.main_requests)

            # the input box is up once the prompt marker is drawn
            assert screen.poll(lambda: "❯" in screen.text, timeout=90), screen.text[-2000:]
            screen.submit("please answer", asked)
            screen.wait_for(ANSWER, timeout=60)
            with_tools = [r for r in srv.main_requests if r.body.get("tools")]
            assert "please answer" in str(with_tools[0].body["messages"])
            assert with_tools[0].headers["x-api-key"] == env["ANTHROPIC_API_KEY"]

            child.sendcontrol("c")
            time.sleep(0.3)
            child.sendcontrol("c")
            child.expect(r"EXIT=(\d+)", timeout=30)
            assert child.match.group(1) == b"0"
            child.expect(pexpect.EOF, timeout=30)
            stty = child.before.decode(errors="replace")
            assert " icanon" in stty and " echo" in stty  # cooked mode is back
        finally:
            if child.isalive():
                child.kill(signal.SIGKILL)
            child.close(force=True)
