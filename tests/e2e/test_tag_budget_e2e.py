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
