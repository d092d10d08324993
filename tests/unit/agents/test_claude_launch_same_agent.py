"""`ctxwrap claude` keeps Claude Code the same agent (issue 43): its hooks, its side model, its
context window and its organization's policy, decided at launch (agents/claude/launcher.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ctxwrap.agents.claude import launcher, same_agent
from ctxwrap.testing.claude_home import find_claude

URL = "http://127.0.0.1:5/hook"
HTTP = {"url": URL, "headers": {"x-ctxwrap-hook": "SECRET"}}


def test_the_hooks_post_straight_to_the_proxy() -> None:
    """No Python start per tool call: each PostToolUse hook is an HTTP POST to the launch, with
    Claude Code's wait a little over the proxy's own deadline for that tool; the secret in a
    header, not in the URL (Claude Code records a hook's URL in its transcript)."""
    hooks = launcher.hook_settings("CMD", HTTP)["hooks"]
    entries = {m["matcher"]: m["hooks"] for m in hooks["PostToolUse"]}
    assert set(entries) == {"Bash", "Write", "Read|Grep|Glob", launcher.LOOKUP_MATCHER}
    for matcher, [entry] in entries.items():
        assert entry["type"] == "http" and entry["url"] == URL
        assert entry["headers"] == {"x-ctxwrap-hook": "SECRET"}
        assert entry["timeout"] == launcher.HTTP_HOOK_TIMEOUT_S[matcher]
    assert entries["Bash"][0]["timeout"] == 20  # the proxy's bash digest deadline is 15 s
    failure = {m["matcher"] for m in hooks["PostToolUseFailure"]}
    assert failure == {"Bash", "Read|Grep|Glob", launcher.LOOKUP_MATCHER}
    assert "PreToolUse" not in hooks  # never a rewritten command
    life = launcher.lifecycle_hooks("CMD", HTTP)["hooks"]
    assert life["PostCompact"][0]["hooks"][0] == {"type": "http", **HTTP, "timeout": 10}
    # Claude Code skips HTTP hooks for SessionStart (test_wrapper_lifecycle.py: listed at launch)
    assert life["SessionStart"][0]["hooks"][0]["type"] == "command"
    # `-p`: no SessionStart hook (its Python start would only delay the first request, which
    # registers the session anyway)
    quiet = launcher.lifecycle_hooks("CMD", HTTP, session_start=False)["hooks"]
    assert "SessionStart" not in quiet and quiet["PostCompact"] == life["PostCompact"]
    # without a URL: the command hook, as before
    cmds = launcher.hook_settings("CMD")["hooks"]["PostToolUse"]
    assert [m["matcher"] for m in cmds] == [launcher.HOOK_TOOLS, launcher.LOOKUP_MATCHER]
    for cmd in cmds:
        assert cmd["hooks"][0] == {"type": "command", "command": "CMD", "timeout": 30}


@pytest.mark.parametrize(
    ("tool", "lookup"),
    [
        ("WebFetch", True),
        ("WebSearch", True),
        ("mcp__github__pull_request_read", True),
        ("mcp__", False),
        ("Read", False),
        ("NotebookRead", False),
        ("WebFetchX", False),
        ("xmcp__a__b", False),
    ],
)
def test_the_lookup_matcher_is_what_the_proxy_takes_for_a_lookup(tool: str, lookup: bool) -> None:
    """Claude Code tests a matcher that is not plain names as an unanchored regex against the
    tool's name: ours fires for exactly the tools the session stores as lookups."""
    import re

    from ctxwrap.agents.claude import anthropic_wire

    assert bool(re.search(launcher.LOOKUP_MATCHER, tool)) is lookup
    assert anthropic_wire.is_lookup(tool) is lookup


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


# -- the model catalog, side model, 1M window, organization policy (same_agent.py) -----------

CAT = same_agent.CATALOG["2.1.197"]


@pytest.mark.skipif(find_claude() is None, reason="claude not installed")
def test_the_pinned_table_is_what_the_pinned_binary_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bumping Claude Code without re-reading its catalog fails here."""
    claude = find_claude()
    assert claude is not None
    version = launcher.claude_version(launcher.ClaudeInstall([str(claude)]))
    assert version in same_agent.CATALOG
    binary = same_agent.binary_of(str(claude))
    assert binary is not None and same_agent.version_beside(binary) == version
    # another version's binary: its own catalog, read once, then from the cache
    monkeypatch.setattr(same_agent, "CATALOG", {})
    found = same_agent.catalog_for(None, str(claude), tmp_path)
    assert (tmp_path / "claude-catalog.json").is_file()
    monkeypatch.undo()
    assert found == same_agent.CATALOG[version]
    monkeypatch.setattr(same_agent, "CATALOG", {})
    monkeypatch.setattr(same_agent, "catalog_from_binary", lambda data: None)
    assert same_agent.catalog_for(None, str(claude), tmp_path) == found  # from the cache


@pytest.mark.parametrize(
    ("env", "layers", "want"),
    [
        ({}, [], {"ANTHROPIC_SMALL_FAST_MODEL": "claude-haiku-4-5-20251001"}),
        ({"ANTHROPIC_SMALL_FAST_MODEL": "mine"}, [], {}),  # the user's own choice
        ({"ANTHROPIC_DEFAULT_HAIKU_MODEL": "mine"}, [], {}),  # Claude Code's qw() uses it
        ({}, [{"env": {"ANTHROPIC_DEFAULT_HAIKU_MODEL": "mine"}}], {}),
        (
            {},
            [{"modelOverrides": {"claude-haiku-4-5-20251001": "arn:haiku"}}],
            {"ANTHROPIC_SMALL_FAST_MODEL": "arn:haiku"},
        ),
    ],
)
def test_the_side_model_is_plain_claude_codes(
    env: dict[str, str], layers: list[Any], want: dict[str, str]
) -> None:
    assert same_agent.side_model_env(env, layers, CAT) == want


@pytest.mark.parametrize(
    ("args", "env", "layers", "want_args", "want_env"),
    [
        (["--model", "opus", "-p", "x"], {}, [], ["--model", "opus[1m]", "-p", "x"], {}),
        (["--model=claude-opus-4-8"], {}, [], ["--model=claude-opus-4-8[1m]"], {}),
        (["--model", "opus[1m]"], {}, [], ["--model", "opus[1m]"], {}),  # already
        (["--model", "haiku"], {}, [], ["--model", "haiku"], {}),  # 200k at Anthropic's too
        (["--model", "claude-opus-4-6"], {}, [], ["--model", "claude-opus-4-6"], {}),
        ([], {"ANTHROPIC_MODEL": "sonnet"}, [], [], {"ANTHROPIC_MODEL": "sonnet[1m]"}),
        ([], {}, [{"model": "claude-fable-5"}], [], {"ANTHROPIC_MODEL": "claude-fable-5[1m]"}),
        ([], {}, [], [], {}),  # the default model: Claude Code gives it 1M by itself
        (["--model", "opus"], {"CLAUDE_CODE_DISABLE_1M_CONTEXT": "1"}, [], ["--model", "opus"], {}),
        (["--", "--model", "opus"], {}, [], ["--", "--model", "opus"], {}),  # the prompt's
    ],
)
def test_a_named_native_1m_model_keeps_its_window(
    args: list[str],
    env: dict[str, str],
    layers: list[Any],
    want_args: list[str],
    want_env: dict[str, str],
) -> None:
    assert same_agent.one_m_model(args, env, layers, CAT) == (want_args, want_env)


def _write(path: Path, doc: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))


def test_who_plain_claude_code_fetches_an_organization_policy_for(tmp_path: Path) -> None:
    cfg = tmp_path / ".claude"
    cfg.mkdir()
    none = same_agent.org_policy({}, cfg)
    assert not none.eligible and none.launch_line() is None  # apiKeyHelper only: plain neither
    key = same_agent.org_policy({"ANTHROPIC_API_KEY": "k"}, cfg)
    assert key.eligible and not key.known and "does not fetch" in (key.launch_line() or "")
    assert same_agent.org_policy({"CLAUDE_CODE_OAUTH_TOKEN": "t"}, cfg).eligible
    for plan, eligible in (("pro", False), ("max", False), ("team", True), ("enterprise", True)):
        oauth = {"accessToken": "x", "subscriptionType": plan}
        _write(cfg / ".credentials.json", {"claudeAiOauth": oauth})
        assert same_agent.org_policy({}, cfg).eligible is eligible, plan
    # its last fetch found nothing: quiet; restrictions or managed settings: plain claude
    _write(cfg / "policy-limits.json", {"restrictions": {"allow_web_fetch": {"allowed": True}}})
    quiet = same_agent.org_policy({}, cfg)
    assert quiet.known and not quiet.restricted and quiet.launch_line() is None
    _write(cfg / "policy-limits.json", {"restrictions": {"allow_web_fetch": {"allowed": False}}})
    assert "running plain claude" in (same_agent.org_policy({}, cfg).launch_line() or "")
    _write(cfg / "policy-limits.json", {"restrictions": {}})
    _write(cfg / "remote-settings.json", {"permissions": {"deny": ["WebFetch"]}})
    assert same_agent.org_policy({}, cfg).restricted


@pytest.mark.skipif(find_claude() is None, reason="claude not installed")
def test_doctor_says_what_differs_from_plain_claude_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ctxwrap.agents.claude.doctor_check import check_claude

    monkeypatch.setenv("CTXWRAP_CLAUDE", str(find_claude()))
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    for var in ("ANTHROPIC_BASE_URL", "CLAUDE_CONFIG_DIR", "CLAUDE_CODE_OAUTH_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-api03-x")

    def ours() -> dict[str, tuple[str, str]]:
        return {c.name: (c.level, c.summary) for c in check_claude()[4:]}

    got = ours()
    assert got["claude side model"][0] == "ok" and "claude-haiku-4-5" in got["claude side model"][1]
    assert got["claude org policy"][0] == "warn"  # an API key, nothing known: said
    (tmp_path / ".claude").mkdir()
    (tmp_path / ".claude" / "policy-limits.json").write_text('{"restrictions": {}}')
    assert ours()["claude org policy"][0] == "ok"
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "https://gateway.example")
    assert list(ours()) == ["claude first-party"]
