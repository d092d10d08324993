"""`ctxwrap codex …`: run Codex CLI exactly as `codex …` would, with ctxwrap around it.

- The loopback Responses proxy runs in this process. The active provider's ``base_url`` is
  redirected for this launch only, by a ``-c`` override on the command line: the user's
  ``config.toml`` is never written. Built-in ``openai``: ``-c openai_base_url=…`` (Codex
  refuses ``model_providers.openai.*``); a custom provider: ``-c
  model_providers.<id>.base_url=…``. The upstream is where that provider pointed.
- Arguments pass through, the exit status is Codex's; ``--ctxwrap-off`` / PI_CTX_OFF=1 runs
  plain Codex, and so does any failure of ours or a provider the proxy cannot serve (one
  warning on stderr).
- On exit, the line of ``launch/exit_line.py`` for the thread Codex ran last: its savings, how
  to resume it through ctxwrap (``ctxwrap codex resume ID``), ``ctxwrap stats --session ID``;
  ``--ctxwrap-quiet`` or ``exit_line = false`` silence it.
"""

from __future__ import annotations

import json
import os
import re
import sys
import threading
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import urlsplit

from ctxwrap import __version__, paths
from ctxwrap.daemon.argv import daemon_run_argv
from ctxwrap.errors import CtxwrapError
from ctxwrap.launch.child import Install, exit_with, find_install, run_child
from ctxwrap.launch.daemon import ensure_daemon_beside, path_with_ctxwrap
from ctxwrap.launch.listener import ProxySetup, preload_exit_line

OFF_FLAG = "--ctxwrap-off"
CODEX_PACKAGE = "@openai/codex"
INSTALL_HINT = f"install it with `npm install -g {CODEX_PACKAGE}`, or set CTXWRAP_CODEX"
# Subcommands that never talk to a model: run as they are.
PLAIN_SUBCOMMANDS = frozenset(
    {
        "login",
        "logout",
        "mcp",
        "mcp-server",
        "app-server",
        "completion",
        "sandbox",
        "debug",
        "apply",
        "a",
        "cloud",
        "features",
        "help",
        "generate-ts",
    }
)
# Root options that take a value (so their value is not taken for a subcommand).
VALUE_OPTIONS = frozenset(
    {
        "-c",
        "--config",
        "-m",
        "--model",
        "-p",
        "--profile",
        "-s",
        "--sandbox",
        "-a",
        "--ask-for-approval",
        "-C",
        "--cd",
        "-i",
        "--image",
        "--add-dir",
        "--enable",
        "--disable",
        "--local-provider",
        "--remote",
        "--remote-auth-token-env",
    }
)
RESUME_WORDS = frozenset({"resume", "fork"})
_PROVIDER_ID_RE = re.compile(r"^[A-Za-z0-9_-]+$")


class CodexNotFound(CtxwrapError):
    exit_code = 127


class Unsupported(Exception):
    """The launch is one the proxy cannot serve: run plain Codex (one warning)."""


CodexInstall = Install  # where `codex` is: the argv that runs it


def find_codex() -> Install:
    return find_install("CTXWRAP_CODEX", "codex", lambda why: CodexNotFound(why, hint=INSTALL_HINT))


def codex_version(codex: CodexInstall, timeout: float = 5.0) -> str | None:
    """`codex --version` → "0.171.0"."""
    from ctxwrap.launch.child import version_output

    out = version_output(codex.argv, timeout)
    return out.split()[-1] if out else None


def version_beside(launcher_path: str) -> str | None:
    """The version without running Codex (`codex --version` starts node, then the native
    binary: CPU taken from Codex's own start-up): the npm package's package.json, found from
    the `codex.js` that `codex` is, or that its wrapper script execs."""
    try:
        target = Path(os.path.realpath(launcher_path))
        if target.suffix != ".js" and target.stat().st_size < 64 << 10:
            text = target.read_text(errors="replace")[:4096]
            for token in text.replace('"', " ").replace("'", " ").split():
                if token.endswith("codex.js"):
                    target = Path(token)
                    break
        for parent in list(target.parents)[:3]:
            pkg = parent / "package.json"
            if pkg.is_file():
                data = json.loads(pkg.read_text())
                if isinstance(data, dict) and data.get("name") == CODEX_PACKAGE:
                    version = data.get("version")
                    return version if isinstance(version, str) else None
    except (OSError, ValueError):
        return None
    return None


