"""Mechanism 1 end to end: real pi, real daemon, scripted model. What reaches the model?"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
from pathlib import Path

import pytest
from support import PI_VERSIONS, Xdg, ctxwrap, run_ctxwrap_pi, tool_contents, wait_ready

pytestmark = pytest.mark.e2e

AUX_ALWAYS = {"PI_CTX_BASH_AUX_MIN_CHARS": "0"}  # ask the aux model even for a short extract
SEQ = {"tool_calls": [{"name": "bash", "arguments": {"command": "seq 1 40000"}}]}
DONE = {"text": "done"}


def longest_raw_run(text: str) -> int:
    """Longest run of consecutive integers on consecutive lines: `seq` output leaking through."""
    best = run = 0
    prev: int | None = None
    for line in text.splitlines():
        cur = int(line) if line.strip().isdigit() else None
        run = (
            run + 1
            if cur is not None and prev is not None and cur == prev + 1
            else (1 if cur is not None else 0)
        )
        best = max(best, run)
        prev = cur
    return best


def assert_no_raw(text: str, *, limit: int = 40) -> None:
    assert "pi-bash-" not in text, "pi's temp file path leaked"
    assert "Full output:" not in text, "pi's truncation note leaked"
    assert longest_raw_run(text) <= limit, f"a raw run of {longest_raw_run(text)} lines leaked"


@pytest.mark.parametrize("pi", PI_VERSIONS)
def test_large_output_reaches_model_as_digest(pi: str, tmp_path: Path, xdg: Xdg) -> None:
    run = run_ctxwrap_pi(pi, tmp_path, xdg, [SEQ, DONE])
    assert run.proc.returncode == 0, run.proc.stderr
    assert run.proc.stdout.strip() == "done"
    bodies = run.main_bodies()
    assert len(bodies) == 2
    (content,) = tool_contents(bodies[1])
    assert " digested by ctxwrap · " in content.split("\n", 1)[0], content[:300]
    assert "40,001 lines" in content or "40,000 lines" in content  # the size of the real output
    assert "exit code 0" in content
    # pi's bash finds `ctxwrap recall` (`ctxwrap pi` puts it on PATH) and no skill is there to
    # find: none of ctxwrap's own tools rides in the requests, from the first one on (plain pi's
    # tool list), and the note names the command
    assert re.search(r"`ctxwrap recall r[0-9a-f]{8} PATTERN`", content), content[:300]
    names = [[t["function"]["name"] for t in b["tools"]] for b in bodies]
    assert all(n == ["read", "bash", "edit", "write"] for n in names), names
    assert len(content) < 8000
    for body in bodies:
        for text in tool_contents(body):
            assert_no_raw(text)
    assert_no_raw(run.session_text())
    # The extract of `seq` is a few lines: condensing it further would cost more than it saves.
    assert run.server.aux_requests == []


def test_the_model_recalls_a_digested_output_through_pis_bash(tmp_path: Path, xdg: Xdg) -> None:
    """pi 1.6: the digest's note names `ctxwrap recall`, and that command, run by the model in
    pi's own bash in a later session, gives back the lines asked for, whole (an answer is never
    digested again); `ctxwrap show` prints the whole output to a person in another shell."""
    one = run_ctxwrap_pi("pi", tmp_path, xdg, [SEQ, DONE])
    assert one.proc.returncode == 0, one.proc.stderr
    (content,) = tool_contents(one.main_bodies()[1])
    found = re.search(r"`ctxwrap recall (r[0-9a-f]{8}) PATTERN`", content)
    assert found is not None, content[:300]
    shown = ctxwrap(xdg, "show", found.group(1))
    assert shown.returncode == 0
    assert shown.stdout.splitlines()[39999] == "40000"
    missing = ctxwrap(xdg, "show", "rdeadbeef")
    assert missing.returncode == 66 and "no stored output" in missing.stderr
    command = f"ctxwrap recall {found.group(1)} '^3999[0-9]$'"
    ask = {"tool_calls": [{"name": "bash", "arguments": {"command": command}}]}
    two = run_ctxwrap_pi(
        "pi", tmp_path, xdg, [ask, DONE], prompt="the last lines?", home=one.home,
        args=("--continue",),
    )  # fmt: skip
    assert two.proc.returncode == 0, two.proc.stderr
    answer = tool_contents(two.main_bodies()[1])[-1]
    assert re.findall(r"^\d+: (\d+)$", answer, re.M) == [str(n) for n in range(39990, 40000)]
    assert re.search(r"10 of 40,00[01] lines matched", answer), answer[-300:]


def test_without_bash_the_model_recalls_through_ctx_recall(tmp_path: Path, xdg: Xdg) -> None:
    """pi 1.6 with bash turned off (`--exclude-tools bash`): `ctxwrap recall` cannot run, so
    the bridge keeps its ctx_recall tool from the first request on."""
    run = run_ctxwrap_pi("pi", tmp_path, xdg, [DONE], args=("--exclude-tools", "bash"))
    assert run.proc.returncode == 0, run.proc.stderr
    [names] = [[t["function"]["name"] for t in b["tools"]] for b in run.main_bodies()]
    assert "bash" not in names and "ctx_recall" in names, names


def test_a_session_whose_history_names_ctx_recall_keeps_it_when_resumed(
    tmp_path: Path, xdg: Xdg
) -> None:
    """pi 1.6: a session that ran with the ctx_recall tool (an older bridge; here
    PI_CTX_RECALL=tool) has digests that say `ctx_recall(handle=…)`. Resumed where `ctxwrap
    recall` could run in bash, it keeps the tool: taken away, the hint in its history would
    name a tool that is gone. A new session in the same place goes without it."""
    one = run_ctxwrap_pi("pi", tmp_path, xdg, [SEQ, DONE], extra_env={"PI_CTX_RECALL": "tool"})
    assert one.proc.returncode == 0, one.proc.stderr
    (content,) = tool_contents(one.main_bodies()[1])
    assert 'ctx_recall(handle="r' in content, content[:300]
    two = run_ctxwrap_pi(
        "pi", tmp_path, xdg, [DONE], prompt="and now?", home=one.home, args=("--continue",)
    )
    assert two.proc.returncode == 0, two.proc.stderr
    [names] = [[t["function"]["name"] for t in b["tools"]] for b in two.main_bodies()]
    assert "bash" in names and "ctx_recall" in names, names
    three = run_ctxwrap_pi("pi", tmp_path, xdg, [DONE], prompt="new", home=one.home)
    assert three.proc.returncode == 0, three.proc.stderr
    [names] = [[t["function"]["name"] for t in b["tools"]] for b in three.main_bodies()]
    assert "ctx_recall" not in names, names


FAILING_SUITE = """
import pytest

