"""Upstream faults reach the agent as they would without ctxwrap (issue 43, item 1).

Each fault class runs twice against the scripted server, under the plain agent and under
ctxwrap, with short retry settings the agents support: the same exit status, the same number of
tries seen by the server and the same error message (host:port aside: the proxy has its own).
Real Claude Code 2.1.197 (`claude -p`) and Codex 0.171.0 (`codex exec`).
"""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from support import CTXWRAP, Xdg, make_xdg

from ctxwrap.testing.claude_home import claude_env, claude_print_args, find_claude
from ctxwrap.testing.codex_home import codex_env, codex_exec_args, find_codex
from ctxwrap.testing.model_server import ScriptedModelServer

pytestmark = pytest.mark.e2e

ANSWER = {"text": "recovered answer"}
LONG = {"text": "a reply long enough to be streamed in several pieces " * 4}
# fault class → the steps of one session (the retry budget is one retry per agent)
FAULTS: dict[str, list[dict[str, Any]]] = {
    "429_retry_after": [
        {"status": 429, "text": "rate limited", "headers": {"retry-after": "1"}},
        {"status": 429, "text": "rate limited", "headers": {"retry-after": "1"}},
        ANSWER,
    ],
    "overloaded": [
        {"status": 529, "text": "overloaded", "error_type": "overloaded_error"},
        ANSWER,
    ],
    "503": [{"status": 503, "text": "unavailable"}, {"status": 503, "text": "unavailable"}],
    "500_then_answer": [{"status": 500, "text": "boom"}, ANSWER],
    "401": [{"status": 401, "text": "invalid x-api-key", "error_type": "authentication_error"}],
    "reset": [{"fault": "reset"}, {"fault": "reset"}, ANSWER],
    "refused": [{"fault": "down", "down_s": 6}, ANSWER],
    "cut": [{**LONG, "fault": "cut"}, {**LONG, "fault": "cut"}, ANSWER],
    "stall": [{**LONG, "fault": "stall", "delay_s": 2}, ANSWER],
}


@dataclass
class Outcome:
    rc: int
    tries: int
    message: str
    output: str
    seconds: float


def _normalise(text: str) -> str:
    # the proxy's own address aside
    return re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:PORT", text)


def _claude_message(stdout: str) -> str:
    try:
        return str(json.loads(stdout).get("result", ""))
    except ValueError:
        return stdout.strip()[-500:]


def _codex_message(stdout: str) -> str:
    for line in reversed(stdout.splitlines()):
        if not line.startswith("{"):
            continue
        event = json.loads(line)
        if event.get("type") == "turn.failed":
            return str(event["error"]["message"])
        if event.get("type") == "item.completed" and event["item"].get("type") == "agent_message":
            return str(event["item"]["text"])
    return ""


def run(agent: str, wrapped: bool, steps: list[dict[str, Any]], root: Path) -> Outcome:
    root.mkdir(parents=True)
    xdg = make_xdg(root)
    work = root / "work"
    work.mkdir()
    with ScriptedModelServer(steps) as srv:
        if agent == "claude":
            env = claude_env(xdg.env(), home=root / "home", base_url=srv.root_url)
            env["CLAUDE_CODE_MAX_RETRIES"] = "1"
            args = claude_print_args("go")
            argv = [*CTXWRAP, "claude", *args] if wrapped else [env["CTXWRAP_CLAUDE"], *args]
        else:
            env = codex_env(xdg.env(), home=root / "home", base_url=srv.base_url)
            config = Path(env["CODEX_HOME"]) / "config.toml"
            text = config.read_text().replace("request_max_retries = 0", "request_max_retries = 1")
            config.write_text(text.replace("stream_max_retries = 0", "stream_max_retries = 1"))
            args = codex_exec_args("go")
            argv = [*CTXWRAP, "codex", *args] if wrapped else [env["CTXWRAP_CODEX"], *args]
        start = time.monotonic()
        proc = subprocess.run(
            argv,
            cwd=work,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=150,
        )
        seconds = time.monotonic() - start
        tries = len(srv.main_requests)
    message = _claude_message(proc.stdout) if agent == "claude" else _codex_message(proc.stdout)
    outcome = Outcome(proc.returncode, tries, message, proc.stdout + proc.stderr, seconds)
    if wrapped:
        _check_failed_tries(xdg, outcome, steps)
    return outcome


