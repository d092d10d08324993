"""Faults end to end (issue 12, findings 7 and 9): a slow aux model and a crash-looping daemon.

Real pi (both versions), a real daemon process, the scripted model server. What is checked is
what the user sees: wall time against plain pi, pi's exit status, what reached the model,
and what `ctxwrap stats --json` says afterwards.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest
from support import CTXWRAP, Xdg, ctxwrap, run_ctxwrap_pi, tool_contents

pytestmark = pytest.mark.e2e

AUX_TIMEOUT_S = 4
WRITE_BODY = '"""Model definition."""\n' + "".join(f"layer_{i} = Conv({i})\n" for i in range(200))
# Three tool rounds that each ask the aux model something the agent waits for.
SLOW_AUX_SCRIPT: list[dict[str, Any]] = [
    {"tool_calls": [{"name": "bash", "arguments": {"command": "seq 1 40000"}}]},
    {
        "tool_calls": [
            {"name": "write", "arguments": {"path": "src/model.py", "content": WRITE_BODY}}
        ]
    },
    {"tool_calls": [{"name": "bash", "arguments": {"command": "seq 5 30000"}}]},
    {"text": "done"},
]


@pytest.mark.serial
# pi 1.6 only: these fault paths are the bridge's own code, the same under 0.73 (whose API
# differences the parallel tests cover); the serial pass runs alone and its time is budgeted.
@pytest.mark.parametrize("pi", ["pi"])
def test_slow_aux_costs_at_most_one_aux_timeout(pi: str, tmp_path: Path, xdg: Xdg) -> None:
    """Aux answers take 25 s; the timeout is 4 s. Three rounds wait for the aux model (two
    digests, a fact): a sum of timeouts would add 12 s; one budget adds at most 4 s."""
    plain = run_ctxwrap_pi(pi, tmp_path / "plain", xdg, SLOW_AUX_SCRIPT, plain=True)
    assert plain.proc.returncode == 0, plain.proc.stderr
    run = run_ctxwrap_pi(
        pi,
        tmp_path / "wrapped",
        xdg,
        SLOW_AUX_SCRIPT,
        aux_rules=[{"task": "digest", "answer": "AUX DIGEST"}, {"task": "fact", "answer": "AUX"}],
        aux_delay_s=25,
        extra_env={
            "PI_CTX_BASH_AUX_MIN_CHARS": "0",  # ask the aux model even for a short extract
            "PI_CTX_AUX_TIMEOUT_MS": str(AUX_TIMEOUT_S * 1000),
        },
    )
    assert run.proc.returncode == 0, run.proc.stderr
    added = run.elapsed - plain.elapsed
    # From the first model request to the last: where aux waits land, free of the start-up
    # noise of a loaded machine (pi's own start, the daemon's auto-start).
    span, plain_span = model_span(run.server.requests), model_span(plain.server.requests)
    print(
        f"\n{pi}: plain {plain.elapsed:.1f}s (model span {plain_span:.1f}s),"
        f" ctxwrap {run.elapsed:.1f}s (model span {span:.1f}s)"
    )
    assert span - plain_span < AUX_TIMEOUT_S + 1.5, (plain_span, span)
    assert added < AUX_TIMEOUT_S + 5, (plain.elapsed, run.elapsed)
    # The aux model was asked (the budget was spent once) and the extractive digest stood.
    assert run.server.aux_requests, "the aux model was never asked"
    digests = [c for b in run.main_bodies() for c in tool_contents(b) if "digested by ctxwrap" in c]
    assert digests and all("AUX DIGEST" not in c for c in digests)
    assert any("40,000 lines" in c or "40,001 lines" in c for c in digests)
    facts = json.loads(ctxwrap(xdg, "facts", "--json").stdout or "[]")
    assert facts, "no fact kept"


def model_span(requests: list[Any]) -> float:
    main = [r.timestamp for r in requests if r.kind == "main"]
    return max(main) - min(main)


class CrashLoop:
    """SIGKILL the daemon every `every` seconds and start a new one at once (Restart=always)."""

    def __init__(self, xdg: Xdg, every: float) -> None:
        self.xdg, self.every = xdg, every
        self.stop = threading.Event()
        self.kills = 0
        self.starters: list[subprocess.Popen[bytes]] = []
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.wait(self.every):
            pid = self.xdg.daemon_pid()
            if pid:
                try:
                    os.kill(pid, signal.SIGKILL)
                    self.kills += 1
                except ProcessLookupError:
                    pass
            self.starters.append(
                subprocess.Popen(
                    [*CTXWRAP, "daemon", "start"],
                    env=self.xdg.env(),
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )

    def __enter__(self) -> CrashLoop:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(10)
        for p in self.starters:
            p.wait(30)


@pytest.mark.serial  # a daemon killed every 0.7 s must come up in between
# pi 1.6 only: these fault paths are the bridge's own code, the same under 0.73 (whose API
# differences the parallel tests cover); the serial pass runs alone and its time is budgeted.
@pytest.mark.parametrize("pi", ["pi"])
def test_daemon_killed_in_a_loop_loses_no_statistics_silently(
    pi: str, tmp_path: Path, xdg: Xdg
) -> None:
    steps = 14
    script: list[dict[str, Any]] = [
        {"tool_calls": [{"name": "bash", "arguments": {"command": f"echo step {i}"}}]}
        for i in range(steps)
    ] + [{"text": "done"}]
    assert ctxwrap(xdg, "daemon", "start").returncode == 0
    with CrashLoop(xdg, every=0.7) as loop:
        run = run_ctxwrap_pi(pi, tmp_path, xdg, script, main_delay_s=0.35)
    assert run.proc.returncode == 0, run.proc.stderr
    assert loop.kills >= 4, f"only {loop.kills} kills: the loop did not hit the session"
    calls = len(run.main_bodies())
    assert calls == steps + 1
    assert ctxwrap(xdg, "daemon", "start").returncode == 0
    out = ctxwrap(xdg, "stats", "--json", "--by", "session")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    groups = [g for g in doc["groups"] if g["session"]]
    assert len(groups) == 1, (doc["groups"], ctxwrap(xdg, "sessions", "--json").stdout)
    group = groups[0]
    sid = group["session"]["session_id"]
    recorded = group["llm_calls"]
    print(
        f"\n{pi}: {loop.kills} kills, {calls} LLM calls, {recorded} recorded, {doc['incomplete_sessions']=}"
    )
    # Every call is there, or the session says its figures are incomplete — never silently short.
    assert recorded == calls or sid in doc["incomplete_sessions"], (recorded, calls, doc)
    # never more: a record sent again after its answer was lost counts once (it was 16 of 15)
    assert recorded <= calls
    with sqlite3.connect(xdg.db) as db:
        ids = [r[0] for r in db.execute("SELECT record_id FROM llm_calls")]
    assert None not in ids and len(set(ids)) == len(ids)
    # The queue delivers what a restarted daemon can take: most calls arrive.
    assert recorded >= calls * 0.8, (recorded, calls)
