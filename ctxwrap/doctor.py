"""`ctxwrap doctor`: check pi and its Node, the daemon, the socket directory, the config, the aux
backend and each agent, and say what to fix. Exit status 1 when something is broken. Each
agent's own checks live with its adapter (`agents/pi/doctor_check.py` — first, as the aux
backend's check needs its result —, `agents/claude/doctor_check.py`,
`agents/codex/doctor_check.py`).

The checks are plain functions returning `Check`s so tests drive each one with a fake pi or a
broken config; the command only prints them.
"""

from __future__ import annotations

import os
import socket
import stat
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

from ctxwrap import paths
from ctxwrap.check import Check as Check
from ctxwrap.check import Level as Level
from ctxwrap.errors import CtxwrapError


class DoctorFailed(CtxwrapError):
    """At least one check failed; the report above says what to fix."""


# -- daemon, socket dir, config, aux -------------------------------------------------------------


def check_daemon() -> Check:
    from ctxwrap.client import NeedsRestart, Ready, Unsafe, probe, systemd_unit_enabled

    result = probe()
    if isinstance(result, Unsafe):
        return Check("daemon", "fail", result.reason, result.error.hint if result.error else None)
    if isinstance(result, Ready):
        h = result.health
        if h.config_error:
            return Check(
                "daemon",
                "fail",
                f"pid {h.pid} runs on its last good config: {h.config_error}",
                f"fix {paths.config_file()}; the daemon reloads it by itself",
            )
        how = "systemd" if h.systemd else _started_by(h.pid) or "started by an earlier ctxwrap"
        summary = f"{h.version}, pid {h.pid} ({how}), {h.sessions} live session(s)"
        if h.degraded:
            return Check(
                "daemon",
                "fail",
                f"degraded: {h.degraded}; {summary}",
                f"free space where {paths.state_dir()} lives; the daemon recovers by itself "
                "(meanwhile digests go on without recall, and stats are lost)",
            )
        return Check("daemon", "ok", f"ready, {summary}")
    if isinstance(result, NeedsRestart):
        return Check(
            "daemon",
            "warn",
            f"another version answers: {result.reason}",
            "ctxwrap daemon restart (or `systemctl --user restart ctxwrap`)",
        )
    if systemd_unit_enabled():
        return Check(
            "daemon",
            "warn",
            f"not answering ({result.reason}); ctxwrap.socket is installed",
            "systemctl --user enable --now ctxwrap.socket; journalctl --user -u ctxwrap",
        )
    return Check("daemon", "ok", f"not running ({result.reason}); `ctxwrap pi` starts it on demand")


def _started_by(pid: int) -> str | None:
    """How daemon ``pid`` came to run, from the second line of its pidfile."""
    try:
        lines = paths.pidfile_path().read_text().splitlines()
    except OSError:
        return None
    if not lines or lines[0].split()[:1] != [str(pid)]:
        return None
    for line in lines[1:]:
        if line.startswith("started-by "):
            how = line.removeprefix("started-by ").strip()
            if how.startswith("ctxwrap pi"):
                return f"auto-started by {how}"
            return f"started by `{how}`"
    return None


def check_socket_dir() -> Check:
    d = paths.runtime_dir()
    where = (
        "$XDG_RUNTIME_DIR/ctxwrap"
        if d.parent != Path("/tmp")
        else "XDG_RUNTIME_DIR unset: the /tmp fallback of this state dir"
    )
    try:
        st = d.lstat()
    except FileNotFoundError:
        return Check("socket dir", "ok", f"{d} ({where}) does not exist yet; created 0700 on start")
    except OSError as exc:
        return Check(
            "socket dir", "fail", f"{d}: {exc.strerror}", "check the parent directory's permissions"
        )
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        return Check(
            "socket dir",
            "fail",
            f"{d} is not a plain directory",
            f"remove {d}; ctxwrap recreates it",
        )
    if st.st_uid != os.getuid():
        return Check(
            "socket dir",
            "fail",
            f"{d} is owned by uid {st.st_uid}, not you",
            f"remove {d}, or set XDG_RUNTIME_DIR to a directory you own",
        )
    mode = stat.S_IMODE(st.st_mode)
    if mode != 0o700:
        return Check(
            "socket dir", "fail", f"{d} has mode {mode:04o}, must be 0700", f"chmod 700 {d}"
        )
    sock = paths.socket_path()
    try:
        sst = sock.lstat()
    except FileNotFoundError:
        return Check("socket dir", "ok", f"{d} 0700 ({where}); no socket yet")
    smode = stat.S_IMODE(sst.st_mode)
    if not stat.S_ISSOCK(sst.st_mode) or sst.st_uid != os.getuid() or smode & 0o077:
        return Check(
            "socket dir",
            "fail",
            f"{sock}: not a private socket of yours (mode {smode:04o})",
            f"ctxwrap daemon stop; rm {sock}",
        )
    return Check("socket dir", "ok", f"{d} 0700, socket 0{smode:o} ({where})")


def legacy_runtime_dir() -> Path:
    """Where ctxwrap before the per-state-dir fallback kept its socket without XDG_RUNTIME_DIR."""
    return Path(f"/tmp/ctxwrap-{os.getuid()}")