def both(agent: str, steps: list[dict[str, Any]], root: Path) -> tuple[Outcome, Outcome]:
    """The plain and the wrapped run at once: each has its own server, home and state, and most
    of a fault's time is waiting (retry delays, an outage), which the two can share."""
    with ThreadPoolExecutor(2) as pool:
        plain = pool.submit(run, agent, False, steps, root / "plain")
        wrapped = pool.submit(run, agent, True, steps, root / "wrapped")
        return plain.result(), wrapped.result()


def _check_failed_tries(xdg: Xdg, outcome: Outcome, steps: list[dict[str, Any]]) -> None:
    """Only answered tries are LLM calls (past the script's end the server answers too); every
    failed try the server saw is counted apart."""
    if not xdg.db.exists():
        return
    with sqlite3.connect(xdg.db) as db:
        (calls,) = db.execute("SELECT COUNT(*) FROM llm_calls").fetchone()
        (failed,) = db.execute("SELECT COUNT(*) FROM failed_tries").fetchone()
    # a stream cut or stalled mid-message was answered (the provider bills what it began)
    failing = sum(1 for s in steps[: outcome.tries] if "status" in s or s.get("fault") == "reset")
    failing += sum(1 for s in steps[: outcome.tries] if s.get("fault") == "down")
    answered = outcome.tries - failing
    assert calls == answered, (calls, answered)
    assert failed >= outcome.tries - answered, (failed, outcome.tries, answered)


AGENTS = [
    pytest.param(
        "claude", marks=pytest.mark.skipif(find_claude() is None, reason="claude not installed")
    ),
    pytest.param(
        "codex", marks=pytest.mark.skipif(find_codex() is None, reason="codex not installed")
    ),
]


@pytest.mark.parametrize("fault", sorted(FAULTS))
@pytest.mark.parametrize("agent", AGENTS)
def test_a_fault_reaches_the_agent_as_without_ctxwrap(
    agent: str, fault: str, tmp_path: Path
) -> None:
    if agent == "codex" and fault == "refused":
        pytest.skip("Codex's network wait: test_codex_waits_out_an_upstream_outage_as_plain")
    steps = FAULTS[fault]
    plain, wrapped = both(agent, steps, tmp_path)
    print(f"\n{agent} {fault}: plain {plain}\nwrapped {wrapped}")
    assert wrapped.rc == plain.rc
    assert wrapped.tries == plain.tries
    assert _normalise(wrapped.message) == _normalise(plain.message)
    assert "ctxwrap proxy" not in wrapped.output


@pytest.mark.skipif(find_codex() is None, reason="codex not installed")
def test_codex_waits_out_an_upstream_outage_as_plain(tmp_path: Path) -> None:
    """Upstream down (refused) for 10 s: plain Codex waits for the network and answers; so does
    Codex under ctxwrap — the proxy stops listening while the upstream refuses, so Codex's own
    network wait applies instead of its retry budget (it failed after ~26 s before)."""
    steps = [{"fault": "down", "down_s": 10}, ANSWER]
    plain, wrapped = both("codex", steps, tmp_path)
    assert plain.rc == wrapped.rc == 0, (plain, wrapped)
    assert plain.tries == wrapped.tries == 2
    assert plain.message == wrapped.message == ANSWER["text"]
    assert "waiting for network" in plain.output and "waiting for network" in wrapped.output
    assert "Reconnecting... 1/" not in wrapped.output  # no retry budget spent
    assert wrapped.seconds > 10


@pytest.mark.skipif(find_codex() is None, reason="codex not installed")
def test_codex_error_lines_carry_no_secret(tmp_path: Path) -> None:
    """Codex prints the URL it called: under ctxwrap it is the proxy's address and the
    upstream's own path (the secret travels in a header), as plain Codex prints its own."""
    out = run("codex", True, [{"status": 503, "text": "unavailable"}] * 2, tmp_path / "w")
    assert re.search(r"url: http://127\.0\.0\.1:\d+/v1/responses\b", out.output), out.output
    assert not re.search(r"127\.0\.0\.1:\d+/[A-Za-z0-9_-]{20,}", out.output), out.output
