"""systemd user units: rendering, `systemd-analyze verify`, `ctxwrap service …`, and the
daemon started the way systemd starts it (socket passed as fd 3, READY=1 on NOTIFY_SOCKET).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from support import isolated_env

from ctxwrap.service import render_unit

REPO = Path(__file__).resolve().parents[2]


def ctxwrap_argv() -> list[str]:
    return [sys.executable, "-m", "ctxwrap"]


@pytest.fixture
def env(tmp_path: Path) -> Iterator[dict[str, str]]:
    with isolated_env(tmp_path) as e:
        yield e


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*ctxwrap_argv(), *args], env=env, capture_output=True, text=True, timeout=60, check=False
    )


# -- unit files ----------------------------------------------------------------------------------


def test_units_name_this_interpreter_and_the_client_socket() -> None:
    service = render_unit("ctxwrap.service")
    socket_unit = render_unit("ctxwrap.socket")
    assert f"ExecStart={os.path.abspath(sys.executable)} -m ctxwrap daemon run" in service
    for line in ("Type=notify", "Restart=on-failure", "Requires=ctxwrap.socket"):
        assert line in service.splitlines()
    assert "man:ctxwrap(1)" in service and "man:ctxwrap(1)" in socket_unit
    for line in (
        "ListenStream=%t/ctxwrap/daemon.sock",
        "SocketMode=0600",
        "DirectoryMode=0700",
        "WantedBy=sockets.target",
    ):
        assert line in socket_unit.splitlines()
    assert "@PYTHON@" not in service


def test_exec_path_with_space_and_percent_is_quoted() -> None:
    service = render_unit("ctxwrap.service", python="/opt/my env/100%/python")
    assert 'ExecStart="/opt/my env/100%%/python" -m ctxwrap daemon run' in service


def test_systemd_analyze_verify(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed (apt-get install -y systemd)")
    units = tmp_path / "units"
    units.mkdir()
    for name in ("ctxwrap.socket", "ctxwrap.service"):
        (units / name).write_text(render_unit(name))
    # Documentation=man:… is checked too: point MANPATH at the committed pages.
    manpath = tmp_path / "manpath"
    for page, section in (("ctxwrap.1", "man1"), ("ctxwrap-daemon.8", "man8")):
        (manpath / section).mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / "man" / page, manpath / section / page)
    env = {**os.environ, "MANPATH": str(manpath), "SYSTEMD_LOG_LEVEL": "notice"}
    done = subprocess.run(
        [analyze, "verify", "ctxwrap.socket", "ctxwrap.service"],
        cwd=units,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stderr.strip() == "", done.stderr


# -- ctxwrap service -----------------------------------------------------------------------------


def fake_systemctl(tmp_path: Path, works: bool) -> tuple[Path, Path]:
    """A systemctl that logs its arguments (a real user manager is not part of the test box)."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    log = tmp_path / "systemctl.log"
    exe = bindir / "systemctl"
    exe.write_text(
        f'#!/bin/sh\necho "$*" >> {log}\n'
        + ("" if works else 'echo "Failed to connect to bus" >&2; exit 1\n')
        + 'case "$2" in is-enabled) echo enabled;; is-active) echo active;; esac\nexit 0\n'
    )
    exe.chmod(0o755)
    return bindir, log


