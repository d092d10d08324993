"""Claude Code behind ctxwrap's loopback proxy keeps its first-party behaviour (issue 20, item 5).

Claude Code 2.1.197 turns its tool search (deferred tools, `ToolSearch`) off when
ANTHROPIC_BASE_URL is not Anthropic's host, unless ENABLE_TOOL_SEARCH is set. When plain
Claude Code would talk to Anthropic's endpoint, `ctxwrap claude` sets it (never over the user's
own value); with a base URL of the user's own, Claude Code sees what it saw without ctxwrap.
docs/research/claude-code-base-url.md lists every such switch.

`CTXWRAP_CLAUDE_UPSTREAM` stands for Anthropic's endpoint here: the proxy forwards to the
scripted server while ctxwrap sees no base URL of the user's own.
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

pytestmark = pytest.mark.e2e

MCP_SERVER = Path(__file__).resolve().parents[1] / "mcp_many_tools.py"


def fake_claude(tmp_path: Path) -> tuple[Path, Path]:
    """A `claude` that writes its environment to a file (and answers --version)."""
    dump = tmp_path / "env.json"
    exe = tmp_path / "claude"
    exe.write_text(
        f"#!{sys.executable}\n"
        "import json, os, sys\n"
        "if sys.argv[1:] == ['--version']:\n"
        "    print('2.1.197 (Claude Code)'); sys.exit(0)\n"
        f"open({str(dump)!r}, 'w').write(json.dumps(dict(os.environ)))\n"
    )
    exe.chmod(0o755)
    return exe, dump


@pytest.mark.parametrize(
    ("user_env", "want"),
    [
        ({}, "true"),  # Anthropic's endpoint: tool search on, as plain Claude Code has it
        ({"ANTHROPIC_BASE_URL": "https://api.anthropic.com"}, "true"),
        ({"ENABLE_TOOL_SEARCH": "false"}, "false"),  # the user's own choice stays
        ({"ENABLE_TOOL_SEARCH": "auto:5"}, "auto:5"),
        ({"ANTHROPIC_BASE_URL": "http://127.0.0.1:9/gw"}, None),  # their gateway: as without us
        ({"CLAUDE_CODE_USE_VERTEX": "1"}, None),  # not Anthropic's API at all
    ],
)
def test_the_launched_agents_environment(
    tmp_path: Path, xdg: Xdg, user_env: dict[str, str], want: str | None
) -> None:
    exe, dump = fake_claude(tmp_path)
    env = {
        k: v for k, v in xdg.env().items() if not k.startswith(("ANTHROPIC_", "CLAUDE_", "ENABLE_"))
    }
    env.update(user_env, CTXWRAP_CLAUDE=str(exe), HOME=str(tmp_path))
    proc = subprocess.run(
        [*CTXWRAP, "claude", "-p", "hi"], env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(dump.read_text())
    assert seen.get("ENABLE_TOOL_SEARCH") == want
    assert seen["ANTHROPIC_BASE_URL"].startswith("http://127.0.0.1:")  # through the proxy
    assert "_CLAUDE_CODE_ASSUME_FIRST_PARTY_BASE_URL" not in seen
    for k, v in user_env.items():
        if k != "ANTHROPIC_BASE_URL":
            assert seen[k] == v


def first_request_tools(
    tmp_path: Path, xdg: Xdg, name: str, *, wrapped: bool, extra: dict[str, str], own_url: bool
) -> list[dict[str, Any]]:
    work = tmp_path / name
    work.mkdir()
    mcp = {"mcpServers": {"many": {"command": sys.executable, "args": [str(MCP_SERVER), "40"]}}}
    with ScriptedModelServer([{"text": "done"}]) as srv:
        env = claude_env(xdg.env(), home=tmp_path / name / "home", base_url=srv.root_url)
        if not own_url:  # Anthropic's endpoint, stood in for by the scripted server
            del env["ANTHROPIC_BASE_URL"]
            env["CTXWRAP_CLAUDE_UPSTREAM"] = srv.root_url
        env.update(extra)
        argv = [*CTXWRAP, "claude"] if wrapped else [env["CTXWRAP_CLAUDE"]]
        args = ["-p", "go", "--output-format", "json", "--mcp-config", json.dumps(mcp)]
        proc = subprocess.run(
            [*argv, *args], cwd=work, env=env, capture_output=True, text=True, timeout=180
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        tools: list[dict[str, Any]] = srv.main_requests[0].body["tools"]
        return tools


@pytest.mark.skipif(find_claude() is None, reason="claude not installed (scripts/install-tools.sh)")
@pytest.mark.timeout(300)
def test_tool_search_as_plain_claude_code_has_it(tmp_path: Path, xdg: Xdg) -> None:
    def names(tools: list[dict[str, Any]]) -> list[str]:
        return [t["name"] for t in tools]

    def chars(tools: list[dict[str, Any]]) -> int:
        return len(json.dumps(tools, separators=(",", ":")))

    # Plain Claude Code toward Anthropic's endpoint (what the variable reproduces offline) and
    # `ctxwrap claude` with no base URL of the user's own: the same deferred set.
    plain = first_request_tools(
        tmp_path, xdg, "plain", wrapped=False, extra={"ENABLE_TOOL_SEARCH": "true"}, own_url=True
    )
    ours = first_request_tools(tmp_path, xdg, "ours", wrapped=True, extra={}, own_url=False)
    assert names(ours) == names(plain)
    assert "ToolSearch" in names(ours)
    assert not [n for n in names(ours) if n.startswith("mcp__")]  # the 40 MCP tools deferred
    assert len(ours) < 12
    # A base URL of the user's own: what plain Claude Code sends there, every tool loaded.
    plain_gw = first_request_tools(tmp_path, xdg, "plain-gw", wrapped=False, extra={}, own_url=True)
    ours_gw = first_request_tools(tmp_path, xdg, "ours-gw", wrapped=True, extra={}, own_url=True)
    assert names(ours_gw) == names(plain_gw)
    assert "ToolSearch" not in names(ours_gw)
    assert len([n for n in names(ours_gw) if n.startswith("mcp__many__")]) == 40
    print(
        f"first request: {len(ours)} tools, {chars(ours):,} chars with tool search; "
        f"{len(ours_gw)} tools, {chars(ours_gw):,} chars without"
    )
    assert chars(ours) * 2 < chars(ours_gw)
