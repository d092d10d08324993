"""What the Codex proxy's tool work gives the daemon of a tool no other mechanism takes
(`mechanisms.keeps_result_of`): the output, to keep behind a recall handle so that masking may
take it once old."""

from __future__ import annotations

import threading

from support import RecordingDaemon, codex_session

from ctxwrap.agents.codex import responses_wire
from ctxwrap.agents.codex.session import CodexSession


def _session() -> tuple[CodexSession, RecordingDaemon]:
    sess, daemon = codex_session()
    sess.ensure_registered()
    return sess, daemon


def test_a_result_of_a_tool_no_mechanism_takes_is_given_to_the_daemon_to_keep() -> None:
    """A dynamic or custom tool's answer (no shell, no read, no patch, no lookup): before, the
    daemon was never given it, so masking could not take it however old it grew. A short one
    and an error are not worth it."""
    sess, daemon = _session()
    report = "".join(f"step {i}: wire handler {i}\n" for i in range(40))
    patch = "*** Begin Patch\n*** Add File: src/new.py\n+x = 1\n*** End Patch\n"
    items = [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "plan"}]},
        {"type": "function_call", "call_id": "p1", "name": "project_plan", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "p1", "output": report},
        {"type": "function_call", "call_id": "p2", "name": "project_plan", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "p2", "output": "short"},
        {"type": "function_call", "call_id": "p3", "name": "update_plan", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "p3", "output": "Plan updated"},
        # a patch that did not apply: masking knows it as the write of its file, which the
        # write mechanism takes, so it is no result to keep
        {"type": "custom_tool_call", "call_id": "w1", "name": "apply_patch", "input": patch},
        {"type": "custom_tool_call_output", "call_id": "w1", "output": report},
    ]
    sess._work(responses_wire.to_neutral(items), 0)
    for t in threading.enumerate():  # kept off the request path, each in a thread
        if t.name == "ctxwrap-keep":
            t.join(5)
    kept = [b for p, b in daemon.posts if p == "/v1/tool_result"]
    assert [(b["tool_call_id"], b["tool_name"], b["text"]) for b in kept] == [
        ("p1", "project_plan", report)
    ]
