"""Running the daemon: pidfile lock, a private socket, uvicorn, systemd hand-off, background jobs.

Start-up order matters: the pidfile lock is taken before the socket is touched, so two
daemons can never fight over one socket, and a socket left by a crashed daemon (nobody
answers on it) is replaced.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import socket
import struct
import sys
import time
from pathlib import Path
from typing import Any

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from ctxwrap import __version__, paths
from ctxwrap.config import load_config
from ctxwrap.daemon.app import build_app
from ctxwrap.daemon.service import Daemon
from ctxwrap.errors import (
    ConfigError,
    CtxwrapError,
    DaemonAlreadyRunning,
    DaemonStartError,
    SocketSecurityError,
    StateWriteError,
)
from ctxwrap.state.pidfile import acquire_pidfile
from ctxwrap.state.store import disk_write_failure, free_space

log = logging.getLogger("ctxwrap.daemon")
SD_LISTEN_FDS_START = 3


class PeerCheckedH11Protocol(H11Protocol):
    """Closes connections from any other uid (SO_PEERCRED), before a byte is read."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family == socket.AF_UNIX:
            try:
                creds = sock.getsockopt(
                    socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")
                )
                _pid, uid, _gid = struct.unpack("3i", creds)
            except OSError:
                uid = -1
            if uid != os.getuid():
                log.warning("rejected connection from uid %s", uid)
                transport.close()
                return
        super().connection_made(transport)


def _socket_answers(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(0.5)
        try:
            probe.connect(str(path))
        except OSError:
            return False
    return True


def bind_socket(path: Path) -> socket.socket:
    if path.is_symlink():
        raise SocketSecurityError(
            f"{path} is a symlink; refusing to replace it", hint="remove it by hand"
        )
    if path.exists():
        # Ours and answering: a live daemon. Another user's socket in our (now private) dir is
        # removed unasked: connecting to it would tell its owner we are here.
        if path.lstat().st_uid == os.getuid() and _socket_answers(path):
            raise DaemonAlreadyRunning(
                f"something already answers on {path}", hint="`ctxwrap daemon stop`"
            )
        path.unlink()  # stale: left by a daemon that died without cleaning up
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)  # created 0600: no window where another user could connect
    try:
        sock.bind(str(path))
    finally:
        os.umask(old)
    os.chmod(path, 0o600)
    sock.listen(128)
    return sock


def systemd_socket() -> socket.socket | None:
    """The listening socket systemd passed us (socket activation), if any."""
    if os.environ.get("LISTEN_PID") != str(os.getpid()):
        return None
    if int(os.environ.get("LISTEN_FDS", "0") or 0) < 1:
        return None
    for var in ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"):
        os.environ.pop(var, None)  # not for our children
    sock = socket.socket(fileno=SD_LISTEN_FDS_START)
    sock.setblocking(False)
    return sock


def sd_notify(message: str) -> bool:
    addr = os.environ.get("NOTIFY_SOCKET")
    if not addr:
        return False
    if addr.startswith("@"):
        addr = "\0" + addr[1:]
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
        try:
            s.connect(addr)
            s.sendall(message.encode())
        except OSError:
            return False
    return True


class ConfigWatcher:
    """Reload config.toml when it changes; a broken edit keeps the last good config in force."""

    def __init__(self, daemon: Daemon, loop: asyncio.AbstractEventLoop) -> None:
        self.daemon = daemon
        self.loop = loop
        self.observer: Any = None

    def start(self) -> None:
        from watchdog.events import FileSystemEvent, FileSystemEventHandler
        from watchdog.observers import Observer

        target = self.daemon.loaded.file
        target.parent.mkdir(parents=True, exist_ok=True)
        watcher = self

        class Handler(FileSystemEventHandler):
            def on_any_event(self, event: FileSystemEvent) -> None:
                # watchdog reports reads too (opened, closed_no_write): our own reload reads
                # the file, so reacting to those would reload forever.
                if event.event_type in ("opened", "closed_no_write"):
                    return
                names = {
                    os.fsdecode(event.src_path),
                    os.fsdecode(getattr(event, "dest_path", "") or ""),
                }
                if str(target) in names:
                    watcher.loop.call_soon_threadsafe(watcher.reload)

        self.observer = Observer()
        self.observer.schedule(Handler(), str(target.parent), recursive=False)
        self.observer.daemon = True
        self.observer.start()

    def reload(self) -> None:
        try:
            loaded = load_config(self.daemon.loaded.file)
        except ConfigError as exc:
            self.daemon.report_config_error(exc.message)
            log.warning("config reload failed, keeping the last good config: %s", exc.message)
            return
        if loaded.settings != self.daemon.loaded.settings or self.daemon.config_error:
            self.daemon.apply_config(loaded)
            log.info("config reloaded from %s", loaded.file)

    def stop(self) -> None:
        if self.observer is not None:
            self.observer.stop()


