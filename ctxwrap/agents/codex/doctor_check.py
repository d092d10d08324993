"""`ctxwrap doctor`'s Codex CLI checks: the binary and its version, the provider, the proxy.

A missing Codex is a warning, not a failure: many users run only pi or Claude Code. The
provider check reads the user's config as `ctxwrap codex` would (config.toml, the default
profile; no -c overrides) and says whether its base_url can be redirected to the proxy.
"""

from __future__ import annotations

import os
import tomllib

from ctxwrap.agents.codex.launcher import (
    INSTALL_HINT,
    CodexNotFound,
    Invocation,
    Unsupported,
    codex_home,
    codex_version,
    effective_config,
    find_codex,
    route_for,
)
from ctxwrap.check import Check, installed


def check_codex() -> list[Check]:
    codex, _version, first = installed(
        "codex", "Codex CLI", find_codex, codex_version, CodexNotFound, INSTALL_HINT
    )
    if codex is None:
        return [first]
    return [
        first,
        check_provider(dict(os.environ)),
        _check_proxy(),
    ]


def check_provider(env: dict[str, str]) -> Check:
    """Whether the configured provider's endpoint can be pointed at the proxy per launch."""
    home = codex_home(env)
    try:
        route = route_for(effective_config(home, Invocation(None, [], None, False)), env)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        return Check(
            "codex config",
            "warn",
            f"{home / 'config.toml'} unreadable ({exc}); `ctxwrap codex` runs plain codex",
            "fix the file (`codex` reports the same error)",
        )
    except Unsupported as exc:
        return Check(
            "codex config",
            "warn",
            f"{exc}: `ctxwrap codex` runs plain codex (no savings)",
            'use a provider with wire_api = "responses" and a base_url, or the openai one',
        )
    where = route.upstream or "the OpenAI endpoint of the login"
    return Check(
        "codex config",
        "ok",
        f"{route.provider} ({where}) is redirected per launch with -c {route.override_key}",
    )


def _check_proxy() -> Check:
    from ctxwrap.agents._proxy.doctor import check_door
    from ctxwrap.agents.codex.proxy import CodexProxy

    def make() -> CodexProxy:
        return CodexProxy(
            upstream="http://127.0.0.1:9",
            provider="custom",  # a custom provider's door: the secret header
            state_dir=None,
            socket_path=None,
            start_info={},
        )

    return check_door("codex", make, "/v1/responses")
