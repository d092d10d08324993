"""`ctxwrap doctor`'s Claude Code checks: the binary and its version, the proxy, the hook.

A missing Claude Code is a warning, not a failure: many users run only pi.
"""

from __future__ import annotations

import subprocess

from ctxwrap.agents.claude.launcher import (
    INSTALL_HINT,
    ClaudeNotFound,
    claude_version,
    find_claude,
    hook_command,
)
from ctxwrap.check import Check


def check_claude() -> list[Check]:
    try:
        claude = find_claude()
    except ClaudeNotFound as exc:
        return [
            Check("claude", "warn", f"{exc.message}; `ctxwrap claude` is unavailable", INSTALL_HINT)
        ]
    version = claude_version(claude)
    if version is None:
        return [Check("claude", "fail", f"`{claude.argv[0]} --version` failed", INSTALL_HINT)]
    return [
        Check("claude", "ok", f"Claude Code {version} ({claude.argv[0]})"),
        _check_proxy(),
        _check_hook(),
    ]


def _check_proxy() -> Check:
    import httpx

    from ctxwrap.agents.claude.proxy import ClaudeProxy

    try:
        proxy = ClaudeProxy(
            upstream="http://127.0.0.1:9", state_dir=None, socket_path=None, start_info={}
        )
        proxy.start()
        try:
            denied = httpx.get(f"http://127.0.0.1:{proxy.port}/v1/models", timeout=3).status_code
        finally:
            proxy.close()
    except (OSError, httpx.HTTPError) as exc:
        return Check(
            "claude proxy", "fail", f"cannot serve on 127.0.0.1: {exc}", "check loopback networking"
        )
    if denied != 404:
        return Check("claude proxy", "fail", f"a request without the secret got {denied}, not 404")
    return Check(
        "claude proxy", "ok", "serves on 127.0.0.1, refuses requests without the per-launch secret"
    )


def _check_hook() -> Check:
    command = hook_command()
    try:
        run = subprocess.run(
            command, shell=True, input=b"{}", capture_output=True, timeout=10, check=False
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return Check("claude hook", "fail", f"`{command}` did not run: {exc}")
    if run.returncode != 0:
        return Check("claude hook", "fail", f"`{command}` exited {run.returncode}")
    return Check(
        "claude hook",
        "ok",
        f"`{command}` runs (per launch the hooks POST to the proxy directly; this command "
        "serves where an HTTP(S)_PROXY, the sandbox or allowedHttpHookUrls is in the way)",
    )
