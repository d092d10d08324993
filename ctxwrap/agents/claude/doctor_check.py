"""`ctxwrap doctor`'s Claude Code checks: the binary and its version, the proxy, the hook.

A missing Claude Code is a warning, not a failure: many users run only pi.
"""

from __future__ import annotations

import os
import subprocess

from ctxwrap import paths
from ctxwrap.agents.claude import same_agent
from ctxwrap.agents.claude.launcher import (
    INSTALL_HINT,
    ClaudeInstall,
    ClaudeNotFound,
    claude_config_dir,
    claude_version,
    find_claude,
    hook_command,
    talks_to_anthropic,
)
from ctxwrap.check import Check, installed


def check_claude() -> list[Check]:
    claude, version, first = installed(
        "claude", "Claude Code", find_claude, claude_version, ClaudeNotFound, INSTALL_HINT
    )
    if claude is None or version is None:
        return [first]
    return [
        first,
        _check_proxy(),
        _check_hook(),
        *_check_same_agent(claude, version),
    ]


def _check_same_agent(claude: ClaudeInstall, version: str) -> list[Check]:
    """What behind the proxy differs from plain Claude Code at Anthropic's endpoint
    (agents/claude/same_agent.py), for this user's environment and login."""
    env = dict(os.environ)
    if not talks_to_anthropic(env):
        return [
            Check(
                "claude first-party",
                "ok",
                "a base URL or provider of your own: Claude Code behaves as without ctxwrap",
            )
        ]
    out: list[Check] = []
    catalog = same_agent.catalog_for(version, claude.argv[0], paths.state_dir())
    if catalog is None:
        out.append(
            Check(
                "claude side model",
                "warn",
                f"cannot read Claude Code {version}'s model catalog: behind the proxy its side "
                "requests go to the main model and a named 1M model gets a 200k window",
                "set ANTHROPIC_SMALL_FAST_MODEL, and name 1M models with [1m] (opus[1m])",
            )
        )
    else:
        out.append(
            Check(
                "claude side model",
                "ok",
                f"side requests go to {catalog.side_model} as without ctxwrap; a named "
                "native-1M model keeps its 1M window ([1m] added)",
            )
        )
    policy = same_agent.org_policy(env, claude_config_dir())
    if not policy.eligible:
        summary = "your login gets no organization policy from Anthropic: nothing to lose"
        out.append(Check("claude org policy", "ok", summary))
    elif policy.restricted:
        out.append(
            Check(
                "claude org policy",
                "warn",
                "your organization's policy limits or managed settings (last fetched by plain "
                "claude) apply only when Claude Code talks to api.anthropic.com itself: "
                "`ctxwrap claude` runs plain claude, without savings",
            )
        )
    elif policy.known:
        out.append(
            Check(
                "claude org policy",
                "ok",
                "plain claude's last fetch found no organization restrictions; behind the "
                "proxy Claude Code does not fetch them again",
                "run plain `claude` now and then so that ctxwrap sees a new policy",
            )
        )
    else:
        out.append(
            Check(
                "claude org policy",
                "warn",
                "behind the proxy Claude Code does not fetch your organization's policy limits "
                "or managed settings, and none are known: restrictions would not apply",
                "run plain `claude` once: ctxwrap then runs plain claude if it finds any",
            )
        )
    return out


def _check_proxy() -> Check:
    from ctxwrap.agents._proxy.doctor import check_door
    from ctxwrap.agents.claude.proxy import ClaudeProxy

    def make() -> ClaudeProxy:
        return ClaudeProxy(
            upstream="http://127.0.0.1:9", state_dir=None, socket_path=None, start_info={}
        )

    return check_door("claude", make, "/v1/models")


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
