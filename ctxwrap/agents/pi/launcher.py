"""`ctxwrap pi …`: run pi exactly as `pi …` would, with the bridge loaded.

Arguments pass through untouched, the exit status is pi's, and nothing here may stop pi from
running: if the daemon cannot be started, pi still runs (the bridge fails open by itself).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import threading
from pathlib import Path

from ctxwrap import __version__, paths
from ctxwrap.errors import CtxwrapError, PiNotFound, SocketSecurityError
from ctxwrap.launch.child import exit_with, run_child

TYPE_CHECKING = False  # not `typing`'s: its import is ~5 ms of every `ctxwrap pi`
if TYPE_CHECKING:
    from typing import NoReturn

OFF_FLAG = "--ctxwrap-off"
INSTALL_HINT = "install it with `npm install -g @earendil-works/pi-coding-agent` (needs Node >= 22.19), or set CTXWRAP_PI"


class PiInstall:  # neither a dataclass nor a NamedTuple: their imports are before pi starts
    __slots__ = ("argv", "package", "version")

    def __init__(self, argv: list[str], package: str, version: str | None) -> None:
        self.argv = argv  # command that runs pi (may be a wrapper script)
        self.package = package  # npm package name, when known
        self.version = version


def bridge_path() -> Path:
    # A file next to ours (pi loads it by path), not importlib.resources: ~9 ms of imports.
    return Path(__file__).resolve().parents[2] / "_bridge" / "ctxwrap-bridge.ts"


def find_pi() -> PiInstall:
    override = os.environ.get("CTXWRAP_PI", "")
    if override:
        found = shutil.which(override) or (override if os.access(override, os.X_OK) else None)
        if not found:
            raise PiNotFound(f"CTXWRAP_PI={override!r} is not an executable", hint=INSTALL_HINT)
    else:
        found = shutil.which("pi")
        if not found:
            raise PiNotFound("pi is not on PATH", hint=INSTALL_HINT)
    package, version = _package_of(Path(found))
    return PiInstall([found], package, version)


def _package_of(exe: Path) -> tuple[str, str | None]:
    """Find pi's package.json next to its entry point (npm links bin → dist/cli.js)."""
    try:
        target = exe.resolve()
        if target.suffix not in (".js", ".mjs"):
            # A wrapper script (as our installer writes): look for the cli.js it execs.
            text = target.read_text(errors="replace")[:2000]
            for token in text.replace('"', " ").split():
                if token.endswith("cli.js"):
                    target = Path(token)
                    break
        for parent in target.parents:
            pkg = parent / "package.json"
            if pkg.is_file():
                data = json.loads(pkg.read_text())
                if "pi-coding-agent" in str(data.get("name", "")):
                    return str(data["name"]), str(data.get("version"))
    except (OSError, ValueError):
        pass
    return "unknown", None


def bridge_env(pi: PiInstall) -> dict[str, str]:
    from ctxwrap.daemon.argv import daemon_run_argv
    from ctxwrap.launch.daemon import path_with_ctxwrap

    env = dict(os.environ)
    env.update(
        {
            # pi's bash finds `ctxwrap recall`: the bridge then needs no tool of its own
            "PATH": path_with_ctxwrap(env.get("PATH", "")),
            "CTXWRAP_SOCKET": str(paths.socket_path()),
            "CTXWRAP_VERSION": __version__,
            "CTXWRAP_PI_PACKAGE": pi.package,
            "CTXWRAP_PI_VERSION": pi.version or "",
            "CTXWRAP_DAEMON_START": json.dumps(daemon_run_argv()),
            "CTXWRAP_STARTED_BY": "ctxwrap pi's bridge",  # when the bridge revives the daemon
        }
    )
    return env


def _runtime_dir_safe() -> bool:
    """A planted runtime directory is refused before pi starts (one lstat, no connect)."""
    try:
        paths.check_runtime_dir(paths.runtime_dir())
    except FileNotFoundError:
        return True  # the daemon start creates it privately
    except SocketSecurityError as exc:
        hint = f" (hint: {exc.hint})" if exc.hint else ""
        sys.stderr.write(f"ctxwrap: warning: {exc.message}; running pi without savings{hint}\n")
        return False
    return True


def _ensure_daemon_beside_pi(note: Path | None, exited: threading.Event) -> threading.Thread:
    """Make sure the daemon runs while pi starts, not before: pi's own start-up (seconds) hides
    the probe and a cold daemon start; the bridge waits for the daemon itself. Started once
    pi's process exists, so its imports do not delay pi's exec. Then the exit line's imports,
    while pi runs rather than after it exits (`note`: the exit note; None: no exit line;
    `exited`: set when pi has exited, which ends the wait for its session)."""

    def work() -> None:
        from ctxwrap.launch.daemon import ensure_daemon

        ensure_daemon("running pi without savings", started_by="ctxwrap pi")
        if note is not None:
            preload_after_session_start(note, exited)

    return threading.Thread(target=work, name="ctxwrap-ensure-daemon", daemon=True)


