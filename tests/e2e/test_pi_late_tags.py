"""No turn of the real pi waits for a tagger it cannot use, and no late DROP is lost (issue 43).

With a tagger slower than `tag_wait_ms` (a remote small model answers in ~0.8 s), the bridge
waits for a request's tags only while the tagger has been answering within the wait
(`TagPace`, the twin of the proxies' agents/_proxy/tag_wait.py): the first read round waits
`TAG_FIRST_WAIT_MS` at most, the next one not at all. The DROPs that arrive late are not lost:
the next cold boundary (an idle gap past the cache TTL) masks them, frozen like any edit.
The same for Claude Code and Codex: tests/e2e/test_claude_late_tags.py, test_codex_late_tags.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support import PI_VERSIONS, ROUND_ONE_TAGS, Xdg, run_ctxwrap_pi

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.serial,  # it measures when a request leaves against when its tag did
]

# A tagger slower than the wait (1.5 s against tag_wait_ms = 800): a request that waited the
# whole wait would come >= 0.8 s after its tag request; one that did not, well under 0.6 s.
AUX_DELAY_S = 1.5
DROP = {"task": "tag", "match": "DROP-ME-MARKER", "answer": {"decision": "DROP"}}
RULES = {  # cold after a 2 s gap; masks only at a cold boundary (the warm rule off)
    "PI_CTX_CACHE_TTL_S": "2",
    "PI_CTX_TAG_WAIT_MS": "800",
    "PI_CTX_MASK_WARM": "0",
    **ROUND_ONE_TAGS,  # the tagger from the first round
}
SCRIPT: list[object] = [
    {"tool_calls": [{"name": "read", "arguments": {"path": "a.txt"}}]},
    {"tool_calls": [{"name": "read", "arguments": {"path": "b.txt"}}]},
    # the last mask_keep_rounds (2) rounds are never masked: one more round, then the gap
    {"tool_calls": [{"name": "bash", "arguments": {"command": "echo checked"}}]},
    {"tool_calls": [{"name": "bash", "arguments": {"command": "sleep 2.6"}}]},  # the idle gap
    {"text": "done"},
]


def notes(name: str) -> str:
    return "DROP-ME-MARKER\n" + "".join(f"{name} note {i}: nothing relevant\n" for i in range(120))


def results(body: dict[str, Any]) -> dict[str, str]:
    return {
        str(m.get("tool_call_id")): json.dumps(m.get("content"))
        for m in body["messages"]
        if m.get("role") == "tool"
    }


@pytest.mark.timeout(240)
@pytest.mark.parametrize("pi", PI_VERSIONS)
def test_a_late_drop_waits_for_nothing_and_becomes_a_mask(
    pi: str, tmp_path: Path, xdg: Xdg
) -> None:
    run = run_ctxwrap_pi(
        pi,
        tmp_path,
        xdg,
        SCRIPT,
        aux_rules=[DROP],
        aux_delay_s=AUX_DELAY_S,
        extra_env=RULES,
        files={"a.txt": notes("a"), "b.txt": notes("b")},
        timeout=180,
    )
    assert run.proc.returncode == 0, run.proc.stderr
    reqs = run.server.main_requests
    tags = [r for r in run.server.aux_requests if r.aux_task == "tag"]
    assert len(reqs) == 5 and len(tags) == 2, (len(reqs), len(tags))
    a, b = "call_0_0", "call_1_0"
    # a's round: the tagger's pace is unknown, the request waits the first wait (250 ms) at
    # most; b's round: the tagger is known to be slower than tag_wait_ms, no wait at all
    # (before this change both waited the whole 800 ms).
    assert reqs[1].timestamp - tags[0].timestamp < 0.6, reqs[1].timestamp - tags[0].timestamp
    assert reqs[2].timestamp - tags[1].timestamp < 0.45, reqs[2].timestamp - tags[1].timestamp
    # Too late for the tail: both reads reach the model whole, and stay so while warm ...
    for req in reqs[1:4]:
        assert "a note 5" in results(req.body)[a]
    for req in reqs[2:4]:
        assert "b note 5" in results(req.body)[b]
    # ... and the cold boundary after the idle gap masks both late DROPs (never lost).
    last = results(reqs[4].body)
    for cid, name in ((a, "a.txt"), (b, "b.txt")):
        assert "was hidden" in last[cid] and name in last[cid], last[cid]
    assert "DROP-ME-MARKER" not in json.dumps(reqs[4].body["messages"])
    events = [json.loads(line) for line in (xdg.state / "ctxwrap" / "events.jsonl").open()]
    (mask,) = [e for e in events if e.get("event") == "mask"]
    assert mask["trigger"] == "idle"
    assert sorted(m[:2] for m in mask["masks"]) == [[a, "dropped"], [b, "dropped"]]
    # pi's own session keeps the true history
    assert "DROP-ME-MARKER" in run.session_text()


# One read round, then a round long enough for the slow tag to come back and be recorded.
ONE_READ: list[object] = [
    {"tool_calls": [{"name": "read", "arguments": {"path": "a.txt"}}]},
    {"tool_calls": [{"name": "bash", "arguments": {"command": "sleep 1.8"}}]},
    {"text": "done"},
]


@pytest.mark.timeout(240)
def test_a_tagger_known_slow_from_earlier_sessions_is_not_waited_for_even_once(
    tmp_path: Path, xdg: Xdg
) -> None:
    """The daemon tells the bridge the tagger's pace of earlier sessions at registration
    (`tag_pace_ms`): a new pi process does not wait its first read round's TAG_FIRST_WAIT_MS
    (250 ms) for a tagger it already knows to be slower than tag_wait_ms."""
    gaps = []
    for i in range(2):
        run = run_ctxwrap_pi(
            "pi",
            tmp_path,
            xdg,
            ONE_READ,
            aux_rules=[DROP],
            aux_delay_s=AUX_DELAY_S,
            extra_env=RULES,
            files={"a.txt": notes("a")},
            home=tmp_path / f"home{i}",
            timeout=120,
        )
        assert run.proc.returncode == 0, run.proc.stderr
        (tag,) = [r for r in run.server.aux_requests if r.aux_task == "tag"]
        gaps.append(run.server.main_requests[1].timestamp - tag.timestamp)
    # the first session knows nothing yet: the blind first wait (the bridge's setTimeout)
    assert gaps[0] >= 0.24, gaps
    # the second starts from the first's pace (before: the same 250 ms again)
    assert gaps[1] < 0.2, gaps