def check_legacy_daemon() -> Check | None:
    """An older ctxwrap's daemon still running at /tmp/ctxwrap-<uid>, which every HOME of the
    user shared: nothing of this version talks to it (its socket names the state dir now), and
    with `idle_exit_s = 0` it would run until the next reboot. None when there is none."""
    from ctxwrap.state.pidfile import pidfile_locked, read_pidfile

    old = legacy_runtime_dir()
    try:
        if old.lstat().st_uid != os.getuid() or old == paths.runtime_dir():
            return None
    except OSError:
        return None
    pidfile = old / "daemon.pid"
    found = read_pidfile(pidfile)
    if found is None or not pidfile_locked(pidfile):
        return None
    pid, version = found
    return Check(
        "old daemon",
        "warn",
        f"pid {pid} (ctxwrap {version}) still runs at {old}, the socket every HOME shared "
        "before; nothing uses it now",
        f"stop it:\n$ kill {pid}",
    )


def check_config() -> tuple[Check, object | None]:
    from ctxwrap.config import load_config
    from ctxwrap.errors import ConfigError

    try:
        loaded = load_config()
    except ConfigError as exc:
        return Check("config", "fail", exc.message, exc.hint), None
    state = "" if loaded.file.exists() else " (absent: defaults)"
    return Check("config", "ok", f"{loaded.file}{state}"), loaded.settings


def _tcp_reachable(host: str, port: int, timeout: float = 1.0) -> str | None:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return None
    except OSError as exc:
        return exc.strerror or str(exc)


def check_aux(settings: object | None, pi_failed: list[str]) -> Check:
    """``pi_failed``: names of the failed checks among pi and node (aux "pi" needs both)."""
    from ctxwrap.config import AUX_BY_AGENT, Settings

    if not isinstance(settings, Settings):
        return Check("aux backend", "warn", "not checked: the config does not load")
    backend = settings.aux_backend
    if backend == "none":
        return Check(
            "aux backend",
            "warn",
            "none: digests are extractive only, nothing is tagged DROP",
            'set aux_backend = "pi" (or "http") in the config for model-written digests',
        )
    if backend == AUX_BY_AGENT:
        model = settings.aux_model or "the active pi model"
        if pi_failed:
            return Check(
                "aux backend",
                "fail",
                f"pi ({model}), but pi cannot run here",
                f"fix the {' and '.join(pi_failed)} check{'s' if len(pi_failed) > 1 else ''} above",
            )
        return Check("aux backend", "ok", f"pi, with {model} (only under `ctxwrap pi`)")
    if not settings.aux_base_url:
        return Check(
            "aux backend",
            "fail",
            "http, but aux_base_url is not set",
            "set aux_base_url, e.g. http://127.0.0.1:11434/v1 (Ollama)",
        )
    url = urlsplit(settings.aux_base_url)
    if url.scheme not in {"http", "https"} or not url.hostname:
        return Check(
            "aux backend",
            "fail",
            f"aux_base_url {settings.aux_base_url!r} is not an http(s) URL",
            "use a URL like http://127.0.0.1:11434/v1",
        )
    if settings.aux_api_key_env and not os.environ.get(settings.aux_api_key_env):
        return Check(
            "aux backend",
            "fail",
            f"{settings.aux_api_key_env} (aux_api_key_env) is not set",
            f"export {settings.aux_api_key_env} where the daemon starts, or unset aux_api_key_env",
        )
    port = url.port or (443 if url.scheme == "https" else 80)
    # A TCP connect only: says whether anything listens without sending a prompt or a key.
    err = _tcp_reachable(url.hostname, port)
    if err:
        return Check(
            "aux backend",
            "fail",
            f"http {settings.aux_api}: {url.hostname}:{port} unreachable ({err})",
            "start the model server, or fix aux_base_url",
        )
    return Check("aux backend", "ok", f"http {settings.aux_api} at {settings.aux_base_url}")


def run_checks() -> list[Check]:
    from ctxwrap.agents.pi.doctor_check import CHECK_NAMES, check_pi_and_node

    checks = check_pi_and_node()
    checks.append(check_daemon())
    checks.append(check_socket_dir())
    if (legacy := check_legacy_daemon()) is not None:
        checks.append(legacy)
    cfg, settings = check_config()
    checks.append(cfg)
    pi_failed = [c.name for c in checks if c.name in CHECK_NAMES and c.level == "fail"]
    checks.append(check_aux(settings, pi_failed))
    for check_agent in agent_checks():
        checks += check_agent()
    return checks


_MARK = {"ok": "ok  ", "warn": "warn", "fail": "FAIL"}


def render_text(checks: list[Check], width: int) -> list[str]:
    """`ctxwrap doctor`'s lines, none wider than `width` but a command too long to fit (a
    path): a check's words wrap under its summary; a fix line starting with `$ ` is a command,
    printed alone on its line and never broken. From 80 columns the names form a column."""
    import textwrap

    wide = width >= 80
    out: list[str] = []

    def para(text: str, first: str, indent: str) -> None:
        out.extend(
            textwrap.wrap(
                text,
                width=max(len(first) + 20, width),
                initial_indent=first,
                subsequent_indent=indent,
                break_on_hyphens=False,
            )
            or [first.rstrip()]
        )

    for c in checks:
        head = f"{_MARK[c.level]}  {c.name:12} " if wide else f"{_MARK[c.level]}  {c.name}: "
        indent = " " * (19 if wide else 6)
        para(c.summary, head, indent)
        if c.fix and c.level != "ok":
            for n, line in enumerate(c.fix.split("\n")):
                if line.startswith("$ "):
                    command = line[2:]
                    fits = len(indent) + len(command) <= width
                    out.append(indent + command if fits else command)
                else:
                    para(line, indent + ("fix: " if n == 0 else ""), indent)
    return out


def agent_checks() -> list[Callable[[], list[Check]]]:
    """Each agent adapter's own checks (imported here, late: the adapters sit below the doctor)."""
    from ctxwrap.agents.claude.doctor_check import check_claude
    from ctxwrap.agents.codex.doctor_check import check_codex

    return [check_claude, check_codex]
