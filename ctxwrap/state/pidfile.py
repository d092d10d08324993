"""The daemon's pidfile: `<pid> <version>`, held under an exclusive fcntl lock while it runs.

Kept apart from lifecycle.py so CLI commands can read it without importing the server stack.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from ctxwrap import __version__
from ctxwrap.errors import DaemonAlreadyRunning


def acquire_pidfile(path: Path) -> int:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError as exc:
        other = read_pidfile(path)
        os.close(fd)
        raise DaemonAlreadyRunning(
            f"a ctxwrap daemon is already running (pid {other[0] if other else '?'})",
            hint="`ctxwrap daemon stop` or `ctxwrap daemon restart`",
        ) from exc
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()} {__version__}\n".encode())
    return fd


def read_pidfile(path: Path) -> tuple[int, str] | None:
    try:
        pid_s, version = path.read_text().split()[:2]
        return int(pid_s), version
    except (OSError, ValueError):
        return None


def pidfile_locked(path: Path) -> bool:
    """True while a live daemon holds the lock (a pid alone may be stale or reused)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def pid_alive(pid: int) -> bool:
    """Does process `pid` exist? (Someone else's process counts as alive.)"""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except (OverflowError, ValueError):
        return False
    return True
