"""Where ctxwrap keeps its socket, state and config (XDG base directories).

An empty or relative XDG variable counts as unset, as the XDG spec says.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from ctxwrap.errors import SocketSecurityError


def _xdg(var: str, fallback: Path) -> Path:
    value = os.environ.get(var, "")
    return Path(value) if value and os.path.isabs(value) else fallback


def runtime_dir() -> Path:
    base = os.environ.get("XDG_RUNTIME_DIR", "")
    if base and os.path.isabs(base):
        return Path(base) / "ctxwrap"
    return Path(f"/tmp/ctxwrap-{os.getuid()}")


def state_dir() -> Path:
    return _xdg("XDG_STATE_HOME", Path.home() / ".local" / "state") / "ctxwrap"


def config_dir() -> Path:
    return _xdg("XDG_CONFIG_HOME", Path.home() / ".config") / "ctxwrap"


def config_file() -> Path:
    return config_dir() / "config.toml"


def socket_path() -> Path:
    return runtime_dir() / "daemon.sock"


def pidfile_path() -> Path:
    return runtime_dir() / "daemon.pid"


def startup_lock_path() -> Path:
    return runtime_dir() / "start.lock"


def db_path() -> Path:
    return state_dir() / "ctxwrap.db"


def default_event_log() -> Path:
    return state_dir() / "events.jsonl"


def daemon_log_path() -> Path:
    return state_dir() / "daemon.log"


def ensure_private_dir(path: Path) -> Path:
    """Create `path` as a 0700 directory owned by us, or refuse one that isn't.

    A symlink or a directory owned by someone else would let another user
    intercept the socket, so both are errors rather than something to repair.
    """
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    except FileExistsError as exc:
        raise SocketSecurityError(
            f"{path} exists and is not a directory",
            hint="remove it, or point XDG_RUNTIME_DIR elsewhere",
        ) from exc
    st = path.lstat()
    if stat.S_ISLNK(st.st_mode):
        raise SocketSecurityError(
            f"{path} is a symlink; refusing to use it for the daemon socket",
            hint="remove the link; ctxwrap creates the directory itself",
        )
    if st.st_uid != os.getuid():
        raise SocketSecurityError(
            f"{path} is owned by uid {st.st_uid}, not by you (uid {os.getuid()})",
            hint="remove it, or set XDG_RUNTIME_DIR to a directory you own",
        )
    if stat.S_IMODE(st.st_mode) != 0o700:
        os.chmod(path, 0o700)
    return path
