"""`ctxwrap pi` passes pi's exit status, output and arguments through, on both launch paths.

Two paths exist (ctxwrap/agents/pi/launcher.py): with a terminal on stdin and stdout pi runs under a
PTY proxy; without one it is a plain child with inherited stdio. Every check here runs
through each path that matters: the PTY path under pexpect, the other under subprocess with
stdin from /dev/null. Fake pi scripts (CTXWRAP_PI) make the exit status, the argv and the
environment pi received observable; real pi checks `--version`.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pexpect
import pytest
from support import CTXWRAP, Xdg, pi_path

from ctxwrap.agents.pi.launcher import bridge_path

pytestmark = pytest.mark.e2e

PI_VERSIONS = [pytest.param("pi", id="pi-1.6"), pytest.param("pi-0.73", id="pi-0.73")]
PATHS = [pytest.param(True, id="pty"), pytest.param(False, id="no-tty")]

# A fake pi that reports what it was given: argv, whether stdio are terminals, ctxwrap's env.
ARGV_PI = f"""#!{sys.executable}
import json, os, sys
print("FAKEPI=" + json.dumps({{
    "argv": sys.argv[1:],
    "tty": [os.isatty(0), os.isatty(1)],
    "env": {{k: v for k, v in os.environ.items() if k.startswith("CTXWRAP_") and k != "CTXWRAP_PI"}},
}}), flush=True)
"""
FAIL_PI = "#!/bin/sh\necho fake-pi-fails\nexit 7\n"
SIGTERM_PI = "#!/bin/sh\necho fake-pi-terminates-itself\nkill -TERM $$\n"
# Waits for a signal: a SIGTERM that reaches it is answered with exit 42.
TRAP_PI = "#!/bin/sh\ntrap 'echo fake-pi-got-term; exit 42' TERM\necho fake-pi-waiting\nwhile :; do sleep 0.1; done\n"


def fake_pi(tmp_path: Path, text: str, name: str = "fake-pi") -> Path:
    path = tmp_path / name
    path.write_text(text)
    path.chmod(0o755)
    return path


def launcher_env(xdg: Xdg, pi: Path | None, **extra: str) -> dict[str, str]:
    env = xdg.env()
    env.pop("CTXWRAP_PI", None)
    env.pop("PI_CTX_OFF", None)
    if pi is not None:
        env["CTXWRAP_PI"] = str(pi)
    env.update(extra)
    return env


def run_no_tty(
    args: list[str], env: Mapping[str, str], timeout: float = 90
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CTXWRAP, "pi", *args],
        env=dict(env),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@contextlib.contextmanager
def spawn_tty(args: list[str], env: Mapping[str, str]) -> Iterator[pexpect.spawn]:
    child = pexpect.spawn(
        CTXWRAP[0], [*CTXWRAP[1:], "pi", *args], env=dict(env), timeout=60, dimensions=(24, 80)
    )
    try:
        yield child
    finally:
        if child.isalive():
            child.kill(signal.SIGKILL)
        child.close(force=True)


def run_tty(args: list[str], env: Mapping[str, str]) -> tuple[int, str]:
    """Run `ctxwrap pi ARGS` on a terminal; return (exit status, everything it printed)."""
    with spawn_tty(args, env) as child:
        child.expect(pexpect.EOF, timeout=90)
        output = child.before.decode(errors="replace")
        child.close()
        status = child.exitstatus if child.exitstatus is not None else 128 + child.signalstatus
    return status, output.replace("\r\n", "\n")


def run_either(tty: bool, args: list[str], env: Mapping[str, str]) -> tuple[int, str]:
    if tty:
        return run_tty(args, env)
    proc = run_no_tty(args, env)
    return proc.returncode, proc.stdout + proc.stderr


def fakepi_report(output: str) -> dict[str, Any]:
    lines = [line for line in output.splitlines() if line.startswith("FAKEPI=")]
    assert len(lines) == 1, output
    return dict(json.loads(lines[0].removeprefix("FAKEPI=")))


def without_ctxwrap_lines(text: str) -> str:
    """pi's own output: drop ctxwrap's warnings (e.g. a slow daemon start on a loaded box)."""
    return "".join(
        line for line in text.splitlines(keepends=True) if not line.startswith("ctxwrap: ")
    )


@pytest.mark.parametrize("name", PI_VERSIONS)
@pytest.mark.timeout(240)
def test_version_matches_plain_pi_with_and_without_tty(name: str, xdg: Xdg) -> None:
    pi = pi_path(name)
    env = launcher_env(xdg, pi)
    plain = subprocess.run(
        [str(pi), "--version"],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert plain.returncode == 0 and (plain.stdout + plain.stderr).strip(), plain

    started = time.monotonic()
    wrapped = run_no_tty(["--version"], env)
    assert wrapped.returncode == 0, wrapped.stderr
    # nothing of ours outlives pi (a wait for a session that never starts held it 15 s)
    assert time.monotonic() - started < 10
    # Same bytes on the same streams (0.73 prints its version on stderr, 1.6 on stdout).
    assert wrapped.stdout == plain.stdout
    assert without_ctxwrap_lines(wrapped.stderr) == plain.stderr

    status, output = run_tty(["--version"], env)
    assert status == 0, output
    assert without_ctxwrap_lines(output).strip() == (plain.stdout + plain.stderr).strip()


@pytest.mark.parametrize("tty", PATHS)
@pytest.mark.timeout(180)
def test_failing_pi_exit_status_passes_through(tty: bool, xdg: Xdg, tmp_path: Path) -> None:
    status, output = run_either(tty, ["--whatever"], launcher_env(xdg, fake_pi(tmp_path, FAIL_PI)))
    assert status == 7, output
    assert "fake-pi-fails" in output


@pytest.mark.parametrize("tty", PATHS)
@pytest.mark.timeout(180)
def test_pi_killed_by_sigterm_gives_143(tty: bool, xdg: Xdg, tmp_path: Path) -> None:
    status, output = run_either(tty, [], launcher_env(xdg, fake_pi(tmp_path, SIGTERM_PI)))
    assert status == 143, output
    assert "fake-pi-terminates-itself" in output


@pytest.mark.parametrize("tty", PATHS)
@pytest.mark.timeout(180)
def test_bridge_loaded_and_arguments_untouched(tty: bool, xdg: Xdg, tmp_path: Path) -> None:
    args = ["--model", "x y", "--", "-e", "", "--ctxwrap-offish", "ünï"]
    status, output = run_either(tty, args, launcher_env(xdg, fake_pi(tmp_path, ARGV_PI)))
    assert status == 0, output
    report = fakepi_report(output)
    assert report["argv"] == ["-e", str(bridge_path()), *args]
    assert report["tty"] == [tty, tty]  # the path taken is the one we meant to test
    assert report["env"]["CTXWRAP_SOCKET"] == str(xdg.socket)
    assert bridge_path().is_file()
    # ctxwrap pi started the daemon by itself, in the isolated runtime dir.
    assert xdg.daemon_pid() is not None


@pytest.mark.parametrize("tty", PATHS)
@pytest.mark.parametrize("how", ["flag", "env"])
@pytest.mark.timeout(180)
def test_ctxwrap_off_runs_plain_pi(how: str, tty: bool, xdg: Xdg, tmp_path: Path) -> None:
    args = ["--model", "m", "-p", "hello"]
    if how == "flag":
        env = launcher_env(xdg, fake_pi(tmp_path, ARGV_PI))
        status, output = run_either(tty, ["--ctxwrap-off", *args], env)
    else:
        env = launcher_env(xdg, fake_pi(tmp_path, ARGV_PI), PI_CTX_OFF="1")
        status, output = run_either(tty, args, env)
    assert status == 0, output
    report = fakepi_report(output)
    assert report["argv"] == args  # no -e bridge, and --ctxwrap-off itself is not passed on
    # pi's environment is ours, unchanged: no CTXWRAP_SOCKET & co. for a bridge to find
    assert report["env"] == {
        k: v for k, v in env.items() if k.startswith("CTXWRAP_") and k != "CTXWRAP_PI"
    }
    assert report["tty"] == [tty, tty]
    assert not xdg.socket.exists()  # plain pi needs no daemon
    assert "ctxwrap:" not in output


@pytest.mark.parametrize("tty", PATHS)
@pytest.mark.timeout(120)
def test_no_pi_anywhere_is_a_clear_error(tty: bool, xdg: Xdg, tmp_path: Path) -> None:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    env = launcher_env(xdg, None, PATH=str(empty))
    status, output = run_either(tty, ["--version"], env)
    assert status == 127, output
    assert "ctxwrap: error: pi is not on PATH" in output
    assert "hint:" in output and "CTXWRAP_PI" in output
    assert not xdg.socket.exists()


@pytest.mark.timeout(120)
def test_ctxwrap_pi_not_executable_is_127(xdg: Xdg, tmp_path: Path) -> None:
    env = launcher_env(xdg, tmp_path / "no-such-pi")
    proc = run_no_tty([], env)
    assert proc.returncode == 127, proc.stderr
    assert "CTXWRAP_PI=" in proc.stderr and "hint:" in proc.stderr


@pytest.mark.parametrize("tty", PATHS)
@pytest.mark.timeout(180)
def test_sigterm_to_ctxwrap_reaches_pi(tty: bool, xdg: Xdg, tmp_path: Path) -> None:
    """A supervisor that stops `ctxwrap pi` by its pid stops pi the way it would stop plain pi."""
    env = launcher_env(xdg, fake_pi(tmp_path, TRAP_PI))
    if tty:
        with spawn_tty([], env) as child:
            child.expect("fake-pi-waiting", timeout=90)
            os.kill(child.pid, signal.SIGTERM)
            child.expect(pexpect.EOF, timeout=60)
            output = child.before.decode(errors="replace")
            child.close()
            status = child.exitstatus
        assert "fake-pi-got-term" in output
        assert status == 42, output
        return
    proc = subprocess.Popen(
        [*CTXWRAP, "pi"],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if "fake-pi-waiting" in line:
                break
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 42  # -15 here: ctxwrap died and left pi running
        assert "fake-pi-got-term" in proc.stdout.read()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # ctxwrap and a pi it may have orphaned
        proc.wait(10)
        if proc.stdout:
            proc.stdout.close()


def _old_system_node() -> str:
    """A real Node older than pi 1.x needs (Debian's nodejs 20 here), else skip with why."""
    node = shutil.which("node", path="/usr/local/bin:/usr/bin:/bin")
    if node is None:
        pytest.skip("no system node to run pi 1.x on an old Node (apt-get install nodejs)")
    version = subprocess.run([node, "--version"], capture_output=True, text=True).stdout
    major, minor = (int(x) for x in version.lstrip("v").split(".")[:2])
    if (major, minor) >= (22, 19):
        pytest.skip(f"system node {version.strip()} is new enough; no old Node to test with")
    return node


def test_pi_1x_on_an_old_node_gets_a_hint_after_its_syntax_error(xdg: Xdg, tmp_path: Path) -> None:
    """npm's layout: the bin is `#!/usr/bin/env node` cli.js, so PATH decides the Node."""
    node = _old_system_node()
    cli = pi_path("pi")  # our wrapper names the real cli.js; run that one through `env node`
    entry = next(t for t in cli.read_text().replace('"', " ").split() if t.endswith("cli.js"))
    env = xdg.env()
    env.update(CTXWRAP_PI=entry, PATH=f"{Path(node).parent}:/bin", HOME=str(tmp_path))
    done = subprocess.run(
        [*CTXWRAP, "pi", "--ctxwrap-off", "--version"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 1
    assert "SyntaxError" in done.stderr  # pi's own failure, passed through
    hint = done.stderr[done.stderr.index("SyntaxError") :]  # said after pi's own error
    assert "ctxwrap: pi 1.6.0 needs Node >= 22.19" in hint, done.stderr
    assert f"its launcher ran {node}" in hint and "first on PATH" in hint
