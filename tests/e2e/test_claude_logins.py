"""Logins other than ANTHROPIC_API_KEY through `ctxwrap claude` (issue 20, item 6).

A subscription login (`CLAUDE_CODE_OAUTH_TOKEN`: Claude Code sends `Authorization: Bearer`
and the `oauth-2025-04-20` beta) and an `apiKeyHelper` (settings: Claude Code runs it and
sends its key as `x-api-key` and `Authorization: Bearer`) must reach the upstream through the
proxy on the agent's calls and on ctxwrap's own aux calls (run on the session's upstream with
the session's credentials), and be written nowhere by ctxwrap.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from support import ROUND_ONE_TAGS, Xdg, run_ctxwrap_claude

from ctxwrap.agents.claude.anthropic_wire import marked_ttl_s
from ctxwrap.testing.claude_home import claude_env, find_claude
from ctxwrap.testing.model_server import ScriptedModelServer

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        find_claude() is None, reason="claude not installed (scripts/install-tools.sh)"
    ),
]

OAUTH_TOKEN = "sk-ant-oat01-ctxwrap-test-OAUTH-never-store-me"
HELPER_KEY = "sk-ant-helper-ctxwrap-test-KEY-never-store-me"
DROP = {"task": "tag", "match": "DROP-ME-MARKER", "answer": {"decision": "DROP"}}
NOTES = "DROP-ME-MARKER\n" + "".join(f"note {i}: nothing relevant here\n" for i in range(200))


@pytest.mark.timeout(180)
@pytest.mark.parametrize("login", ["oauth", "api-key-helper"])
def test_the_login_reaches_upstream_and_is_stored_nowhere(
    tmp_path: Path, xdg: Xdg, login: str
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "notes.txt").write_text(NOTES)
    steps = [
        {"tool_calls": [{"name": "Read", "arguments": {"file_path": str(work / "notes.txt")}}]},
        {"text": "done"},
    ]
    with ScriptedModelServer(steps, aux_rules=[DROP]) as srv:
        env = claude_env(xdg.env(), home=tmp_path / "home", base_url=srv.root_url)
        env.update(ROUND_ONE_TAGS)  # an aux call in the first round, to carry the login
        del env["ANTHROPIC_API_KEY"]
        args = ["-p", "go", "--output-format", "json", "--allowedTools", "Read"]
        if login == "oauth":
            env["CLAUDE_CODE_OAUTH_TOKEN"] = OAUTH_TOKEN
            secret = OAUTH_TOKEN
            want = {"authorization": f"Bearer {OAUTH_TOKEN}"}
        else:
            helper = tmp_path / "key-helper.sh"
            helper.write_text(f"#!/bin/sh\necho {HELPER_KEY}\n")
            helper.chmod(0o700)
            args += ["--settings", json.dumps({"apiKeyHelper": str(helper)})]
            secret = HELPER_KEY
            want = {"x-api-key": HELPER_KEY, "authorization": f"Bearer {HELPER_KEY}"}
        run_ctxwrap_claude(args, cwd=work, env=env)
        main, aux = srv.main_requests, srv.aux_requests
        assert len(main) == 2
        assert aux and {r.aux_task for r in aux} == {"tag"}
        for r in [*main, *aux]:  # the agent's calls and ctxwrap's own aux calls alike
            assert {k: r.headers.get(k) for k in want} == want
        if login == "oauth":
            for r in aux:  # a subscription token needs its beta on ctxwrap's calls too
                assert "oauth-2025-04-20" in r.headers["anthropic-beta"]
            # under a subscription login Claude Code asks for the 1-hour cache: the proxy's
            # idle boundary follows it (test_claude_masking_proxy.py)
            assert marked_ttl_s(main[0].body) == 3600.0
        # the login worked for ctxwrap's own decision: the dropped read is a tombstone
        [result] = [
            b["content"]
            for m in main[-1].body["messages"]
            for b in (m["content"] if isinstance(m.get("content"), list) else [])
            if isinstance(b, dict) and b.get("type") == "tool_result"
        ]
        assert isinstance(result, str) and result.startswith("[ctxwrap: read ")
    # plain Claude Code's window, for where its plain session compacts (auto_compact.py): a
    # subscription login gets 200k, an API key the 1M one (the context-1m beta)
    with sqlite3.connect(xdg.db) as db:
        windows = {w for (w,) in db.execute("SELECT context_window FROM session_models") if w}
    assert windows == {200_000 if login == "oauth" else 1_000_000}
    assert_in_no_file(xdg, secret)


def assert_in_no_file(xdg: Xdg, secret: str) -> None:
    """Nothing ctxwrap keeps (state: database, session files, raw outputs, logs; config;
    runtime: socket dir, per-launch settings) holds the credential."""
    needle = secret.encode()
    checked = []
    for root in (xdg.state, xdg.config, xdg.runtime):
        for path in root.rglob("*") if root.exists() else ():
            if path.is_file() and not path.is_socket():
                checked.append(path)
                assert needle not in path.read_bytes(), f"credential found in {path}"
    names = {p.name for p in checked}
    assert "ctxwrap.db" in names
    assert any(p.parent.name == "claude" and p.suffix == ".jsonl" for p in checked)
