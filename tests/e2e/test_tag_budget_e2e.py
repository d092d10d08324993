"""The tagger's budget with the real agents (invariant 10): by default a tag call goes out only
while the session is ahead of plain by what it costs, as the daemon's own turn_end totals say.

A session's first read comes before anything was saved: it is not tagged, so it stays whole
even though the scripted tagger would drop it. After a build log is digested the session is
ahead, and the same kind of read is tagged and dropped. With the budget off, both are.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support import ROUND_ONE_TAGS, Xdg, run_ctxwrap_pi

from ctxwrap.testing.model_server import aux_task_of

pytestmark = pytest.mark.e2e

LICENSE = "LICENSE TEXT\n" + "".join(
    f"Permission is hereby granted, clause {i}, irrelevant-marker\n" for i in range(120)
)
NOTICE = "THIRD PARTY NOTICES\n" + "".join(
    f"Notice {i}: vendored component, irrelevant-marker\n" for i in range(120)
)
BUILD = 'for i in $(seq 1 6000); do echo "[$i] compiling unit_$i.c ... ok"; done'
SCRIPT = [
    {"tool_calls": [{"name": "read", "arguments": {"path": "LICENSE"}}]},
    {"tool_calls": [{"name": "bash", "arguments": {"command": BUILD}}]},
    {"tool_calls": [{"name": "bash", "arguments": {"command": "echo built"}}]},
    {"tool_calls": [{"name": "read", "arguments": {"path": "NOTICE"}}]},
    {"tool_calls": [{"name": "bash", "arguments": {"command": "echo after-notice"}}]},
    {"text": "done"},
]
DROP = [{"task": "tag", "match": "irrelevant-marker", "answer": '{"decision": "DROP"}'}]
FILES = {"LICENSE": LICENSE, "NOTICE": NOTICE}


@pytest.mark.parametrize("budget", [True, False], ids=["default", "off"])
def test_the_tagger_spends_only_what_the_session_saved(
    tmp_path: Path, xdg: Xdg, budget: bool
) -> None:
    run = run_ctxwrap_pi(
        "pi",
        tmp_path,
        xdg,
        SCRIPT,
        aux_rules=DROP,
        files=FILES,
        extra_env=None if budget else ROUND_ONE_TAGS,
    )
    assert run.proc.returncode == 0, run.proc.stderr
    tags = [r for r in run.server.aux_requests if aux_task_of(r.body) == "tag"]
    tagged = ["LICENSE" in json.dumps(r.body) for r in tags]
    last = json.dumps(run.main_bodies()[-1]["messages"])
    assert "compiling unit_" not in last or "digested" in last  # the build log was digested
    assert "Notice 119: vendored component" not in last  # tagged once ahead: dropped
    if budget:
        assert tagged == [False]  # one tag call, for NOTICE: nothing paid for LICENSE's
        assert "clause 119, irrelevant-marker" in last  # kept whole: never tagged
    else:
        assert sorted(tagged) == [False, True]
        assert "clause 119, irrelevant-marker" not in last


def test_claude_code_tags_only_once_the_session_has_saved(tmp_path: Path, xdg: Xdg) -> None:
    """The same budget under `ctxwrap claude` (the rule is the daemon's, behind the proxy's
    /v1/tag_batch): the first Read is not tagged and reaches every request whole; the Read
    after a digested build log is tagged and dropped."""
    from test_claude import ClaudeEnv, _steps, tool_results

    from ctxwrap.testing.model_server import ScriptedModelServer

    drop = {"task": "tag", "match": "irrelevant-marker", "answer": {"decision": "DROP"}}
    with ScriptedModelServer([], aux_rules=[drop]) as srv:
        ce = ClaudeEnv(tmp_path, xdg, srv)
        for name, text in FILES.items():
            (ce.work / name).write_text(text)
        read = lambda name: {"name": "Read", "arguments": {"file_path": str(ce.work / name)}}  # noqa: E731
        bash = lambda cmd: {"name": "Bash", "arguments": {"command": cmd}}  # noqa: E731
        srv.steps = _steps(
            [
                {"tool_calls": [read("LICENSE")]},
                # under Claude Code's own limit (30,000 chars; a longer output goes to a file
                # and the model sees a 2 KB preview, which leaves the digest little to save)
                {"tool_calls": [bash(BUILD.replace("6000", "700"))]},
                {"tool_calls": [bash("echo built")]},
                {"tool_calls": [read("NOTICE")]},
                {"tool_calls": [bash("echo after-notice")]},
                {"text": "done"},
            ]
        )
        ce.run(timeout=180)
        reqs = srv.main_requests
        tags = [r for r in srv.aux_requests if r.aux_task == "tag"]
    assert len(reqs) == 6
    assert len(tags) == 1 and "NOTICE" in json.dumps(tags[0].body)  # none for LICENSE
    last = tool_results(reqs[-1])
    assert "digested" in json.dumps(last["toolu_1_0"])  # what saved before the second Read
    license_text, notice_text = (json.dumps(last[f"toolu_{i}_0"]) for i in (0, 3))
    assert "clause 119, irrelevant-marker" in license_text  # never tagged: whole
    assert "judged not needed" in notice_text and "Notice 119" not in notice_text
