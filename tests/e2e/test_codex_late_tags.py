"""No turn of the real Codex waits for a tagger it cannot use (issue 43, item 4).

Codex has no hook: a read's output reaches the proxy with the request that carries it, and the
proxy used to hold that request for the whole tag aux call (0.81 s with a 0.8 s tagger, measured). Now
the tag runs beside the request, which waits for it only while the tagger has been answering
within `tag_wait_ms`; the late DROPs become history masks at the first cold boundary.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support import ROUND_ONE_TAGS, Xdg
from test_codex import DROP, CodexEnv, outputs

from ctxwrap.testing.codex_home import find_codex
from ctxwrap.testing.model_server import ScriptedModelServer

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.serial,  # it measures when a request leaves against when its tag did
    pytest.mark.skipif(
        find_codex() is None, reason="codex not installed (scripts/install-tools.sh)"
    ),
]

# A tagger slower than the wait (1.5 s against tag_wait_ms = 800): a request that waited would
# come ≥ 0.8 s after the tag request; one that did not, well under 0.5 s even on a loaded box.
AUX_DELAY_S = 1.5
# cold after a 2 s gap; masks only at a cold boundary; the tagger from the first round
RULES = {
    "PI_CTX_CACHE_TTL_S": "2",
    "PI_CTX_TAG_WAIT_MS": "800",
    "PI_CTX_MASK_WARM": "0",
    **ROUND_ONE_TAGS,
}


def notes(name: str) -> str:
    return "DROP-ME-MARKER\n" + "".join(f"{name} note {i}: nothing relevant\n" for i in range(120))


@pytest.mark.timeout(240)
def test_a_late_drop_holds_no_request_and_becomes_a_mask(tmp_path: Path, xdg: Xdg) -> None:
    exec_ = lambda cmd: {"name": "exec_command", "arguments": {"cmd": cmd}}  # noqa: E731
    steps = [
        {"tool_calls": [exec_("cat a.txt")]},
        {"tool_calls": [exec_("cat b.txt")]},
        {"tool_calls": [exec_("true")]},
        {"tool_calls": [exec_("sleep 2.6")]},  # the idle gap: past the 2 s TTL
        {"text": "done"},
    ]
    with ScriptedModelServer(steps, aux_rules=[DROP], aux_delay_s=AUX_DELAY_S) as srv:
        ce = CodexEnv(tmp_path, xdg, srv)
        ce.env.update(RULES)
        for name in ("a", "b"):
            (ce.work / f"{name}.txt").write_text(notes(name))
        ce.run("read the notes", timeout=180)
        reqs = srv.main_requests
        tags = [r for r in srv.aux_requests if r.aux_task == "tag"]
    assert len(reqs) == 5 and len(tags) == 2
    a, b = "call_0_0", "call_1_0"
    # The request carrying b's output went on while its tag ran (the tagger, measured on
    # a's round, is slower than tag_wait_ms): before this change it waited for the answer.
    gap = reqs[2].timestamp - tags[1].timestamp
    assert gap < 0.5, gap
    for req in reqs[2:4]:
        assert "b note 5" in json.dumps(outputs(req)[b])  # too late for the tail: whole
    last = outputs(reqs[4])
    for cid, name in ((a, "a.txt"), (b, "b.txt")):
        assert "ctxwrap recall r" in last[cid] and name in last[cid], last[cid]
    assert "DROP-ME-MARKER" not in json.dumps(reqs[4].body["input"])
    events = [json.loads(line) for line in (xdg.state / "ctxwrap" / "events.jsonl").open()]
    (mask,) = [e for e in events if e.get("event") == "mask"]
    assert sorted(m[:2] for m in mask["masks"]) == [[a, "dropped"], [b, "dropped"]]
