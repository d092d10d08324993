"""What every launcher does around the agent: make sure the daemon runs, and that the
`ctxwrap` the agent's model is told to run (`ctxwrap recall …`) resolves in its shell.

Shared by `ctxwrap pi`, `ctxwrap claude` and `ctxwrap codex` (agents/*/launcher.py); standard
library only at import time (a launcher's start-up is the user's wait).
"""

from __future__ import annotations

import os
import sys
import threading


def ensure_daemon(without: str, *, started_by: str = "ctxwrap") -> bool:
    """Start the daemon unless it runs (bounded: 10 s). Fail open: on any failure one warning
    on stderr (never stdout), ending with what the agent runs without (`without`), and the
    agent runs anyway. False when nothing of ours may talk to the socket: it could be another
    user's (the pi bridge then does not load)."""
    from ctxwrap.client import ensure_running
    from ctxwrap.errors import CtxwrapError, SocketSecurityError

    try:
        ensure_running(deadline_s=10.0, started_by=started_by)
    except CtxwrapError as exc:
        hint = f" (hint: {exc.hint})" if isinstance(exc, SocketSecurityError) and exc.hint else ""
        sys.stderr.write(f"ctxwrap: warning: {exc.message}; {without}{hint}\n")
        return not isinstance(exc, SocketSecurityError)
    return True


def ensure_daemon_beside(without: str) -> threading.Thread:
    """`ensure_daemon` on a thread of its own: the daemon's start (a process of its own) runs
    beside the caller's imports and proxy build."""
    thread = threading.Thread(target=ensure_daemon, args=(without,), daemon=True)
    thread.start()
    return thread


def path_with_ctxwrap(path: str) -> str:
    """`PATH` with the directory of this interpreter's `ctxwrap` script appended when it is not
    there: digests and tombstones tell the model to run `ctxwrap recall …` in its shell."""
    from ctxwrap.paths import script_beside_interpreter  # stdlib only, like this module

    script = script_beside_interpreter()
    here = str(script.parent) if script is not None else None
    if here is not None and here not in path.split(os.pathsep):
        return f"{path}{os.pathsep}{here}" if path else here
    return path
