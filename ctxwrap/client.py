"""Talking to the daemon from the CLI: probe, auto-start, version handshake.

`probe()` never raises; it says Ready, NeedsRestart (another version answers) or Unreachable.
`ensure_running()` starts a daemon when needed, under a file lock so that concurrent
`ctxwrap` invocations end up with exactly one daemon.

This module is on `ctxwrap pi`'s start-up path, so the probe uses the standard library only:
httpx (and what it imports) and the pydantic protocol models cost about a second under load.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ctxwrap import PROTOCOL_VERSION, __version__, paths
from ctxwrap.daemon.argv import daemon_run_argv
from ctxwrap.errors import DaemonStartError, DaemonUnreachable, SocketSecurityError
from ctxwrap.state.pidfile import pidfile_locked, read_pidfile

if TYPE_CHECKING:
    import ssl

    import httpx

START_DEADLINE_S = 15.0


@dataclass(frozen=True)
class Health:
    """What GET /v1/health says (protocol.Health on the daemon side)."""

    version: str
    protocol: int
    pid: int
    uptime_s: float
    sessions: int
    socket: str
    config_error: str | None = None
    systemd: bool = False
    degraded: str | None = None  # why state writes fail (disk full), while they do

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Health:
        return cls(
            version=str(data["version"]),
            protocol=int(data["protocol"]),
            pid=int(data["pid"]),
            uptime_s=float(data.get("uptime_s", 0.0)),
            sessions=int(data.get("sessions", 0)),
            socket=str(data.get("socket", "")),
            config_error=data.get("config_error"),
            systemd=bool(data.get("systemd", False)),
            degraded=str(data["degraded"]) if data.get("degraded") else None,
        )


@dataclass(frozen=True)
class Ready:
    health: Health


@dataclass(frozen=True)
class NeedsRestart:
    health: Health
    reason: str


@dataclass(frozen=True)
class Unreachable:
    reason: str


@dataclass(frozen=True)
class Unsafe(Unreachable):
    """The socket or its directory is not ours alone: nothing was sent to it."""

    error: SocketSecurityError | None = None


ProbeResult = Ready | NeedsRestart | Unreachable


def make_client(socket_path: Path | None = None, timeout: float = 5.0) -> httpx.Client:
    """An httpx client that checks the socket (paths.check_socket) before every request.

    Raises SocketSecurityError from the request when another user could own the other end.
    """
    import httpx

    sock = socket_path or paths.socket_path()

    class CheckedTransport(httpx.HTTPTransport):
        def handle_request(self, request: httpx.Request) -> httpx.Response:
            try:
                paths.check_socket(sock)
            except FileNotFoundError as exc:
                raise httpx.ConnectError(f"no socket at {sock}", request=request) from exc
            return super().handle_request(request)

    transport = CheckedTransport(uds=str(sock), verify=_no_ca_context())
    return httpx.Client(transport=transport, base_url="http://ctxwrap", timeout=timeout)


def _no_ca_context() -> ssl.SSLContext:
    """The daemon speaks plain HTTP on its Unix socket: its client needs no CA bundle. httpx's
    default context loads one (~50 ms of CPU, paid by every proxy launch beside the agent's
    first request); this one trusts no certificate at all, so TLS could never succeed."""
    import ssl

    return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)


def _exchange(sock: Path, request: bytes, timeout: float) -> tuple[int, bytes]:
    """One HTTP/1.1 exchange over the Unix socket with the standard library (no httpx: a
    command pays no second of imports), the whole of it bounded by `timeout`; the status and
    the body. The caller has checked the socket. Raises OSError or ValueError."""
    deadline = time.monotonic() + timeout
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(str(sock))
        s.sendall(request)
        chunks = []
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no answer from the daemon within {timeout} s")
            s.settimeout(left)
            chunk = s.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
    head, _, body = b"".join(chunks).partition(b"\r\n\r\n")
    status = head.split(b" ", 2)
    if len(status) < 2 or not status[1].isdigit():
        raise ValueError(f"not an HTTP answer: {head[:40]!r}")
    return int(status[1]), body


def _get_health(sock: Path, timeout: float) -> dict[str, Any]:
    """GET /v1/health over the Unix socket with the standard library only."""
    request = b"GET /v1/health HTTP/1.1\r\nHost: ctxwrap\r\nConnection: close\r\n\r\n"
    status, body = _exchange(sock, request, timeout)
    if status != 200:
        raise ValueError(f"health answered {status}")
    data = json.loads(body)
    if not isinstance(data, dict):
        raise ValueError("health is not a JSON object")
    return data


def post_json(
    path: str, payload: dict[str, Any], *, timeout: float, socket_path: Path | None = None
) -> tuple[int, Any]:
    """POST `payload` to the daemon over its Unix socket, checked first (`paths.check_socket`),
    the whole exchange bounded by `timeout`; the status and the JSON answer. Raises OSError,
    ValueError or SocketSecurityError."""
    sock = socket_path or paths.socket_path()
    paths.check_socket(sock)
    body = json.dumps(payload).encode()
    head = (
        f"POST {path} HTTP/1.1\r\nHost: ctxwrap\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode()
    status, answer = _exchange(sock, head + body, timeout)
    return status, json.loads(answer) if answer else None


def probe(socket_path: Path | None = None, timeout: float = 1.0) -> ProbeResult:
    sock = socket_path or paths.socket_path()
    try:
        paths.check_socket(sock)  # before a single byte: another user may have planted it
    except FileNotFoundError:
        return Unreachable(f"no socket at {sock}")
    except SocketSecurityError as exc:
        return Unsafe(exc.message, exc)
    try:
        health = Health.from_json(_get_health(sock, timeout))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return Unreachable(f"{type(exc).__name__}: {exc}")
    if health.protocol != PROTOCOL_VERSION or health.version != __version__:
        return NeedsRestart(
            health,
            f"daemon {health.version} (protocol {health.protocol}), "
            f"client {__version__} (protocol {PROTOCOL_VERSION})",
        )
    return Ready(health)


def systemd_unit_enabled() -> bool:
    """When the user installed the systemd units, socket activation owns start-up."""
    unit = paths.config_dir().parent / "systemd/user/ctxwrap.socket"
    return unit.exists() and os.environ.get("CTXWRAP_NO_SYSTEMD") != "1"


def _spawn_daemon(started_by: str) -> subprocess.Popen[bytes]:
    log = paths.daemon_log_path()
    # The daemon creates the state dir itself and reports when it cannot (a full disk).
    with contextlib.suppress(OSError):
        log.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    return subprocess.Popen(
        daemon_run_argv(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # survives the terminal that started it
        close_fds=True,
        env={**os.environ, "CTXWRAP_STARTED_BY": started_by},
    )


def _start_failed(child: subprocess.Popen[bytes]) -> DaemonStartError:
    """The daemon we spawned exited before it answered: say why, from its failure record."""
    from ctxwrap.daemon.lifecycle import read_start_failure

    record = read_start_failure(child.pid)
    log = paths.daemon_log_path()
    if record is None:
        return DaemonStartError(
            f"the daemon exited during start-up (status {child.returncode})",
            hint=f"run `ctxwrap daemon run` in the foreground to see why; log: {log}",
        )
    err = DaemonStartError(
        f"the daemon could not start: {record.get('message')}", hint=record.get("hint") or None
    )
    if isinstance(record.get("exit_code"), int):
        err.exit_code = record["exit_code"]
    return err


def stop_daemon(timeout: float = 10.0) -> bool:
    """Ask the running daemon to stop (SIGTERM by pidfile); True if one was stopped."""
    try:
        # A pidfile in a directory another user controls could name any process of ours.
        paths.check_runtime_dir(paths.runtime_dir())
    except FileNotFoundError:
        return False
    info = read_pidfile(paths.pidfile_path())
    if info is None:
        return False
    pid = info[0]
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        if not pidfile_locked(paths.pidfile_path()):
            return True
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    return True


def ensure_running(deadline_s: float = START_DEADLINE_S, *, started_by: str = "ctxwrap") -> Health:
    """Return the health of a ready daemon of our version, starting or restarting one if needed.

    A daemon that fails to start is reported as soon as it exits, with the reason it left
    (see lifecycle.start_failure_path), not after the deadline. ``started_by`` names the
    command, for doctor.
    """
    first = probe()
    if isinstance(first, Ready):
        return first.health
    runtime = paths.ensure_private_dir(paths.runtime_dir())
    lock_fd = os.open(runtime / "start.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        # Whoever waited here finds the daemon the winner started.
        fcntl.flock(lock_fd, fcntl.LOCK_EX)
        result = probe(timeout=2.0)
        if isinstance(result, Ready):
            return result.health
        if (
            isinstance(result, Unreachable)
            and pidfile_locked(paths.pidfile_path())
            and paths.socket_path().exists()
        ):
            # We hold the start lock, so nobody is mid-start: a daemon holds its lock but does
            # not answer (stopped, hung). Starting another is impossible and waiting pointless.
            info = read_pidfile(paths.pidfile_path())
            raise DaemonUnreachable(
                f"the daemon (pid {info[0] if info else '?'}) holds its lock but does not answer ({result.reason})",
                hint="`ctxwrap daemon restart`, or kill it",
            )
        if isinstance(result, NeedsRestart):
            stop_daemon()
        child = None if systemd_unit_enabled() else _spawn_daemon(started_by)
        end = time.monotonic() + deadline_s
        last: ProbeResult = result
        while time.monotonic() < end:
            last = probe(timeout=0.5)
            if isinstance(last, Ready):
                return last.health
            if child is not None and child.poll() is not None:
                raise _start_failed(child)
            time.sleep(0.03)
        reason = last.reason if isinstance(last, (Unreachable, NeedsRestart)) else "?"
        raise DaemonStartError(
            f"the daemon did not become ready within {deadline_s:.0f}s ({reason})",
            hint=f"run `ctxwrap daemon run` in the foreground to see why; log: {paths.daemon_log_path()}",
        )
    finally:
        fcntl.flock(lock_fd, fcntl.LOCK_UN)
        os.close(lock_fd)


def request(
    method: str, path: str, body: dict[str, Any] | None = None, *, timeout: float = 5.0
) -> Any:
    """One call to a running daemon; raises DaemonUnreachable when nothing answers and
    SocketSecurityError (nothing sent) when the socket is not ours alone."""
    import httpx

    try:
        with make_client(timeout=timeout) as c:
            r = c.request(method, path, json=body)
    except httpx.HTTPError as exc:
        raise DaemonUnreachable(
            f"cannot reach the daemon at {paths.socket_path()}: {exc}",
            hint="`ctxwrap daemon start`",
        ) from exc
    try:
        data = r.json()
    except json.JSONDecodeError:
        data = {"error": r.text[:200]}
    if r.status_code >= 400:
        raise DaemonUnreachable(
            f"daemon answered {r.status_code}: {data.get('error')} {data.get('detail') or ''}".strip()
        )
    return data
