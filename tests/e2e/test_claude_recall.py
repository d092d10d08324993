"""The model gets back what ctxwrap hid, under the real Claude Code's own permission rules.

A digest names `ctxwrap recall HANDLE PATTERN`, which the model runs in Bash. Here the user's
settings allow only the commands of the task, as people run `claude -p` in scripts: with the
rule `ctxwrap doctor` recommends the recall runs and answers the line the digest left out;
without it (or with a rule that denies it) Claude Code refuses it, `ctxwrap doctor` said so
beforehand, and the exit line says so after.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from support import CTXWRAP, Xdg, run_ctxwrap_claude

from ctxwrap.agents.claude.doctor_check import RECALL_RULE
from ctxwrap.testing.claude_home import claude_env, find_claude
from ctxwrap.testing.model_server import RecordedRequest, ScriptedModelServer

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        find_claude() is None, reason="claude not installed (scripts/install-tools.sh)"
    ),
]

BIG = "seq 1 6000"  # digested: the middle of it is not in the digest
RECALL = "ctxwrap recall {fill} '^4242$'"
STEPS = [
    {"tool_calls": [{"name": "Bash", "arguments": {"command": BIG}}]},
    {
        "tool_calls": [{"name": "Bash", "arguments": {"command": RECALL}}],
        "fill": r"ctxwrap recall (r[0-9a-f]+)",
    },
    {"text": "done"},
]


def results(req: RecordedRequest) -> dict[str, dict[str, Any]]:
    return {
        b["tool_use_id"]: b
        for m in req.body["messages"]
        for b in (m["content"] if isinstance(m.get("content"), list) else [])
        if isinstance(b, dict) and b.get("type") == "tool_result"
    }


def text(block: dict[str, Any]) -> str:
    content = block["content"]
    if isinstance(content, list):
        return "".join(str(c.get("text", "")) for c in content if isinstance(c, dict))
    return str(content)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("rules", ["recall-allowed", "task-rules-only", "recall-denied"])
def test_the_model_recalls_what_a_digest_left_out_when_the_rules_allow_it(
    tmp_path: Path, xdg: Xdg, rules: str
) -> None:
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    (home / ".claude").mkdir(parents=True)
    allowed = rules == "recall-allowed"
    permissions: dict[str, Any] = {"allow": ["Bash(seq:*)", *([RECALL_RULE] if allowed else [])]}
    if rules == "recall-denied":  # everything allowed but the recall
        permissions = {"allow": ["Bash"], "deny": ["Bash(ctxwrap recall:*)"]}
    settings = {"permissions": permissions}
    (home / ".claude" / "settings.json").write_text(json.dumps(settings))
    with ScriptedModelServer(STEPS) as srv:
        env = claude_env(xdg.env(), home=home, base_url=srv.root_url)
        doctor = subprocess.run(
            [*CTXWRAP, "doctor", "--json"],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        [said] = [c for c in json.loads(doctor.stdout)["checks"] if c["name"] == "claude recall"]
        run = run_ctxwrap_claude(["-p", "go", "--output-format", "json"], cwd=work, env=env)
        reqs = srv.main_requests
    assert len(reqs) == 3
    got = results(reqs[-1])
    digest, recall = text(got["toolu_0_0"]), got["toolu_1_0"]
    assert " digested by ctxwrap · " in digest and "\n4242\n" not in digest
    handle = digest.split("ctxwrap recall ")[1].split()[0]
    # the command ran as the model wrote it, naming the digest's handle
    [use] = [
        b["input"]["command"]
        for m in reqs[-1].body["messages"]
        for b in (m["content"] if isinstance(m.get("content"), list) else [])
        if isinstance(b, dict) and b.get("id") == "toolu_1_0"
    ]
    assert use == f"ctxwrap recall {handle} '^4242$'"
    denials = [d["tool_input"]["command"] for d in json.loads(run.stdout)["permission_denials"]]
    refused_note = "Claude Code refused the model's `ctxwrap recall` once"
    if allowed:
        assert said["level"] == "ok" and RECALL_RULE in said["summary"]
        assert recall.get("is_error") is False and denials == []
        assert "refused" not in run.stderr
        answer = text(recall)
        assert answer.splitlines() == ["4242: 4242", "[1 of 6,000 lines matched]"]  # line: text
        assert "digested by ctxwrap" not in answer  # a recall's answer is never digested
    else:
        assert said["level"] == "warn" and RECALL_RULE in said["fix"]
        assert ("denies" in said["summary"]) is (rules == "recall-denied")
        assert recall.get("is_error") is True and denials == [use]
        assert "4242:" not in text(recall)  # no line came back (the denial names the command)
        # the exit line says so, and how to allow it, before the resume command
        exit_lines = " ".join(run.stderr.split())
        assert refused_note in exit_lines and f'"{RECALL_RULE}"' in exit_lines
        assert run.stderr.rstrip().splitlines()[-1].startswith("ctxwrap claude --resume ")


@pytest.mark.serial
@pytest.mark.timeout(240)
def test_dont_ask_again_on_a_recall_allows_every_later_recall_and_doctor_sees_it(
    tmp_path: Path, xdg: Xdg, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Interactive Claude Code asks before the model's first recall; its second option writes
    the rule `Bash(ctxwrap recall *)` to the project's local settings. The next recall, of
    another handle, runs unasked, and `ctxwrap doctor`'s check accepts the rule Claude Code
    wrote (README: "don't ask again" covers every later recall in that project)."""
    import signal

    import pexpect
    from terminal import Terminal, bash_permission_prompt, wait_for_claude_code

    from ctxwrap.agents.claude.doctor_check import check_recall
    from ctxwrap.testing.claude_home import seed_claude_home

    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    seed_claude_home(home, work)
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(home / ".claude"))  # the doctor reads this home
    first, second = "ctxwrap recall r0123abcd 'a b'", "ctxwrap recall r4567cdef x"
    steps = [
        {"tool_calls": [{"name": "Bash", "arguments": {"command": first}}]},
        {"tool_calls": [{"name": "Bash", "arguments": {"command": second}}]},
        {"text": "RECALLS-DONE"},
    ]
    assert check_recall(work).level == "warn"
    with ScriptedModelServer(steps, side_text="A title") as srv:
        env = claude_env(xdg.env(), home=home, base_url=srv.root_url)
        env["TERM"] = "xterm-256color"
        child = pexpect.spawn(
            CTXWRAP[0], [*CTXWRAP[1:], "claude"], env=env, cwd=str(work), dimensions=(40, 150),
            timeout=60,
        )  # fmt: skip
        screen = Terminal(child, 40, 150)
        try:
            wait_for_claude_code(screen)
            screen.submit("recall what you hid", lambda: bool(srv.requests))
            prompt = bash_permission_prompt(screen)
            assert "2. Yes, and don't ask again for: ctxwrap recall *" in prompt
            screen.forget()
            child.send("2")
            # the second recall, another handle, runs without a prompt
            assert screen.poll(lambda: len(srv.main_requests) == 3, timeout=60), (
                f"the second recall was not run unasked; tail: {screen.text[-2000:]!r}"
            )
            assert "Do you want to proceed?" not in screen.wait_for("RECALLS-DONE")
            child.sendcontrol("c")
            child.sendcontrol("c")
            child.expect(pexpect.EOF, timeout=30)
        finally:
            if child.isalive():
                child.kill(signal.SIGKILL)
            child.close(force=True)
    rules = json.loads((work / ".claude" / "settings.local.json").read_text())
    assert rules["permissions"]["allow"] == ["Bash(ctxwrap recall *)"]
    said = check_recall(work)
    assert (said.level, "Bash(ctxwrap recall *)" in said.summary) == ("ok", True)
