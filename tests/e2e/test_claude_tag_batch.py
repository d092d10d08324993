"""The real Claude Code: the Read/Grep/Glob results of one tool round get ONE tag aux call.

Claude Code runs the parallel Reads of one assistant message and fires one PostToolUse hook
per call; the proxy knows the message's calls from the response it forwarded and sends one
`/v1/tag_batch` when the last of them has its hook — not only at the next request.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from support import ROUND_ONE_TAGS, Xdg
from test_claude import ClaudeEnv, _steps, assert_prefix_chain, tool_results

from ctxwrap.testing.claude_home import find_claude
from ctxwrap.testing.model_server import RecordedRequest, ScriptedModelServer

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        find_claude() is None, reason="claude not installed (scripts/install-tools.sh)"
    ),
]

DROP = {"task": "tag", "match": "DROP-ME-MARKER", "answer": {"decision": "DROP"}}
# Longer than the proxy's tag wait (tag_wait_ms, 400 ms), shorter than the Bash call that
# follows the Reads: a batch sent only when the next request starts would come too late.
AUX_DELAY_S = 1.5
SLOW_BASH = "sleep 3"


def body(name: str, marker: str = "") -> str:
    return marker + "".join(f"{name} line {i}: plain content nobody needs\n" for i in range(200))


def batch_numbers(req: RecordedRequest) -> list[str]:
    text = json.dumps(req.body["messages"])
    return re.findall(r"### result (\d+) \(", text)


def test_one_round_of_reads_is_one_tag_call(tmp_path: Path, xdg: Xdg) -> None:
    with ScriptedModelServer([], aux_rules=[DROP], aux_delay_s=AUX_DELAY_S) as srv:
        ce = ClaudeEnv(tmp_path, xdg, srv)
        ce.env.update(ROUND_ONE_TAGS)  # tags from the first round
        files = {
            "a.txt": body("alpha"),
            "b.txt": body("bravo", "DROP-ME-MARKER\n"),
            "c.txt": body("charlie"),
            "d.txt": body("delta", "DROP-ME-MARKER\n"),
        }
        for name, text in files.items():
            (ce.work / name).write_text(text)
        read = lambda name: {"name": "Read", "arguments": {"file_path": str(ce.work / name)}}  # noqa: E731
        bash = {"name": "Bash", "arguments": {"command": SLOW_BASH}}
        srv.steps = _steps(
            [
                # round 1: three parallel Reads (one to drop), then a slow command
                {"tool_calls": [read("a.txt"), read("b.txt"), read("c.txt"), bash]},
                # round 2: a single Read: tagged on its own hook, waits for nothing
                {"tool_calls": [read("d.txt"), bash]},
                {"tool_calls": [{"name": "Bash", "arguments": {"command": "true"}}]},
                {"text": "done"},
            ]
        )
        ce.run(timeout=180)
        reqs = srv.main_requests
        assert len(reqs) == 4
        tags = [r for r in srv.aux_requests if r.aux_task == "tag"]
        # one aux call per round (without batching: one per Read, 4 in all)
        assert len(tags) == 2, [batch_numbers(t) for t in tags]
        assert sorted(batch_numbers(tags[0])) == ["1", "2", "3"]
        assert batch_numbers(tags[1]) == ["1"]
        first = json.dumps(tags[0].body["messages"])
        assert "alpha line 0" in first and "bravo line 0" in first and "charlie line 0" in first
        assert "delta line 0" in json.dumps(tags[1].body["messages"])

        # Each round's tag answered (after AUX_DELAY_S) before the request that carries its
        # results: the DROP-ruled Reads are tombstones from that request on, the others whole.
        a, b, c, d = "toolu_0_0", "toolu_0_1", "toolu_0_2", "toolu_1_0"
        for req in reqs[1:]:
            results = tool_results(req)
            assert isinstance(results[b], str) and results[b].startswith("[ctxwrap: read ")
            assert "judged not needed" in results[b] and "ctxwrap recall r" in results[b]
            for cid, name in ((a, "a.txt"), (c, "c.txt")):
                assert files[name].splitlines()[5] in json.dumps(results[cid])
                assert not json.dumps(results[cid]).startswith('"[ctxwrap')
        for req in reqs[2:]:
            results = tool_results(req)
            assert isinstance(results[d], str) and results[d].startswith("[ctxwrap: read ")
        assert "DROP-ME-MARKER" not in json.dumps([r.body["messages"] for r in reqs])
        assert_prefix_chain(reqs)


MCP_SERVER = Path(__file__).resolve().parents[1] / "mcp_many_tools.py"


def test_an_mcp_answer_is_a_lookup_tagged_stored_and_recalled(tmp_path: Path, xdg: Xdg) -> None:
    """An MCP server's answer, with the tool allowed the way users allow it (`--allowedTools
    mcp__SERVER__TOOL`, no blanket permission), is read like a file: Claude Code's PostToolUse
    hook puts it in its round's tag batch, the daemon stores it behind a recall handle, and a
    DROP makes it a tombstone naming the tool and the handle from the next request on, while
    `ctxwrap recall` gives the whole answer back. The answer the tagger keeps stays whole."""
    tool = "mcp__many__probe_tool_01"
    mcp = {"mcpServers": {"many": {"command": sys.executable, "args": [str(MCP_SERVER), "3"]}}}
    call = lambda record: {"name": tool, "arguments": {"record_id": record, "pages": 200}}  # noqa: E731
    with ScriptedModelServer([], aux_rules=[DROP]) as srv:
        ce = ClaudeEnv(tmp_path, xdg, srv)
        ce.env.update(ROUND_ONE_TAGS)  # tags from the first round
        srv.steps = _steps(
            [
                {"tool_calls": [call("DROP-ME-MARKER"), call("kept-record")]},
                {"tool_calls": [{"name": "Bash", "arguments": {"command": "true"}}]},
                {"text": "done"},
            ]
        )
        ce.run("go", "--mcp-config", json.dumps(mcp), "--allowedTools", tool, timeout=180)
        reqs = srv.main_requests
        assert len(reqs) == 3
        [tag] = [r for r in srv.aux_requests if r.aux_task == "tag"]
        assert sorted(batch_numbers(tag)) == ["1", "2"]  # one batch for the round
        for req in reqs[1:]:
            results = tool_results(req)
            dropped, kept = results["toolu_0_0"], results["toolu_0_1"]
            assert isinstance(dropped, str) and dropped.startswith(f"[ctxwrap: {tool}(")
            assert "ctxwrap recall r" in dropped
            assert "section 150: details of the record" in json.dumps(kept)
        for req in reqs[1:]:  # the dropped answer's pages are nowhere in the context
            assert json.dumps(req.body["messages"]).count("section 150: details") == 1
        assert_prefix_chain(reqs)
        handle = re.search(r"ctxwrap recall (r[\w-]+)", dropped)
        assert handle is not None
        recalled = ce.ctxwrap("recall", handle.group(1), "section 150")
        assert recalled.returncode == 0, recalled.stderr
        assert "section 150: details of the record, page 150" in recalled.stdout
