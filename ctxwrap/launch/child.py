"""Run an agent as the user's terminal would: under a PTY when there is one, else inherited stdio.

Shared by every agent launcher (`ctxwrap pi`, `ctxwrap claude`). Returns the child's exit
status unchanged (signal → 128+N).
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
from collections.abc import Callable, Mapping, Sequence

from ctxwrap.launch.pty_proxy import FORWARDED, run_under_pty

TYPE_CHECKING = False  # not `typing`'s: its import is ~5 ms before the agent starts
if TYPE_CHECKING:
    from typing import NoReturn


def find_executable(override_var: str, name: str, not_found: Callable[[str], Exception]) -> str:
    """The agent binary a launcher runs: `$override_var` (a name on PATH or a path), else
    `name` on PATH; `not_found(why)` is raised otherwise."""
    override = os.environ.get(override_var, "")
    if override:
        found = shutil.which(override) or (override if os.access(override, os.X_OK) else None)
        if not found:
            raise not_found(f"{override_var}={override!r} is not an executable")
        return found
    found = shutil.which(name)
    if not found:
        raise not_found(f"{name} is not on PATH")
    return found


class Install:  # neither a dataclass nor a NamedTuple: their imports are before the agent starts
    """An agent's executable, as the argv that runs it."""

    __slots__ = ("argv",)

    def __init__(self, argv: list[str]) -> None:
        self.argv = argv

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Install) and other.argv == self.argv

    def __repr__(self) -> str:
        return f"Install({self.argv!r})"


def find_install(override_var: str, name: str, not_found: Callable[[str], Exception]) -> Install:
    """`find_executable`'s answer as an `Install`."""
    return Install([find_executable(override_var, name, not_found)])


def version_output(argv: Sequence[str], timeout: float = 5.0) -> str | None:
    """What `ARGV --version` prints (stripped), or None when it cannot run: each agent reads
    its own version out of it."""
    import subprocess

    try:
        out = subprocess.run(
            [*argv, "--version"], capture_output=True, text=True, timeout=timeout, check=False
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return out.strip() or None


def run_child(
    argv: Sequence[str], env: Mapping[str, str], on_started: Callable[[], object] | None = None
) -> int:
    """`on_started` runs once the agent's process exists: work of ours that can overlap the
    agent's own start-up (seconds of Node) goes there, not before it."""
    if os.isatty(sys.stdin.fileno()) and os.isatty(sys.stdout.fileno()):
        return run_under_pty(argv, env, on_started=on_started)
    # No terminal (scripts, -p, --mode json|rpc): the agent gets our stdio as it is.
    import subprocess  # here: under a terminal (pty.fork) its ~5 ms are not paid before the agent

    started: list[subprocess.Popen[bytes]] = []
    early: list[int] = []

    def forward(signum: int, _frame: object) -> None:
        # `kill <ctxwrap pid>` (a supervisor, a job runner) must stop the agent as it would
        # the plain agent, not kill us and orphan it; the same signals the PTY path forwards.
        if not started:
            early.append(signum)  # before the agent exists (a start-up thread may hold the GIL)
        elif started[0].returncode is None:
            started[0].send_signal(signum)

    # Handlers first, then the child: a signal between the two must not be lost.
    old_handlers = {s: signal.signal(s, forward) for s in FORWARDED}
    try:
        proc = subprocess.Popen(list(argv), env=dict(env))
        started.append(proc)
        for signum in early:
            proc.send_signal(signum)
        if on_started is not None:
            on_started()
        while True:
            try:
                proc.wait()
                break
            except KeyboardInterrupt:
                continue  # the child got the same SIGINT from the terminal's process group
    finally:
        for s, h in old_handlers.items():
            signal.signal(s, h)
    rc = proc.returncode
    return 128 - rc if rc < 0 else rc


def exit_with(run: Callable[[list[str]], int], args: list[str]) -> NoReturn:
    """A launcher's entry (`ctxwrap pi|codex ARGS…`, no click): the agent's exit status, a
    ctxwrap error as one line (and its hint) with its own status, 130 on Ctrl+C."""
    from ctxwrap.errors import CtxwrapError

    try:
        code = run(args)
    except CtxwrapError as exc:
        sys.stderr.write(f"ctxwrap: error: {exc.message}\n")
        if exc.hint:
            sys.stderr.write(f"hint: {exc.hint}\n")
        code = exc.exit_code
    except KeyboardInterrupt:
        code = 130
    _exit_now(code)


def _exit_now(code: int) -> NoReturn:
    """Exit as the agent did, without the interpreter's teardown: freeing every module and
    object of the proxy's imports took 0.1-0.2 s after the agent had exited, with the user
    waiting. atexit handlers still run (the proxies' cache-state flush), then stdio is flushed;
    every thread left is a daemon thread, as at any exit."""
    import atexit
    import contextlib

    try:
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):  # a closed pipe: nothing more to say
                stream.flush()
        os._exit(code)
