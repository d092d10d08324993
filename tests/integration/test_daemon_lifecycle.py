"""The real daemon process: start, stop, restart, status, races, stale state, signals, peers.

Every daemon started here dies in `finally`: the `xdg` fixture kills the pidfile's daemon,
and `no_stray_daemons` kills any other daemon process running under this test's XDG dirs
(a race that produced two daemons must not leak one into the next test).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import CTXWRAP, Xdg, client, ctxwrap, wait_ready

from ctxwrap import __version__
from ctxwrap.protocol import PROTOCOL_VERSION
from ctxwrap.state.pidfile import pidfile_locked

STATUS_FIELDS = {"state", "pid", "version", "socket", "uptime_s", "sessions"}


def daemon_pids(xdg: Xdg) -> list[int]:
    """Every live `ctxwrap daemon run` whose XDG_RUNTIME_DIR is this test's."""
    want = f"XDG_RUNTIME_DIR={xdg.runtime}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            env = (entry / "environ").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z" and b"daemon" in argv and b"run" in argv and want in env:
            found.append(int(entry.name))
    return sorted(found)


def pid_gone(pid: int, timeout: float = 10.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            with open(f"/proc/{pid}/stat") as fh:
                if fh.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True  # exited; its parent has not reaped it yet
        except OSError:
            return True
        time.sleep(0.02)
    return False


@pytest.fixture
def no_stray_daemons(xdg: Xdg) -> Iterator[Xdg]:
    try:
        yield xdg
    finally:
        for pid in daemon_pids(xdg):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def status_json(xdg: Xdg) -> tuple[int, dict[str, object]]:
    proc = ctxwrap(xdg, "daemon", "status", "--json")
    return proc.returncode, json.loads(proc.stdout)


def started_pid(proc: subprocess.CompletedProcess[str]) -> int:
    assert proc.returncode == 0, proc.stderr
    m = re.search(r"ready \(pid (\d+)\) on (\S+)", proc.stdout)
    assert m, proc.stdout
    return int(m.group(1))


# -- lifecycle commands ------------------------------------------------------------------------


def test_status_start_restart_stop(no_stray_daemons: Xdg) -> None:
    xdg = no_stray_daemons
    code, out = status_json(xdg)
    assert code == 3, "exit 3 when not ready, like `systemctl status`"
    assert set(out) >= STATUS_FIELDS
    assert out["state"] == "unreachable" and out["pid"] is None
    assert out["socket"] == str(xdg.socket)

    pid = started_pid(ctxwrap(xdg, "daemon", "start"))
    assert daemon_pids(xdg) == [pid] == [xdg.daemon_pid()]
    code, out = status_json(xdg)
    assert code == 0
    assert out["state"] == "ready"
    assert out["pid"] == pid
    assert out["version"] == __version__
    assert out["socket"] == str(xdg.socket)
    assert isinstance(out["uptime_s"], float) and 0 <= out["uptime_s"] < 120
    assert out["sessions"] == 0
    assert oct(xdg.socket.stat().st_mode & 0o777) == "0o600"
    assert oct(xdg.socket.parent.stat().st_mode & 0o777) == "0o700"

    again = started_pid(ctxwrap(xdg, "daemon", "start"))
    assert again == pid, "start is a no-op when a ready daemon answers"

    new = started_pid(ctxwrap(xdg, "daemon", "restart"))
    assert new != pid and pid_gone(pid)
    assert daemon_pids(xdg) == [new]

    stop = ctxwrap(xdg, "daemon", "stop")
    assert stop.returncode == 0 and stop.stdout.strip() == "stopped"
    assert pid_gone(new)
    assert not xdg.socket.exists()
    assert not pidfile_locked(xdg.pidfile)
    assert status_json(xdg)[0] == 3
    assert ctxwrap(xdg, "daemon", "stop").stdout.strip() == "not running"


def test_plain_status_when_down_says_it_starts_on_demand(xdg: Xdg) -> None:
    # issue 22: not running is the normal state between sessions, not a failure
    proc = ctxwrap(xdg, "status")
    assert proc.returncode == 0, proc.stdout
    assert "daemon: not running (starts on demand)" in proc.stdout
    assert json.loads(ctxwrap(xdg, "status", "--json").stdout)["state"] == "not-running"
    # `daemon status` keeps systemctl's convention
    assert ctxwrap(xdg, "daemon", "status").returncode == 3


def test_plain_status_exits_3_when_the_socket_does_not_answer(xdg: Xdg) -> None:
    xdg.socket.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(str(xdg.socket))
    os.chmod(xdg.socket, 0o600)
    srv.listen(1)  # accepts, never answers: a hung daemon
    try:
        proc = ctxwrap(xdg, "status")
        assert proc.returncode == 3, proc.stdout
        assert "not running" not in proc.stdout
    finally:
        srv.close()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_stops_cleanly(xdg: Xdg, sig: signal.Signals) -> None:
    proc = subprocess.Popen(
        [*CTXWRAP, "daemon", "run"],
        env=xdg.env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        wait_ready(xdg)
        assert pidfile_locked(xdg.pidfile)
        proc.send_signal(sig)
        code = proc.wait(15)
        err = proc.stderr.read().decode() if proc.stderr else ""
        assert code == 0, err
        assert not xdg.socket.exists(), "the socket is removed on a clean stop"
        assert not pidfile_locked(xdg.pidfile), "the pidfile lock is released"
        assert "Traceback" not in err
    finally:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        proc.wait(10)
        if proc.stderr:
            proc.stderr.close()


# -- races ---------------------------------------------------------------------------------------


def test_two_concurrent_daemon_starts_make_one_daemon(no_stray_daemons: Xdg) -> None:
    xdg = no_stray_daemons
    procs = [
        subprocess.Popen(
            [*CTXWRAP, "daemon", "start"],
            env=xdg.env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            stdin=subprocess.DEVNULL,
        )
        for _ in range(2)
    ]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=60)
        results.append(subprocess.CompletedProcess(p.args, p.returncode, out, err))
    pids = {started_pid(r) for r in results}
    assert len(pids) == 1, results
    assert daemon_pids(xdg) == sorted(pids) == [xdg.daemon_pid()]


ENSURE = "from ctxwrap.client import ensure_running; print(ensure_running().pid, flush=True)"


def test_two_concurrent_ensure_running_make_one_daemon(no_stray_daemons: Xdg) -> None:
    xdg = no_stray_daemons
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", ENSURE],
            env=xdg.env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=60) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    pids = {int(out.strip()) for out, _ in outs}
    assert len(pids) == 1, outs
    assert daemon_pids(xdg) == sorted(pids)
    assert wait_ready(xdg)["pid"] in pids


