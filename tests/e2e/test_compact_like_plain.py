"""Compaction timing under `ctxwrap pi` (real pi 1.6 and 0.73, interactive on a PTY, and
`pi -p` runs continued with `-p --continue`).

pi compacts when the context its provider reports crosses `contextWindow - reserveTokens`.
ctxwrap's context is smaller, so pi alone would compact later than plain pi and carry, in the
meantime, much more than plain pi did after its compaction: replayed on the real pi sessions
that costs more than the masking saved (docs/accounting.md, "Compaction timing"). With
`compact_like_plain` (the default) the bridge asks pi to compact once the run ends when the
daemon's plain counterfactual has compacted and the session has not; a print run, which ends
there, leaves it to the next run of the session, which compacts before its first request (a
print run from session_start, awaited; an interactive `-c` as it opens, its prompt queued).

Interactive: two prompts of two big `seq` outputs each put plain pi (8,000-token threshold) over it in the
second prompt; ctxwrap's digests keep the real context far under it.
"""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

import pexpect
import pytest
from support import Xdg, count_compactions, run_ctxwrap_pi, session_cost
from test_launcher_pty import ctxwrap_tui, type_prompt

pytestmark = pytest.mark.e2e

ANSWERS = ["FIRST-PROMPT-DONE", "SECOND-PROMPT-DONE"]


def _seq(n: int) -> dict[str, object]:
    return {"tool_calls": [{"name": "bash", "arguments": {"command": f"seq 1 {n}"}}]}


SCRIPT = [
    step
    for k, answer in enumerate(ANSWERS)
    for step in (_seq(4000 + 10 * k), _seq(4001 + 10 * k), {"text": answer})
]
# threshold = 128000 - 120000 = 8000 tokens; pi keeps the last 2,000 lines of each seq
# output (~2,500 tokens): plain pi crosses it in the second prompt. keepRecentTokens is small
# so that pi finds something to summarise in a session this short.
SETTINGS: dict[str, object] = {"compaction": {"reserveTokens": 120000, "keepRecentTokens": 100}}


def compactions(agent_dir: Path) -> int:
    return count_compactions(
        "".join(f.read_text(errors="replace") for f in (agent_dir / "sessions").rglob("*.jsonl"))
    )


# The feature on, under both pi versions; off (the contrast: pi compacts later) once, under
# pi 1.6 — the bridge's own code path is the same, and the suite's time is budgeted.
@pytest.mark.parametrize(
    ("name", "on"),
    [("pi", True), ("pi-0.73", True), ("pi", False)],
    ids=["like-plain-pi-1.6", "like-plain-pi-0.73", "off-pi-1.6"],
)
@pytest.mark.timeout(300)
def test_pi_compacts_when_plain_pi_would_have(
    name: str, on: bool, tmp_path: Path, xdg: Xdg
) -> None:
    env = {} if on else {"PI_CTX_COMPACT_LIKE_PLAIN": "0"}
    with ctxwrap_tui(name, tmp_path, xdg, SCRIPT, pi_settings=SETTINGS, extra_env=env) as tui:
        tui.wait_up()
        for k, answer in enumerate(ANSWERS):
            type_prompt(tui, f"run sequences, part {k + 1}")
            tui.child.expect_exact(answer, timeout=90)
        agent_dir = tmp_path / "home" / ".pi" / "agent"
        if on:  # the user is told why pi compacts now
            tui.child.expect_exact("ctxwrap: compacting now", timeout=30)
        # The summarisation runs after the run ended, in the background of the idle editor.
        end = time.monotonic() + (30 if on else 8)
        while time.monotonic() < end and not tui.server.summary_requests:
            time.sleep(0.2)
        summaries = len(tui.server.summary_requests)
        deadline = time.monotonic() + 20
        while on and compactions(agent_dir) < 1 and time.monotonic() < deadline:
            time.sleep(0.2)
        tui.child.send("\x04")  # Ctrl+D: leave pi
        tui.child.expect(pexpect.EOF, timeout=60)

    # ctxwrap's own context never reached pi's threshold: pi alone would not have compacted
    assert len(tui.server.main_requests) == 6
    cost = session_cost(xdg)
    assert cost["plain_compactions"] >= 1  # plain pi would have
    if on:
        assert summaries >= 1 and compactions(agent_dir) == 1
        assert cost["compactions"] == 1
        # recorded as ctxwrap's ask, not the user's /compact (which plain would run too)
        with sqlite3.connect(xdg.db) as db:
            assert list(db.execute("SELECT from_extension FROM compactions")) == [(1,)]
    else:
        assert summaries == 0 and compactions(agent_dir) == 0
        assert cost["compactions"] == 0


