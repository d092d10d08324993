"""Run the real Claude Code offline against the scripted Anthropic server (tests, demo).

Claude Code keeps its state in ``$HOME/.claude``: each run gets its own HOME. The variables
below keep it from contacting anything but ``ANTHROPIC_BASE_URL`` (checked: with them, the
only requests are ``HEAD /`` and ``POST /v1/messages``; docs/research/claude-code-notes.md).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping
from pathlib import Path

OFFLINE_ENV = {
    "DISABLE_TELEMETRY": "1",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_ERROR_REPORTING": "1",
}
TEST_API_KEY = "sk-ant-test-9f3c2e1d-NEVER-STORE-ME"


def _search_path() -> str:
    repo_tools = Path(__file__).resolve().parents[2] / ".tools" / "bin"
    return os.pathsep.join([str(repo_tools), os.environ.get("PATH", "")])


def find_claude() -> Path | None:
    """Claude Code: CTXWRAP_CLAUDE, else <repo>/.tools/bin/claude, else PATH."""
    override = os.environ.get("CTXWRAP_CLAUDE")
    found = shutil.which(override or "claude", path=None if override else _search_path())
    return Path(found) if found else None


def claude_env(
    base: Mapping[str, str], *, home: Path, base_url: str, api_key: str = TEST_API_KEY
) -> dict[str, str]:
    """``base`` plus a private HOME, the scripted server as upstream, and no side traffic."""
    home.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in base.items() if not k.startswith(("ANTHROPIC_", "CLAUDE_"))}
    env.update(OFFLINE_ENV)
    env.update(HOME=str(home), ANTHROPIC_BASE_URL=base_url, ANTHROPIC_API_KEY=api_key)
    claude = find_claude()
    if claude is not None:
        env["CTXWRAP_CLAUDE"] = str(claude)
    return env


def claude_print_args(prompt: str, *extra: str) -> list[str]:
    """Arguments of one non-interactive run with the tools ctxwrap works on allowed."""
    return [
        "-p",
        prompt,
        "--output-format",
        "json",
        "--allowedTools",
        "Bash Read Write Grep Glob",
        *extra,
    ]


def seed_claude_home(home: Path, project: Path, api_key: str = TEST_API_KEY) -> None:
    """Skip the interactive first-run screens: onboarding, the folder-trust dialog, and the
    "use this API key?" question (Claude Code remembers the key's last 20 characters)."""
    home.mkdir(parents=True, exist_ok=True)
    state = {
        "hasCompletedOnboarding": True,
        "theme": "dark",
        "customApiKeyResponses": {"approved": [api_key[-20:]], "rejected": []},
        "projects": {
            str(project): {"hasTrustDialogAccepted": True, "hasCompletedProjectOnboarding": True}
        },
    }
    (home / ".claude.json").write_text(json.dumps(state))
