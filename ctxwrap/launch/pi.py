"""`ctxwrap pi …`: run pi exactly as `pi …` would, with the bridge loaded.

Arguments pass through untouched, the exit status is pi's, and nothing here may stop pi from
running: if the daemon cannot be started, pi still runs (the bridge fails open by itself).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from ctxwrap import __version__, paths
from ctxwrap.errors import CtxwrapError, PiNotFound
from ctxwrap.launch.pty_proxy import FORWARDED, run_under_pty

OFF_FLAG = "--ctxwrap-off"
INSTALL_HINT = "install it with `npm install -g @earendil-works/pi-coding-agent` (needs Node >= 22.19), or set CTXWRAP_PI"


@dataclass(frozen=True)
class PiInstall:
    argv: list[str]  # command that runs pi (may be a wrapper script)
    package: str  # npm package name, when known
    version: str | None


def bridge_path() -> Path:
    return Path(str(resources.files("ctxwrap") / "_bridge" / "ctxwrap-bridge.ts"))


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


def _daemon_start_argv() -> list[str]:
    # `daemon run` directly, not `daemon start`: one Python start-up instead of two when the
    # bridge revives a killed daemon; the pidfile lock already makes concurrent starts safe.
    return [
        sys.executable,
        "-m",
        "ctxwrap",
        "daemon",
        "run",
        "--log-file",
        str(paths.daemon_log_path()),
    ]


def bridge_env(pi: PiInstall) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "CTXWRAP_SOCKET": str(paths.socket_path()),
            "CTXWRAP_VERSION": __version__,
            "CTXWRAP_PI_PACKAGE": pi.package,
            "CTXWRAP_PI_VERSION": pi.version or "",
            "CTXWRAP_DAEMON_START": json.dumps(_daemon_start_argv()),
            "CTXWRAP_STARTED_BY": "ctxwrap pi's bridge",  # when the bridge revives the daemon
        }
    )
    return env


def _ensure_daemon() -> None:
    from ctxwrap.client import ensure_running

    try:
        ensure_running(deadline_s=10.0, started_by="ctxwrap pi")
    except CtxwrapError as exc:
        # Fail open: pi runs as plain pi would; say why once, on stderr (never on stdout).
        sys.stderr.write(f"ctxwrap: warning: {exc.message}; running pi without savings\n")


def run_pi(args: list[str]) -> int:
    off = OFF_FLAG in args or os.environ.get("PI_CTX_OFF", "") in ("1", "true", "yes")
    args = [a for a in args if a != OFF_FLAG]
    pi = find_pi()
    if off:
        argv = [*pi.argv, *args]
        env = dict(os.environ)
    else:
        _ensure_daemon()
        argv = [*pi.argv, "-e", str(bridge_path()), *args]
        env = bridge_env(pi)
    if os.isatty(sys.stdin.fileno()) and os.isatty(sys.stdout.fileno()):
        rc = run_under_pty(argv, env)
    else:
        rc = _run_plain(argv, env)
    if 0 < rc < 128:
        _explain_failure(pi)
    return rc


def _explain_failure(pi: PiInstall) -> None:
    """pi failed: if that is because its Node is too old (pi 1.x on Node 20 dies with a bare
    SyntaxError), say so. Checked only after a failure, so a good start pays nothing."""
    from ctxwrap.doctor import node_too_old

    try:
        why = node_too_old(Path(pi.argv[0]))
    except Exception:  # an explanation must never turn pi's failure into ours
        return
    if why:
        sys.stderr.write(f"ctxwrap: {why}\n")


def _run_plain(argv: list[str], env: dict[str, str]) -> int:
    # No terminal (scripts, -p, --mode json|rpc): pi gets our stdio as it is.
    proc = subprocess.Popen(argv, env=env)

    def forward(signum: int, _frame: object) -> None:
        # `kill <ctxwrap pid>` (a supervisor, a job runner) must stop pi as it would plain pi,
        # not kill us and orphan pi; the same signals the PTY path forwards.
        if proc.returncode is None:
            proc.send_signal(signum)

    old_handlers = {s: signal.signal(s, forward) for s in FORWARDED}
    try:
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