# -- stale and dead daemons ----------------------------------------------------------------------

BIND_AND_DIE = (
    "import socket, sys; s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); s.listen(1)"
)


def test_stale_socket_is_replaced(no_stray_daemons: Xdg) -> None:
    xdg = no_stray_daemons
    xdg.socket.parent.mkdir(mode=0o700, parents=True)
    # A socket file bound by a process that has exited: nobody answers on it.
    subprocess.run([sys.executable, "-c", BIND_AND_DIE, str(xdg.socket)], check=True)
    assert xdg.socket.is_socket()
    os.utime(xdg.socket, (946684800, 946684800))  # marks the stale file (inodes get reused)
    with socket.socket(socket.AF_UNIX) as probe, pytest.raises(ConnectionRefusedError):
        probe.connect(str(xdg.socket))

    pid = started_pid(ctxwrap(xdg, "daemon", "start"))
    assert xdg.socket.stat().st_mtime > 946684800, "the daemon bound a new socket"
    assert wait_ready(xdg)["pid"] == pid


def test_kill_9_then_start_again(no_stray_daemons: Xdg) -> None:
    xdg = no_stray_daemons
    first = started_pid(ctxwrap(xdg, "daemon", "start"))
    os.kill(first, signal.SIGKILL)
    assert pid_gone(first)
    assert xdg.socket.exists(), "SIGKILL leaves the socket behind"
    assert status_json(xdg)[0] == 3

    second = started_pid(ctxwrap(xdg, "daemon", "start"))
    assert second != first
    health = wait_ready(xdg)
    assert health["pid"] == second and health["protocol"] == PROTOCOL_VERSION
    assert daemon_pids(xdg) == [second]


OLD_DAEMON = r'''
"""A stand-in for a daemon of an older protocol: real pidfile lock, real socket path."""
import json, os, socketserver, sys
from http.server import BaseHTTPRequestHandler
from ctxwrap import __version__, paths
from ctxwrap.state.pidfile import acquire_pidfile

lock = acquire_pidfile(paths.pidfile_path())

class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        body = json.dumps({
            "status": "ok", "version": __version__, "protocol": 0, "pid": os.getpid(),
            "uptime_s": 1.0, "sessions": 0, "socket": str(paths.socket_path()),
        }).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass

server = socketserver.UnixStreamServer(str(paths.socket_path()), Handler)
print("serving", flush=True)
server.serve_forever()
'''