# -- print mode: `pi -p`, then `pi -p --continue` (scripts, CI) --------------------------------
#
# A print run ends where the interactive one asks pi to compact (agent_end), so the bridge asks
# at the start of the next print run of the session instead (session_start, awaited: pi holds the
# prompt until the summary is in), when the daemon's plain counterfactual has compacted more
# often than the session. One run of four `seq` outputs puts plain pi over its threshold;
# ctxwrap's digests keep the real context under it, so pi alone does not compact. In the other
# first run only its last reply (~3,000 tokens of text) puts plain pi over: plain pi compacts
# when that run ends, which the daemon's counterfactual must have counted by then.
FIRST_RUN = [_seq(4000 + k) for k in range(4)] + [{"text": "FIRST-RUN-DONE"}]
LAST_REPLY_RUN = [_seq(4000), _seq(4001), {"text": "FIRST-RUN-DONE " + "word " * 2400}]
CONTINUED = "CONTINUED-RUN-DONE"


@pytest.mark.parametrize(
    ("name", "on", "script"),
    [
        ("pi", True, FIRST_RUN),
        ("pi-0.73", True, FIRST_RUN),
        ("pi", False, FIRST_RUN),
        ("pi", True, LAST_REPLY_RUN),
        ("pi-0.73", True, LAST_REPLY_RUN),
    ],
    ids=[
        "print-pi-1.6",
        "print-pi-0.73",
        "print-off-pi-1.6",
        "last-reply-pi-1.6",
        "last-reply-pi-0.73",
    ],
)
@pytest.mark.timeout(300)
def test_a_continued_print_run_compacts_first_where_plain_pi_had(
    name: str, on: bool, script: list[dict[str, object]], tmp_path: Path, xdg: Xdg
) -> None:
    env = {} if on else {"PI_CTX_COMPACT_LIKE_PLAIN": "0"}
    first = run_ctxwrap_pi(
        name, tmp_path, xdg, script, prompt="run sequences", pi_settings=SETTINGS, extra_env=env
    )
    assert first.proc.returncode == 0, first.proc.stderr
    assert "FIRST-RUN-DONE" in first.proc.stdout
    # the first run ends as it did: no summary nobody may continue
    assert not first.server.summary_requests and compactions(first.agent_dir) == 0
    cost = session_cost(xdg)
    assert cost["plain_compactions"] >= 1 and cost["compactions"] == 0  # plain pi had compacted

    again = run_ctxwrap_pi(
        name,
        tmp_path,
        xdg,
        [{"text": CONTINUED}],
        prompt="and now?",
        args=("--continue",),
        home=first.home,
        pi_settings=SETTINGS,
        extra_env=env,
    )
    assert again.proc.returncode == 0, again.proc.stderr
    assert CONTINUED in again.proc.stdout  # the run goes on answering
    (main,) = again.server.main_requests
    sent = json.dumps(main.body["messages"], ensure_ascii=False)
    cost = session_cost(xdg)
    if on:
        # compacted before the run's first request, which carries the summary, not the outputs
        (summary,) = again.server.summary_requests
        assert summary.timestamp < main.timestamp
        assert "Scripted session summary" in sent
        # the first prompt and its first outputs are summarised away (pi keeps the last turn)
        assert "run sequences" not in sent and "seq 1 4000" not in sent
        assert compactions(again.agent_dir) == 1
        # told as a compaction on stderr, never as an error
        assert "ctxwrap: compacted this session where pi would have" in again.proc.stderr
        assert "Error" not in again.proc.stderr and "failed" not in again.proc.stderr
        assert cost["compactions"] == 1
        with sqlite3.connect(xdg.db) as db:  # ctxwrap's ask, not the user's /compact
            assert list(db.execute("SELECT from_extension FROM compactions")) == [(1,)]
    else:
        assert not again.server.summary_requests and compactions(again.agent_dir) == 0
        assert "Scripted session summary" not in sent
        assert "run sequences" in sent and "seq 1 4000" in sent
        assert "ctxwrap: compacted" not in again.proc.stderr
        assert cost["compactions"] == 0


