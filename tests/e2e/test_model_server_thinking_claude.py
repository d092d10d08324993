"""The scripted server's thinking rules (`thinking_rules=True`) against the real Claude Code
2.1.197, plain: what it sends about old thinking is what a policy would change (issue 41,
item 3; docs/accounting.md, "Old thinking"). It asks the API to keep every earlier turn's
thinking (`clear_thinking_20251015`, keep "all", under the context-management beta), on a
model that would keep it anyway and on one that would drop it, so plain pays for old thinking
on every request; the server takes those requests as the API does."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from ctxwrap.engine.thinking import CLEAR_THINKING, CONTEXT_MANAGEMENT_BETA, old_thinking
from ctxwrap.testing.claude_home import claude_env, claude_print_args, find_claude
from ctxwrap.testing.model_server import ScriptedModelServer, anthropic_prompt_tokens

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        find_claude() is None, reason="claude not installed (scripts/install-tools.sh)"
    ),
]


@pytest.mark.parametrize("model", ["claude-sonnet-4-6", "claude-sonnet-4-5-20250929"])
def test_plain_claude_code_keeps_every_earlier_turns_thinking(tmp_path: Path, model: str) -> None:
    work = tmp_path / "work"
    work.mkdir()
    say = {"command": "echo hi", "description": "say hi"}
    steps = [
        {"tool_calls": [{"name": "Bash", "arguments": json.dumps(say)}]},
        {"text": "first done"},
        {"text": "second done"},
    ]
    with ScriptedModelServer(steps, thinking_rules=True, side_text="title") as srv:
        env = claude_env({"PATH": "/usr/bin:/bin"}, home=tmp_path / "home", base_url=srv.root_url)
        claude = str(find_claude())
        for prompt, extra in (("say hi", ()), ("and again", ("--continue",))):
            done = subprocess.run(
                [claude, *claude_print_args(prompt, "--model", model, *extra)],
                cwd=work,
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert done.returncode == 0, done.stderr[-2000:]
        mains = srv.main_requests
        assert len(mains) == 3
        for rec in mains:
            assert rec.body["context_management"] == {
                "edits": [{"type": CLEAR_THINKING, "keep": "all"}]
            }
            assert CONTEXT_MANAGEMENT_BETA in rec.headers["anthropic-beta"].split(",")
            assert rec.thinking_cleared == ()  # taken as the API takes it, nothing cleared
            assert rec.usage is not None
        # the second prompt's request carries the first turn's two thinking blocks, and pays
        # for them: its usage counts the whole request
        last = mains[-1]
        assert len(old_thinking(last.body["messages"])) == 2
        usage = last.usage or {}
        counted = sum(
            usage[k]
            for k in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
        )
        assert counted == anthropic_prompt_tokens(last.body)
