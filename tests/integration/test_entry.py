"""`ctxwrap pi` goes straight to the launcher (no click): same messages and exit codes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from support import Xdg

CTXWRAP = [sys.executable, "-m", "ctxwrap"]


def run(xdg: Xdg, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CTXWRAP, *args], env={**xdg.env(), **env}, capture_output=True, text=True,
        timeout=60, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def test_pi_not_found_is_reported_like_every_ctxwrap_error(xdg: Xdg, tmp_path: Path) -> None:
    missing = str(tmp_path / "no-such-pi")
    fast = run(xdg, "pi", "--ctxwrap-off", "-p", "x", CTXWRAP_PI=missing)
    assert fast.returncode == 127
    assert fast.stderr.startswith(f"ctxwrap: error: CTXWRAP_PI={missing!r} is not an executable")
    assert "\nhint: install it with" in fast.stderr and fast.stdout == ""
    # The same command through click (a global option first) says exactly the same.
    slow = run(xdg, "--debug", "pi", "--ctxwrap-off", "-p", "x", CTXWRAP_PI=missing)
    assert slow.returncode == 127 and "CTXWRAP_PI=" in slow.stderr


def test_the_fast_path_does_not_import_click(xdg: Xdg, tmp_path: Path) -> None:
    probe = tmp_path / "fake-pi"
    probe.write_text('#!/bin/sh\necho fake-pi "$@"\nexit 3\n')
    probe.chmod(0o755)
    for agent in ("pi", "claude", "codex"):
        out = subprocess.run(
            [sys.executable, "-X", "importtime", "-m", "ctxwrap", agent, "--ctxwrap-off", "a b"],
            env={**xdg.env(), f"CTXWRAP_{agent.upper()}": str(probe)},
            capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        assert (out.returncode, out.stdout) == (3, "fake-pi a b\n"), out
        imported = {line.rsplit("|", 1)[-1].strip() for line in out.stderr.splitlines()}
        assert "ctxwrap.launch.child" in imported and "click" not in imported, agent


def test_a_launcher_exits_with_the_agents_status_without_the_interpreters_teardown(
    xdg: Xdg, tmp_path: Path
) -> None:
    """atexit handlers run, stdout and stderr are flushed, and the status is the agent's."""
    probe = tmp_path / "fake-pi"
    probe.write_text("#!/bin/sh\nexit 5\n")
    probe.chmod(0o755)
    code = (
        "import atexit, sys\n"
        "atexit.register(lambda: print('atexit ran', flush=True))\n"
        "sys.stdout.write('buffered ')\n"
        "from ctxwrap.agents.pi.launcher import main\n"
        "main(['--ctxwrap-off'])\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env={**xdg.env(), "CTXWRAP_PI": str(probe)},
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert (out.returncode, out.stdout) == (5, "buffered atexit ran\n"), out
