"""The one exception tree ctxwrap raises to a person. Each carries an exit code and a hint.

Exit codes follow sysexits(3) where one fits, so scripts can tell failures apart.
"""

from __future__ import annotations


class CtxwrapError(Exception):
    """Base of every error meant for a person: a message, an optional hint, an exit code."""

    exit_code = 1

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


class ConfigError(CtxwrapError):
    """A config value, file or environment variable is invalid."""

    exit_code = 78  # EX_CONFIG


class ConfigExists(CtxwrapError):
    """`config init` found a config file and was not told to replace it."""

    exit_code = 73  # EX_CANTCREAT: the file is fine, it just is not ours to overwrite


class DaemonError(CtxwrapError):
    """The daemon could not be reached, started or understood."""

    exit_code = 69  # EX_UNAVAILABLE


class DaemonUnreachable(DaemonError):
    """Nothing answers on the socket."""


class DaemonStartError(DaemonError):
    """Auto-start or `daemon start` did not produce a ready daemon in time."""


class DaemonAlreadyRunning(DaemonError):
    """`daemon run` found another live daemon holding the pidfile lock."""


class StateWriteError(CtxwrapError):
    """The state directory refuses writes (disk full, quota, I/O error, read-only)."""

    exit_code = 74  # EX_IOERR


class SocketSecurityError(CtxwrapError):
    """The runtime or state directory, or the socket, is not private to this user."""

    exit_code = 77  # EX_NOPERM


class PiNotFound(CtxwrapError):
    """No pi executable on CTXWRAP_PI or PATH."""

    exit_code = 127


class NotFoundError(CtxwrapError):
    """A session, handle or record that was asked for does not exist."""

    exit_code = 66  # EX_NOINPUT


__all__ = [
    "ConfigError",
    "ConfigExists",
    "CtxwrapError",
    "DaemonAlreadyRunning",
    "DaemonError",
    "DaemonStartError",
    "DaemonUnreachable",
    "NotFoundError",
    "PiNotFound",
    "SocketSecurityError",
    "StateWriteError",
]


class ExitCode(Exception):
    """Carry a child's exit status up to main() without calling sys.exit elsewhere."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code
