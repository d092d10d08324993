"""Real pi's TUI through `ctxwrap pi` on a real pseudo-terminal (pexpect), pi 1.6 and 0.73.

What a user sees when typing `ctxwrap pi` instead of `pi`: the TUI comes up, a prompt gets
the model's answer on screen, resizing the terminal resizes pi, and leaving pi (Ctrl+D on an
empty editor, or Ctrl+C twice within 500 ms — docs/keybindings.md `app.exit` / `app.clear`
of both versions) gives back a sane terminal. The model is the scripted server on loopback;
the daemon is auto-started by `ctxwrap pi` inside the test's own XDG dirs.
"""

from __future__ import annotations

import array
import contextlib
import fcntl
import os
import re
import signal
import termios
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pexpect
import pytest
from support import CTXWRAP, Xdg, client, ctxwrap, pi_path, wait_ready

from ctxwrap.testing.model_server import ScriptedModelServer
from ctxwrap.testing.pi_home import MODEL, PROVIDER, make_pi_agent_dir, pi_env

pytestmark = pytest.mark.e2e

PI_VERSIONS = [pytest.param("pi", id="pi-1.6"), pytest.param("pi-0.73", id="pi-0.73")]
ROWS, COLS = 30, 100
ANSWER = "ANSWER-FROM-THE-SCRIPTED-MODEL"
TITLE = re.compile(rb"\x1b\]0;[^\x07]* - work\x07")  # pi's "π - <cwd>" terminal title


@dataclass
class Tui:
    child: pexpect.spawn
    server: ScriptedModelServer

    def wait_up(self) -> float:
        """Wait for the TUI, then for pi to bind its session; return how long the binding took.

        The footer names the model once the TUI has rendered. pi sets the terminal title once
        its extensions' session_start handlers returned, just before it reads the first prompt:
        pi 0.73 drops a prompt submitted before that (plain pi too), pi 1.x queues it.
        """
        rendered: float | None = None
        bound: float | None = None
        while rendered is None or bound is None:  # either may come first
            which = self.child.expect([re.escape(MODEL.encode()), TITLE], timeout=60)
            if which == 0:
                rendered = rendered or time.monotonic()
            else:
                bound = time.monotonic()
        return max(0.0, bound - rendered)


@contextlib.contextmanager
def ctxwrap_tui(
    name: str,
    tmp_path: Path,
    xdg: Xdg,
    script: Sequence[object] = (),
    *,
    in_bash: str | None = None,
    pi_settings: dict[str, object] | None = None,
    extra_env: dict[str, str] | None = None,
    home: Path | None = None,
    args: Sequence[str] = (),
) -> Iterator[Tui]:
    """`ctxwrap pi` (interactive) on a ROWS×COLS pexpect terminal; killed in any case.

    ``in_bash``: run it as ``bash -c 'ctxwrap pi …; <in_bash>'`` to inspect the terminal after.
    ``pi_settings``: merged into pi's settings.json; ``extra_env``: for ctxwrap and pi.
    ``home``: an earlier run's (its sessions, for ``args=("--continue",)``).
    """
    pi = pi_path(name)
    home = home or tmp_path / "home"
    work = home / "work"
    work.mkdir(parents=True, exist_ok=True)
    server = ScriptedModelServer(script)
    server.start()
    child: pexpect.spawn | None = None
    try:
        agent_dir = make_pi_agent_dir(home, server.base_url, settings=pi_settings)
        env = xdg.env(pi_env(agent_dir, home))
        env.update(CTXWRAP_PI=str(pi), TERM="xterm-256color", **(extra_env or {}))
        argv = [*CTXWRAP, "pi", "--offline", "--provider", PROVIDER, "--model", MODEL, *args]
        if in_bash is None:
            child = pexpect.spawn(
                argv[0], argv[1:], env=env, cwd=str(work), dimensions=(ROWS, COLS), timeout=60
            )
        else:
            command = " ".join(f"'{a}'" for a in argv) + f"; {in_bash}"
            child = pexpect.spawn(
                "bash",
                ["--norc", "-c", command],
                env=env,
                cwd=str(work),
                dimensions=(ROWS, COLS),
                timeout=60,
            )
        if os.environ.get("CTXWRAP_TEST_TUI_LOG"):
            child.logfile_read = open(os.environ["CTXWRAP_TEST_TUI_LOG"], "ab")  # noqa: SIM115
        yield Tui(child, server)
    finally:
        if child is not None:
            if child.isalive():
                child.kill(signal.SIGKILL)
            child.close(force=True)
        server.close()


