"""No turn of the real Claude Code waits for a tagger it cannot use (issue 43, item 4).

With a tagger slower than `tag_wait_ms` (a remote small model answers in ~0.8 s), a request waits for its
tail's tags only while the tagger has been answering within `tag_wait_ms` (400 ms): after the
first round it is known to be slower, and the next request goes out before its tag is in.
The late DROPs are not lost: the first cold boundary (an idle gap past the cache TTL) masks
them, frozen like any edit.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support import ROUND_ONE_TAGS, Xdg
from test_claude import BIG_WRITE, ClaudeEnv, _steps, tool_results, tool_uses

from ctxwrap.testing.claude_home import find_claude
from ctxwrap.testing.model_server import ScriptedModelServer

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.serial,  # it measures when a request leaves against when its tag did
    pytest.mark.skipif(
        find_claude() is None, reason="claude not installed (scripts/install-tools.sh)"
    ),
]

# A tagger slower than the wait (1.5 s against tag_wait_ms = 800): a request that waited would
# come ≥ 0.8 s after the tag request; one that did not, well under 0.5 s even on a loaded box.
AUX_DELAY_S = 1.5
DROP = {"task": "tag", "match": "DROP-ME-MARKER", "answer": {"decision": "DROP"}}
RULES = {  # cold after a 2 s gap; masks only at a cold boundary (the warm rule off)
    "PI_CTX_CACHE_TTL_S": "2",
    "PI_CTX_TAG_WAIT_MS": "800",
    "PI_CTX_MASK_WARM": "0",
    **ROUND_ONE_TAGS,  # the tagger from the first round
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
        ce.env["PI_CTX_WRITE"] = "1"  # the Write's fact beside the turn (the strip: off by default)
        for name in ("a", "b"):
            (ce.work / f"{name}.txt").write_text(notes(name))
        read = lambda name: {"name": "Read", "arguments": {"file_path": str(ce.work / name)}}  # noqa: E731
        bash = lambda cmd: {"name": "Bash", "arguments": {"command": cmd}}  # noqa: E731
        write = lambda name: {  # noqa: E731
            "name": "Write",
            "arguments": {"file_path": str(ce.work / name), "content": BIG_WRITE},
        }
        srv.steps = _steps(
            [
                {"tool_calls": [read("a.txt")]},
                {"tool_calls": [read("b.txt")]},
                {"tool_calls": [write("big.txt")]},  # its aux fact: beside the turn too
                {"tool_calls": [bash("sleep 2.6")]},  # the idle gap: past the 2 s TTL
                {"text": "done"},
            ]
        )
        ce.run(timeout=180)
        reqs = srv.main_requests
        tags = [r for r in srv.aux_requests if r.aux_task == "tag"]
        facts = [r for r in srv.aux_requests if r.aux_task == "fact"]
    assert len(reqs) == 5 and len(tags) == 2 and len(facts) == 1
    a, b = "toolu_0_0", "toolu_1_0"
    # The request carrying b's result left before b's tagger answered: no wait on a tagger
    # known (from a's round) to be slower than tag_wait_ms.
    # (measured with a 0.8 s tagger: 0.06 s after b's tag request, 0.43 s before this change)
    gap = reqs[2].timestamp - tags[1].timestamp
    assert gap < 0.5, gap
    # Too late for the tail: both reads reach the model whole, and stay so while warm ...
    for req in reqs[1:4]:
        results = tool_results(req)
        assert "a note 5" in text_of(results[a])
    for req in reqs[2:4]:
        assert "b note 5" in text_of(tool_results(req)[b])
    # The Write's hook returned at once: the next request did not wait for the aux fact
    # (the 0.8 s tagger's pace), its stub carries the daemon's own one-line fact.
    assert reqs[3].timestamp - facts[0].timestamp < 0.5, reqs[3].timestamp - facts[0].timestamp
    stub = tool_uses(reqs[3])["toolu_2_0"]["content"]
    assert stub.startswith("[content stripped by ctxwrap: ") and "\n" not in stub
    assert "quick brown fox" not in json.dumps(reqs[3].body["messages"])
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