@pytest.mark.parametrize("n", range(400))
def test_many(n):
    assert n not in (137, 288), f"value {n} is cursed"

def test_parser_rejects_garbage():
    raise ValueError("unexpected token at line 3")
"""


@pytest.mark.parametrize("pi", PI_VERSIONS)
def test_failing_test_run_keeps_what_matters(pi: str, tmp_path: Path, xdg: Xdg) -> None:
    cmd = f"{sys.executable} -m pytest -v -p no:cacheprovider test_suite.py"
    script = [{"tool_calls": [{"name": "bash", "arguments": {"command": cmd}}]}, DONE]
    run = run_ctxwrap_pi(
        pi, tmp_path, xdg, script, files={"test_suite.py": FAILING_SUITE}, aux_status=500
    )  # aux down: the extractive digest is what the model sees
    assert run.proc.returncode == 0, run.proc.stderr
    (content,) = tool_contents(run.main_bodies()[1])
    assert " digested by ctxwrap · " in content.split("\n", 1)[0], content[:300]
    for must in (
        "test_many[137]",
        "test_many[288]",
        "test_parser_rejects_garbage",
        "value 137 is cursed",
        "unexpected token at line 3",
        "3 failed, 398 passed",
        "exit code 1",
    ):
        assert must in content, f"{must!r} lost from the digest:\n{content}"
    assert "test_many[5] PASSED" not in content  # the noise is gone
    assert "daemon is unavailable" not in content  # not the blind-tail fallback
    assert_no_raw(run.session_text())


@pytest.mark.parametrize("pi", ["pi"])
def test_aux_answer_longer_than_input_is_refused(pi: str, tmp_path: Path, xdg: Xdg) -> None:
    rules = [{"task": "digest", "answer": "VERBOSE " * 5000}]
    run = run_ctxwrap_pi(pi, tmp_path, xdg, [SEQ, DONE], aux_rules=rules, extra_env=AUX_ALWAYS)
    (content,) = tool_contents(run.main_bodies()[1])
    assert " digested by ctxwrap · " in content.split("\n", 1)[0]
    assert "VERBOSE" not in content
    assert len(run.server.aux_requests) == 1


@pytest.mark.parametrize("pi", PI_VERSIONS)
def test_daemon_killed_before_the_tool_call(pi: str, tmp_path: Path, xdg: Xdg) -> None:
    """SIGKILL mid-session: the bridge restarts the daemon and still digests."""
    kill = f"kill -9 $(cut -d' ' -f1 {xdg.pidfile}); sleep 0.2; seq 1 40000"
    script = [{"tool_calls": [{"name": "bash", "arguments": {"command": kill}}]}, DONE]
    run = run_ctxwrap_pi(pi, tmp_path, xdg, script)
    assert run.proc.returncode == 0, run.proc.stderr
    (content,) = tool_contents(run.main_bodies()[1])
    assert " digested by ctxwrap · " in content.split("\n", 1)[0], content[:300]
    assert_no_raw(content)
    assert_no_raw(run.session_text())
    wait_ready(xdg, 5)  # and a daemon is up again for the next session


@pytest.mark.parametrize("pi", PI_VERSIONS)
def test_daemon_gone_for_good_still_no_raw_flood(pi: str, tmp_path: Path, xdg: Xdg) -> None:
    """No daemon can be started: the bridge itself cuts the output to a bounded tail."""
    # After the kill, the runtime dir becomes a symlink, which a new daemon refuses to use.
    rt = xdg.runtime / "ctxwrap"
    kill = (
        f"kill -9 $(cut -d' ' -f1 {xdg.pidfile}); rm -rf {rt}; ln -s /nonexistent {rt}; seq 1 40000"
    )
    script = [{"tool_calls": [{"name": "bash", "arguments": {"command": kill}}]}, DONE]
    run = run_ctxwrap_pi(pi, tmp_path, xdg, script)
    assert run.proc.returncode == 0, run.proc.stderr
    (content,) = tool_contents(run.main_bodies()[1])
    assert content.startswith("[ctxwrap: output too large"), content[:200]
    assert len(content.encode()) <= 3000 + 200
    assert content.rstrip().endswith("40000")
    assert "pi-bash-" not in content and "Full output:" not in content
    assert "pi-bash-" not in run.session_text()


@pytest.mark.serial
# pi 1.6 only: these fault paths are the bridge's own code, the same under 0.73 (whose API
# differences the parallel tests cover); the serial pass runs alone and its time is budgeted.
@pytest.mark.parametrize("pi", ["pi"])
def test_hung_daemon_costs_at_most_the_deadline(pi: str, tmp_path: Path, xdg: Xdg) -> None:
    """SIGSTOP: every bridge call gives up at its deadline; the run ends normally."""
    started = ctxwrap(xdg, "daemon", "start")
    assert started.returncode == 0, started.stderr
    pid = xdg.daemon_pid()
    assert pid
    plain = run_ctxwrap_pi(pi, tmp_path / "plain", xdg, [SEQ, DONE], plain=True)
    os.kill(pid, signal.SIGSTOP)
    try:
        run = run_ctxwrap_pi(pi, tmp_path / "hung", xdg, [SEQ, DONE])
    finally:
        os.kill(pid, signal.SIGCONT)
    assert run.proc.returncode == 0, run.proc.stderr
    assert run.proc.stdout.strip() == "done"
    (content,) = tool_contents(run.main_bodies()[1])
    assert content.startswith("[ctxwrap: output too large")  # fail-open tail, bounded
    # One probe (1 s) + one deadline per call, and a timeout suspends further calls for 5 s.
    assert run.elapsed - plain.elapsed < 12, (run.elapsed, plain.elapsed)


@pytest.mark.parametrize("pi", PI_VERSIONS)
def test_small_output_passes_untouched(pi: str, tmp_path: Path, xdg: Xdg) -> None:
    script = [{"tool_calls": [{"name": "bash", "arguments": {"command": "seq 1 300"}}]}, DONE]
    run = run_ctxwrap_pi(pi, tmp_path, xdg, script)
    plain = run_ctxwrap_pi(pi, tmp_path / "p", xdg, script, plain=True)
    assert tool_contents(run.main_bodies()[1]) == tool_contents(plain.main_bodies()[1])


@pytest.mark.parametrize("pi", PI_VERSIONS)
def test_aux_digest_runs_through_pi(pi: str, tmp_path: Path, xdg: Xdg) -> None:
    rules = [{"task": "digest", "answer": "forty thousand consecutive integers, nothing else"}]
    run = run_ctxwrap_pi(pi, tmp_path, xdg, [SEQ, DONE], aux_rules=rules, extra_env=AUX_ALWAYS)
    (content,) = tool_contents(run.main_bodies()[1])
    assert " digested by ctxwrap · " in content.split("\n", 1)[0]
    assert "forty thousand consecutive integers, nothing else" in content
    (aux,) = run.server.aux_requests  # through pi's own provider code to the (scripted) model
    assert aux.aux_task == "digest" and "seq 1 40000" in json.dumps(aux.body)
