"""Old thinking under the real Claude Code 2.1.197 through `ctxwrap claude` (issue 41, item 3;
docs/accounting.md, "Old thinking").

Claude Code asks the API to keep every earlier turn's thinking (`clear_thinking_20251015`,
keep "all"). At a cold boundary, where the cache is rewritten anyway, ctxwrap raises that
edit's `keep` so the provider leaves out the turns before the latest that thought; it never
touches `messages`, so a model that checks its thinking prefix (Opus 5.5) takes the request:
the provider applies the edit after its check. The scripted server applies the edit as the API does
(`thinking_rules`) and says what it cleared; ctxwrap's stats count it as the old-thinking
mechanism. `clear_old_thinking = false` leaves the agent's edit alone.
"""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest
from support import Xdg, ctxwrap, run_ctxwrap_claude

from ctxwrap.engine.thinking import CLEAR_THINKING, old_thinking, thinking_blocks
from ctxwrap.testing.claude_home import claude_env, claude_print_args, find_claude
from ctxwrap.testing.model_server import ScriptedModelServer

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        find_claude() is None, reason="claude not installed (scripts/install-tools.sh)"
    ),
]

TTL_S = 8.0
STEPS = [
    {"text": "hello back"},
    {"tool_calls": [{"name": "Bash", "arguments": {"command": "echo one"}}]},
    {"text": "one done"},
    {"text": "two done"},
    {"text": "three done"},
]


def _keep(body: dict[str, Any]) -> object:
    edits = body["context_management"]["edits"]
    return next(e["keep"] for e in edits if e["type"] == CLEAR_THINKING)


def _session(tmp_path: Path, xdg: Xdg, model: str, env_extra: dict[str, str]) -> Any:
    work = tmp_path / "work"
    work.mkdir()
    srv = ScriptedModelServer(STEPS, thinking_rules=True, side_text="title")
    srv.__enter__()
    base = claude_env(xdg.env(), home=tmp_path / "home", base_url=srv.root_url)
    # Claude Code starts within the TTL (the runs before the gap are warm), the gap is past it
    env = {**base, "PI_CTX_CACHE_TTL_S": str(TTL_S), **env_extra}

    def run(prompt: str, *extra: str) -> dict[str, Any]:
        args = claude_print_args(prompt, "--model", model, *extra)
        proc = run_ctxwrap_claude(args, cwd=work, env=env)
        return dict(json.loads(proc.stdout))

    # the first run settles Claude Code's first-run tool list (a cold boundary of its own)
    run("hello")
    run("task one", "--continue")
    run("task two", "--continue")
    before = len(srv.main_requests)
    time.sleep(TTL_S + 0.5)  # past the cache TTL: the next request rewrites the cache anyway
    three = run("task three", "--continue")
    return srv, before, three


# Opus 5.5 checks its thinking prefix: the model the edit must not trouble (the rule is the same
# on Sonnet 4.6, the corpus's model; the suite's time goes to the harder case)
@pytest.mark.serial  # an idle gap past a cache TTL that Claude Code starts within
@pytest.mark.parametrize("model", ["claude-opus-5-5"])
def test_a_cold_boundary_leaves_earlier_thinking_out_through_the_providers_edit(
    tmp_path: Path, xdg: Xdg, model: str
) -> None:
    srv, before, three = _session(tmp_path, xdg, model, {})
    try:
        mains = srv.main_requests
        # warm, with a few tokens of thinking against the whole conversation to rewrite: the
        # payback rule keeps Claude Code's own edit
        assert all(_keep(r.body) == "all" for r in mains[:before])
        assert all(r.thinking_cleared == () for r in mains[:before])
        cold = mains[before]
        messages = cold.body["messages"]
        # the turns before the latest that thought are left out by the provider, not by us:
        # every thinking block Claude Code sent back is still in the request
        thought_turns = sorted({b.turn for b in thinking_blocks(messages)})
        assert len(thought_turns) == 3  # hello, task one, task two
        assert _keep(cold.body) == {"type": "thinking_turns", "value": 1}
        assert len(old_thinking(messages)) == 4  # hello 1, task one 2 (a tool loop), two 1
        cleared = {b for b in thinking_blocks(messages) if b.turn < thought_turns[-1]}
        assert len(cold.thinking_cleared) == len(cleared) == 3
        assert srv.prefix_failures == []  # the edit is applied after the prefix check
        assert three["result"] == "three done"
        # the answer said what it cleared; the stats count it as old thinking
        with sqlite3.connect(xdg.db) as db:
            saved = db.execute("SELECT SUM(saved_thinking) FROM llm_calls").fetchone()[0]
        assert saved > 0
        done = ctxwrap(xdg, "stats", "--json")
        assert done.returncode == 0, done.stderr
        stats = json.loads(done.stdout)
        by_mech = {m["mechanism"]: m for m in stats["totals"]["mechanisms"]}
        assert by_mech["thinking"]["saved_chars"] == saved
    finally:
        srv.__exit__(None, None, None)


def test_clear_old_thinking_off_leaves_claude_codes_edit_alone(tmp_path: Path, xdg: Xdg) -> None:
    # not serial: with the setting off nothing changes whether a run is warm or cold
    srv, _before, three = _session(
        tmp_path, xdg, "claude-sonnet-4-6", {"PI_CTX_CLEAR_OLD_THINKING": "0"}
    )
    try:
        assert all(_keep(r.body) == "all" for r in srv.main_requests)
        assert all(r.thinking_cleared == () for r in srv.main_requests)
        assert three["result"] == "three done"
    finally:
        srv.__exit__(None, None, None)
