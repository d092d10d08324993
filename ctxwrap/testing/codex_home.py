"""Run the real Codex CLI offline against the scripted Responses server (tests, demo).

Codex keeps its state in ``$CODEX_HOME``: each run gets its own, with a ``config.toml`` that
declares the scripted server as a custom provider (``wire_api = "responses"``, the key in
``env_key``). With it, the only requests are ``POST /v1/responses``
(docs/research/codex-0.171.md).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import time
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


def codex_exec_args(prompt: str, *extra: str, sandbox: str = "workspace-write") -> list[str]:
    """One non-interactive run, by default one that may write in its working directory."""
    return ["exec", "--json", "--skip-git-repo-check", "-s", sandbox, *extra, prompt]


CHATGPT_ACCOUNT_ID = "acc-ctxwrap-test"


def _jwt(claims: dict[str, object]) -> str:
    def part(obj: dict[str, object]) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()

    return f"{part({'alg': 'none', 'typ': 'JWT'})}.{part(claims)}.unsigned"


def write_chatgpt_login(codex_home: Path) -> str:
    """A ChatGPT login in ``auth.json`` as ``codex login`` leaves one (tokens unsigned: only the
    scripted server sees them); returns the access token. With it Codex sends
    ``chatgpt-account-id`` and compresses its request bodies (zstd)."""
    claims: dict[str, object] = {
        "email": "dev@example.com",
        "exp": int(time.time()) + 86_400,
        "https://api.openai.com/auth": {
            "chatgpt_plan_type": "plus",
            "chatgpt_account_id": CHATGPT_ACCOUNT_ID,
            "chatgpt_user_id": "user-ctxwrap-test",
        },
    }
    token = _jwt(claims)
    auth = {
        "OPENAI_API_KEY": None,
        "auth_mode": "chatgpt",
        "tokens": {
            "id_token": token,
            "access_token": token,
            "refresh_token": "rt-ctxwrap-test",
            "account_id": CHATGPT_ACCOUNT_ID,
        },
        "last_refresh": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    codex_home.mkdir(parents=True, exist_ok=True)
    path = codex_home / "auth.json"
    path.write_text(json.dumps(auth))
    path.chmod(0o600)
    return token
