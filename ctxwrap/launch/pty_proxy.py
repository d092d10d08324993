"""Run a child under a pseudo-terminal and proxy the user's terminal to it.

Shape taken from asciinema's pty recorder: raw mode as a context manager restored on every
exit path, signals turned into bytes on a pipe that select() watches, window size copied at
start and on SIGWINCH. Unlike asciinema we keep the child's exit status (signal → 128+N).
"""

from __future__ import annotations

import array
import contextlib
import errno
import fcntl
import os
import pty
import select
import signal
import termios
import tty
from collections.abc import Callable, Iterator, Mapping, Sequence

FORWARDED = (
    signal.SIGTERM,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGCONT,
    signal.SIGUSR1,
    signal.SIGUSR2,
)


@contextlib.contextmanager
def raw_mode(fd: int) -> Iterator[None]:
    try:
        saved = termios.tcgetattr(fd)
    except termios.error:
        yield  # not a terminal after all
        return
    try:
        tty.setraw(fd)
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSAFLUSH, saved)


def _copy_winsize(src: int, dst: int) -> None:
    buf = array.array("h", [0, 0, 0, 0])
    try:
        fcntl.ioctl(src, termios.TIOCGWINSZ, buf, True)
        fcntl.ioctl(dst, termios.TIOCSWINSZ, buf)
    except OSError:
        pass


def _write_all(fd: int, data: bytes) -> None:
    while data:
        try:
            n = os.write(fd, data)
        except InterruptedError:
            continue
        data = data[n:]


def exit_status(wait_status: int) -> int:
    if os.WIFSIGNALED(wait_status):
        return 128 + os.WTERMSIG(wait_status)
    return os.waitstatus_to_exitcode(wait_status)


def run_under_pty(
    argv: Sequence[str],
    env: Mapping[str, str],
    *,
    stdin_fd: int = 0,
    stdout_fd: int = 1,
    on_started: Callable[[], object] | None = None,
) -> int:
    """Spawn argv on a new PTY, proxy stdin/stdout, return the child's exit status.

    `on_started` runs once the child exists (the launcher's own work then overlaps its start)."""
    pid, master = pty.fork()
    if pid == 0:  # child: exec pi with the terminal as its controlling tty
        try:
            os.execvpe(argv[0], list(argv), dict(env))
        except OSError as exc:
            os.write(2, f"ctxwrap: cannot run {argv[0]}: {exc.strerror}\n".encode())
            os._exit(127)
    if on_started is not None:
        on_started()
    _copy_winsize(stdout_fd if os.isatty(stdout_fd) else stdin_fd, master)

    sig_r, sig_w = os.pipe()
    os.set_blocking(sig_w, False)
    old_wakeup = signal.set_wakeup_fd(sig_w)
    watched = (signal.SIGWINCH, signal.SIGCHLD, *FORWARDED)
    old_handlers = {s: signal.signal(s, lambda *_: None) for s in watched}
    status: int | None = None
    try:
        with raw_mode(stdin_fd):
            fds = [master, stdin_fd, sig_r]
            while True:
                try:
                    # Once pi has exited, a grandchild may still hold the terminal open:
                    # drain briefly, then stop instead of waiting for it.
                    ready, _, _ = select.select(fds, [], [], 0.2 if status is not None else None)
                except InterruptedError:
                    continue
                if not ready:
                    break
                if sig_r in ready:
                    for signum in os.read(sig_r, 1024):
                        if signum == signal.SIGWINCH:
                            _copy_winsize(stdout_fd if os.isatty(stdout_fd) else stdin_fd, master)
                            with contextlib.suppress(ProcessLookupError):
                                os.kill(pid, signal.SIGWINCH)
                        elif signum in FORWARDED:
                            with contextlib.suppress(ProcessLookupError):
                                os.kill(pid, signum)
                if master in ready:
                    try:
                        data = os.read(master, 65536)
                    except OSError as exc:  # EIO: the child closed the terminal
                        if exc.errno != errno.EIO:
                            raise
                        data = b""
                    if not data:
                        break
                    _write_all(stdout_fd, data)
                if stdin_fd in ready:
                    data = os.read(stdin_fd, 65536)
                    if not data:  # our stdin closed: send EOF (^D) and stop reading
                        fds.remove(stdin_fd)
                        _write_all(master, b"\x04")
                    else:
                        _write_all(master, data)
                if status is None:
                    done, wstatus = os.waitpid(pid, os.WNOHANG)
                    if done:
                        status = wstatus
    finally:
        signal.set_wakeup_fd(old_wakeup)
        for s, h in old_handlers.items():
            signal.signal(s, h)
        os.close(sig_r)
        os.close(sig_w)
        os.close(master)
    if status is None:
        _, status = os.waitpid(pid, 0)
    return exit_status(status)
