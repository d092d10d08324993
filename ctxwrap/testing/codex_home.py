"""Run the real Codex CLI offline against the scripted Responses server (tests, demo).

Codex keeps its state in ``$CODEX_HOME``: each run gets its own, with a ``config.toml`` that
declares the scripted server as a custom provider (``wire_api = "responses"``, the key in
``env_key``). With it, the only requests are ``POST /v1/responses``
(docs/research/codex-0.171.md).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from pathlib import Path

TEST_API_KEY = "sk-codex-test-5b1e7a-NEVER-STORE-ME"
PROVIDER_ID = "scripted"
KEY_ENV = "CTXWRAP_TEST_CODEX_KEY"
MODEL = "gpt-5.5"  # a model entry whose tools are exec_command + freeform apply_patch


def _search_path() -> str:
    repo_tools = Path(__file__).resolve().parents[2] / ".tools" / "bin"
    return os.pathsep.join([str(repo_tools), os.environ.get("PATH", "")])


def find_codex() -> Path | None:
    """Codex CLI: CTXWRAP_CODEX, else <repo>/.tools/bin/codex, else PATH."""
    override = os.environ.get("CTXWRAP_CODEX")
    found = shutil.which(override or "codex", path=None if override else _search_path())
    return Path(found) if found else None


def write_codex_config(home: Path, base_url: str, *, extra: str = "") -> Path:
    home.mkdir(parents=True, exist_ok=True)
    config = home / "config.toml"
    config.write_text(
        f'model = "{MODEL}"\n'
        f'model_provider = "{PROVIDER_ID}"\n'
        "[analytics]\nenabled = false\n"
        f"[model_providers.{PROVIDER_ID}]\n"
        'name = "scripted"\n'
        f'base_url = "{base_url}"\n'
        'wire_api = "responses"\n'
        f'env_key = "{KEY_ENV}"\n'
        "request_max_retries = 0\n"
        "stream_max_retries = 0\n" + extra
    )
    return config


def codex_env(
    base: Mapping[str, str], *, home: Path, base_url: str, api_key: str = TEST_API_KEY
) -> dict[str, str]:
    """``base`` plus a private CODEX_HOME (and HOME) whose provider is the scripted server."""
    env = {k: v for k, v in base.items() if not k.startswith(("CODEX_", "OPENAI_"))}
    write_codex_config(home / ".codex", base_url)
    env.update(HOME=str(home), CODEX_HOME=str(home / ".codex"), **{KEY_ENV: api_key})
    codex = find_codex()
    if codex is not None:
        env["CTXWRAP_CODEX"] = str(codex)
    return env


def codex_exec_args(prompt: str, *extra: str) -> list[str]:
    """One non-interactive run that may write in its working directory."""
    return ["exec", "--json", "--skip-git-repo-check", "-s", "workspace-write", *extra, prompt]