def codex_home(env: dict[str, str]) -> Path:
    value = env.get("CODEX_HOME", "")
    return Path(value) if value else Path.home() / ".codex"


# -- what the user's command line and config select ---------------------------------------------


@dataclass(frozen=True)
class Invocation:
    subcommand: str | None
    overrides: list[tuple[str, str]]  # -c key=value, in order
    profile: str | None
    oss: bool


def parse_args(args: list[str]) -> Invocation:
    sub: str | None = None
    overrides: list[tuple[str, str]] = []
    profile: str | None = None
    oss = False
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--":
            break
        value: str | None = None
        name = a
        if a.startswith("--") and "=" in a:
            name, value = a.split("=", 1)
        elif a.startswith("-c") and len(a) > 2 and not a.startswith("--"):
            name, value = "-c", a[2:]
        if name in VALUE_OPTIONS:
            if value is None:
                value = args[i + 1] if i + 1 < len(args) else ""
                i += 1
            if name in ("-c", "--config") and "=" in value:
                k, v = value.split("=", 1)
                overrides.append((k.strip(), v))
            elif name in ("-p", "--profile"):
                profile = value
        elif a == "--oss":
            oss = True
        elif not a.startswith("-") and sub is None:
            sub = a
            # A subcommand's own options (`exec -c …`) are parsed by the same loop.
        i += 1
    return Invocation(sub, overrides, profile, oss)


def _toml_value(text: str) -> Any:
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text  # Codex takes a value that is no TOML as a literal string