def children_of(pid: int) -> list[int]:
    kids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            # the command name in (…) may hold spaces: the ppid is the 2nd field after ")"
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                kids.append(int(stat.parent.name))
    return kids


def pi_process(root: int, timeout: float = 30) -> int:
    """The node process running pi, a descendant of `root` (the ctxwrap process)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        todo, seen = [root], []
        while todo:
            pid = todo.pop()
            seen.append(pid)
            todo.extend(children_of(pid))
        for pid in seen[1:]:
            with contextlib.suppress(OSError):
                # pi sets process.title, so its cmdline may read just "pi": go by the binary.
                if Path(os.readlink(f"/proc/{pid}/exe")).name == "node":
                    return pid
        time.sleep(0.1)
    raise AssertionError(f"no pi (node) process under pid {root}")


def pi_environ(pid: int) -> dict[str, str]:
    items = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(i.decode(errors="replace").split("=", 1) for i in items if b"=" in i)


def live_session_pids(xdg: Xdg, timeout: float = 60) -> set[int]:
    """pids of the pi processes whose bridge registered a session with the daemon."""
    wait_ready(xdg, timeout=timeout)
    end = time.monotonic() + timeout
    pids: set[int] = set()
    while not pids and time.monotonic() < end:
        with client(xdg) as c:
            pids = {s["pid"] for s in c.get("/v1/sessions").json()["sessions"] if s["live"]}
        if not pids:
            time.sleep(0.1)
    return pids


def terminal_size_of(pid: int) -> tuple[int, int]:
    """(rows, cols) of the terminal on the process's stdin, read with TIOCGWINSZ."""
    fd = os.open(f"/proc/{pid}/fd/0", os.O_RDONLY | os.O_NOCTTY | os.O_NONBLOCK)
    try:
        buf = array.array("H", [0, 0, 0, 0])
        fcntl.ioctl(fd, termios.TIOCGWINSZ, buf, True)
        return buf[0], buf[1]
    finally:
        os.close(fd)


def type_prompt(tui: Tui, text: str) -> None:
    """Type into pi's editor; wait for the echo so no keystroke races the TUI's start."""
    tui.child.send(text)
    tui.child.expect_exact(text, timeout=60)
    tui.child.send("\r")


@pytest.mark.parametrize("name", PI_VERSIONS)
@pytest.mark.timeout(300)
def test_a_hung_daemon_neither_holds_the_tui_nor_loses_the_first_prompt(
    name: str, tmp_path: Path, xdg: Xdg
) -> None:
    """A daemon that takes the call and never answers (SIGSTOP): pi is ready for the user as
    soon as its TUI is, and the prompt typed then is answered.

    The bridge's session_start once waited out its deadline for the daemon's answer; pi 0.73
    threw away a prompt submitted meanwhile (a user typing at once lost it; so did this suite
    on a loaded machine, where the daemon answered slowly)."""
    started = ctxwrap(xdg, "daemon", "start")
    assert started.returncode == 0, started.stderr
    pid = xdg.daemon_pid()
    assert pid
    deadline_s = 6  # each bridge decision's deadline: long enough to see a wait for it
    env = {"PI_CTX_BRIDGE_TIMEOUT_MS": str(deadline_s * 1000)}
    os.kill(pid, signal.SIGSTOP)
    try:
        with ctxwrap_tui(name, tmp_path, xdg, [{"text": ANSWER}], extra_env=env) as tui:
            binding = tui.wait_up()
            assert binding < deadline_s / 2, binding
            type_prompt(tui, "please answer")
            tui.child.expect_exact(ANSWER, timeout=60)  # after one deadline, fail-open
            assert "please answer" in str(tui.server.main_requests[0].body["messages"][-1])
    finally:
        os.kill(pid, signal.SIGCONT)


@pytest.mark.parametrize("name", PI_VERSIONS)
@pytest.mark.timeout(300)
def test_tui_comes_up_and_answers_a_prompt(name: str, tmp_path: Path, xdg: Xdg) -> None:
    with ctxwrap_tui(name, tmp_path, xdg, [{"text": ANSWER}]) as tui:
        tui.wait_up()
        pid = pi_process(tui.child.pid)
        assert pi_environ(pid)["CTXWRAP_SOCKET"] == str(xdg.socket)
        # pi's terminal is ctxwrap's own PTY, not the one pexpect gave ctxwrap.
        pi_tty = os.readlink(f"/proc/{pid}/fd/0")
        assert pi_tty.startswith("/dev/pts/")
        assert pi_tty != os.readlink(f"/proc/{tui.child.pid}/fd/0")

        type_prompt(tui, "please answer")
        tui.child.expect_exact(ANSWER, timeout=60)
        body = tui.server.main_requests[0].body
        assert "please answer" in str(body["messages"][-1]["content"])
        # The daemon was started by `ctxwrap pi` itself, in the isolated XDG runtime dir, and
        # the bridge loaded in this pi registered its session there.
        assert pid in live_session_pids(xdg)

        tui.child.send("\x04")  # Ctrl+D on the (now empty) editor: app.exit
        tui.child.expect(pexpect.EOF, timeout=60)
        tui.child.close()
        assert tui.child.exitstatus == 0, tui.child.before


