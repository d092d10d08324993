"""History masking under the real Claude Code: after an idle gap past the cache TTL (2 s
here), an earlier task's large read and bash digest are tombstones with recall handles, the
current task's results stay whole, the view is frozen, and `--continue` replays it."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from support import CHECKED_AND_NOT, CTXWRAP, Xdg, run_ctxwrap_claude

from ctxwrap.agents._proxy.cache_state import strip_cache_control
from ctxwrap.testing.claude_home import claude_env, claude_print_args, find_claude
from ctxwrap.testing.model_server import ScriptedModelServer

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        find_claude() is None, reason="claude not installed (scripts/install-tools.sh)"
    ),
]

OLD = "# task one module\n" + "".join(
    f"def old_helper_{i}(): return {i}  # old-marker\n" for i in range(150)
)
NEW = "# task two module\n" + "".join(
    f"def new_helper_{i}(): return {i}  # new-marker\n" for i in range(150)
)


GEN_LOG = r"""
for i in range(60000):
    if i == 31337:
        print(f"2026-11-30T10:00:{i % 60:02d} ERROR worker-7 lost connection to db-primary")
    else:
        print(f"2026-11-30T10:00:{i % 60:02d} INFO request {i} served in {i % 97}ms status=200")
print("server shutdown complete: 60000 requests, 1 error")
"""


def results(body: dict[str, Any]) -> dict[str, Any]:
    return {
        b["tool_use_id"]: b["content"]
        for m in body["messages"]
        for b in (m["content"] if isinstance(m["content"], list) else [])
        if isinstance(b, dict) and b.get("type") == "tool_result"
    }


def text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(b.get("text", "") for b in content if isinstance(b, dict))


def recalled(tomb: str, pattern: str, env: dict[str, str]) -> str:
    """What `ctxwrap recall` gives back for the handle a tombstone names."""
    handle = tomb.split("ctxwrap recall ")[1].split()[0]
    out = subprocess.run(
        [*CTXWRAP, "recall", handle, pattern], env=env, capture_output=True, text=True, timeout=30
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def cached_form(messages: list[Any]) -> list[str]:
    """Messages as the prompt cache sees them: no cache markers, and a lone text block the same
    as a string (Claude Code sends its newest prompt as a block to mark it, then as a string)."""
    out = []
    for m in strip_cache_control(messages):
        c = m.get("content")
        if (
            isinstance(c, list)
            and len(c) == 1
            and set(c[0]) == {"type", "text"}
            and c[0]["type"] == "text"
        ):
            m = {**m, "content": c[0]["text"]}
        out.append(json.dumps(m))
    return out


def cold_rules(ttl: str) -> dict[str, str]:
    """The cold-boundary rules of the defaults before issue 21 (earlier tasks and stale reads
    masked, warm masking off), from 400 chars, with a cache TTL of `ttl` seconds."""
    return {
        "PI_CTX_CACHE_TTL_S": ttl,
        "PI_CTX_MASK_MIN_CHARS": "400",
        "PI_CTX_MASK_EARLIER_TASKS": "1",
        "PI_CTX_MASK_WARM": "0",
        "PI_CTX_MASK_STALE_READS": "1",
        "PI_CTX_MASK_OLDER_ROUNDS": "0",
        "PI_CTX_MASK_READ_IDLE_ROUNDS": "0",
    }


def assert_extends(bodies: list[dict[str, Any]]) -> None:
    for k in range(len(bodies) - 1):
        a = cached_form(bodies[k]["messages"])
        b = cached_form(bodies[k + 1]["messages"])
        assert b[: len(a)] == a, f"request {k + 1} rewrote what request {k} sent"


@pytest.mark.serial
def test_idle_gap_masks_the_earlier_task_under_claude_code(tmp_path: Path, xdg: Xdg) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "old.py").write_text(OLD)
    (work / "new.py").write_text(NEW)
    (work / "gen_log.py").write_text(GEN_LOG)
    steps = [
        {"text": "ready"},
        {"tool_calls": [{"name": "Read", "arguments": {"file_path": str(work / "old.py")}}]},
        {"tool_calls": [{"name": "Bash", "arguments": {"command": "python3 gen_log.py"}}]},
        {"text": "task one done"},
        {"tool_calls": [{"name": "Read", "arguments": {"file_path": str(work / "new.py")}}]},
        {"tool_calls": [{"name": "Bash", "arguments": {"command": "echo checked"}}]},
        {"text": "task two done"},
        {"text": "resumed"},
    ]
    with ScriptedModelServer(steps) as srv:
        base = claude_env(xdg.env(), home=tmp_path / "home", base_url=srv.root_url)

        def run(prompt: str, ttl: str, *extra: str) -> dict[str, Any]:
            args = claude_print_args(prompt, *extra)
            proc = run_ctxwrap_claude(args, cwd=work, env={**base, **cold_rules(ttl)})
            return dict(json.loads(proc.stdout))

        # Claude Code's first run in a fresh home sends other tool descriptions than later runs
        # (a tool-set change: cold anyway); a first task settles that, so that the boundary
        # below is the idle gap alone.
        run("hello", "2")
        run("task one: look at old.py", "2", "--continue")
        n_one = len(srv.main_requests)
        assert n_one == 4
        time.sleep(2.5)  # the idle gap: past the 2 s cache TTL
        two = run("task two: look at new.py", "2", "--continue")
        assert two["result"] == "task two done"
        bodies = [r.body for r in srv.main_requests[n_one:]]
        # --continue with a warm cache (a new daemon with a long TTL: the running one's
        # settings win over a client's env): the same view, nothing new masked.
        xdg.kill_daemon()
        run("and now?", "300", "--continue")
        last = srv.main_requests[-1].body

    assert len(bodies) == 3
    assert "old-marker" in json.dumps(srv.main_requests[n_one - 1].body["messages"])
    # From the first request after the gap on, the earlier task's read is a tombstone ...
    old_id, log_id, new_id, bash_id = "toolu_1_0", "toolu_2_0", "toolu_4_0", "toolu_5_0"
    digest = text_of(results(srv.main_requests[n_one - 1].body)[log_id])
    assert " digested by ctxwrap · " in digest.split("\n", 1)[0] and "db-primary" in digest
    tomb = text_of(results(bodies[0])[old_id])
    assert tomb.startswith("[ctxwrap: ") and "old.py" in tomb and "earlier task" in tomb
    assert "`ctxwrap recall r" in tomb and "ctx_recall" not in tomb
    log_tomb = text_of(results(bodies[0])[log_id])
    assert log_tomb.startswith("[ctxwrap: ") and "gen_log.py" in log_tomb
    assert "earlier task" in log_tomb and "`ctxwrap recall r" in log_tomb
    for body in [*bodies, last]:
        assert "old-marker" not in json.dumps(body["messages"])
        assert "db-primary" not in json.dumps(body["messages"])
        assert text_of(results(body)[old_id]) == tomb
        assert text_of(results(body)[log_id]) == log_tomb
    # ... the current task's results are whole, and between boundaries the view is frozen.
    assert "new_helper_149" in text_of(results(bodies[1])[new_id])
    assert "new_helper_149" in text_of(results(bodies[2])[new_id])
    assert "checked" in text_of(results(bodies[2])[bash_id])
    assert_extends(bodies)
    # --continue replays the same view: the old rounds as they were last sent
    assert results(last) == results(bodies[-1])
    assert_extends([bodies[-1], last])

    # recorded with its reason; the handle gives the read back
    events = [json.loads(line) for line in (xdg.state / "ctxwrap" / "events.jsonl").open()]
    (mask,) = [e for e in events if e.get("event") == "mask"]
    assert mask["trigger"] == "idle"
    assert [m[:2] for m in mask["masks"]] == [[old_id, "earlier_task"], [log_id, "earlier_task"]]
    assert mask["removed_tokens"] > 1000 and mask["cost_tokens"] == 0
    with sqlite3.connect(xdg.db) as db:
        masked = db.execute("SELECT tool_call_id FROM edits WHERE kind='mask' ORDER BY 1")
        assert list(masked) == [(old_id,), (log_id,)]
    assert "old_helper_149" in recalled(tomb, "old_helper_149", base)


@pytest.mark.serial
@CHECKED_AND_NOT
def test_no_mask_breaks_a_preserved_thinking_prefix(
    tmp_path: Path, xdg: Xdg, model: str, guarded: bool
) -> None:
    """Claude Opus 5.5 checks that nothing before a returned thinking block changed since it
    wrote the block, and refuses the request otherwise. The scripted server does the same
    (`preserved_thinking`): Claude Code's own requests are append-only and pass it (every
    request before the gap, and every one on Opus 5.5); an idle gap would mask the earlier
    task's read, which a thinking block follows — on Opus 5.5 it is not masked and the session
    goes on; on Opus 4.8 (no check on the real API, checked here anyway) it is, and the check
    refuses it: what the guard prevents."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "old.py").write_text(OLD)
    (work / "new.py").write_text(NEW)
    steps = [
        {"text": "ready"},
        {"tool_calls": [{"name": "Read", "arguments": {"file_path": str(work / "old.py")}}]},
        {"text": "task one done"},
        {"tool_calls": [{"name": "Read", "arguments": {"file_path": str(work / "new.py")}}]},
        {"text": "task two done"},
    ]
    with ScriptedModelServer(steps, preserved_thinking=True, side_text="title") as srv:
        base = claude_env(xdg.env(), home=tmp_path / "home", base_url=srv.root_url)

        def run(prompt: str, *extra: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [*CTXWRAP, "claude", *claude_print_args(prompt, "--model", model, *extra)],
                cwd=work,
                env={**base, **cold_rules("2")},
                capture_output=True,
                text=True,
                timeout=120,
            )

        # a first conversation settles Claude Code's first-run tool list (another prefix)
        assert run("hello").returncode == 0
        one = run("task one: look at old.py")
        assert one.returncode == 0, one.stderr[-2000:]
        n_one = len(srv.main_requests)
        assert "old-marker" in json.dumps(srv.main_requests[-1].body["messages"])
        time.sleep(2.5)  # past the 2 s cache TTL: a cold boundary, where masks are decided
        two = run("task two: look at new.py", "--continue")
        after = [r.body for r in srv.main_requests[n_one:]]

    assert after, "no request after the gap"
    returned = [
        b
        for m in after[0]["messages"]
        for b in (m["content"] if isinstance(m["content"], list) else [])
        if isinstance(b, dict) and b.get("type") == "thinking"
    ]
    assert returned, "Claude Code sent no thinking block back: nothing was checked"
    with sqlite3.connect(xdg.db) as db:
        masks = db.execute("SELECT count(*) FROM edits WHERE kind='mask'").fetchone()[0]
    if guarded:
        assert srv.prefix_failures == []
        assert two.returncode == 0, two.stderr[-2000:]
        assert json.loads(two.stdout)["result"] == "task two done"
        assert "old-marker" in json.dumps(after[0]["messages"])  # not masked
        assert masks == 0
    else:
        assert masks >= 1 and "old-marker" not in json.dumps(after[0]["messages"])
        assert srv.prefix_failures, "the masked request passed the prefix check"


