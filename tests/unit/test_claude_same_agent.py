"""`ctxwrap claude` keeps Claude Code the same agent (issue 43): its hooks, its side model, its
context window and its organization's policy, decided at launch (agents/claude/launcher.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ctxwrap.agents.claude import launcher

URL = "http://127.0.0.1:5/SECRET/_ctxwrap/hook"


def test_the_hooks_post_straight_to_the_proxy() -> None:
    """No Python start per tool call: each PostToolUse hook is an HTTP POST to the proxy, with
    Claude Code's wait a little over the proxy's own deadline for that tool."""
    hooks = launcher.hook_settings("CMD", URL)["hooks"]
    entries = {m["matcher"]: m["hooks"] for m in hooks["PostToolUse"]}
    assert set("|".join(entries).split("|")) == set(launcher.HOOK_TOOLS.split("|"))
    for matcher, [entry] in entries.items():
        assert entry["type"] == "http" and entry["url"] == URL
        assert entry["timeout"] == launcher.HTTP_HOOK_TIMEOUT_S[matcher]
    assert entries["Bash"][0]["timeout"] == 20  # the proxy's bash digest deadline is 15 s
    failure = {m["matcher"] for m in hooks["PostToolUseFailure"]}
    assert set("|".join(failure).split("|")) == {"Bash", "Read", "Grep", "Glob"}
    assert "PreToolUse" not in hooks  # never a rewritten command
    life = launcher.lifecycle_hooks("CMD", URL)["hooks"]
    assert life["SessionStart"][0]["hooks"][0] == {"type": "http", "url": URL, "timeout": 10}
    # without a URL: the command hook, as before
    [cmd] = launcher.hook_settings("CMD")["hooks"]["PostToolUse"]
    assert cmd["hooks"][0] == {"type": "command", "command": "CMD", "timeout": 30}


@pytest.mark.parametrize(
    ("env", "layers", "usable"),
    [
        ({}, [], True),
        ({"HTTPS_PROXY": "http://corp:3128"}, [], False),  # the hook would go through it
        ({"http_proxy": "http://corp:3128", "NO_PROXY": "localhost,127.0.0.1"}, [], True),
        ({"HTTPS_PROXY": "http://corp:3128", "no_proxy": "*"}, [], True),
        ({}, [{"sandbox": {"enabled": True}}], False),  # through the sandbox's proxy
        ({}, [{"sandbox": {"enabled": False}}], True),
        ({}, [{"allowedHttpHookUrls": ["https://hooks.example/*"]}], False),
        ({}, [None], False),  # a settings file we cannot read
    ],
)
def test_http_hooks_only_where_they_reach_the_proxy_directly(
    env: dict[str, str], layers: list[Any], usable: bool
) -> None:
    assert launcher.http_hooks_usable(env, layers) is usable


def test_settings_layers_in_claude_codes_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = tmp_path / "repo" / "sub"
    project.mkdir(parents=True)
    (tmp_path / "repo" / ".git").mkdir()
    cfg = tmp_path / "cfg"
    cfg.mkdir()
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(cfg))
    monkeypatch.setattr(launcher, "MANAGED_SETTINGS", tmp_path / "managed.json")
    for path, n in [
        (cfg / "settings.json", 0),
        (tmp_path / "repo" / ".claude" / "settings.json", 1),
        (tmp_path / "repo" / ".claude" / "settings.local.json", 2),
        (project / ".claude" / "settings.json", 3),
        (tmp_path / "managed.json", 5),
    ]:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"n": n}))
    (tmp_path / ".claude").mkdir()
    (tmp_path / ".claude" / "settings.json").write_text('{"n": 99}')  # above the repository
    layers = launcher.settings_layers(json.dumps({"n": 4}), project)
    assert [layer["n"] for layer in layers] == [0, 1, 2, 3, 4, 5]
