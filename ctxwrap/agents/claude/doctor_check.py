"""`ctxwrap doctor`'s Claude Code checks: the binary and its version, the proxy, the hook,
whether the model may run `ctxwrap recall` without asking.

A missing Claude Code is a warning, not a failure: many users run only pi.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

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
    settings_layers,
    talks_to_anthropic,
)
from ctxwrap.agents.claude.session import RECALL_RULE
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
        check_recall(),
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


# What the model runs to get back a result ctxwrap hid (the tombstone's and the digest's
# wording): two handles, with and without a pattern, so a rule counts only if it takes every
# recall.
_RECALLS = ("ctxwrap recall r1a2b3c4d", "ctxwrap recall r9e8f7a6b 'some pattern'")

Verdict = Literal["allowed", "mode", "asks", "denied", "unreadable", "unset"]


def _bash_rule_takes(rule: str, command: str) -> bool:
    """Whether a Claude Code permission rule names `command` of its Bash tool: `Bash`,
    `Bash(*)`, `Bash(prefix:*)` (the prefix, then a word boundary), `Bash(glob)` with `*`
    for any text (a lone trailing ` *` may match nothing), or the exact command."""
    rule = rule.strip()
    if rule == "Bash":
        return True
    if not (rule.startswith("Bash(") and rule.endswith(")")):
        return False
    spec = rule[5:-1]
    if spec.endswith(":*") or (spec.endswith(" *") and spec.count("*") == 1):
        prefix = spec[:-2]
        return command == prefix or command.startswith(prefix + " ")
    if "*" not in spec:
        return command == spec
    pattern = ".*".join(re.escape(part) for part in spec.split("*"))
    return re.fullmatch(pattern, command, re.DOTALL) is not None


def recall_verdict(layers: Sequence[Any]) -> tuple[Verdict, str]:
    """Whether Claude Code lets the model run `ctxwrap recall`, from its settings layers
    (`settings_layers`), by its order: a deny rule, then an ask rule, then an allow rule
    wins; else the default mode decides. Returns the verdict and the rule or mode behind it."""
    if any(layer is None for layer in layers):
        return "unreadable", ""
    rules: dict[str, list[str]] = {"deny": [], "ask": [], "allow": []}
    mode = "default"
    for layer in layers:
        permissions = layer.get("permissions")
        if not isinstance(permissions, dict):
            continue
        for kind, found in rules.items():
            value = permissions.get(kind)
            if isinstance(value, list):
                found.extend(v for v in value if isinstance(v, str))
        if isinstance(permissions.get("defaultMode"), str):
            mode = permissions["defaultMode"]  # a later layer wins
    first: tuple[tuple[str, Verdict], ...] = (("deny", "denied"), ("ask", "asks"))
    for kind, verdict in first:
        for rule in rules[kind]:
            if any(_bash_rule_takes(rule, command) for command in _RECALLS):
                return verdict, rule
    for rule in rules["allow"]:
        if all(_bash_rule_takes(rule, command) for command in _RECALLS):
            return "allowed", rule
    if mode in ("bypassPermissions", "auto"):
        return "mode", mode
    return "unset", mode


def check_recall(cwd: Path | None = None) -> Check:
    """Masked and digested results name `ctxwrap recall HANDLE PATTERN`, which the model runs
    in Bash. Unless a rule allows it, Claude Code asks the user every time, and `claude -p`
    refuses it ("This command requires approval"): the model reads again, or guesses."""
    verdict, why = recall_verdict(settings_layers(None, cwd))
    fix = (
        f'add "{RECALL_RULE}" to "permissions" → "allow" in ~/.claude/settings.json (or '
        'answer "don\'t ask again" the first time Claude Code asks)'
    )
    if verdict == "allowed":
        return Check("claude recall", "ok", f"the model may run `ctxwrap recall` ({why})")
    if verdict == "mode":
        return Check("claude recall", "ok", f"the model may run `ctxwrap recall` (mode {why})")
    if verdict == "denied":
        summary = f"`{why}` denies `ctxwrap recall`: the model cannot get back what ctxwrap hid"
        return Check("claude recall", "warn", summary, f"narrow that deny rule, then {fix}")
    if verdict == "asks":
        summary = f"`{why}` makes Claude Code ask before each `ctxwrap recall`"
        return Check("claude recall", "warn", summary, fix)
    if verdict == "unreadable":
        return Check(
            "claude recall",
            "warn",
            "a Claude Code settings file here is unreadable: cannot tell whether the model may "
            "run `ctxwrap recall`",
        )
    if why == "dontAsk":  # the mode refuses what no rule allows, without asking
        summary = (
            "mode dontAsk refuses `ctxwrap recall`: the model cannot get back what ctxwrap hid"
        )
        return Check("claude recall", "warn", summary, fix)
    return Check(
        "claude recall",
        "warn",
        "Claude Code asks before the model runs `ctxwrap recall` to get back a result ctxwrap "
        "hid, and `claude -p` refuses it",
        fix,
    )
