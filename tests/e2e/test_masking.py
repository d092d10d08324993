"""Mechanism 6 end to end: after an idle gap longer than the cache TTL, an earlier task's
large read becomes a tombstone, the current task's reads stay whole, and the view is frozen
(each later request extends the previous one, and --continue replays it)."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest
from support import (
    CHECKED_AND_NOT,
    PI_VERSIONS,
    PiRun,
    Xdg,
    request_messages_json,
    run_ctxwrap_pi,
    tool_contents,
)

from ctxwrap.testing.model_server import ScriptedModelServer

pytestmark = pytest.mark.e2e

OLD = "# task one module\n" + "".join(
    f"def old_helper_{i}(): return {i}  # old-marker\n" for i in range(150)
)
NEW = "# task two module\n" + "".join(
    f"def new_helper_{i}(): return {i}  # new-marker\n" for i in range(150)
)
FILES = {"old.py": OLD, "new.py": NEW}

TASK_ONE = [
    {"tool_calls": [{"name": "read", "arguments": {"path": "old.py"}}]},
    {"text": "task one done"},
]
TASK_TWO = [
    {"tool_calls": [{"name": "read", "arguments": {"path": "new.py"}}]},
    {"tool_calls": [{"name": "bash", "arguments": {"command": "echo checked"}}]},
    {"text": "task two done"},
]
# These tests pin the earlier-task rule at a cold boundary with warm masking off (the defaults
# before issue 21); the activity-aware defaults: tests/e2e/test_replay_sessions.py.
RULES = {
    "PI_CTX_MASK_EARLIER_TASKS": "1",
    "PI_CTX_MASK_WARM": "0",
    "PI_CTX_MASK_STALE_READS": "1",
    "PI_CTX_MASK_OLDER_ROUNDS": "0",
    "PI_CTX_MASK_READ_IDLE_ROUNDS": "0",
}
TTL = {"PI_CTX_CACHE_TTL_S": "2", **RULES}


def assert_extends(bodies: list[dict[str, object]]) -> None:
    for k in range(len(bodies) - 1):
        a, b = request_messages_json(bodies[k]), request_messages_json(bodies[k + 1])
        assert b[: len(a)] == a, f"request {k + 1} rewrote what request {k} sent"


def two_tasks_with_a_pause(
    pi: str,
    tmp_path: Path,
    xdg: Xdg,
    env: dict[str, str],
    srv: ScriptedModelServer,
    files: dict[str, str] = FILES,
) -> tuple[PiRun, PiRun]:
    """Task one, a 2.5 s pause, task two on `--continue` (the same pi home and server)."""
    one = run_ctxwrap_pi(
        pi, tmp_path, xdg, prompt="task one", files=files, extra_env=env, server=srv
    )
    assert one.proc.returncode == 0, one.proc.stderr
    time.sleep(2.5)  # past TTL's 2 s cache_ttl_s, well inside a 300 s one
    two = run_ctxwrap_pi(
        pi, tmp_path, xdg, prompt="task two", home=one.home, args=("--continue",),
        extra_env=env, server=srv,
    )  # fmt: skip
    assert two.proc.returncode == 0, two.proc.stderr
    return one, two


def db_rows(xdg: Xdg, sql: str) -> list[tuple[object, ...]]:
    with sqlite3.connect(xdg.db) as conn:
        return list(conn.execute(sql))


@pytest.mark.serial
@pytest.mark.parametrize("pi", PI_VERSIONS)
def test_idle_gap_masks_the_earlier_task_and_the_view_is_frozen(
    pi: str, tmp_path: Path, xdg: Xdg
) -> None:
    # One server for the three runs: tool call ids stay unique across the session.
    with ScriptedModelServer([*TASK_ONE, *TASK_TWO, {"text": "resumed"}]) as srv:
        one = run_ctxwrap_pi(
            pi, tmp_path, xdg, prompt="task one", files=FILES, extra_env=TTL, server=srv
        )
        assert one.proc.returncode == 0, one.proc.stderr
        assert "old-marker" in json.dumps(srv.main_requests[-1].body["messages"])  # untouched
        time.sleep(2.5)  # the idle gap: past the 2 s cache TTL
        two = run_ctxwrap_pi(
            pi, tmp_path, xdg, prompt="task two", home=one.home, args=("--continue",),
            extra_env=TTL, server=srv,
        )  # fmt: skip
        assert two.proc.returncode == 0, two.proc.stderr
        bodies = [r.body for r in srv.main_requests[2:]]
        # --continue with a warm cache (a new daemon with a long TTL: the running one's settings
        # win over a client's env): the same view is replayed, nothing new is masked.
        xdg.kill_daemon()
        three = run_ctxwrap_pi(
            pi, tmp_path, xdg, prompt="task three", home=one.home, args=("--continue",),
            extra_env={"PI_CTX_CACHE_TTL_S": "300", **RULES}, server=srv,
        )  # fmt: skip
        assert three.proc.returncode == 0, three.proc.stderr
        last = srv.main_requests[-1].body
    assert len(bodies) == 3
    sent = [json.dumps(b["messages"], ensure_ascii=False) for b in bodies]
    # From the first request after the gap on, the earlier task's read is a tombstone ...
    assert not any("old-marker" in s for s in sent), "the earlier task's read was sent whole"
    tomb = [c for c in tool_contents(bodies[0]) if "was hidden" in c]
    assert len(tomb) == 1 and "read old.py" in tomb[0] and "earlier task" in tomb[0]
    assert "`ctxwrap recall r" in tomb[0]
    # ... the current task's read is whole, and between boundaries the view is frozen.
    assert "new_helper_149" in sent[1] and "new_helper_149" in sent[2]
    assert_extends(bodies)
    assert "task two done" in two.proc.stdout
    # pi's own session keeps the true history; the mask is recorded with its reason.
    assert "old-marker" in two.session_text()
    assert db_rows(xdg, "SELECT kind FROM edits WHERE kind='mask'") == [("mask",)]
    events = [json.loads(line) for line in (xdg.state / "ctxwrap" / "events.jsonl").open()]
    (mask,) = [e for e in events if e.get("event") == "mask"]
    assert mask["trigger"] == "idle" and mask["masks"][0][1] == "earlier_task"
    assert mask["removed_tokens"] > 1000 and mask["cost_tokens"] == 0

    before = request_messages_json(bodies[-1])[1:]  # without the system message
    after = request_messages_json(last)[1:]
    assert after[: len(before)] == before
    assert "new_helper_149" in json.dumps(last["messages"])
    assert "old-marker" not in json.dumps(last["messages"])


@pytest.mark.parametrize("pi", PI_VERSIONS)
def test_a_pause_inside_pis_long_cache_retention_masks_nothing(
    pi: str, tmp_path: Path, xdg: Xdg
) -> None:
    """Under PI_CACHE_RETENTION=long pi asks the provider for a long-lived cache (here
    `prompt_cache_retention: "24h"`): a pause past cache_ttl_s is no idle boundary, and the
    calls are recorded with that lifetime for the cost model."""
    with ScriptedModelServer([*TASK_ONE, *TASK_TWO]) as srv:
        two_tasks_with_a_pause(pi, tmp_path, xdg, {**TTL, "PI_CACHE_RETENTION": "long"}, srv)
        bodies = [r.body for r in srv.main_requests]
    assert all(b.get("prompt_cache_retention") == "24h" for b in bodies)
    assert all("old_helper_149" in json.dumps(b["messages"]) for b in bodies[1:])
    events = [json.loads(line) for line in (xdg.state / "ctxwrap" / "events.jsonl").open()]
    assert [e for e in events if e.get("event") == "mask"] == []
    # the first request of each process knows only pi's setting (30 minutes, the shortest
    # long lifetime); the others the lifetime the previous payload asked for
    ttls = [r for (r,) in db_rows(xdg, "SELECT cache_ttl_s FROM llm_calls ORDER BY id")]
    assert ttls == [1800.0, 86400.0, 1800.0, 86400.0, 86400.0]


@pytest.mark.parametrize("pi", ["pi"])
def test_no_gap_no_mask(pi: str, tmp_path: Path, xdg: Xdg) -> None:
    """Within the TTL the cache is warm: nothing older is rewritten (the default, off)."""
    env = {"PI_CTX_CACHE_TTL_S": "300", **RULES}  # the daemon's setting reaches the bridge
    with ScriptedModelServer([*TASK_ONE, *TASK_TWO]) as srv:
        two_tasks_with_a_pause(pi, tmp_path, xdg, env, srv)
    bodies = [r.body for r in srv.main_requests]
    assert all("old-marker" in json.dumps(b["messages"]) for b in bodies[1:])
    assert_extends(bodies[2:])
    before = request_messages_json(bodies[1])[1:]
    assert request_messages_json(bodies[2])[1 : len(before) + 1] == before


@pytest.mark.serial
@CHECKED_AND_NOT
def test_no_mask_breaks_a_preserved_thinking_prefix_under_pi(
    tmp_path: Path, xdg: Xdg, model: str, guarded: bool
) -> None:
    """pi 1.x on Anthropic Messages sends its thinking blocks back, signed by the server for
    the prefix they were written after (`preserved_thinking`, as Opus 5.5 checks them). The
    idle gap that masks the earlier task's read above masks nothing on Opus 5.5 (a thinking
    block follows the read) and the session goes on; on Opus 4.8 (unchecked by the real API,
    checked here anyway) it masks, and the check refuses the request."""
    with ScriptedModelServer([*TASK_ONE, *TASK_TWO], preserved_thinking=True) as srv:
        kw: dict[str, Any] = {"pi_model": model, "pi_api": "anthropic-messages", "server": srv}
        one = run_ctxwrap_pi(
            "pi", tmp_path, xdg, prompt="task one", files=FILES, extra_env=TTL, **kw
        )
        assert one.proc.returncode == 0, one.proc.stderr
        n_one = len(srv.main_requests)
        time.sleep(2.5)  # the idle gap: past the 2 s cache TTL
        two = run_ctxwrap_pi(
            "pi", tmp_path, xdg, prompt="task two", home=one.home, args=("--continue",),
            extra_env=TTL, **kw,
        )  # fmt: skip
        after = [r.body for r in srv.main_requests[n_one:]]
    assert after and "thinking" in json.dumps(after[0]["messages"])  # blocks were sent back
    masks = db_rows(xdg, "SELECT kind FROM edits WHERE kind='mask'")
    if guarded:
        assert srv.prefix_failures == []
        assert two.proc.returncode == 0, two.proc.stderr
        assert "task two done" in two.proc.stdout
        assert "old-marker" in json.dumps(after[0]["messages"])  # not masked
        assert masks == []
    else:
        assert masks and "old-marker" not in json.dumps(after[0]["messages"])
        assert srv.prefix_failures, "the masked request passed the prefix check"


GEN = "for i in range(60):\n    print(f'module_{i:03d}  ok  0.{i:02d}s')\n"  # 1,500 chars


def test_a_short_command_output_is_kept_for_recall_and_masked_once_old(
    tmp_path: Path, xdg: Xdg
) -> None:
    """pi 1.6, the defaults: a command output too short to digest reaches the model whole, is
    stored behind a recall handle on the side, and after an idle gap past the cache TTL it is
    masked as older (a result other than a read, seen rounds ago); `ctxwrap recall` gives it back.
    Before, only digested output could be masked, and it stayed whole to the end."""
    steps = [
        {"tool_calls": [{"name": "bash", "arguments": {"command": "python3 gen.py"}}]},
        {"tool_calls": [{"name": "bash", "arguments": {"command": "echo checked"}}]},
        {"text": "task one done"},
        {"text": "task two done"},
    ]
    env = {"PI_CTX_CACHE_TTL_S": "2"}
    with ScriptedModelServer(steps) as srv:
        two_tasks_with_a_pause("pi", tmp_path, xdg, env, srv, files={"gen.py": GEN})
        assert "module_059  ok" in json.dumps(srv.main_requests[1].body)  # seen whole
        last = json.dumps(srv.main_requests[-1].body)
    assert "module_059  ok" not in last
    assert "python3 gen.py" in last and "`ctxwrap recall r" in last
    [(handle,)] = db_rows(xdg, "SELECT handle FROM raw_outputs")
    assert db_rows(xdg, "SELECT COUNT(*) FROM digests") == [(0,)]
    assert handle in last


APP_TS = "".join(f"export const handler{i} = () => {i};  // app-marker\n" for i in range(50))


@pytest.mark.serial
def test_a_file_read_through_bash_is_masked_as_a_read_and_its_reread_counted(
    tmp_path: Path, xdg: Xdg
) -> None:
    """pi 1.6: `cat app.ts` in pi's bash is a read. Its output is stored on the side, masked
    after an idle gap once its file has been left alone `mask_read_idle_rounds` rounds (as a
    read of the file, not as a log a round old), and the agent reading the file again counts
    as that result needed again. Before, the daemon stored no such output: it stayed whole."""
    steps = [
        {"tool_calls": [{"name": "bash", "arguments": {"command": "cat app.ts"}}]},
        {"tool_calls": [{"name": "bash", "arguments": {"command": "echo a"}}]},
        {"tool_calls": [{"name": "bash", "arguments": {"command": "echo b"}}]},
        {"text": "task one done"},
        {"tool_calls": [{"name": "bash", "arguments": {"command": "cat app.ts"}}]},
        {"text": "task two done"},
    ]
    env = {"PI_CTX_CACHE_TTL_S": "2", "PI_CTX_MASK_READ_IDLE_ROUNDS": "2"}
    with ScriptedModelServer(steps) as srv:
        two_tasks_with_a_pause("pi", tmp_path, xdg, env, srv, files={"app.ts": APP_TS})
        assert "handler49 = () => 49" in json.dumps(srv.main_requests[1].body)  # seen whole
        first_of_two = json.dumps(srv.main_requests[4].body)
        last = json.dumps(srv.main_requests[-1].body)
    assert "handler49 = () => 49" not in first_of_two
    assert "[ctxwrap: cat app.ts (" in first_of_two and "has not been touched" in first_of_two
    assert "handler49 = () => 49" in last  # the agent read it again
    rows = db_rows(xdg, "SELECT how FROM needed_again")
    assert rows == [("reread",)]


PLAN_TOOL = """
export default function (pi) {
  pi.registerTool({
    name: "project_plan",
    label: "Project plan",
    description: "The project's plan, every step of it.",
    parameters: { type: "object", properties: {} },
    async execute() {
      let text = "";
      for (let i = 0; i < 40; i++) text += `step ${i}: wire handler ${i} (plan-marker)\\n`;
      return { content: [{ type: "text", text }], details: {} };
    },
  });
}
"""


@pytest.mark.serial
def test_a_custom_tools_result_is_kept_and_masked_once_old(tmp_path: Path, xdg: Xdg) -> None:
    """pi 1.6 with a tool of the user's own extension: no mechanism takes its result, so the
    daemon was never given it and masking, which takes only what the model can get back,
    carried it in every later request. The bridge now gives it to the daemon to keep; after an
    idle gap it is a tombstone whose handle gives the plan back."""
    steps = [
        {"tool_calls": [{"name": "project_plan", "arguments": {}}]},
        {"tool_calls": [{"name": "bash", "arguments": {"command": "echo a"}}]},
        {"text": "task one done"},
        {"text": "task two done"},
    ]
    ext = tmp_path / "plan-tool.ts"
    ext.write_text(PLAN_TOOL)
    env = {"PI_CTX_CACHE_TTL_S": "2"}
    with ScriptedModelServer(steps) as srv:
        one = run_ctxwrap_pi(
            "pi", tmp_path, xdg, prompt="task one", args=("-e", str(ext)), extra_env=env,
            server=srv,
        )  # fmt: skip
        assert one.proc.returncode == 0, one.proc.stderr
        assert "step 39: wire handler 39" in json.dumps(srv.main_requests[1].body)  # seen whole
        time.sleep(2.5)  # past the 2 s cache TTL
        two = run_ctxwrap_pi(
            "pi", tmp_path, xdg, prompt="task two", home=one.home,
            args=("--continue", "-e", str(ext)), extra_env=env, server=srv,
        )  # fmt: skip
        assert two.proc.returncode == 0, two.proc.stderr
        last = json.dumps(srv.main_requests[-1].body)
    assert "plan-marker" not in last
    assert "[ctxwrap: project_plan (" in last and "ctxwrap recall r" in last
    rows = db_rows(xdg, "SELECT tool_name FROM raw_outputs")
    assert ("project_plan",) in rows