@pytest.fixture
def old_daemon(no_stray_daemons: Xdg, tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    xdg = no_stray_daemons
    script = tmp_path / "old_daemon.py"
    script.write_text(OLD_DAEMON)
    xdg.socket.parent.mkdir(mode=0o700, parents=True)
    proc = subprocess.Popen(
        [sys.executable, str(script)], env=xdg.env(), stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "serving"
        assert wait_ready(xdg)["protocol"] == 0
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        proc.wait(10)
        if proc.stdout:
            proc.stdout.close()


def test_status_of_an_old_protocol_daemon_is_needs_restart(
    no_stray_daemons: Xdg, old_daemon: subprocess.Popen[str]
) -> None:
    code, out = status_json(no_stray_daemons)
    assert code == 3
    assert out["state"] == "needs-restart" and out["pid"] == old_daemon.pid


def test_protocol_mismatch_restarts_the_daemon(
    no_stray_daemons: Xdg, old_daemon: subprocess.Popen[str]
) -> None:
    xdg = no_stray_daemons
    assert xdg.daemon_pid() == old_daemon.pid
    pid = started_pid(ctxwrap(xdg, "daemon", "start"))
    assert old_daemon.wait(15) == -signal.SIGTERM, "the old daemon is asked to stop"
    assert pid != old_daemon.pid
    health = wait_ready(xdg)
    assert health["pid"] == pid and health["protocol"] == PROTOCOL_VERSION
    assert xdg.daemon_pid() == pid


# -- transport -----------------------------------------------------------------------------------

NOBODY = 65534

CONNECT_AS_NOBODY = r"""
import os, socket, sys
os.setgroups([]); os.setgid(65534); os.setuid(65534)
s = socket.socket(socket.AF_UNIX)
s.settimeout(5)
s.connect(sys.argv[1])  # the kernel accepts; the daemon then closes before reading a byte
got = b""
try:
    s.sendall(b"GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n")
    while chunk := s.recv(65536):
        got += chunk
    print("closed", len(got), got[:40])
except socket.timeout:
    print("timeout", len(got), got[:40])
except (BrokenPipeError, ConnectionResetError):
    print("reset", len(got), got[:40])
"""


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to connect as another uid")
def test_other_uid_is_rejected_without_an_answer(no_stray_daemons: Xdg) -> None:
    xdg = no_stray_daemons
    pid = started_pid(ctxwrap(xdg, "daemon", "start"))
    # Open every layer to everyone, so only the SO_PEERCRED check stands in the way.
    for d in (xdg.runtime, xdg.socket.parent):
        d.chmod(0o755)
    xdg.socket.chmod(0o666)
    proc = subprocess.run(
        [sys.executable, "-c", CONNECT_AS_NOBODY, str(xdg.socket)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 0, proc.stderr
    verdict = proc.stdout.split()
    assert verdict[0] in ("closed", "reset") and verdict[1] == "0", proc.stdout
    # The daemon stays up and still answers its own user.
    assert wait_ready(xdg)["pid"] == pid
    log = (xdg.state / "ctxwrap" / "daemon.log").read_text()
    assert f"rejected connection from uid {NOBODY}" in log


def test_curl_gets_health(xdg: Xdg) -> None:
    curl = shutil.which("curl")
    if curl is None:
        pytest.skip("curl is not installed")
    pid = started_pid(ctxwrap(xdg, "daemon", "start"))
    proc = subprocess.run(
        [
            curl,
            "-sS",
            "-i",
            "--max-time",
            "5",
            "--unix-socket",
            str(xdg.socket),
            "http://x/v1/health",
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 0, proc.stderr
    head, body = proc.stdout.split("\n\n", 1)  # text mode: \r\n became \n
    assert head.startswith("HTTP/1.1 200")
    assert re.search(rf"(?im)^x-ctxwrap-instance: {pid}-\d+\.\d+\r?$", head), head
    health = json.loads(body)
    assert health["status"] == "ok" and health["pid"] == pid
    assert health["protocol"] == PROTOCOL_VERSION


def test_instance_header_changes_on_restart(no_stray_daemons: Xdg) -> None:
    """The bridge notices a restarted daemon by this header and registers its session again."""
    xdg = no_stray_daemons
    started_pid(ctxwrap(xdg, "daemon", "start"))
    with client(xdg) as c:
        first = c.get("/v1/health").headers["x-ctxwrap-instance"]
        assert c.get("/v1/health").headers["x-ctxwrap-instance"] == first
    started_pid(ctxwrap(xdg, "daemon", "restart"))
    with client(xdg) as c:
        assert c.get("/v1/health").headers["x-ctxwrap-instance"] != first


def test_log_file_option_is_honoured(xdg: Xdg, tmp_path: Path) -> None:
    """`daemon run --log-file X` logs to X (it once went to the state dir regardless)."""
    log = tmp_path / "elsewhere.log"
    proc = subprocess.Popen(
        [*CTXWRAP, "daemon", "run", "--log-file", str(log)],
        env=xdg.env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_ready(xdg)
        end = time.monotonic() + 5
        # The handler creates the file at start-up; the "ready" line follows the first health
        # answer by a moment, so wait for the line, not the file.
        while not (log.exists() and "ready on" in log.read_text()) and time.monotonic() < end:
            time.sleep(0.05)
        assert log.exists() and "ready on" in log.read_text()
    finally:
        proc.kill()
        proc.wait(10)