class _RedactingFormatter(logging.Formatter):
    """Log lines and tracebacks can quote request content or a bad config value: redact them."""

    def format(self, record: logging.LogRecord) -> str:
        from ctxwrap.digest.redact import redact_secrets

        return redact_secrets(super().format(record))


async def _housekeeping(daemon: Daemon, server: uvicorn.Server) -> None:
    while not server.should_exit:
        await asyncio.sleep(2.0)
        daemon.reap_dead_sessions()
        idle = daemon.cfg.idle_exit_s
        if idle and not daemon.sessions and time.monotonic() - daemon.last_activity > idle:
            log.info("no live session for %ss: exiting", idle)
            server.should_exit = True


STARTED_BY_ENV = "CTXWRAP_STARTED_BY"  # set by whoever spawns `daemon run` in the background


def start_failure_path() -> Path:
    """Where a daemon that could not start leaves why, for the client waiting on it.

    In the runtime dir, not the state dir: the state dir's disk being full is one of the
    reasons a start fails, and then daemon.log cannot say so either."""
    return paths.runtime_dir() / "start-failure.json"


def read_start_failure(pid: int) -> dict[str, Any] | None:
    """The failure record daemon ``pid`` left, if it left one."""
    try:
        data = json.loads(start_failure_path().read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("pid") == pid else None


def _record_start_failure(exc: BaseException) -> CtxwrapError:
    """Say why start-up failed in the log and the runtime dir; return the error to raise."""
    if isinstance(exc, CtxwrapError):
        err = exc
    else:
        state = paths.state_dir()
        cause = disk_write_failure(exc)
        if cause is not None:
            err = StateWriteError(
                f"cannot write the state directory {state}: {cause} ({free_space(state)})",
                hint=f"free space on the filesystem holding {state}, or point XDG_STATE_HOME "
                "at another one",
            )
        else:
            # SQLite's messages do not say which file: name the state dir it was opening.
            err = DaemonStartError(
                f"start-up failed (state dir {state}): {type(exc).__name__}: {exc}"
            )
    log.error("start-up failed: %s%s", err.message, f" ({err.hint})" if err.hint else "")
    record = {
        "pid": os.getpid(),
        "ts": time.time(),
        "message": err.message,
        "hint": err.hint,
        "exit_code": err.exit_code,
    }
    with contextlib.suppress(OSError):
        path = start_failure_path()
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(json.dumps(record))
        os.replace(tmp, path)
    return err


def run_daemon(*, log_file: Path | None = None) -> int:
    """`ctxwrap daemon run`: serve until SIGTERM/SIGINT. Returns the exit status."""
    # Whatever umask started us (000 included): the DB, its -wal/-shm, logs and raw outputs
    # hold what passed through the daemon and are the user's alone.
    os.umask(0o077)
    started_by = os.environ.pop(STARTED_BY_ENV, "") or "ctxwrap daemon run"
    state_error: Exception | None = None
    try:
        state = paths.ensure_state_dir()
    except Exception as exc:  # a full disk, a foreign dir: reported below, once logging is up
        state, state_error = paths.state_dir(), exc
    handler: logging.Handler = logging.StreamHandler(sys.stderr)
    if log_file is not None:
        try:
            handler = logging.FileHandler(log_file)
        except OSError as exc:  # e.g. the state dir cannot be created: say so on stderr
            sys.stderr.write(f"ctxwrap: cannot open the log {log_file}: {exc.strerror}\n")
    handler.setFormatter(_RedactingFormatter("%(asctime)s %(levelname)s %(message)s"))
    logging.basicConfig(level=logging.INFO, handlers=[handler])
    sock_path = paths.socket_path()
    pid_fd: int | None = None
    sock: socket.socket | None = None
    activated: socket.socket | None = None
    bound_ino: int | None = None
    try:
        if state_error is not None:
            raise state_error
        runtime = paths.ensure_private_dir(paths.runtime_dir())
        try:
            loaded = load_config()
            config_error = None
        except ConfigError as exc:
            # A broken config must not keep the daemon down: run on defaults and say why.
            loaded = load_config(Path(os.devnull))
            config_error = exc.message
        pid_fd = acquire_pidfile(runtime / "daemon.pid")
        activated = systemd_socket()
        if activated is not None:
            started_by = "systemd"
        sock = activated or bind_socket(sock_path)
        bound_ino = None if activated else os.stat(sock_path).st_ino
        daemon = Daemon(
            loaded,
            socket=sock_path,
            state_dir=state,
            systemd=activated is not None or "NOTIFY_SOCKET" in os.environ,
        )
    except BaseException as exc:
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        err = _record_start_failure(exc)
        _release(sock, activated, sock_path, bound_ino, pid_fd)
        raise err from exc
    with contextlib.suppress(OSError):
        start_failure_path().unlink(missing_ok=True)  # an earlier failed start's, now moot
    # A second line after `<pid> <version>`: how this daemon came to run, for doctor/status.
    with contextlib.suppress(OSError):
        os.write(pid_fd, f"started-by {started_by}\n".encode())
    if config_error:
        daemon.report_config_error(config_error)
    app = build_app(daemon)
    config = uvicorn.Config(
        app,
        http=PeerCheckedH11Protocol,
        lifespan="off",
        log_level="warning",
        access_log=False,
        timeout_keep_alive=300,
        ws="none",
    )
    server = uvicorn.Server(config)
    app.state.request_stop = lambda: setattr(server, "should_exit", True)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        watcher = ConfigWatcher(daemon, loop)
        with contextlib.suppress(Exception):
            watcher.start()
        house = asyncio.create_task(_housekeeping(daemon, server))

        async def notify_when_started() -> None:
            while not server.started and not server.should_exit:
                await asyncio.sleep(0.01)
            sd_notify(f"READY=1\nSTATUS=serving on {sock_path}\nMAINPID={os.getpid()}")
            log.info("ctxwrap daemon %s ready on %s (pid %s)", __version__, sock_path, os.getpid())

        notifier = asyncio.create_task(notify_when_started())
        try:
            await server.serve(sockets=[sock])
        finally:
            sd_notify("STOPPING=1")
            house.cancel()
            notifier.cancel()
            watcher.stop()
            await daemon.aclose()

    # uvicorn restores the handlers it found and re-raises the signal it caught once it has
    # stopped serving; with SIG_DFL that kills us before the cleanup below. No-op handlers
    # make that re-raise harmless.
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: None)
    try:
        asyncio.run(main())
    finally:
        _release(sock, activated, sock_path, bound_ino, pid_fd)
    return 0


def _release(
    sock: socket.socket | None,
    activated: socket.socket | None,
    sock_path: Path,
    bound_ino: int | None,
    pid_fd: int | None,
) -> None:
    if sock is not None and activated is None and bound_ino is not None:
        with contextlib.suppress(OSError):
            # Only remove the socket if it is still ours (a successor may have replaced it).
            if sock_path.exists() and os.stat(sock_path).st_ino == bound_ino:
                sock_path.unlink()
    if sock is not None:
        sock.close()
    if pid_fd is not None:
        with contextlib.suppress(OSError):
            os.ftruncate(pid_fd, 0)
        os.close(pid_fd)