def test_install_writes_units_enables_socket_and_uninstall_removes(
    env: dict[str, str], tmp_path: Path
) -> None:
    bindir, log = fake_systemctl(tmp_path, works=True)
    env = {**env, "PATH": f"{bindir}{os.pathsep}{env['PATH']}"}
    done = cli(env, "service", "install")
    assert done.returncode == 0, done.stdout + done.stderr
    unit_dir = Path(env["XDG_CONFIG_HOME"]) / "systemd" / "user"
    assert (unit_dir / "ctxwrap.socket").read_text() == render_unit("ctxwrap.socket")
    assert (unit_dir / "ctxwrap.service").read_text() == render_unit("ctxwrap.service")
    calls = log.read_text().splitlines()
    assert "--user daemon-reload" in calls
    assert "--user enable --now ctxwrap.socket" in calls
    assert calls.index("--user daemon-reload") < calls.index("--user enable --now ctxwrap.socket")

    # the client now leaves start-up to socket activation
    probe = subprocess.run(
        [sys.executable, "-c", "from ctxwrap.client import systemd_unit_enabled as e; print(e())"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert probe.stdout.strip() == "True"

    status = cli(env, "service", "status")
    assert status.returncode == 0, status.stdout
    assert "ctxwrap.socket: enabled, active" in status.stdout

    again = cli(env, "service", "install")
    assert "unchanged" in again.stdout

    gone = cli(env, "service", "uninstall")
    assert gone.returncode == 0, gone.stdout + gone.stderr
    assert not (unit_dir / "ctxwrap.socket").exists()
    assert not (unit_dir / "ctxwrap.service").exists()
    assert "--user disable --now ctxwrap.socket ctxwrap.service" in log.read_text()


def test_install_without_a_user_manager_says_what_to_run(
    env: dict[str, str], tmp_path: Path
) -> None:
    bindir, log = fake_systemctl(tmp_path, works=False)
    env = {**env, "PATH": f"{bindir}{os.pathsep}{env['PATH']}"}
    done = cli(env, "service", "install")
    assert done.returncode == 0, done.stderr
    assert "systemctl --user enable --now ctxwrap.socket" in done.stdout
    assert (Path(env["XDG_CONFIG_HOME"]) / "systemd/user/ctxwrap.socket").exists()
    assert "enable" not in log.read_text()  # only the probe ran
    status = cli(env, "service", "status")
    assert "not available" in status.stdout
    assert status.returncode == 0  # installed and current; activity unknowable here


def test_status_before_install_exits_3(env: dict[str, str]) -> None:
    done = cli(env, "service", "status")
    assert done.returncode == 3
    assert "not installed" in done.stdout


def test_relative_xdg_config_home_counts_as_unset(env: dict[str, str]) -> None:
    env = {**env, "XDG_CONFIG_HOME": "relative/dir", "PATH": "/nonexistent"}
    done = cli(env, "service", "install", "--no-enable")
    assert done.returncode == 0, done.stderr
    assert (Path(env["HOME"]) / ".config/systemd/user/ctxwrap.service").exists()


# -- socket activation + sd_notify ---------------------------------------------------------------

# What systemd does before exec: the listening socket becomes fd 3, LISTEN_PID is the pid of
# the process that will run the daemon (exec keeps it), LISTEN_FDS=1.
SYSTEMD_LIKE_EXEC = """
import os, sys
fd = int(os.environ.pop("TEST_LISTEN_FD"))
if fd != 3:
    os.dup2(fd, 3)
    os.close(fd)
os.environ["LISTEN_FDS"] = "1"
os.environ["LISTEN_PID"] = str(os.getpid())
os.execv(sys.executable, [sys.executable, "-m", "ctxwrap", "daemon", "run"])
"""


def recv_until(sock: socket.socket, needle: str, deadline: float) -> str:
    seen = ""
    while needle not in seen:
        sock.settimeout(max(0.05, deadline - time.monotonic()))
        try:
            seen += sock.recv(4096).decode() + "\n"
        except TimeoutError:
            break
    return seen


@dataclass
class Activated:
    proc: subprocess.Popen[bytes]
    sock_path: Path
    inode: int
    notify: socket.socket
    log: Path


@contextlib.contextmanager
def systemd_started_daemon(env: dict[str, str], tmp_path: Path) -> Iterator[Activated]:
    """A daemon started as systemd would; killed in `finally` whatever the test did."""
    runtime = Path(env["XDG_RUNTIME_DIR"]) / "ctxwrap"
    runtime.mkdir(mode=0o700)
    sock_path = runtime / "daemon.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(sock_path))
    os.chmod(sock_path, 0o600)
    listener.listen(16)
    notify_path = Path(env["XDG_RUNTIME_DIR"]) / "notify"
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(str(notify_path))
    log = tmp_path / "daemon.log"
    with log.open("w") as log_fh:
        proc = subprocess.Popen(
            [sys.executable, "-c", SYSTEMD_LIKE_EXEC],
            env={
                **env,
                "TEST_LISTEN_FD": str(listener.fileno()),
                "NOTIFY_SOCKET": str(notify_path),
            },
            pass_fds=(listener.fileno(),),
            stdin=subprocess.DEVNULL,
            stdout=log_fh,
            stderr=subprocess.STDOUT,
        )
    try:
        yield Activated(proc, sock_path, sock_path.stat().st_ino, notify, log)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        listener.close()
        notify.close()


def test_socket_activation_and_sd_notify(env: dict[str, str], tmp_path: Path) -> None:
    with systemd_started_daemon(env, tmp_path) as d:
        got = recv_until(d.notify, "READY=1", time.monotonic() + 30)
        assert "READY=1" in got, f"no READY=1; got {got!r}; log: {d.log.read_text()}"
        assert f"MAINPID={d.proc.pid}" in got

        transport = httpx.HTTPTransport(uds=str(d.sock_path))
        with httpx.Client(transport=transport, base_url="http://ctxwrap", timeout=5) as c:
            health = c.get("/v1/health").json()
        assert health["pid"] == d.proc.pid
        assert health["systemd"] is True
        # it served on the socket it was given, not one it bound itself
        assert d.sock_path.stat().st_ino == d.inode

        d.proc.send_signal(signal.SIGTERM)
        # systemd counts both a 0 exit and death by SIGTERM as a clean stop
        assert d.proc.wait(timeout=20) == 0  # run_daemon's cleanup ran
        assert d.sock_path.exists()  # systemd's socket: not the daemon's to remove


def test_sigterm_under_systemd_stops_cleanly(env: dict[str, str], tmp_path: Path) -> None:
    with systemd_started_daemon(env, tmp_path) as d:
        assert "READY=1" in recv_until(d.notify, "READY=1", time.monotonic() + 30)
        d.proc.send_signal(signal.SIGTERM)
        code = d.proc.wait(timeout=20)
        assert "STOPPING=1" in recv_until(d.notify, "STOPPING=1", time.monotonic() + 5)
        assert code == 0