@pytest.mark.parametrize("name", PI_VERSIONS)
@pytest.mark.timeout(300)
def test_resize_reaches_pi(name: str, tmp_path: Path, xdg: Xdg) -> None:
    with ctxwrap_tui(name, tmp_path, xdg) as tui:
        tui.wait_up()
        pid = pi_process(tui.child.pid)
        assert terminal_size_of(pid) == (ROWS, COLS)  # copied at start

        new_rows, new_cols = 41, 133
        tui.child.setwinsize(new_rows, new_cols)
        end = time.monotonic() + 30
        while terminal_size_of(pid) != (new_rows, new_cols) and time.monotonic() < end:
            time.sleep(0.05)
        assert terminal_size_of(pid) == (new_rows, new_cols)
        # pi noticed (SIGWINCH reached it): it redraws its full-width rules at the new width.
        # (0.73 colours each "─" on its own, NO_COLOR or not: allow SGR codes in between.)
        rule = re.compile(b"(?:(?:\x1b\\[[0-9;]*m)*%s){%d}" % (re.escape("─".encode()), new_cols))
        tui.child.expect(rule, timeout=60)

        tui.child.send("\x04")
        tui.child.expect(pexpect.EOF, timeout=60)
        tui.child.close()
        assert tui.child.exitstatus == 0


def lflag_of(fd: int) -> int:
    return int(termios.tcgetattr(fd)[3])


@pytest.mark.parametrize("name", PI_VERSIONS)
@pytest.mark.parametrize(
    "keys", [pytest.param("\x03\x03", id="ctrl-c-twice"), pytest.param("\x04", id="ctrl-d")]
)
@pytest.mark.timeout(300)
def test_exit_keys_leave_the_terminal_sane(name: str, keys: str, tmp_path: Path, xdg: Xdg) -> None:
    with ctxwrap_tui(name, tmp_path, xdg, in_bash='echo "PI-RC=$?"; stty -a') as tui:
        tui.wait_up()
        # While pi runs, ctxwrap holds the user's terminal in raw mode (pi's keys pass through) …
        assert not lflag_of(tui.child.child_fd) & (termios.ICANON | termios.ECHO)
        tui.child.send(keys)
        tui.child.expect(r"PI-RC=(\d+)", timeout=60)
        assert tui.child.match.group(1) == b"0"
        tui.child.expect(pexpect.EOF, timeout=60)
        stty = tui.child.before.decode(errors="replace").split()
        tui.child.close()
        assert tui.child.exitstatus == 0
    # … and gives it back cooked: canonical input and echo on again.
    assert "icanon" in stty and "echo" in stty, stty
    assert "-icanon" not in stty and "-echo" not in stty
    assert re.search(r"\bisig\b", " ".join(stty)) and "-isig" not in stty


@pytest.mark.parametrize("name", PI_VERSIONS)
@pytest.mark.timeout(300)
def test_quit_before_the_first_prompt_offers_no_resume(name: str, tmp_path: Path, xdg: Xdg) -> None:
    """Issue 44 item 15: pi writes its session file with the first prompt; quit before it and
    `pi --session FILE` has nothing to open, so the exit line must not offer it."""
    with ctxwrap_tui(name, tmp_path, xdg) as tui:
        tui.wait_up()
        tui.child.send("\x04")  # Ctrl+D on the empty editor
        tui.child.expect(pexpect.EOF, timeout=60)
        said = tui.child.before.decode(errors="replace")
        tui.child.close()
        assert tui.child.exitstatus == 0, said[-1500:]
    assert not list((tmp_path / "home").rglob("sessions/**/*.jsonl"))  # pi wrote none
    assert "ctxwrap pi --session" not in said and "resume through" not in said, said[-1500:]
    assert "details: ctxwrap stats" not in said  # nothing sent: no figures to look at
