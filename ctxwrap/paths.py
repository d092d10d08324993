"""Where ctxwrap keeps its socket, state and config (XDG base directories).

An empty or relative XDG variable counts as unset, as the XDG spec says.

Without XDG_RUNTIME_DIR the socket lives in /tmp, which every HOME of a user shares (a test
HOME, `sudo -u` with another HOME, a container bind-mounting /tmp): the fallback directory
names the state directory it serves (`/tmp/ctxwrap-<uid>-<hash of the state dir>`), so a
daemon started for another HOME, its state elsewhere, is never the one this HOME talks to.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

from ctxwrap.errors import SocketSecurityError


def _xdg(var: str, fallback: Path) -> Path:
    value = os.environ.get(var, "")
    return Path(value) if value and os.path.isabs(value) else fallback


def runtime_dir() -> Path:
    base = os.environ.get("XDG_RUNTIME_DIR", "")
    if base and os.path.isabs(base):
        return Path(base) / "ctxwrap"
    return fallback_runtime_dir()


def fallback_runtime_dir() -> Path:
    """`/tmp/ctxwrap-<uid>-<10 hex>`: the uid, and a hash of the state directory the daemon
    there serves (one per HOME, or per XDG_STATE_HOME)."""
    import hashlib  # only here: ~4 ms of every launch where XDG_RUNTIME_DIR is set

    tag = hashlib.sha256(os.fsencode(state_dir())).hexdigest()[:10]
    return Path(f"/tmp/ctxwrap-{os.getuid()}-{tag}")


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


def ensure_state_dir(path: Path | None = None) -> Path:
    """The state directory, 0700 and ours, with every file directly in it 0600.

    It holds the raw-output store, the database and the logs: readable by other local users
    it would leak what passed through the daemon. An existing directory of ours is tightened
    (older versions left 0755 and 0644); one owned by someone else is refused.
    """
    path = path or state_dir()
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = path.stat()  # a symlinked state dir of ours (another disk) is fine; its target counts
    if not stat.S_ISDIR(st.st_mode):
        raise SocketSecurityError(
            f"{path} is not a directory", hint="remove it or set XDG_STATE_HOME"
        )
    if st.st_uid != os.getuid():
        raise SocketSecurityError(
            f"the state directory {path} is owned by uid {st.st_uid}, not by you (uid {os.getuid()})",
            hint=f"have root or its owner remove {path}, or set XDG_STATE_HOME to a directory you own",
        )
    if stat.S_IMODE(st.st_mode) != 0o700:
        os.chmod(path, 0o700)
    with os.scandir(path) as entries:
        for entry in entries:
            est = entry.stat(follow_symlinks=False)
            if est.st_uid != os.getuid() or not stat.S_IMODE(est.st_mode) & 0o077:
                continue
            if stat.S_ISREG(est.st_mode):
                os.chmod(entry.path, 0o600)
            elif stat.S_ISDIR(est.st_mode):
                os.chmod(entry.path, 0o700)
    return path


def _dir_refusal(path: Path, st: os.stat_result) -> SocketSecurityError | None:
    """Why a runtime directory is not ours alone (mode aside), or None."""
    if stat.S_ISLNK(st.st_mode):
        return SocketSecurityError(
            f"{path} is a symlink; refusing to use it for the daemon socket",
            hint=f"remove the link (`rm {path}`); ctxwrap creates the directory itself",
        )
    if not stat.S_ISDIR(st.st_mode):
        return SocketSecurityError(
            f"{path} exists and is not a directory",
            hint="remove it, or point XDG_RUNTIME_DIR elsewhere",
        )
    if st.st_uid != os.getuid():
        return SocketSecurityError(
            f"{path} is owned by uid {st.st_uid}, not by you (uid {os.getuid()}); "
            "another user could impersonate the daemon there",
            hint=f"have root or its owner remove {path}, or set XDG_RUNTIME_DIR to a directory you own",
        )
    return None


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
    if refusal := _dir_refusal(path, st):
        raise refusal
    if stat.S_IMODE(st.st_mode) != 0o700:
        os.chmod(path, 0o700)
    return path


def check_runtime_dir(directory: Path) -> None:
    """Refuse a runtime directory that is not ours alone, without repairing anything.

    Ours, not a symlink, no group/other bits: then nobody else can put a socket or a pidfile
    in it. Raises SocketSecurityError, or FileNotFoundError when it does not exist.
    """
    st = directory.lstat()
    if refusal := _dir_refusal(directory, st):
        raise refusal
    if stat.S_IMODE(st.st_mode) & 0o077:
        raise SocketSecurityError(
            f"{directory} has mode {stat.S_IMODE(st.st_mode):04o}; other users could plant a "
            "socket there, so ctxwrap will not talk to it",
            hint=f"`chmod 700 {directory}` after checking what is inside, then `ctxwrap daemon restart`",
        )


def check_socket(sock: Path) -> None:
    """Refuse a daemon socket another user could have planted or could reach, before any byte.

    The CLI and the bridge (its own TypeScript copy) call this before connecting: the
    directory must be ours, not a symlink and closed to group and others (then nobody else can
    swap what is inside it), and the socket must be a socket of ours. Raises
    SocketSecurityError, or FileNotFoundError when there is no socket (nothing to talk to).
    """
    check_runtime_dir(sock.parent)
    sst = sock.lstat()
    if stat.S_ISLNK(sst.st_mode) or not stat.S_ISSOCK(sst.st_mode):
        raise SocketSecurityError(
            f"{sock} is not a socket; refusing to connect",
            hint=f"remove it (`rm {sock}`) and run `ctxwrap daemon start`",
        )
    if sst.st_uid != os.getuid():
        raise SocketSecurityError(
            f"{sock} is owned by uid {sst.st_uid}, not by you (uid {os.getuid()}); "
            "another user could impersonate the daemon there",
            hint=f"remove it (`rm {sock}`) and run `ctxwrap daemon start`",
        )


def tools_bin_dir() -> Path | None:
    """Where the pinned pi/node wrappers live: ``$CTXWRAP_TOOLS_BIN``, else ``<repo>/.tools/bin``."""
    configured = os.environ.get("CTXWRAP_TOOLS_BIN")
    if configured:
        return Path(configured)
    repo_bin = Path(__file__).resolve().parents[1] / ".tools" / "bin"
    return repo_bin if repo_bin.is_dir() else None


def script_beside_interpreter() -> Path | None:
    """The `ctxwrap` script of this install, beside the interpreter that runs it (a venv's,
    pipx's), or None (an interpreter with the script elsewhere: `pip install --user`)."""
    here = Path(sys.executable).parent / "ctxwrap"
    return here if here.is_file() else None


def ctxwrap_program() -> str | None:
    """This install's `ctxwrap` script as a shell command, by its absolute path: the one beside
    this interpreter, else the one on PATH; None when neither is found."""
    import shlex  # not at the top: `ctxwrap pi` imports this module before pi starts
    import shutil

    found = script_beside_interpreter() or shutil.which("ctxwrap")
    return shlex.quote(str(Path(found).absolute())) if found else None
