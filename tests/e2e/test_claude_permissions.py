"""Claude Code's permission system under `ctxwrap claude` is plain Claude Code's (issue 20).

A/B with the real Claude Code, headless: the same script runs under plain `claude` and under
`ctxwrap claude`, with scoped allow rules given on the command line (`--allowedTools
"Bash(seq:*)" …`) or in the user's settings file (`permissions.allow`). The model asks for an
allowed command with a large output, an allowed one with a tiny output, and one that is not
allowed. Both runs must run and deny the same commands; the wrapped run must still digest the
large output; with `--disallowedTools "Bash(touch:*)"` the deny rule must hold as well. The
tests fail if ctxwrap rewrote the command (the PreToolUse wrapper of old): Claude Code then
checks its rules against the rewrite.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pexpect
import pytest
from support import CTXWRAP, Xdg
from terminal import Terminal, bash_permission_prompt, wait_for_claude_code

from ctxwrap.testing.claude_home import claude_env, find_claude, seed_claude_home
from ctxwrap.testing.model_server import RecordedRequest, ScriptedModelServer

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        find_claude() is None, reason="claude not installed (scripts/install-tools.sh)"
    ),
]

BIG = "seq 1 6000"  # 28,893 chars: allowed, over bash_min_tokens, under Claude Code's cap
TINY = "echo tiny-output-ok"  # allowed, left alone
DENIED = "touch not-allowed.txt"  # no rule allows it: -p denies it
SCRIPT = [
    {"tool_calls": [{"name": "Bash", "arguments": {"command": BIG}}]},
    {"tool_calls": [{"name": "Bash", "arguments": {"command": TINY}}]},
    {"tool_calls": [{"name": "Bash", "arguments": {"command": DENIED}}]},
    {"text": "done"},
]
ALLOW = ["Bash(seq:*)", "Bash(echo:*)", "Read", "Write"]


@dataclass
class Outcome:
    result: dict[str, Any]  # Claude Code's -p JSON
    requests: list[RecordedRequest]
    touched: bool  # the denied command ran after all
    work: Path

    def blocks(self) -> dict[str, dict[str, Any]]:
        """tool_use id → its tool_result block, as the model got it in the last request."""
        out: dict[str, dict[str, Any]] = {}
        for m in self.requests[-1].body["messages"]:
            for b in m["content"] if isinstance(m.get("content"), list) else []:
                if isinstance(b, dict) and b.get("type") == "tool_result":
                    out[b["tool_use_id"]] = b
        return out

    def text(self, cid: str) -> str:
        content = self.blocks()[cid]["content"]
        if isinstance(content, list):
            content = "".join(str(c.get("text", "")) for c in content if isinstance(c, dict))
        return str(content).replace(str(self.work), "WORK")

    def denied_commands(self) -> list[str]:
        return [d["tool_input"]["command"] for d in self.result.get("permission_denials", [])]


def run(tmp_path: Path, xdg: Xdg, name: str, *, wrapped: bool, rules: str) -> Outcome:
    work = tmp_path / name / "work"
    work.mkdir(parents=True)
    home = tmp_path / name / "home"
    args = ["-p", "go", "--output-format", "json"]
    if rules == "allowedTools":
        args += ["--allowedTools", *ALLOW]
    elif rules == "disallowedTools":  # all of Bash allowed but one command: the deny wins
        args += ["--allowedTools", "Bash", "Read", "--disallowedTools", "Bash(touch:*)"]
    else:
        (home / ".claude").mkdir(parents=True)
        settings = {"permissions": {"allow": ALLOW}}
        (home / ".claude" / "settings.json").write_text(json.dumps(settings))
    with ScriptedModelServer(SCRIPT) as srv:
        env = claude_env(xdg.env(), home=home, base_url=srv.root_url)
        argv = [*CTXWRAP, "claude"] if wrapped else [env["CTXWRAP_CLAUDE"]]
        proc = subprocess.run(
            [*argv, *args], cwd=work, env=env, capture_output=True, text=True, timeout=180
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        touched = (work / "not-allowed.txt").exists()
        return Outcome(json.loads(proc.stdout), srv.main_requests, touched, work)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("rules", ["allowedTools", "settings-allow", "disallowedTools"])
def test_scoped_allow_rules_run_and_deny_the_same_commands(
    tmp_path: Path, xdg: Xdg, rules: str
) -> None:
    plain = run(tmp_path, xdg, "plain", wrapped=False, rules=rules)
    wrapped = run(tmp_path, xdg, "wrapped", wrapped=True, rules=rules)
    big, tiny, denied = "toolu_0_0", "toolu_1_0", "toolu_2_0"
    for o in (plain, wrapped):
        assert len(o.requests) == 4
        # the allowed commands ran, the other one did not — under both
        assert o.denied_commands() == [DENIED]
        assert not o.touched
        assert o.blocks()[big].get("is_error") is False
        assert o.blocks()[tiny].get("is_error") is False
        assert o.blocks()[denied].get("is_error") is True
        assert o.result["is_error"] is False
    # plain Claude Code's results, whole; ctxwrap's: the big one digested, the rest the same
    assert plain.text(big).startswith("1\n2\n3\n") and "\n6000" in plain.text(big)
    assert re.match(r"\$ seq .* → exit code 0 · 6,000 lines \(", wrapped.text(big))
    assert len(wrapped.text(big)) < len(plain.text(big)) // 4
    assert wrapped.text(tiny) == plain.text(tiny) == "tiny-output-ok"
    assert wrapped.text(denied) == plain.text(denied)
    assert "compound_statement" not in wrapped.text(denied)
    # the model's own commands, as asked, in the history of both
    for o in (plain, wrapped):
        uses = [
            b["input"]["command"]
            for m in o.requests[-1].body["messages"]
            for b in (m["content"] if isinstance(m.get("content"), list) else [])
            if isinstance(b, dict) and b.get("type") == "tool_use"
        ]
        assert uses == [BIG, TINY, DENIED]


# -- the interactive permission prompt, on a real pseudo-terminal ------------------------------

GEN = "./gen.sh 3000"  # prompts (not read-only); the rule it offers is `Bash(./gen.sh 3000 *)`
GEN_AGAIN = "./gen.sh 3000 again"  # the same prefix: allowed by that rule without a prompt
DONE = "ALL-DONE-MARKER"


@pytest.mark.serial
@pytest.mark.timeout(240)
@pytest.mark.parametrize("wrapped", [True, False], ids=["ctxwrap", "plain"])
def test_prompt_shows_the_command_and_dont_ask_again_works(
    tmp_path: Path, xdg: Xdg, wrapped: bool
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "gen.sh").write_text("#!/bin/sh\nseq 1 $1\n")
    (work / "gen.sh").chmod(0o755)
    home = tmp_path / "home"
    seed_claude_home(home, work)
    steps = [
        {"tool_calls": [{"name": "Bash", "arguments": {"command": GEN}}]},
        {"tool_calls": [{"name": "Bash", "arguments": {"command": GEN_AGAIN}}]},
        {"text": DONE},
    ]
    with ScriptedModelServer(steps, side_text="A title") as srv:
        env = claude_env(xdg.env(), home=home, base_url=srv.root_url)
        env["TERM"] = "xterm-256color"
        argv = [*CTXWRAP, "claude"] if wrapped else [env["CTXWRAP_CLAUDE"]]
        child = pexpect.spawn(
            argv[0], argv[1:], env=env, cwd=str(work), dimensions=(40, 150), timeout=60
        )
        screen = Terminal(child, 40, 150)
        try:
            wait_for_claude_code(screen)
            screen.submit("run the generator", lambda: bool(srv.requests))
            prompt = bash_permission_prompt(screen)
            # the model's own command, nothing of ours, and the session-wide option
            assert f"Bash command {GEN} " in prompt
            assert "Do you want to proceed?" in prompt
            assert f"2. Yes, and don't ask again for: {GEN}" in prompt
            for ours in ("compound_statement", "__ctxwrap", "CTXWRAP", "printf", "{ "):
                assert ours not in prompt
            screen.forget()
            child.send("2")
            # the second command has the allowed prefix: it runs without asking, so the model
            # gets its result (a prompt would hold the third request back)
            assert screen.poll(lambda: len(srv.main_requests) == 3, timeout=60), (
                f"the second command did not run unasked; tail: {screen.text[-2000:]!r}"
            )
            after = screen.wait_for(DONE)
            assert "Do you want to proceed?" not in after
            rules = json.loads((work / ".claude" / "settings.local.json").read_text())
            assert rules["permissions"]["allow"] == [f"Bash({GEN} *)"]
            reqs = srv.main_requests
            assert len(reqs) == 3
            first, second = (_result_text(reqs[-1], f"toolu_{i}_0") for i in (0, 1))
            if wrapped:
                assert re.match(r"\$ .* · 3,000 lines \(.* digested by ctxwrap", first)
                assert re.match(r"\$ .* · 3,000 lines \(.* digested by ctxwrap", second)
            else:
                assert first.startswith("1\n2\n3\n") and second.startswith("1\n2\n3\n")
            child.sendcontrol("c")
            time.sleep(0.3)
            child.sendcontrol("c")
            child.expect(pexpect.EOF, timeout=30)
            if wrapped:
                # the title request is Claude Code's, not a call of the agent (issue 20, item 4)
                assert len(srv.side_requests) == 1
                assert_agent_calls(env, 3)
        finally:
            if child.isalive():
                child.kill(signal.SIGKILL)
            child.close(force=True)


def _result_text(req: RecordedRequest, cid: str) -> str:
    for m in req.body["messages"]:
        for b in m["content"] if isinstance(m.get("content"), list) else []:
            if isinstance(b, dict) and b.get("tool_use_id") == cid:
                content = b["content"]
                return content if isinstance(content, str) else json.dumps(content)
    raise AssertionError(f"no result for {cid}")


def assert_agent_calls(env: dict[str, str], calls: int) -> None:
    """`ctxwrap stats` counts the agent's own calls; the session is Claude Code's."""

    def ctxwrap(*args: str) -> Any:
        out = subprocess.run([*CTXWRAP, *args], env=env, capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)

    end = time.monotonic() + 15
    while True:  # the proxy reports after each response, in the background
        totals = ctxwrap("stats", "--json")["totals"]
        if totals["llm_calls"] >= calls or time.monotonic() > end:
            break
        time.sleep(0.3)
    assert totals["llm_calls"] == calls
    sessions = ctxwrap("sessions", "--all", "--json")["sessions"]
    assert [s["agent"] for s in sessions] == ["claude"]
