"""`ctxwrap replay` on a transcript the real Claude Code writes against the scripted Anthropic
server: one call per response, message sizes as the server received them, a digest and a strip.

Needs the Anthropic side of the scripted server and `ctxwrap.testing.claude_home` (branch
`claude`); skipped until both are there. tests/fixtures/sessions/claude-2.1.197.jsonl was
captured the same way.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from ctxwrap.replay import Thresholds, replay_paths, run_json
from ctxwrap.testing.model_server import ScriptedModelServer

claude_home = pytest.importorskip(
    "ctxwrap.testing.claude_home", reason="needs ctxwrap.testing.claude_home (branch claude)"
)

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(claude_home.find_claude() is None, reason="claude is not installed"),
]

NOTES = "".join(f"line {i} of a long notes file\n" for i in range(700))
BODY = "".join(f"value_{i} = {i}\n" for i in range(300))


def block_chars(block: Any) -> int:
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
        return (
            sum(block_chars(b) for b in content)
            if isinstance(content, list)
            else len(content or "")
        )
    return 0


def message_chars(message: dict[str, Any]) -> int:
    content = message["content"]
    return len(content) if isinstance(content, str) else sum(block_chars(b) for b in content)


def test_replay_of_a_real_claude_code_transcript(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "NOTES.txt").write_text(NOTES)
    steps = [
        {
            "tool_calls": [
                {"name": "Bash", "arguments": {"command": "seq 1 4000", "description": "count"}},
                {"name": "Read", "arguments": {"file_path": str(work / "NOTES.txt")}},
            ]
        },
        {
            "tool_calls": [
                {"name": "Write", "arguments": {"file_path": str(work / "v.py"), "content": BODY}}
            ]
        },
        {"text": "done"},
    ]
    home = tmp_path / "home"
    with ScriptedModelServer(steps) as srv:
        env = claude_home.claude_env({"PATH": "/usr/bin:/bin"}, home=home, base_url=srv.root_url)
        proc = subprocess.run(
            [str(claude_home.find_claude()), *claude_home.claude_print_args("go")],
            env=env,
            cwd=work,
            capture_output=True,
            text=True,
            timeout=180,
            stdin=subprocess.DEVNULL,
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        bodies = [r.body for r in srv.main_requests]
    [transcript] = sorted((home / ".claude" / "projects").rglob("*.jsonl"))
    # the write strip on (off by default), so the transcript's write is replayed stripped
    doc = run_json(replay_paths([transcript], per_call=True, thresholds=Thresholds(write=True)))
    assert doc["skipped_files"] == {}
    [s] = doc["groups"]
    assert s["format"] == "claude" and s["llm_calls"] == len(bodies) == 3
    for call, body in zip(s["calls"], bodies, strict=True):
        received = sum(message_chars(m) for m in body["messages"])
        assert abs(call["messages_chars"] - received) <= 0.15 * received + 200, (
            call["index"],
            call["messages_chars"],
            received,
        )
    kinds = [i["kind"] for i in s["intervention_list"]]
    assert kinds.count("digest") == 1 and kinds.count("strip") == 1
