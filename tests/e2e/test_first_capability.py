"""The first `find_capability` is never wrong, however late the daemon registers the session
(issue 20, item 2).

`ctxwrap pi` starts the daemon beside pi, so pi's first prompt can reach the bridge before the
daemon has the session, and the first capability search could overtake the registration: the
daemon then answered from an empty catalog ("nothing matched") while the skills list was already
gone from the system prompt.

The race is made deterministic from outside the product, as in test_cold_start.py: a
`sitecustomize` on PYTHONPATH, active only in the `ctxwrap daemon run` process, either
- keeps the daemon from listening until the scripted model has received pi's first request (the
  test touches a "go" file then): nobody answers pi's registration, its catalog or its prompt,
  the fast-launch path; or
- holds the session's first `/v1/sessions/start` until the model has been asked (or a
  capability search arrives), up to `hold_s`: a daemon that is up but registers slowly.
The marks file says what happened; each run asserts the race took place.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from support import PI_VERSIONS, Xdg, run_ctxwrap_pi, tool_contents
from test_lazy import make_skills

from ctxwrap.testing.model_server import ScriptedModelServer

pytestmark = [pytest.mark.e2e, pytest.mark.serial]  # the race is timed: never under load

# Each run forces the race by construction, so one run of each kind (even: the daemon not yet
# listening; odd: a registration held) per pi version catches the bug: with the bridge before
# 9db9dac all four fail ("nothing matched" / "the ctxwrap daemon is unavailable"). The suite
# runs those 4; CTXWRAP_RACE_RUNS=10 is the "20 of 20" soak (10 per pi version).
RUNS = int(os.environ.get("CTXWRAP_RACE_RUNS", "2"))
SLOW_REGISTRATION = """
import asyncio, json, os, time
try:
    with open("/proc/self/cmdline", "rb") as fh:
        _argv = fh.read().split(b"\\0")
except OSError:
    _argv = []
if b"daemon" in _argv and b"run" in _argv:
    _marks = os.environ["RACE_MARKS"]
    _hold = float(os.environ["RACE_HOLD_S"])
    _asked = os.environ["RACE_ASKED_FILE"]  # the test touches it when the model is asked
    _release_early = os.environ.get("RACE_RELEASE_ON_ASKED") == "1"
    _wait_to_listen = os.environ.get("RACE_WAIT_TO_LISTEN") == "1"

    def _mark(**kw):
        with open(_marks, "a") as fh:
            fh.write(json.dumps({"t": time.time(), **kw}) + "\\n")

    import ctxwrap.daemon.app as _app

    _build = _app.build_app

    def build_app(daemon):
        inner = _build(daemon)
        state = {"starts": 0, "other": None}

        async def app(scope, receive, send):
            path = scope.get("path", "") if scope.get("type") == "http" else ""
            if path == "/v1/sessions/start":
                state["starts"] += 1
                if state["starts"] == 1:
                    state["other"] = asyncio.Event()
                    began = time.time()
                    while time.time() - began < _hold and not state["other"].is_set():
                        if _release_early and os.path.exists(_asked):
                            break
                        await asyncio.sleep(0.02)
                    await asyncio.sleep(0.2)  # the model's answer is on its way to the bridge
                    _mark(event="start_released", held=time.time() - began)
                else:
                    _mark(event="start_again")
            elif path.startswith("/v1/") and path not in ("/v1/health", "/v1/sessions"):
                _mark(event="call", path=path)
                if _release_early and state["other"] is not None and path == "/v1/capabilities/search":
                    state["other"].set()
            await inner(scope, receive, send)

        app.state = inner.state  # the daemon sets its stop hook there
        return app

    _app.build_app = build_app
    import ctxwrap.daemon.lifecycle  # (after the patch) imported before the wait: up soon after "go"

    if _wait_to_listen:
        _until = time.time() + 30
        while not os.path.exists(_asked) and time.time() < _until:
            time.sleep(0.02)
        _mark(event="daemon_go")
