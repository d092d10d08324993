"""How every starter runs the daemon; its own module so `ctxwrap pi` can name it without
importing the client before pi starts."""

from __future__ import annotations

import sys

from ctxwrap import paths


def daemon_run_argv() -> list[str]:
    """How every starter runs a daemon (CLI, the pi bridge, the Claude Code proxy): `daemon run`
    directly, one Python start-up; the pidfile lock makes concurrent starts safe."""
    return [
        sys.executable,
        "-m",
        "ctxwrap",
        "daemon",
        "run",
        "--log-file",
        str(paths.daemon_log_path()),
    ]
