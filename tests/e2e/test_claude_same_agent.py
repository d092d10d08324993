"""Behind ctxwrap's proxy Claude Code 2.1.197 is the agent it is at Anthropic's endpoint (issue 43,
item 5): its side requests go to the model plain Claude Code picks, a named native-1M model
keeps its 1M window, and an organization's policy is never silently weaker.

"Plain Claude Code at Anthropic's endpoint" is reproduced offline for the reference runs only
with its internal `_CLAUDE_CODE_ASSUME_FIRST_PARTY_BASE_URL` (never passed under ctxwrap:
test_claude_first_party.py); `CTXWRAP_CLAUDE_UPSTREAM` stands for Anthropic's endpoint under
ctxwrap. Each case runs with an API key, a subscription (OAuth) token and an apiKeyHelper.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support import CTXWRAP, Xdg

from ctxwrap.testing.claude_home import claude_env, find_claude
from ctxwrap.testing.model_server import ScriptedModelServer

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        find_claude() is None, reason="claude not installed (scripts/install-tools.sh)"
    ),
]

LOGINS = ["api-key", "oauth", "api-key-helper"]
HAIKU = "claude-haiku-4-5-20251001"  # what 2.1.197's `qw()` picks at Anthropic's endpoint
# A prompt-type hook is a side request of Claude Code's (its small/fast model, `qw()`) that
# -p mode sends; the interactive title request is another (test_claude_permissions.py).
PROMPT_HOOK = {"matcher": "Read", "hooks": [{"type": "prompt", "prompt": "Fine? $ARGUMENTS"}]}


def run_claude(
    tmp_path: Path,
    xdg: Xdg,
    name: str,
    srv: ScriptedModelServer,
    login: str,
    *,
    wrapped: bool,
    args: list[str],
    settings: dict[str, Any] | None = None,
) -> subprocess.CompletedProcess[str]:
    work = tmp_path / name
    work.mkdir()
    (work / "a.txt").write_text("hello\n")
    env = claude_env(xdg.env(), home=work / "home", base_url=srv.root_url)
    settings = dict(settings or {})
    if login == "oauth":
        del env["ANTHROPIC_API_KEY"]
        env["CLAUDE_CODE_OAUTH_TOKEN"] = "sk-ant-oat01-ctxwrap-test-never-store-me"
    elif login == "api-key-helper":
        del env["ANTHROPIC_API_KEY"]
        helper = work / "key-helper.sh"
        helper.write_text("#!/bin/sh\necho sk-ant-helper-ctxwrap-test\n")
        helper.chmod(0o700)
        settings["apiKeyHelper"] = str(helper)
    if wrapped:  # no base URL of the user's own: Anthropic's endpoint, stood in for
        del env["ANTHROPIC_BASE_URL"]
        env["CTXWRAP_CLAUDE_UPSTREAM"] = srv.root_url
        argv = [*CTXWRAP, "claude"]
    else:
        env["_CLAUDE_CODE_ASSUME_FIRST_PARTY_BASE_URL"] = "1"
        argv = [env["CTXWRAP_CLAUDE"]]
    if settings:
        args = [*args, "--settings", json.dumps(settings)]
    proc = subprocess.run(
        [*argv, "-p", "go", "--output-format", "json", *args],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize("login", LOGINS)
def test_side_requests_go_where_plain_claude_code_sends_them(
    tmp_path: Path, xdg: Xdg, login: str
) -> None:
    models = {}
    for wrapped in (False, True):
        read = {"file_path": str(tmp_path / f"{login}-{wrapped}" / "a.txt")}
        steps = [{"tool_calls": [{"name": "Read", "arguments": read}]}, {"text": "done"}]
        with ScriptedModelServer(steps, side_text='{"ok": true}') as srv:
            run_claude(
                tmp_path,
                xdg,
                f"{login}-{wrapped}",
                srv,
                login,
                wrapped=wrapped,
                args=["--allowedTools", "Read"],
                settings={"hooks": {"PostToolUse": [PROMPT_HOOK]}},
            )
            models[wrapped] = (srv.side_models, {r.body["model"] for r in srv.main_requests})
    plain, ours = models[False], models[True]
    assert plain[0] == [HAIKU]  # the reference: Haiku, whatever the login
    assert ours == plain  # not the main model (what subscription and helper logins got)
    assert HAIKU not in ours[1]


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize("login", LOGINS)
def test_a_named_1m_model_keeps_its_window(tmp_path: Path, xdg: Xdg, login: str) -> None:
    windows = {}
    for wrapped in (False, True):
        with ScriptedModelServer([{"text": "done"}]) as srv:
            proc = run_claude(
                tmp_path, xdg, f"{login}-{wrapped}", srv, login, wrapped=wrapped,
                args=["--model", "opus"],
            )  # fmt: skip
            usage = json.loads(proc.stdout)["modelUsage"]
            windows[wrapped] = [u["contextWindow"] for u in usage.values()]
            assert {r.body["model"] for r in srv.main_requests} == {"claude-opus-4-8"}
    assert windows == {False: [1_000_000], True: [1_000_000]}  # without the fix: 200,000


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize("login", LOGINS)
def test_the_organization_policy_is_said_not_silently_lost(
    tmp_path: Path, xdg: Xdg, login: str
) -> None:
    """Claude Code fetches policy limits and remote managed settings from api.anthropic.com
    only, never from its base URL, and not at all behind one that is not Anthropic's: the
    proxy cannot answer for them. With no earlier plain run, ctxwrap says so at launch for
    the logins plain Claude Code fetches them for (an API key, a subscription token of no
    known plan), not for apiKeyHelper (plain Claude Code fetches nothing for it)."""
    with ScriptedModelServer([{"text": "done"}]) as srv:
        srv.policy_limits = {"restrictions": {"allow_remote_sessions": {"allowed": False}}}
        srv.managed_settings = {"uuid": "u", "checksum": "c", "settings": {"model": "haiku"}}
        proc = run_claude(tmp_path, xdg, login, srv, login, wrapped=True, args=[])
        assert srv.policy_requests == []  # nothing to answer for: Claude Code asks elsewhere
    said = "does not fetch your organization's policy limits" in proc.stderr
    assert said is (login != "api-key-helper"), proc.stderr


def fake_claude(tmp_path: Path) -> tuple[Path, Path]:
    """A `claude` that writes its environment and arguments to a file."""
    dump = tmp_path / "seen.json"
    exe = tmp_path / "claude"
    exe.write_text(
        f"#!{sys.executable}\n"
        "import json, os, sys\n"
        "if sys.argv[1:] == ['--version']:\n"
        "    print('2.1.197 (Claude Code)'); sys.exit(0)\n"
        f"open({str(dump)!r}, 'w').write(json.dumps([dict(os.environ), sys.argv[1:]]))\n"
    )
    exe.chmod(0o755)
    return exe, dump


@pytest.mark.parametrize(
    ("cached", "wrapped"),
    [
        ({"restrictions": {"allow_web_fetch": {"allowed": False}}}, False),
        ({"restrictions": {"allow_web_fetch": {"allowed": True}}}, True),
    ],
)
def test_a_known_organization_policy_runs_plain_claude(
    tmp_path: Path, xdg: Xdg, cached: dict[str, Any], wrapped: bool
) -> None:
    """Plain Claude Code's last fetch found restrictions: `ctxwrap claude` runs plain Claude
    Code (the policy applies as without ctxwrap) and says why; none: ctxwrap, quietly."""
    exe, dump = fake_claude(tmp_path)
    home = tmp_path / "home"
    (home / ".claude").mkdir(parents=True)
    (home / ".claude" / "policy-limits.json").write_text(json.dumps(cached))
    env = {
        k: v for k, v in xdg.env().items() if not k.startswith(("ANTHROPIC_", "CLAUDE_", "ENABLE_"))
    }
    env.update(CTXWRAP_CLAUDE=str(exe), HOME=str(home), ANTHROPIC_API_KEY="sk-ant-api03-test")
    proc = subprocess.run(
        [*CTXWRAP, "claude", "-p", "hi", "--model", "opus"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    seen_env, seen_args = json.loads(dump.read_text())
    assert ("ANTHROPIC_BASE_URL" in seen_env) is wrapped  # through the proxy, or plain
    assert ("running plain claude" in proc.stderr) is not wrapped
    assert "does not fetch" not in proc.stderr  # the last fetch is known either way
    if wrapped:
        assert seen_env["ANTHROPIC_SMALL_FAST_MODEL"] == "claude-haiku-4-5-20251001"
        assert seen_args[-2:] == ["--model", "opus[1m]"]
    else:  # plain: exactly the user's own arguments and environment
        assert "ANTHROPIC_SMALL_FAST_MODEL" not in seen_env
        assert seen_args == ["-p", "hi", "--model", "opus"]


@pytest.mark.parametrize(
    "user_env",
    [
        {"ANTHROPIC_BASE_URL": "http://127.0.0.1:9/gw"},  # their gateway: as without us
        {"CLAUDE_CODE_USE_BEDROCK": "1"},
        {"ANTHROPIC_SMALL_FAST_MODEL": "mine"},
    ],
)
def test_nothing_changes_where_plain_claude_code_is_not_at_anthropic(
    tmp_path: Path, xdg: Xdg, user_env: dict[str, str]
) -> None:
    exe, dump = fake_claude(tmp_path)
    env = {
        k: v for k, v in xdg.env().items() if not k.startswith(("ANTHROPIC_", "CLAUDE_", "ENABLE_"))
    }
    env.update(user_env, CTXWRAP_CLAUDE=str(exe), HOME=str(tmp_path), ANTHROPIC_API_KEY="k")
    proc = subprocess.run(
        [*CTXWRAP, "claude", "-p", "hi", "--model", "opus"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    seen_env, seen_args = json.loads(dump.read_text())
    assert seen_env.get("ANTHROPIC_SMALL_FAST_MODEL") == user_env.get("ANTHROPIC_SMALL_FAST_MODEL")
    own = "ANTHROPIC_SMALL_FAST_MODEL" in user_env  # Anthropic's endpoint, their side model
    assert seen_args[-2:] == ["--model", "opus[1m]" if own else "opus"]
    assert ("does not fetch" in proc.stderr) is own  # a gateway's policy is not Anthropic's
