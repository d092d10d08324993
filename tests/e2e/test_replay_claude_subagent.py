"""`ctxwrap replay` on the transcripts the real Claude Code writes when it runs a sub-agent
(Task): the main session and `<session>/subagents/agent-*.jsonl`, one LLM call per request
the scripted Anthropic server received, the sub-agent's calls in its own session under its
parent, and each call's messages as the server received them."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from support import task_step

from ctxwrap.replay import replay_paths, run_json
from ctxwrap.testing.model_server import ScriptedModelServer

claude_home = pytest.importorskip("ctxwrap.testing.claude_home")

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(claude_home.find_claude() is None, reason="claude is not installed"),
]

STEPS = [
    task_step("Run wc -l on notes.txt and report"),
    {"tool_calls": [{"name": "Bash", "arguments": {"command": "wc -l notes.txt"}}]},
    {"text": "notes.txt has 300 lines"},
    {"text": "done: 300 lines"},
]


def _chars(block: Any) -> int:
    if isinstance(block, str):
        return len(block)
    kind = block.get("type")
    if kind == "text":
        return len(block["text"])
    if kind == "tool_use":
        args = json.dumps(block["input"], separators=(",", ":"), ensure_ascii=False)
        return len(block["name"]) + len(args)
    if kind == "tool_result":
        content = block.get("content")
        return sum(_chars(b) for b in content) if isinstance(content, list) else len(content or "")
    return 0


# A reminder Claude Code 2.1.197 adds to a sub-agent's later requests without writing it to
# the sub-agent's transcript (the main one records its agent listing as an attachment):
# replay cannot see it (about 1.5k chars).
UNRECORDED = ("Available agent types for the Agent tool",)


def _messages_chars(body: dict[str, Any], *, subagent: bool) -> int:
    return sum(
        len(m["content"]) if isinstance(m["content"], str) else sum(_chars(b) for b in m["content"])
        for m in body["messages"]
        if not (subagent and isinstance(m["content"], str) and m["content"].startswith(UNRECORDED))
    )


def test_replay_of_a_real_claude_code_subagent(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "notes.txt").write_text("".join(f"note {i}\n" for i in range(300)))
    home = tmp_path / "home"
    with ScriptedModelServer(STEPS) as srv:
        env = claude_home.claude_env(dict(os.environ), home=home, base_url=srv.root_url)
        proc = subprocess.run(
            [str(claude_home.find_claude()), *claude_home.claude_print_args("go")],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        reqs = srv.main_requests
    assert len(reqs) == 4
    projects = home / ".claude" / "projects"
    [sub] = list(projects.rglob("subagents/agent-*.jsonl"))
    doc = run_json(replay_paths([projects], per_call=True))
    assert doc["skipped_files"] == {} and doc["skipped_entries"] == {} and doc["unread_files"] == []
    by_source = {g["reader"]["source"]: g for g in doc["groups"]}
    main, agent = by_source["claude"], by_source["claude sub-agent"]
    assert agent["path"] == str(sub)
    assert agent["reader"]["parent_session_id"] == main["session_id"]
    assert (main["llm_calls"], agent["llm_calls"]) == (2, 2)
    # the server saw main, sub-agent, sub-agent, main
    received = [_messages_chars(r.body, subagent=i in (1, 2)) for i, r in enumerate(reqs)]
    replayed = [main["calls"][0], agent["calls"][0], agent["calls"][1], main["calls"][1]]
    for call, n in zip(replayed, received, strict=True):
        assert abs(call["messages_chars"] - n) <= 0.12 * n + 200, (call["messages_chars"], n)
