"""`ctxwrap claude …`: run Claude Code exactly as `claude …` would, with ctxwrap around it.

- The loopback proxy runs in this process; Claude Code gets ``ANTHROPIC_BASE_URL`` pointing at
  it (upstream: the user's own ``ANTHROPIC_BASE_URL``, else the public endpoint).
- A per-launch settings layer (``--settings FILE``, merged with the user's own ``--settings``
  if given) adds the PostToolUse hook; ``~/.claude/settings.json`` is never touched.
- Arguments pass through, the exit status is Claude Code's; ``--ctxwrap-off`` / PI_CTX_OFF=1
  runs plain Claude Code, and so does any failure of ours (one warning on stderr).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import sys
import threading
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
CLAUDE_PACKAGE = "@anthropic-ai/claude-code"
INSTALL_HINT = f"install it with `npm install -g {CLAUDE_PACKAGE}`, or set CTXWRAP_CLAUDE"
HOOK_TOOLS = "Bash|Read|Grep|Glob|Write"
# The web tools and every MCP server's (anthropic_wire.is_lookup): a regex, anchored, since
# Claude Code tests a matcher with more than names and `|` unanchored against the tool name.
LOOKUP_MATCHER = "^(WebFetch|WebSearch|mcp__.+)$"
HOOK_TIMEOUT_S = 30
RESUME_FLAGS = frozenset({"-c", "--continue", "-r", "--resume"})


class ClaudeNotFound(CtxwrapError):
    exit_code = 127


ClaudeInstall = Install  # where `claude` is: the argv that runs it


def find_claude() -> Install:
    return find_install(
        "CTXWRAP_CLAUDE", "claude", lambda why: ClaudeNotFound(why, hint=INSTALL_HINT)
    )


def claude_version(claude: ClaudeInstall, timeout: float = 5.0) -> str | None:
    """`claude --version` → "2.1.197" (it answers offline in ~0.2 s)."""
    from ctxwrap.launch.child import version_output

    out = version_output(claude.argv, timeout)
    return out.split(" ", 1)[0] if out else None


def hook_command() -> str:
    return f"{shlex.quote(sys.executable)} -m ctxwrap hook claude"


# Claude Code's wait for our answer, per tool: a little over the proxy's own deadline for it
# (bash digest 15 s; the Write fact a little longer; a read's is immediate).
HTTP_HOOK_TIMEOUT_S = {"Bash": 20, "Write": 22, "Read|Grep|Glob": 3, LOOKUP_MATCHER: 3}


def hook_settings(command: str, http: dict[str, Any] | None = None) -> dict[str, Any]:
    """Our PostToolUse hooks: `"type": "http"` straight to the running launch when `http` (the
    hook's `url` and `headers`: HookServer.hook_entry) is given, no process start per tool
    call; else the `ctxwrap hook claude` command."""
    if http is None:
        entry = {"type": "command", "command": command, "timeout": HOOK_TIMEOUT_S}
        post = [{"matcher": m, "hooks": [entry]} for m in (HOOK_TOOLS, LOOKUP_MATCHER)]
        failure = [
            {"matcher": m, "hooks": [entry]} for m in ("Bash|Read|Grep|Glob", LOOKUP_MATCHER)
        ]
    else:
        post = [
            {"matcher": tools, "hooks": [{"type": "http", **http, "timeout": timeout}]}
            for tools, timeout in HTTP_HOOK_TIMEOUT_S.items()
        ]
        failure = [p for p in post if p["matcher"] != "Write"]
    return {
        "hooks": {
            # No PreToolUse: the command the model asked for is what Claude Code's permission
            # rules see and what runs (a rewritten one breaks `Bash(npm test:*)` rules).
            "PostToolUse": post,
            # A failing command skips PostToolUse; its output is digested on the request path.
            # A failed Read/Grep/Glob ends its call, so its round's tag batch need not wait.
            "PostToolUseFailure": failure,
        }
    }


PROXY_VARS = ("https_proxy", "HTTPS_PROXY", "http_proxy", "HTTP_PROXY")


def http_hooks_usable(env: dict[str, str], layers: list[Any]) -> bool:
    """Claude Code would POST an HTTP hook straight to our loopback port.

    Not when an HTTP(S)_PROXY variable would route it (a tool's output must never leave the
    machine through the user's proxy; Claude Code skips one only for NO_PROXY hosts), when
    its sandbox is on (hooks then go through the sandbox's network proxy), or when a settings
    layer restricts HTTP hook URLs or has one we cannot read: the command hook then serves.
    """
    if any(env.get(v) for v in PROXY_VARS):
        bypass = (env.get("no_proxy") or env.get("NO_PROXY") or "").replace(",", " ").split()
        if not {"*", "127.0.0.1"} & {b.strip().lower() for b in bypass}:
            return False
    for layer in layers:
        if layer is None or "allowedHttpHookUrls" in layer:
            return False
        sandbox = layer.get("sandbox")
        if isinstance(sandbox, dict) and sandbox.get("enabled"):
            return False
    return True


# Claude Code (2.1.197) switches some of its own behaviour off when ANTHROPIC_BASE_URL is not
# Anthropic's host, as it is behind our loopback proxy: docs/research/claude-code-base-url.md.
FIRST_PARTY_HOSTS = frozenset({"api.anthropic.com"})  # Claude Code's own test (its `wrt`)
OTHER_PROVIDER_VARS = (
    "CLAUDE_CODE_USE_BEDROCK",
    "CLAUDE_CODE_USE_VERTEX",
    "CLAUDE_CODE_USE_FOUNDRY",
    "CLAUDE_CODE_USE_ANTHROPIC_AWS",
    "CLAUDE_CODE_USE_MANTLE",
    "CLAUDE_CODE_USE_GATEWAY",
)


def talks_to_anthropic(env: dict[str, str]) -> bool:
    """Plain Claude Code would talk to Anthropic's own endpoint (not a gateway, not a cloud)."""
    if any(env.get(v, "").strip() not in ("", "0", "false", "no") for v in OTHER_PROVIDER_VARS):
        return False
    base = env.get("ANTHROPIC_BASE_URL", "").strip()
    if not base:
        return True
    try:  # as `new URL(base).host`: the port counts unless it is the scheme's default
        parts = urlsplit(base)
        host, port = parts.hostname or "", parts.port
    except ValueError:
        return False
    default = {"https": 443, "http": 80}.get(parts.scheme.lower())
    if port is not None and port != default:
        host = f"{host}:{port}"
    return host in FIRST_PARTY_HOSTS


def first_party_env(env: dict[str, str]) -> dict[str, str]:
    """Variables that keep Claude Code's first-party behaviour behind the loopback proxy.

    Only when plain Claude Code would talk to Anthropic's endpoint, and never over the
    user's own setting: tool search (deferred tools, the `ToolSearch` tool) is on by default
    there and off for any other base URL unless ENABLE_TOOL_SEARCH is set; "true" is the
    mode Claude Code picks by itself for api.anthropic.com.
    """
    if not talks_to_anthropic(env) or env.get("ENABLE_TOOL_SEARCH"):  # empty is unset to it
        return {}
    return {"ENABLE_TOOL_SEARCH": "true"}


def split_settings_arg(args: list[str]) -> tuple[list[str], str | None]:
    """Take the user's own `--settings X` out of the arguments (it is merged into ours)."""
    out: list[str] = []
    value: str | None = None
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--":
            out.extend(args[i:])
            break
        if a == "--settings" and i + 1 < len(args):
            value = args[i + 1]
            i += 2
            continue
        if a.startswith("--settings="):
            value = a.split("=", 1)[1]
            i += 1
            continue
        out.append(a)
        i += 1
    return out, value


def merged_settings(user_value: str | None, ours: dict[str, Any]) -> dict[str, Any]:
    """The user's --settings (JSON text or a file) with our hooks appended to theirs."""
    if user_value is None:
        return ours
    text = user_value if user_value.lstrip().startswith("{") else Path(user_value).read_text()
    user = json.loads(text)
    if not isinstance(user, dict):
        raise ValueError("--settings is not a JSON object")
    merged = dict(user)
    hooks = dict(user.get("hooks") or {})
    for event, entries in ours["hooks"].items():
        hooks[event] = [*(hooks.get(event) or []), *entries]
    merged["hooks"] = hooks
    return merged


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)


# -- lifecycle: registered at launch, the status line, the exit line -------------------------


def lifecycle_hooks(
    command: str, http: dict[str, Any] | None = None, *, session_start: bool = True
) -> dict[str, Any]:
    """SessionStart (startup, resume, /clear): the proxy registers the session at once, so
    `ctxwrap status` lists it while it sits at its prompt, before its first request.
    PostCompact (auto and manual): Claude Code's own compactions are recorded (its summary's
    size, what started it) beside the plain session's. Claude Code 2.1.197 skips HTTP hooks
    for SessionStart ("HTTP hooks are not supported for SessionStart"): it stays a command,
    run in the background ("async"): its answer is empty, so Claude Code need not wait for
    a Python start before its first request. Not for `-p` (`session_start` False): its first
    request comes at once and registers the session; the hook's Python start (~0.1 s of CPU,
    beside Claude Code's own start-up) would only delay it."""
    command_entry: dict[str, Any] = {"type": "command", "command": command, "timeout": 10}
    compact = command_entry if http is None else {"type": "http", **http, "timeout": 10}
    hooks: dict[str, Any] = {"PostCompact": [{"hooks": [compact]}]}
    if session_start:
        hooks["SessionStart"] = [{"hooks": [{**command_entry, "async": True}]}]
    return {"hooks": hooks}


def statusline_command() -> str:
    return f"{shlex.quote(sys.executable)} -m ctxwrap statusline claude"


MANAGED_SETTINGS = Path("/etc/claude-code/managed-settings.json")


def claude_config_dir() -> Path:
    return Path(os.environ.get("CLAUDE_CONFIG_DIR") or Path.home() / ".claude")


def settings_layers(user_settings: str | None, cwd: Path | None = None) -> list[Any]:
    """Every settings source Claude Code would read, parsed, lowest precedence first (None:
    unreadable): the user settings, the project's shared then local settings (from the
    repository root down to the working directory), their `--settings`, the managed settings.
    """
    here = (cwd or Path.cwd()).resolve()
    project: list[Path] = []
    for d in (here, *here.parents):
        project[:0] = [d / ".claude" / "settings.json", d / ".claude" / "settings.local.json"]
        if (d / ".git").exists():
            break
    sources: list[str] = [
        str(p) for p in (claude_config_dir() / "settings.json", *project) if p.is_file()
    ]
    if user_settings is not None:
        sources.append(user_settings)
    if MANAGED_SETTINGS.is_file():
        sources.append(str(MANAGED_SETTINGS))
    layers: list[Any] = []
    for value in sources:
        try:
            text = value if value.lstrip().startswith("{") else Path(value).read_text()
            data = json.loads(text)
        except (OSError, ValueError):
            data = None
        layers.append(data if isinstance(data, dict) else None)
    return layers


def user_has_status_line(user_settings: str | None, cwd: Path | None = None) -> bool:
    """A statusLine of the user's own anywhere Claude Code would read one: theirs wins.

    Their `--settings`, the user settings, the project's shared and local settings (from the
    working directory up to the repository root) and the managed settings. An unreadable file
    counts as "has one": never risk replacing theirs.
    """
    return any(
        layer is None or layer.get("statusLine") is not None
        for layer in settings_layers(user_settings, cwd)
    )


def status_line_enabled() -> bool:
    """The `stats_widget` setting (pi's footer, Claude Code's status line), read without
    pydantic: PI_CTX_STATS_WIDGET over config.toml over on."""
    value = os.environ.get("PI_CTX_STATS_WIDGET", "")
    if value:
        return value.strip().lower() not in ("0", "false", "no", "off")
    if not os.path.isfile(paths.config_file()):
        return True  # no config: tomllib's import (~20 ms before Claude Code starts) for nothing
    import tomllib

    with contextlib.suppress(OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
        setting = tomllib.loads(paths.config_file().read_text(encoding="utf-8")).get("stats_widget")
        if isinstance(setting, bool):
            return setting
    return True


def lifecycle_settings(
    settings: dict[str, Any],
    user_settings: str | None,
    http: dict[str, Any] | None = None,
    *,
    session_start: bool = True,
) -> dict[str, Any]:
    """Our lifecycle hooks appended to `settings`, and our status line unless the user has
    one of their own (or `stats_widget` is off)."""
    out = dict(settings)
    hooks = dict(out.get("hooks") or {})
    lifecycle = lifecycle_hooks(hook_command(), http, session_start=session_start)
    for event, entries in lifecycle["hooks"].items():
        hooks[event] = [*(hooks.get(event) or []), *entries]
    out["hooks"] = hooks
    if status_line_enabled() and not user_has_status_line(user_settings):
        out["statusLine"] = {"type": "command", "command": statusline_command(), "padding": 0}
    return out


# a session id that is a plain file name: no glob or path in it
_SAFE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")


def resume_args(session_id: str) -> list[str] | None:
    """`--resume ID`, offered only once Claude Code wrote the transcript
    (`<config>/projects/<project>/<id>.jsonl`): before the first prompt it writes none and the
    resume fails ("No conversation found")."""
    if not _SAFE_ID.fullmatch(session_id):
        return None
    override = os.environ.get("CLAUDE_CONFIG_DIR", "")
    projects = (Path(override) if override else Path.home() / ".claude") / "projects"
    try:
        written = any(p.stat().st_size > 0 for p in projects.glob(f"*/{session_id}.jsonl"))
    except OSError:
        return None
    return ["--resume", session_id] if written else None


def _exit_line(proxy: Any, quiet: bool) -> None:
    from ctxwrap.launch.exit_line import print_for_proxy

    print_for_proxy("claude", proxy, quiet, resume_args)


def run_claude(args: list[str]) -> int:
    from ctxwrap.launch.quiet import take_quiet_flag

    off = OFF_FLAG in args or os.environ.get("PI_CTX_OFF", "") in ("1", "true", "yes")
    args = [a for a in args if a != OFF_FLAG]
    args, quiet = take_quiet_flag(args)
    claude = find_claude()
    if off:
        return run_child([*claude.argv, *args], dict(os.environ))
    from ctxwrap.agents.claude import same_agent

    first_party = talks_to_anthropic(dict(os.environ))
    policy = same_agent.org_policy(dict(os.environ), claude_config_dir())
    line = policy.launch_line() if first_party else None
    if line:
        sys.stderr.write(line)
    if first_party and policy.eligible and policy.restricted:
        # no supported switch makes Claude Code apply them behind a proxy: never weaker
        return run_child([*claude.argv, *args], dict(os.environ))
    from ctxwrap.agents.claude.hook import HookServer
    from ctxwrap.launch.listener import Listener

    start_info: dict[str, Any] = {
        "cwd": os.getcwd(),
        "pid": os.getpid(),  # this process lives exactly as long as Claude Code
        "reason": "resume" if RESUME_FLAGS & set(args) else "startup",
        "pi_package": CLAUDE_PACKAGE,
        "pi_version": None,
        "agent": "claude",
    }
    # Before Claude Code starts: only what it needs to start (the proxy's address and secret,
    # the settings layer), all standard library. The proxy itself is built beside Claude
    # Code's own start-up (`ProxySetup`): its imports are ~0.6 s.
    listener: Listener | None = None
    hooks: HookServer | None = None
    settings_file: Path | None = None
    same_env: dict[str, str] = {}  # what keeps first-party behaviour (same_agent.py)
    try:
        rest, user_settings = split_settings_arg(args)
        given = list(
            rest
        )  # the user's arguments, before a `[1m]` of ours (auto_compact reads them)
        listener = Listener()
        base_url = f"http://127.0.0.1:{listener.port}/{listener.secret}"
        layers = settings_layers(user_settings)
        hook: dict[str, Any] | None = None
        if http_hooks_usable(dict(os.environ), layers):
            hooks = HookServer()
            hook = hooks.hook_entry()
        settings = merged_settings(user_settings, hook_settings(hook_command(), hook))
        end = rest.index("--") if "--" in rest else len(rest)
        interactive = not ({"-p", "--print"} & set(rest[:end]))
        settings = lifecycle_settings(settings, user_settings, hook, session_start=interactive)
        binary = same_agent.binary_of(claude.argv[0])
        start_info["pi_version"] = same_agent.version_beside(binary) if binary else None
        if first_party:
            # the version beside the binary, else `claude --version`, else the binary's own
            # catalog, read once and cached
            catalog = same_agent.catalog_for(None, claude.argv[0], paths.state_dir())
            if catalog is None:
                start_info["pi_version"] = claude_version(claude)
                catalog = same_agent.catalog_for(
                    start_info["pi_version"], claude.argv[0], paths.state_dir()
                )
            if catalog is None:
                sys.stderr.write(
                    "ctxwrap: warning: cannot read this Claude Code's model catalog; behind "
                    "the proxy its side requests go to the main model and a named 1M model "
                    "gets a 200k window\n"
                )
            else:
                same_env = same_agent.side_model_env(dict(os.environ), layers, catalog)
                rest, one_m = same_agent.one_m_model(rest, dict(os.environ), layers, catalog)
                same_env.update(one_m)
        runtime = paths.ensure_private_dir(paths.runtime_dir())
        settings_file = runtime / f"claude-settings-{os.getpid()}.json"
        _write_private(settings_file, json.dumps(settings))
    except Exception as exc:  # anything of ours unavailable → plain Claude Code
        sys.stderr.write(
            f"ctxwrap: warning: cannot set up the Claude Code proxy ({type(exc).__name__}: {exc}); "
            "running plain claude\n"
        )
        for opened in (listener, hooks):
            if opened is not None:
                opened.close()
        if settings_file is not None:
            with contextlib.suppress(OSError):
                settings_file.unlink()
        return run_child([*claude.argv, *args], dict(os.environ))

    def build() -> Any:
        return _build_proxy(claude, listener, user_settings, given, start_info, quiet)

    setup = ProxySetup(build, "Claude Code", fallback=lambda: _plain_proxy(listener))

    def started() -> None:  # Claude Code runs: the rest of ours beside its start-up
        setup.start()
        if hooks is not None:
            hooks.serve(setup.get)  # a hook before this waits in the port's backlog

    env = dict(os.environ)
    env.update(first_party_env(env))  # before ANTHROPIC_BASE_URL becomes ours
    env.update(same_env)
    env.update(
        {
            "ANTHROPIC_BASE_URL": base_url,
            "CTXWRAP_CLAUDE_HOOK": base_url + HOOK_PATH,
            "CTXWRAP_SOCKET": str(paths.socket_path()),
            "CTXWRAP_VERSION": __version__,
            "PATH": path_with_ctxwrap(env.get("PATH", "")),
        }
    )
    try:
        return run_child(
            [*claude.argv, "--settings", str(settings_file), *rest], env, on_started=started
        )
    finally:
        # the hook port stops beside the proxy's close (each waits for its serve loop)
        closing = threading.Thread(target=hooks.close, daemon=True) if hooks else None
        if closing is not None:
            closing.start()
        proxy = setup.finish()  # None: no request could have reached it
        if closing is not None:
            closing.join(timeout=1.0)
        with contextlib.suppress(OSError):
            settings_file.unlink()
        if proxy is not None:
            _exit_line(proxy, quiet)  # after close(): the session's last records are in


HOOK_PATH = "/_ctxwrap/hook"  # the proxy's hook endpoint (agents/claude/proxy.py), for the command


def _build_proxy(
    claude: ClaudeInstall,
    listener: Any,
    user_settings: str | None,
    rest: list[str],
    start_info: dict[str, Any],
    quiet: bool,
) -> Any:
    """The proxy on the launch's socket, started (on the setup thread, beside Claude Code)."""
    daemon = ensure_daemon_beside("Claude Code runs without new savings")
    from ctxwrap.agents.claude import auto_compact
    from ctxwrap.agents.claude.proxy import ClaudeProxy, upstream_from_env

    if start_info["pi_version"] is None:  # not beside the binary: `claude --version`, ~0.2 s

        def fill_version() -> None:
            start_info["pi_version"] = claude_version(claude)

        threading.Thread(target=fill_version, daemon=True).start()
    compact = auto_compact.UserConfig()
    with contextlib.suppress(Exception):  # a figure's input: never a reason to fail
        compact = auto_compact.read_user_config(user_settings, rest)
    proxy = ClaudeProxy(
        upstream=upstream_from_env(),
        state_dir=paths.state_dir(),
        socket_path=paths.socket_path(),
        start_info=start_info,
        daemon_start_argv=daemon_run_argv(),
        compact_config=compact,
        listener=listener.sock,
        secret=listener.secret,
    )
    daemon.join()  # bounded by ensure_running's own deadline
    proxy.start()
    # the daemon link's client, built before the first request needs it (not waited for)
    threading.Thread(target=proxy.daemon.warm, daemon=True).start()
    if not quiet:
        preload_exit_line()
    return proxy


def _plain_proxy(listener: Any) -> Any:
    """The agent's requests forwarded as they are, when the proxy could not be built."""
    from ctxwrap.agents._proxy.plain import plain_forwarding
    from ctxwrap.agents.claude.proxy import upstream_from_env

    return plain_forwarding(listener, upstream_from_env(), "claude")


def main(args: list[str]) -> NoReturn:
    """`ctxwrap claude ARGS…` straight from the entry point (no click): Claude Code's status."""
    exit_with(run_claude, args)