@pytest.mark.serial
def test_a_sub_agents_report_is_kept_and_masked_once_old_under_claude_code(
    tmp_path: Path, xdg: Xdg
) -> None:
    """A sub-agent's report comes back as the Task call's result. No hook gives that text, so
    the daemon never had it and masking, which takes only what the model can get back,
    carried it in every later request. The proxy now keeps it from the request that carries
    it; after an idle gap it is a tombstone whose handle gives the report back."""
    work = tmp_path / "work"
    work.mkdir()
    report = "".join(
        f"- finding {i}: handler_{i} in src/app.py returns early (report-marker)\n"
        for i in range(30)
    )
    steps = [
        {"text": "ready"},
        {
            "tool_calls": [
                {
                    "name": "Task",
                    "arguments": {
                        "description": "review the handlers",
                        "prompt": "Review the handlers in src/app.py and report each finding.",
                        "subagent_type": "general-purpose",
                    },
                }
            ]
        },
        {"text": report},  # the sub-agent's answer: its report
        {"tool_calls": [{"name": "Bash", "arguments": {"command": "echo checked"}}]},
        {"text": "reviewed"},
        {"text": "next"},
    ]
    with ScriptedModelServer(steps) as srv:
        base = claude_env(xdg.env(), home=tmp_path / "home", base_url=srv.root_url)
        env = {**base, "PI_CTX_CACHE_TTL_S": "2"}

        def run(prompt: str, *extra: str) -> None:
            args = claude_print_args(prompt, "--allowedTools", "Task", *extra)
            run_ctxwrap_claude(args, cwd=work, env=env)

        run("hello")
        run("review the handlers", "--continue")
        n_one = len(srv.main_requests)
        time.sleep(2.5)  # past the 2 s cache TTL: the next request is a cold boundary
        run("what next?", "--continue")

    task_id = "toolu_1_0"
    plain = text_of(results(srv.main_requests[n_one - 1].body)[task_id])
    assert "finding 29" in plain  # the report, as plain Claude Code sends it
    last = srv.main_requests[-1].body
    tomb = text_of(results(last)[task_id])
    assert tomb.startswith("[ctxwrap: ") and "`ctxwrap recall r" in tomb
    assert "report-marker" not in json.dumps(last["messages"])
    assert "handler_29 in src/app.py" in recalled(tomb, "finding 29", base)