"""


def race_env(
    tmp_path: Path, *, wait_to_listen: bool, hold_s: float, release_on_asked: bool = True
) -> dict[str, str]:
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(SLOW_REGISTRATION)
    return {
        "PYTHONPATH": str(site),
        "RACE_MARKS": str(tmp_path / "race-marks.jsonl"),
        "RACE_ASKED_FILE": str(tmp_path / "asked"),
        "RACE_HOLD_S": str(hold_s),
        "RACE_RELEASE_ON_ASKED": "1" if release_on_asked else "0",
        "RACE_WAIT_TO_LISTEN": "1" if wait_to_listen else "0",
        "CTXWRAP_BRIDGE_LOG": str(tmp_path / "bridge.log"),  # read it when a run fails
    }


def touch_when_the_model_is_asked(srv: ScriptedModelServer, asked: Path) -> threading.Thread:
    def watch() -> None:
        end = time.monotonic() + 120
        while not srv.main_requests and time.monotonic() < end:
            time.sleep(0.01)
        asked.touch()

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def marks(tmp_path: Path) -> list[dict[str, Any]]:
    path = tmp_path / "race-marks.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def session_starts(xdg: Xdg) -> list[dict[str, Any]]:
    events = xdg.state / "ctxwrap" / "events.jsonl"
    rows = [json.loads(line) for line in events.read_text().splitlines() if line.strip()]
    return [r for r in rows if r.get("event") == "session_start"]


FIND_PDF = {
    "tool_calls": [
        {"name": "find_capability", "arguments": {"query": "extract text from PDF files"}}
    ]
}


@pytest.mark.parametrize("run", range(RUNS))
@pytest.mark.parametrize("pi", PI_VERSIONS)
def test_first_find_capability_waits_for_a_slow_registration(
    pi: str, run: int, tmp_path: Path, xdg: Xdg
) -> None:
    home = tmp_path / "home"
    make_skills(home)
    not_listening = run % 2 == 0
    # (a hold past 5 s would time out the bridge's registration call: a hung daemon, not slow)
    env = race_env(tmp_path, wait_to_listen=not_listening, hold_s=0.3 if not_listening else 4.0)
    with ScriptedModelServer([FIND_PDF, {"text": "done"}]) as srv:
        touch_when_the_model_is_asked(srv, tmp_path / "asked")
        result = run_ctxwrap_pi(pi, tmp_path, xdg, server=srv, home=home, extra_env=env)
    seen = marks(tmp_path)
    assert result.proc.returncode == 0, result.proc.stderr
    bodies = result.main_bodies()
    assert "<available_skills>" not in json.dumps(bodies[0]["messages"])  # stripped at once
    (answer,) = tool_contents(bodies[1])
    assert "PDF-SKILL-BODY-MARKER" in answer, (answer, seen)
    # The race happened: the model asked for the skill before the daemon had the session.
    released = [m["t"] for m in seen if m["event"] == "start_released"]
    asked = srv.main_requests[0].timestamp
    if not_listening:
        (began,) = [m["t"] for m in seen if m["event"] == "daemon_go"]
        assert asked < began < released[0], seen
    elif not (released and asked < released[0]):
        # pi took longer than hold_s to reach the model (a loaded machine): no race this time
        pytest.skip(f"no race: the registration was released before the model was asked {seen}")
    # ... and the session was registered once (the event log used to show two starts).
    assert [m for m in seen if m["event"] == "start_again"] == []
    assert len(session_starts(xdg)) == 1, session_starts(xdg)


def test_a_catalog_not_ready_says_so_and_the_next_call_finds_it(tmp_path: Path, xdg: Xdg) -> None:
    """Registration held past the bridge's wait: the tool says "not ready", not "nothing matched"."""
    home = tmp_path / "home"
    make_skills(home)
    env = race_env(tmp_path, wait_to_listen=False, hold_s=3.0, release_on_asked=False)
    env["PI_CTX_BRIDGE_TIMEOUT_MS"] = "250"  # the tool waits 4 x 250 ms
    script = [
        FIND_PDF,
        {"tool_calls": [{"name": "bash", "arguments": {"command": "sleep 3"}}]},
        FIND_PDF,
        {"text": "done"},
    ]
    result = run_ctxwrap_pi("pi", tmp_path, xdg, script, home=home, extra_env=env)
    assert result.proc.returncode == 0, result.proc.stderr
    bodies = result.main_bodies()
    first = tool_contents(bodies[1])[-1]
    assert first == "find_capability: ctxwrap's catalog is not ready; call again.", first
    assert "PDF-SKILL-BODY-MARKER" in tool_contents(bodies[3])[-1]
    assert len(session_starts(xdg)) == 1
