"""An isolated pi home wired to the scripted model server.

``make_pi_agent_dir`` writes ``<root>/.pi/agent/{models.json,settings.json}``; with
``pi_env(agent_dir, home=root)`` pi never reads the real ``~/.pi`` and makes no network
request except to the scripted server::

    env = pi_env(agent_dir, home)
    subprocess.run(["pi", "--offline", "--provider", "scripted", "--model", "scripted-model",
                    "-p", "go"], env=env, stdin=subprocess.DEVNULL)

The same files work for pi 1.6 (@earendil-works) and 0.73 (@mariozechner).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ctxwrap.paths import tools_bin_dir

__all__ = [
    "OFFLINE_ENV",
    "PROVIDER",
    "find_pi",
    "make_pi_agent_dir",
    "pi_command",
    "pi_env",
    "tools_bin_dir",
]

PROVIDER = "scripted"
MODEL = "scripted-model"
API_KEY = "scripted-dummy-key"

# pi reads these itself: no model-catalog refresh, no pi.dev version check, no install
# telemetry, no fd/rg download (pi 1.6 docs/environment-variables.md; 0.73 dist/main.js).
OFFLINE_ENV: Mapping[str, str] = {
    "PI_OFFLINE": "1",
    "PI_SKIP_VERSION_CHECK": "1",
    "PI_TELEMETRY": "0",
}

# Variables passed through from the caller's environment; everything else is dropped so a
# real provider key (OPENAI_API_KEY …) or the caller's PI_* settings never leak into a test.
_INHERITED = ("LANG", "LC_ALL", "LC_CTYPE", "TERM", "TZ", "TMPDIR", "USER", "LOGNAME", "SHELL")


def models_json(
    base_url: str,
    *,
    context_window: int = 128000,
    max_tokens: int = 16384,
    model: str = MODEL,
    api: str = "openai-completions",
) -> dict[str, Any]:
    """The models.json document: provider ``scripted``, model ``scripted-model`` (or `model`:
    a real model's id, where ctxwrap behaves by model). `api` ``anthropic-messages``: pi talks
    Anthropic Messages (the server's root URL as ``base_url``), with thinking."""
    anthropic = api == "anthropic-messages"
    # Plain OpenAI-compatible server: no developer role, store or reasoning_effort.
    compat = {
        "supportsDeveloperRole": False,
        "supportsReasoningEffort": False,
        "supportsStore": False,
    }
    return {
        "providers": {
            PROVIDER: {
                "baseUrl": base_url,
                "api": api,
                "apiKey": API_KEY,
                **({} if anthropic else {"compat": compat}),
                "models": [
                    {
                        "id": model,
                        "name": "Scripted Model",
                        "reasoning": anthropic,
                        "input": ["text"],
                        "contextWindow": context_window,
                        "maxTokens": max_tokens,
                        "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0},
                    }
                ],
            }
        }
    }


def make_pi_agent_dir(
    root: Path,
    base_url: str,
    *,
    context_window: int = 128000,
    settings: Mapping[str, Any] | None = None,
    model: str = MODEL,
    api: str = "openai-completions",
) -> Path:
    """Write ``<root>/.pi/agent`` for the scripted provider and return that directory.

    ``base_url`` is the server's ``/v1`` URL (``ScriptedModelServer.base_url``). ``settings``
    is merged over the defaults in settings.json.
    """
    agent_dir = root / ".pi" / "agent"
    agent_dir.mkdir(parents=True, exist_ok=True)
    doc = models_json(base_url, context_window=context_window, model=model, api=api)
    (agent_dir / "models.json").write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    merged: dict[str, Any] = {
        "defaultProvider": PROVIDER,
        "defaultModel": model,
        "enableInstallTelemetry": False,
        "quietStartup": True,
    }
    merged.update(settings or {})
    (agent_dir / "settings.json").write_text(json.dumps(merged, indent=2) + "\n", encoding="utf-8")
    return agent_dir


def _search_path() -> str:
    current = os.environ.get("PATH", os.defpath)
    tools = tools_bin_dir()
    return f"{tools}{os.pathsep}{current}" if tools else current


def pi_env(
    agent_dir: Path, home: Path, *, extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    """A complete environment for a pi subprocess isolated in ``home``/``agent_dir``."""
    env = {k: os.environ[k] for k in _INHERITED if k in os.environ}
    env.update(
        {
            "HOME": str(home),
            "PATH": _search_path(),
            "PI_CODING_AGENT_DIR": str(agent_dir),
            "PI_CODING_AGENT_SESSION_DIR": str(agent_dir / "sessions"),
            "XDG_CONFIG_HOME": str(home / ".config"),
            "XDG_STATE_HOME": str(home / ".local" / "state"),
            "XDG_CACHE_HOME": str(home / ".cache"),
            "XDG_DATA_HOME": str(home / ".local" / "share"),
            "NO_COLOR": "1",
            **OFFLINE_ENV,
        }
    )
    env.setdefault("LANG", "C.UTF-8")
    env.setdefault("TERM", "dumb")
    env.update(extra or {})
    return env


def find_pi(name: str = "pi") -> Path | None:
    """The pi executable ``name`` (``pi`` = 1.x, ``pi-0.73``) on the search path pi_env uses."""
    found = shutil.which(name, path=_search_path())
    return Path(found) if found else None


def pi_command(
    pi: Path | str, prompt: str, *args: str, wrapped: bool = False, model: str = MODEL
) -> list[str]:
    """argv for one non-interactive run against the scripted model.

    wrapped=True runs it through `ctxwrap pi` (this interpreter), which finds pi through the
    CTXWRAP_PI variable the caller sets to `pi`.
    """
    pi_args = ["--offline", "--provider", PROVIDER, "--model", model, *args, "-p", prompt]
    if wrapped:
        return [sys.executable, "-m", "ctxwrap", "pi", *pi_args]
    return [str(pi), *pi_args]