@pytest.mark.timeout(300)
def test_a_compaction_pi_declines_before_a_print_run_is_no_error(tmp_path: Path, xdg: Xdg) -> None:
    """pi 1.6 declines to compact when what it keeps covers the whole session (keepRecentTokens
    raised before the continued run): the bridge's ask fails, and the run goes on as it would
    have without it — no summary, nothing on stderr but ctxwrap's usual exit line."""
    first = run_ctxwrap_pi(
        "pi", tmp_path, xdg, FIRST_RUN, prompt="run sequences", pi_settings=SETTINGS
    )
    assert first.proc.returncode == 0, first.proc.stderr
    keep_all = {"compaction": {"reserveTokens": 120000, "keepRecentTokens": 120000}}
    again = run_ctxwrap_pi(
        "pi",
        tmp_path,
        xdg,
        [{"text": CONTINUED}],
        prompt="and now?",
        args=("--continue",),
        home=first.home,
        pi_settings=keep_all,
        extra_env={"CTXWRAP_BRIDGE_LOG": str(tmp_path / "bridge.log")},
    )
    assert again.proc.returncode == 0, again.proc.stderr
    assert again.proc.stdout.strip() == CONTINUED
    assert not again.server.summary_requests and compactions(again.agent_dir) == 0
    # (the checks name pi's and ctxwrap's words: the test's tmp path is in the exit line)
    for said in ("ctxwrap: compacted", "Nothing to compact", "Compaction failed", "Error"):
        assert said not in again.proc.stderr, again.proc.stderr
    assert session_cost(xdg)["compactions"] == 0
    # the bridge did ask, before the run (its trace), and pi declined
    trace = (tmp_path / "bridge.log").read_text()
    assert "compact like plain, before the print run" in trace
    assert "compact like plain: Nothing to compact" in trace


@pytest.mark.parametrize("name", ["pi", "pi-0.73"])
@pytest.mark.timeout(300)
def test_an_interactive_resume_after_print_runs_compacts_before_the_first_prompt(
    name: str, tmp_path: Path, xdg: Xdg
) -> None:
    """`ctxwrap pi -c` after a print run in which plain pi compacted: the bridge asks pi to
    compact as the session opens, not after the first run (one run late), and the prompt the
    user types meanwhile goes out after the summary, carrying it."""
    first = run_ctxwrap_pi(
        name, tmp_path, xdg, FIRST_RUN, prompt="run sequences", pi_settings=SETTINGS
    )
    assert first.proc.returncode == 0, first.proc.stderr
    cost = session_cost(xdg)
    assert cost["plain_compactions"] >= 1 and cost["compactions"] == 0

    with ctxwrap_tui(
        name,
        tmp_path,
        xdg,
        [{"text": CONTINUED}],
        pi_settings=SETTINGS,
        home=first.home,
        args=("--continue",),
    ) as tui:
        tui.wait_up()
        tui.child.expect_exact("ctxwrap: compacting now", timeout=30)
        type_prompt(tui, "and now?")
        tui.child.expect_exact(CONTINUED, timeout=90)
        deadline = time.monotonic() + 20
        while compactions(first.agent_dir) < 1 and time.monotonic() < deadline:
            time.sleep(0.2)
        tui.child.send("\x04")  # Ctrl+D: leave pi
        tui.child.expect(pexpect.EOF, timeout=60)

    (summary,) = tui.server.summary_requests
    (main,) = tui.server.main_requests
    assert summary.timestamp < main.timestamp  # before the first run, not after it
    sent = json.dumps(main.body["messages"], ensure_ascii=False)
    assert "Scripted session summary" in sent and "seq 1 4000" not in sent
    assert compactions(first.agent_dir) == 1
    assert session_cost(xdg)["compactions"] == 1