def _set_dotted(config: dict[str, Any], key: str, value: Any) -> None:
    parts = [p.strip().strip('"') for p in key.split(".")]
    node = config
    for part in parts[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = {}
            node[part] = child
        node = child
    node[parts[-1]] = value


def _merge(base: dict[str, Any], layer: dict[str, Any]) -> None:
    for k, v in layer.items():
        if isinstance(v, dict) and isinstance(base.get(k), dict):
            _merge(base[k], v)
        else:
            base[k] = v


def effective_config(home: Path, inv: Invocation) -> dict[str, Any]:
    """config.toml, the selected profile (``[profiles.X]`` and ``X.config.toml``), then -c."""
    config: dict[str, Any] = {}
    path = home / "config.toml"
    if path.is_file():
        config = tomllib.loads(path.read_text(encoding="utf-8"))
    profile = inv.profile or (
        config.get("profile") if isinstance(config.get("profile"), str) else None
    )
    if profile:
        table = (config.get("profiles") or {}).get(profile)
        if isinstance(table, dict):
            _merge(config, table)
        layer = home / f"{profile}.config.toml"
        if layer.is_file():
            _merge(config, tomllib.loads(layer.read_text(encoding="utf-8")))
    for key, raw in inv.overrides:
        _set_dotted(config, key, _toml_value(raw))
    return config


@dataclass(frozen=True)
class Route:
    provider: str
    upstream: str | None  # None: the built-in OpenAI provider picks by login (proxy.py)
    override_key: str  # the -c key that points the provider at the proxy


def route_for(config: dict[str, Any], env: dict[str, str]) -> Route:
    provider = config.get("model_provider", "openai")
    if not isinstance(provider, str):
        raise Unsupported("model_provider is not a string")
    if provider == "openai":
        base = config.get("openai_base_url") or env.get("OPENAI_BASE_URL") or None
        return Route("openai", str(base) if base else None, "openai_base_url")
    table = (config.get("model_providers") or {}).get(provider)
    if not isinstance(table, dict):
        raise Unsupported(f"provider {provider!r} is built in; only openai is proxied")
    if not _PROVIDER_ID_RE.match(provider):
        raise Unsupported(f"provider id {provider!r} cannot be named in a -c override")
    if table.get("wire_api", "responses") != "responses":
        raise Unsupported(f"provider {provider!r} does not speak the Responses API")
    base = table.get("base_url")
    if not isinstance(base, str) or not base:
        raise Unsupported(f"provider {provider!r} has no base_url")
    return Route(provider, base, f"model_providers.{provider}.base_url")


def without_override(args: list[str], key: str) -> list[str]:
    """The arguments without the user's own `-c KEY=…` (its value became our upstream)."""
    out: list[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--":
            out.extend(args[i:])
            break
        if a in ("-c", "--config") and i + 1 < len(args):
            if args[i + 1].split("=", 1)[0].strip() == key:
                i += 2
                continue
        elif a.startswith("--config=") or (a.startswith("-c") and not a.startswith("--")):
            value = a.split("=", 1)[1] if a.startswith("--config=") else a[2:]
            if value.split("=", 1)[0].strip() == key:
                i += 1
                continue
        out.append(a)
        i += 1
    return out


def _toml_string(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


# -- the exit line (ctxwrap/launch/exit_line.py) ---------------------------------------------

EXEC_WORDS = frozenset({"exec", "e"})


def resume_args(inv: Invocation, args: list[str], thread_id: str) -> list[str] | None:
    """How to resume this thread through ctxwrap, in Codex's own form: `exec resume ID` after a
    non-interactive run, `resume ID` after the TUI; None when `--ephemeral` kept no rollout."""
    end = args.index("--") if "--" in args else len(args)
    if "--ephemeral" in args[:end]:
        return None
    if inv.subcommand in EXEC_WORDS:
        return ["exec", "resume", thread_id]
    return ["resume", thread_id]


def _exit_line(proxy: Any, quiet: bool, inv: Invocation, args: list[str]) -> None:
    """The thread Codex ran last (a fork or a resume included): its line."""
    from ctxwrap.launch.exit_line import print_for_proxy

    print_for_proxy("codex", proxy, quiet, lambda thread: resume_args(inv, args, thread))


def run_codex(args: list[str]) -> int:
    from ctxwrap.launch.quiet import take_quiet_flag

    off = OFF_FLAG in args or os.environ.get("PI_CTX_OFF", "") in ("1", "true", "yes")
    args = [a for a in args if a != OFF_FLAG]
    args, quiet = take_quiet_flag(args)
    codex = find_codex()
    env = dict(os.environ)
    inv = parse_args(args)
    if (
        off
        or inv.subcommand in PLAIN_SUBCOMMANDS
        or any(a in ("--version", "-V", "--help", "-h") for a in args)
    ):
        return run_child([*codex.argv, *args], env)
    try:
        if inv.oss:
            raise Unsupported("--oss uses a local provider")
        config = effective_config(codex_home(env), inv)
        route = route_for(config, env)
    except (Unsupported, OSError, tomllib.TOMLDecodeError) as exc:
        sys.stderr.write(f"ctxwrap: warning: {exc}; running plain codex\n")
        return run_child([*codex.argv, *args], env)
    from ctxwrap.launch.listener import Listener

    start_info: dict[str, Any] = {
        "cwd": os.getcwd(),
        "pid": os.getpid(),  # this process lives exactly as long as Codex
        "reason": "resume" if RESUME_WORDS & set(args) else "startup",
        "pi_package": CODEX_PACKAGE,
        "pi_version": None,
        "agent": "codex",
    }
    # Before Codex starts: only its address and secret (standard library); the proxy is built
    # on that socket beside Codex's own start-up (`ProxySetup`): its imports are ~0.6 s.
    try:
        listener = Listener()
        door = proxy_door(route)
    except Exception as exc:  # anything of ours unavailable → plain Codex
        sys.stderr.write(
            f"ctxwrap: warning: cannot set up the Codex proxy ({type(exc).__name__}: {exc}); "
            "running plain codex\n"
        )
        return run_child([*codex.argv, *args], env)

    def build() -> Any:
        return _build_proxy(codex, route, config, listener, door, start_info, quiet)

    def fallback() -> Any:
        # the proxy's server (httpx): imported only when the proxy could not be built
        from ctxwrap.agents._proxy.plain import plain_forwarding

        return plain_forwarding(
            listener,
            route.upstream or OPENAI_UPSTREAM,
            "codex",
            door=door.door,
            base_path=door.base_path,
        )

    setup = ProxySetup(
        build,
        "Codex",
        fallback=fallback,
    )
    rest = without_override(args, route.override_key)
    env.update(
        {
            "CTXWRAP_SOCKET": str(paths.socket_path()),
            "CTXWRAP_VERSION": __version__,
            "PATH": path_with_ctxwrap(env.get("PATH", "")),
        }
    )
    override = ["-c", f"{route.override_key}={_toml_string(door.base_url(listener))}"]
    # A -c override already makes Codex run without its shared background server (that server
    # was started with other settings); said explicitly, Codex no longer warns about it at
    # every TUI launch ("⚠ 1 warning: … requires embedded mode"). Once only: twice is an error.
    if "--no-daemon" not in rest[: rest.index("--") if "--" in rest else len(rest)]:
        override.insert(0, "--no-daemon")
    override += door.overrides(route, listener)
    try:
        return run_child([*codex.argv, *override, *rest], env, on_started=setup.start)
    finally:
        proxy = setup.finish()  # None: no request could have reached it
        if proxy is not None:  # after close(): the thread's last records are in
            _exit_line(proxy, quiet, inv, args)


# -- the proxy's door, before the proxy exists (agents/_proxy/server.py, codex/proxy.py) ----

OPENAI_UPSTREAM = "https://api.openai.com/v1"  # the built-in provider's (codex/proxy.py)
SECRET_HEADER = "x-ctxwrap-proxy"  # the header door's (agents/_proxy/server.py)


@dataclass(frozen=True)
class Door:
    """How Codex's requests show they are its own, as `CodexProxy` will check them: the built-in
    `openai` provider by who connects ("peer"; the secret path where /proc/net/tcp is missing),
    a custom provider by a header; the URL path is the upstream's own."""

    door: str
    base_path: str

    def base_url(self, listener: Any) -> str:
        if self.door == "path":
            return f"http://127.0.0.1:{listener.port}/{listener.secret}"
        return f"http://127.0.0.1:{listener.port}{self.base_path}"

    def overrides(self, route: Route, listener: Any) -> list[str]:
        """Codex's `-c` arguments beside the base_url one: the header door's header."""
        if self.door != "header":
            return []
        key = f"model_providers.{route.provider}.http_headers.{SECRET_HEADER}"
        return ["-c", f"{key}={json.dumps(listener.secret)}"]


def proxy_door(route: Route) -> Door:
    door = "peer" if route.provider == "openai" else "header"
    if door == "peer" and not Path("/proc/net/tcp").is_file():
        door = "path"
    path = urlsplit((route.upstream or OPENAI_UPSTREAM).rstrip("/")).path.strip("/")
    return Door(door, "/" + path if path else "")


def _build_proxy(
    codex: CodexInstall,
    route: Route,
    config: dict[str, Any],
    listener: Any,
    door: Door,
    start_info: dict[str, Any],
    quiet: bool,
) -> Any:
    """The proxy on the launch's socket, started (on the setup thread, beside Codex)."""
    daemon = ensure_daemon_beside("Codex runs without new savings")

    def fill_version() -> None:
        start_info["pi_version"] = codex_version(codex)

    start_info["pi_version"] = version_beside(codex.argv[0])
    if start_info["pi_version"] is None:
        threading.Thread(target=fill_version, daemon=True).start()
    from ctxwrap.agents.codex import auto_compact
    from ctxwrap.agents.codex.proxy import CodexProxy

    proxy = CodexProxy(
        upstream=route.upstream,
        provider=route.provider,
        state_dir=paths.state_dir(),
        socket_path=paths.socket_path(),
        start_info=start_info,
        daemon_start_argv=daemon_run_argv(),
        compact_config={k: config[k] for k in auto_compact.CONFIG_KEYS if k in config},
        listener=listener.sock,
        secret=listener.secret,
    )
    if (proxy.base_url, proxy.launch_overrides()) != (
        door.base_url(listener),
        door.overrides(route, listener),
    ):  # what Codex was given must be what the proxy admits (else: plain forwarding)
        raise RuntimeError("the proxy's door is not the one Codex was given")
    daemon.join()  # bounded by ensure_running's own deadline
    proxy.start()
    # the daemon link's client, built before the first request needs it (not waited for)
    threading.Thread(target=proxy.daemon.warm, daemon=True).start()
    if not quiet:
        preload_exit_line()
    return proxy


def main(args: list[str]) -> NoReturn:
    """`ctxwrap codex ARGS…` straight from the entry point (no click): Codex's exit status."""
    exit_with(run_codex, args)