SESSION_START_WAIT_S = 120.0


def preload_after_session_start(
    note: Path, exited: threading.Event, wait_s: float = SESSION_START_WAIT_S
) -> None:
    """The exit line's imports (~0.1 s of CPU), `PRELOAD_AFTER_S` after pi's session start,
    not after ours: pi takes 1.5-3.5 s to its first request on a 2-core machine, so a timer
    from our start landed in it under load. The bridge writes the exit note at the session's
    start, shortly before the first request; no note (no session: `--help`) → no exit line,
    nothing to preload. Ends when pi has exited (`exited`): the launcher joins this thread
    then, and a pi that starts no session (`--version`) must not keep it waiting."""
    import time

    from ctxwrap.launch.listener import preload_exit_line

    until = time.monotonic() + wait_s
    while not exited.is_set() and time.monotonic() < until:
        try:
            if note.stat().st_size > 0:
                preload_exit_line()
                return
        except OSError:
            return  # gone: pi has exited and the line was printed
        exited.wait(0.1)


def run_pi(args: list[str]) -> int:
    from ctxwrap.launch.quiet import take_quiet_flag

    off = OFF_FLAG in args or os.environ.get("PI_CTX_OFF", "") in ("1", "true", "yes")
    args = [a for a in args if a != OFF_FLAG]
    args, quiet = take_quiet_flag(args)
    pi = find_pi()
    starting: threading.Thread | None = None
    exited = threading.Event()
    note: Path | None = None
    if not off and not _runtime_dir_safe():
        off = True  # another user's directory: no bridge at all, pi runs plain
    if off:
        argv = [*pi.argv, *args]
        env = dict(os.environ)
    else:
        argv = [*pi.argv, "-e", str(bridge_path()), *args]
        env = bridge_env(pi)
        env["CTXWRAP_DAEMON_LAUNCHING"] = "1"  # the bridge waits instead of starting another
        note = None if quiet else _exit_note()
        starting = _ensure_daemon_beside_pi(note, exited)
        if note is not None:
            env["CTXWRAP_EXIT_NOTE"] = str(note)
    try:
        rc = run_child(argv, env, on_started=starting.start if starting is not None else None)
    finally:
        exited.set()  # no session will start now: the preload's wait ends
        if starting is not None and starting.ident is not None:
            # Only a pi that exits at once (`--version`) gets here first; finish the start so
            # the next session finds its daemon (ensure_running bounds itself: 10 s).
            starting.join(timeout=15)
        if note is not None:
            _print_exit_line(note)
    if 0 < rc < 128:
        _explain_failure(pi)
    return rc


# -- the exit line (ctxwrap/launch/exit_line.py) ---------------------------------------------


def _exit_note() -> Path | None:
    """A private file the bridge writes the session's id and file into (CTXWRAP_EXIT_NOTE).
    Made as `tempfile.mkstemp` makes one (new, 0600, not through a link), without its import
    (tempfile, random, shutil: ~5 ms before pi starts)."""
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        runtime = paths.ensure_private_dir(paths.runtime_dir())
        for _ in range(100):
            name = runtime / f"pi-exit-{os.urandom(6).hex()}.json"
            try:
                os.close(os.open(name, flags, 0o600))
            except FileExistsError:
                continue
            return name
    except (OSError, CtxwrapError):
        pass
    return None  # no line, nothing else lost


def resume_args(session_file: object) -> list[str] | None:
    """`--session FILE`, offered only once pi wrote the file (before the first prompt it
    writes nothing and the resume fails); none under `--no-session`."""
    if not isinstance(session_file, str) or not session_file:
        return None
    try:
        written = Path(session_file).is_file() and Path(session_file).stat().st_size > 0
    except OSError:
        return None
    return ["--session", session_file] if written else None


def _print_exit_line(note: Path) -> None:
    """What this pi session saved and how to resume it through ctxwrap; never raises."""
    try:
        try:
            data = json.loads(note.read_text() or "{}")
        finally:
            note.unlink(missing_ok=True)
        sid = data.get("session_id") if isinstance(data, dict) else None
        if not isinstance(sid, str) or not sid:
            return  # pi never started a session (--version, --help, --no-session -p …)
        from ctxwrap.launch.exit_line import print_exit_line

        print_exit_line("pi", sid, resume_args(data.get("session_file")))
    except Exception:
        return


def _explain_failure(pi: PiInstall) -> None:
    """pi failed: if that is because its Node is too old (pi 1.x on Node 20 dies with a bare
    SyntaxError), say so. Checked only after a failure, so a good start pays nothing."""
    from ctxwrap.agents.pi.doctor_check import node_too_old

    try:
        why = node_too_old(Path(pi.argv[0]))
    except Exception:  # an explanation must never turn pi's failure into ours
        return
    if why:
        sys.stderr.write(f"ctxwrap: {why}\n")


def main(args: list[str]) -> NoReturn:
    """`ctxwrap pi ARGS…` straight from the entry point (no click): pi's exit status."""
    exit_with(run_pi, args)
