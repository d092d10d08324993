"""No turn of the real Claude Code waits for a tagger it cannot use (issue 43, item 4).

With a tagger answering in 0.8 s (a realistic remote small model), a request waits for its
tail's tags only while the tagger has been answering within `tag_wait_ms` (400 ms): after the
first round it is known to be slower, and the next request goes out before its tag is in.
The late DROPs are not lost: the first cold boundary (an idle gap past the cache TTL) masks
them, frozen like any edit.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support import Xdg
from test_claude import ClaudeEnv, _steps, tool_results

from ctxwrap.testing.claude_home import find_claude
from ctxwrap.testing.model_server import ScriptedModelServer

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        find_claude() is None, reason="claude not installed (scripts/install-tools.sh)"
    ),
]

AUX_DELAY_S = 0.8
DROP = {"task": "tag", "match": "DROP-ME-MARKER", "answer": {"decision": "DROP"}}
RULES = {  # cold after a 2 s gap; masks only at a cold boundary (the warm rule off)
    "PI_CTX_CACHE_TTL_S": "2",
    "PI_CTX_MASK_WARM": "0",
}


def notes(name: str) -> str:
    return "DROP-ME-MARKER\n" + "".join(f"{name} note {i}: nothing relevant\n" for i in range(120))


def text_of(value: object) -> str:
    return value if isinstance(value, str) else json.dumps(value)


@pytest.mark.timeout(240)
def test_a_late_drop_waits_for_nothing_and_becomes_a_mask(tmp_path: Path, xdg: Xdg) -> None:
    with ScriptedModelServer([], aux_rules=[DROP], aux_delay_s=AUX_DELAY_S) as srv:
        ce = ClaudeEnv(tmp_path, xdg, srv)
        ce.env.update(RULES)
        for name in ("a", "b"):
            (ce.work / f"{name}.txt").write_text(notes(name))
        read = lambda name: {"name": "Read", "arguments": {"file_path": str(ce.work / name)}}  # noqa: E731
        bash = lambda cmd: {"name": "Bash", "arguments": {"command": cmd}}  # noqa: E731
        srv.steps = _steps(
            [
                {"tool_calls": [read("a.txt")]},
                {"tool_calls": [read("b.txt")]},
                {"tool_calls": [bash("true")]},
                {"tool_calls": [bash("sleep 2.6")]},  # the idle gap: past the 2 s TTL
                {"text": "done"},
            ]
        )
        ce.run(timeout=180)
        reqs = srv.main_requests
        tags = [r for r in srv.aux_requests if r.aux_task == "tag"]
    assert len(reqs) == 5 and len(tags) == 2
    a, b = "toolu_0_0", "toolu_1_0"
    # The request carrying b's result left before b's tagger answered: no wait on a tagger
    # known (from a's round) to be slower than tag_wait_ms.
    # (measured: 0.06 s after b's aux request; the 400 ms tag wait made it ≥ 0.4 s)
    gap = reqs[2].timestamp - tags[1].timestamp
    assert gap < 0.3, gap
    # Too late for the tail: both reads reach the model whole, and stay so while warm ...
    for req in reqs[1:4]:
        results = tool_results(req)
        assert "a note 5" in text_of(results[a])
    for req in reqs[2:4]:
        assert "b note 5" in text_of(tool_results(req)[b])
    # ... the cold boundary masks both late DROPs (Claude Code's own prefix would be rewritten
    # then anyway); nothing else of the session is touched.
    last = tool_results(reqs[4])
    for cid, name in ((a, "a.txt"), (b, "b.txt")):
        tomb = text_of(last[cid])
        assert tomb.startswith("[ctxwrap: ") and name in tomb and "ctxwrap recall r" in tomb
    assert "DROP-ME-MARKER" not in json.dumps(reqs[4].body["messages"])
    events = [json.loads(line) for line in (xdg.state / "ctxwrap" / "events.jsonl").open()]
    (mask,) = [e for e in events if e.get("event") == "mask"]
    assert mask["trigger"] == "idle"
    assert sorted(m[:2] for m in mask["masks"]) == [[a, "dropped"], [b, "dropped"]]
