"""Mechanism 5 end to end: the figures `ctxwrap stats` reports are the ones a skeptic recounts."""

from __future__ import annotations

import json
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest
from support import PI_VERSIONS, ROUND_ONE_TAGS, Xdg, ctxwrap, run_ctxwrap_pi

from ctxwrap.testing.model_server import estimate_completion_tokens, estimate_prompt_tokens
from ctxwrap.testing.recount import message_chars, tools_chars

pytestmark = pytest.mark.e2e

BIG_READ = "".join(f"irrelevant line {i} of a vendored license\n" for i in range(400))
BODY = "".join(f"value_{i} = {i}\n" for i in range(300))
SCRIPT = [
    {"tool_calls": [{"name": "bash", "arguments": {"command": "seq 1 30000"}}]},
    {"tool_calls": [{"name": "read", "arguments": {"path": "VENDOR_LICENSE"}}]},
    {"tool_calls": [{"name": "write", "arguments": {"path": "values.py", "content": BODY}}]},
    {"tool_calls": [{"name": "bash", "arguments": {"command": "echo ok"}}]},
    {"text": "done"},
]
RULES = [{"task": "tag", "match": "vendored license", "answer": '{"decision": "DROP"}'}]


def recount(body: dict[str, Any]) -> int:
    """chars/4 basis: message text, tool-call names and arguments, tool specs."""
    return sum(message_chars(m) for m in body["messages"]) + tools_chars(body)


def session_stats(xdg: Xdg) -> dict[str, Any]:
    sessions = json.loads(ctxwrap(xdg, "sessions", "--all", "--json").stdout)["sessions"]
    sid = sessions[0]["session_id"]
    out = ctxwrap(xdg, "stats", "--session", sid, "--json")
    assert out.returncode == 0, out.stderr
    return dict(json.loads(out.stdout))


@pytest.mark.parametrize("pi", PI_VERSIONS)
def test_reported_figures_match_what_the_model_server_received(
    pi: str, tmp_path: Path, xdg: Xdg
) -> None:
    files = {"VENDOR_LICENSE": BIG_READ}
    plain = run_ctxwrap_pi(
        pi, tmp_path / "plain", xdg, SCRIPT, aux_rules=RULES, files=files, plain=True
    )
    # every aux kind runs (the digest too, short extract or not), so all three are accounted
    run = run_ctxwrap_pi(
        pi,
        tmp_path / "wrapped",
        xdg,
        SCRIPT,
        aux_rules=RULES,
        files=files,
        extra_env={"PI_CTX_BASH_AUX_MIN_CHARS": "0", "PI_CTX_WRITE": "1", **ROUND_ONE_TAGS},
    )
    assert run.proc.returncode == 0 and plain.proc.returncode == 0, run.proc.stderr
    totals = session_stats(xdg)["totals"]
    assert totals["llm_calls"] == len(run.main_bodies()) == 5

    sent = sum(recount(b) for b in run.main_bodies())
    plain_sent = sum(recount(b) for b in plain.main_bodies())
    reported_plain = totals["sent_chars"] + totals["saved_chars"]
    assert abs(totals["sent_chars"] - sent) <= 0.02 * sent, (totals["sent_chars"], sent)
    assert abs(reported_plain - plain_sent) <= 0.02 * plain_sent, (reported_plain, plain_sent)
    assert plain_sent > 3 * sent  # and the saving is real

    aux = run.server.aux_requests
    assert sorted(r.aux_task for r in aux) == ["digest", "fact", "tag"]
    aux_in = sum(estimate_prompt_tokens(r.body) for r in aux)
    assert totals["aux_input_tokens"] == aux_in
    assert totals["aux_output_tokens"] > 0
    assert totals["net_tokens"] == totals["saved_tokens"] - totals["aux_tokens"]
    by_mech = {m["mechanism"]: m for m in totals["mechanisms"]}
    assert by_mech["bash"]["saved_tokens"] > 0 and by_mech["amnesia"]["saved_tokens"] > 0
    assert by_mech["writes"]["saved_tokens"] > 0
    _ = estimate_completion_tokens


def test_two_concurrent_sessions_are_accounted_separately(tmp_path: Path, xdg: Xdg) -> None:
    ctxwrap(xdg, "daemon", "start")
    results: dict[str, Any] = {}

    def one(tag: str, script: list[dict[str, Any]]) -> None:
        # b keeps the ctx_recall tool (as where pi has no bash): its spec is in every request
        env = {"PI_CTX_RECALL": "tool"} if tag == "b" else {}
        results[tag] = run_ctxwrap_pi("pi", tmp_path / tag, xdg, script, extra_env=env)

    a = [SCRIPT[0], {"text": "a done"}]
    b = [
        {"tool_calls": [{"name": "bash", "arguments": {"command": "echo small"}}]},
        {"text": "b done"},
    ]
    threads = [
        threading.Thread(target=one, args=("a", a)),
        threading.Thread(target=one, args=("b", b)),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    report = json.loads(ctxwrap(xdg, "stats", "--by", "session", "--json").stdout)
    rows = {g["session"]["session_id"]: g for g in report["groups"]}
    assert len(rows) == 2
    by_calls = sorted((g["llm_calls"], g["saved_chars"]) for g in rows.values())
    assert [c for c, _ in by_calls] == [2, 2]
    small, big = sorted(s for _, s in by_calls)
    # The session with nothing to digest paid for ctxwrap's own tool spec: negative stays negative.
    assert small < 0
    assert big > 5_000  # one 30,000-line output digested, minus ctxwrap's tools


def test_daemon_restart_mid_session_loses_no_figure(tmp_path: Path, xdg: Xdg) -> None:
    restart = f"kill -9 $(cut -d' ' -f1 {xdg.pidfile}); sleep 0.3; seq 1 30000"
    script = [
        SCRIPT[0],
        {"tool_calls": [{"name": "bash", "arguments": {"command": restart}}]},
        {"text": "done"},
    ]
    run = run_ctxwrap_pi("pi", tmp_path, xdg, script)
    assert run.proc.returncode == 0, run.proc.stderr
    totals = session_stats(xdg)["totals"]
    assert totals["llm_calls"] == 3  # calls recorded before and after the restart
    sent = sum(recount(b) for b in run.main_bodies())
    assert abs(totals["sent_chars"] - sent) <= 0.02 * sent
    _ = subprocess
