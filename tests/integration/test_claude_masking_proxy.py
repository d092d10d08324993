"""History masking in the Claude Code proxy, through real HTTP and a real daemon.

Requests are built the way Claude Code builds them (each extends the previous one, the
cache marker moves to the newest block) and sent through the proxy to the scripted Anthropic
server; the assertions are on what the server received. The daemon's cache TTL is 3 s, so a
sleep past it is an idle gap.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from support import Xdg, daemon_process

from ctxwrap.agents._proxy.cache_state import strip_cache_control
from ctxwrap.agents.claude.proxy import ClaudeProxy
from ctxwrap.mechanisms.cost_accounting import load_session_costs
from ctxwrap.testing.model_server import ScriptedModelServer

KEY = "sk-ant-mask-test-key"
SID = "0f0e0d0c-aaaa-bbbb-cccc-00000000mask"
HEADERS = {
    "x-api-key": KEY,
    "anthropic-version": "2023-06-01",
    "x-claude-code-session-id": SID,
    "content-type": "application/json",
}
TOOLS = [{"name": n, "input_schema": {"type": "object"}} for n in ("Bash", "Read", "Write")]
# These tests pin the earlier-task rule at cold boundaries with warm masking off (the
# defaults before issue 21); the activity-aware defaults are tested in test_masking_daemon.py.
RULES = {
    "PI_CTX_MASK_EARLIER_TASKS": "1",
    "PI_CTX_MASK_WARM": "0",
    "PI_CTX_MASK_STALE_READS": "1",
    "PI_CTX_MASK_OLDER_ROUNDS": "0",
    "PI_CTX_MASK_READ_IDLE_ROUNDS": "0",
}
TTL = {"PI_CTX_CACHE_TTL_S": "3", **RULES}
WARM = {"PI_CTX_CACHE_TTL_S": "300", **RULES}
OLD = "".join(f"{i:6d}\u2192def old_helper_{i}(): return {i}  # old-marker\n" for i in range(150))
NEW = "".join(f"{i:6d}\u2192def new_helper_{i}(): return {i}  # new-marker\n" for i in range(150))
THIRD = "".join(f"{i:6d}\u2192third_{i} = {i}  # third-marker\n" for i in range(150))


class Conversation:
    """Claude Code's message list, grown the way Claude Code grows it."""

    def __init__(self, proxy: ClaudeProxy, work: Path) -> None:
        self.proxy = proxy
        self.work = work
        self.messages: list[dict[str, Any]] = []
        self.model = "claude-test-model"
        self.tools: list[dict[str, Any]] = TOOLS
        # Claude Code's cache marker: the 5-minute cache, or the 1-hour one it asks for
        # under a subscription login
        self.marker: dict[str, Any] = {"type": "ephemeral"}

    def body(self) -> dict[str, Any]:
        msgs = strip_cache_control(self.messages)
        last = msgs[-1]["content"]
        if isinstance(last, list):
            last[-1]["cache_control"] = dict(self.marker)  # Claude Code's moving marker
        return {
            "model": self.model,
            "max_tokens": 64,
            "system": [
                {"type": "text", "text": "You are Claude Code.", "cache_control": self.marker}
            ],
            "tools": self.tools,
            "messages": msgs,
        }

    def send(self, path: str = "/v1/messages?beta=true", body: Any = None) -> None:
        r = httpx.post(
            self.proxy.base_url + path, json=body or self.body(), headers=HEADERS, timeout=30
        )
        assert r.status_code == 200, r.text

    def prompt(self, text: str) -> None:
        self.messages.append({"role": "user", "content": [{"type": "text", "text": text}]})
        self.send()

    def read(self, cid: str, name: str, content: str, *, reminder: bool = False) -> None:
        path = str(self.work / name)
        self.messages.append(
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": f"reading {name}"},
                    {"type": "tool_use", "id": cid, "name": "Read", "input": {"file_path": path}},
                ],
            }
        )
        self.proxy.handle_hook(
            json.dumps(
                {
                    "session_id": SID,
                    "hook_event_name": "PostToolUse",
                    "tool_name": "Read",
                    "tool_use_id": cid,
                    "tool_input": {"file_path": path},
                    "tool_response": {
                        "type": "text",
                        "file": {"filePath": path, "content": content},
                    },
                }
            ).encode()
        )
        blocks: list[dict[str, Any]] = [
            {"type": "tool_result", "tool_use_id": cid, "content": content}
        ]
        if reminder:  # Claude Code appends reminders to a tool result message: no new task
            blocks.append({"type": "text", "text": "<system-reminder>todo list</system-reminder>"})
        self.messages.append({"role": "user", "content": blocks})
        self.send()

    def answer(self, text: str) -> None:
        self.messages.append({"role": "assistant", "content": [{"type": "text", "text": text}]})


def new_proxy(srv: ScriptedModelServer, xdg: Xdg) -> ClaudeProxy:
    p = ClaudeProxy(
        upstream=srv.root_url,
        state_dir=xdg.state / "ctxwrap",
        socket_path=xdg.socket,
        start_info={"cwd": "/", "pid": 1, "agent": "claude"},
    )
    p.start()
    return p


@contextlib.contextmanager
def conversation(
    xdg: Xdg, env: dict[str, str], work: Path, replies: int = 20
) -> Iterator[tuple[Conversation, ScriptedModelServer]]:
    """A daemon with `env`, the scripted server and a conversation through a proxy."""
    with daemon_process(xdg, env), ScriptedModelServer([{"text": "ok"}] * replies) as srv:
        proxy = new_proxy(srv, xdg)
        try:
            yield Conversation(proxy, work), srv
        finally:
            proxy.close()


def results(body: dict[str, Any]) -> dict[str, Any]:
    return {
        b["tool_use_id"]: b["content"]
        for m in body["messages"]
        for b in (m["content"] if isinstance(m["content"], list) else [])
        if b.get("type") == "tool_result"
    }


def assert_extends(bodies: list[dict[str, Any]]) -> None:
    """Between two boundaries each request extends the previous one byte for byte."""
    for k in range(len(bodies) - 1):
        a = [json.dumps(m) for m in strip_cache_control(bodies[k]["messages"])]
        b = [json.dumps(m) for m in strip_cache_control(bodies[k + 1]["messages"])]
        assert b[: len(a)] == a, f"request {k + 1} rewrote what request {k} sent"


def wait_for_saved(xdg: Xdg, calls: int, column: str = "saved_masking") -> list[int]:
    """`column` of each recorded LLM call (recorded in the background after a response)."""
    rows: list[int] = []
    for _ in range(100):
        with sqlite3.connect(xdg.db) as db:
            rows = [r for (r,) in db.execute(f"SELECT {column} FROM llm_calls ORDER BY id")]
        if len(rows) >= calls:
            break
        time.sleep(0.1)
    assert len(rows) == calls
    return rows


def mask_events(xdg: Xdg) -> list[dict[str, Any]]:
    path = xdg.state / "ctxwrap" / "events.jsonl"
    events = [json.loads(line) for line in path.open()] if path.exists() else []
    return [e for e in events if e.get("event") == "mask"]


def test_a_pause_inside_the_one_hour_cache_masks_nothing(tmp_path: Path, xdg: Xdg) -> None:
    """Claude Code asks for the 1-hour cache (subscription logins): a pause past
    cache_ttl_s (3 s here, 5 minutes by default) leaves that cache warm, so it is no boundary:
    masking there would rewrite a warm prefix at the 1-hour write price (2x input)."""
    with conversation(xdg, TTL, tmp_path) as (conv, srv):
        conv.marker = {"type": "ephemeral", "ttl": "1h"}
        conv.prompt("task one: look at old.py")
        conv.read("toolu_old", "old.py", OLD)
        conv.answer("task one done")
        time.sleep(3.5)  # past cache_ttl_s, well inside the hour
        conv.prompt("task two: new.py")
        conv.prompt("and the tests?")
        wait_for_saved(xdg, calls=len(srv.main_requests))
        main = [r.body for r in srv.main_requests]
    assert mask_events(xdg) == []
    for body in main[2:]:
        assert results(body)["toolu_old"] == OLD
    assert_extends(main)
    # each call is recorded with the hour it asked for: the cost model prices it so
    with sqlite3.connect(xdg.db) as db:
        ttls = [r for (r,) in db.execute("SELECT cache_ttl_s FROM llm_calls ORDER BY id")]
    assert ttls == [3600.0] * len(main)


def test_the_plain_session_compacts_where_plain_claude_code_would(
    tmp_path: Path, xdg: Xdg, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The proxy tells the daemon the model's window and plain Claude Code's auto-compaction
    threshold (auto_compact.py; here a 100k compaction window lowered to 1 % by Claude Code's own
    variables), so the cost model's plain session compacts there instead of growing without
    bound."""
    monkeypatch.setenv("CLAUDE_CODE_AUTO_COMPACT_WINDOW", "100000")
    monkeypatch.setenv("CLAUDE_AUTOCOMPACT_PCT_OVERRIDE", "1")  # 800 of (100k less 20k)
    with conversation(xdg, WARM, tmp_path) as (conv, srv):
        conv.prompt("look at the three modules")
        conv.read("toolu_a", "old.py", OLD)
        conv.read("toolu_b", "new.py", NEW)
        conv.read("toolu_c", "third.py", THIRD)
        wait_for_saved(xdg, calls=len(srv.main_requests))
    with sqlite3.connect(xdg.db) as db:
        rows = list(
            db.execute(
                "SELECT model, context_window, compaction_enabled, reserve_tokens,"
                " keep_recent_tokens FROM session_models WHERE session_id=? ORDER BY id",
                (SID,),
            )
        )
        # after the model the session started with: once, with the window and threshold
        assert rows[-1] == ("anthropic/claude-test-model", 200_000, 1, 199_200, 0)
        assert sum(1 for r in rows if r[1] is not None) == 1
        costs = load_session_costs(db, [SID])[SID]
    plain_compactions = [c for _ts, _a, _p, c in costs.calls if c is not None]
    assert len(costs.calls) == 4 and plain_compactions, "plain never compacted"


@pytest.mark.serial
def test_idle_gap_masks_the_earlier_task_frozen_and_replayed(tmp_path: Path, xdg: Xdg) -> None:
    with (
        daemon_process(xdg, TTL),
        ScriptedModelServer([{"text": "ok"}] * 40) as srv,
    ):
        proxy = new_proxy(srv, xdg)
        conv = Conversation(proxy, tmp_path)
        try:
            conv.prompt("task one: look at old.py")
            conv.read("toolu_old", "old.py", OLD, reminder=True)
            conv.answer("task one done")
            n_before_gap = len(srv.main_requests)
            time.sleep(3.5)  # idle past the 3 s TTL
            # Neither a count_tokens call nor a side request without tools uses the
            # conversation's cache: they must not hide the gap.
            conv.messages.append(
                {"role": "user", "content": [{"type": "text", "text": "task two: new.py"}]}
            )
            conv.send("/v1/messages/count_tokens?beta=true")
            title = {"model": "claude-haiku", "max_tokens": 8, "messages": [
                {"role": "user", "content": "title for: task two"}]}  # fmt: skip
            conv.send(body=title)
            conv.send()  # the first main request after the gap: cold
            conv.read("toolu_new", "new.py", NEW)
            conv.answer("task two done")
            conv.prompt("and the tests?")  # warm: nothing more is masked
            # the title request is no agent call: it has no llm_calls row
            agent_calls = [r for r in srv.main_requests if r.body.get("tools")]
            saved = wait_for_saved(xdg, calls=len(agent_calls))
        finally:
            proxy.close()
        main = [r.body for r in srv.main_requests]
        count = [r.body for r in srv.all_requests if r.kind == "count_tokens"]

    before, after = main[:n_before_gap], [b for b in main[n_before_gap:] if b.get("tools")]
    assert "old-marker" in json.dumps(before[-1]["messages"])
    assert len(after) == 3
    tomb = results(after[0])["toolu_old"]
    assert isinstance(tomb, str) and tomb.startswith("[ctxwrap: ")
    assert "old.py" in tomb and "earlier task" in tomb
    assert "ctxwrap recall r" in tomb and "PATTERN" in tomb and "ctx_recall" not in tomb
    for body in after:
        assert "old-marker" not in json.dumps(body["messages"])
        assert results(body)["toolu_old"] == tomb
    # the current task's read stays whole; the view is frozen between boundaries
    assert results(after[1])["toolu_new"] == NEW and results(after[2])["toolu_new"] == NEW
    assert_extends(after)
    # count_tokens was answered on the view before the boundary (not yet masked)
    assert "old-marker" in json.dumps(count[0]["messages"])
    # Claude Code's cache marker is never moved: it is where Claude Code put it
    last_block = after[0]["messages"][-1]["content"][-1]
    assert last_block["cache_control"] == {"type": "ephemeral"}

    (event,) = mask_events(xdg)
    assert event["trigger"] == "idle" and event["gap_s"] > 3.0
    assert event["masks"][0][:2] == ["toolu_old", "earlier_task"]
    # the stats count the mask's saving (as history masking, as the pi bridge does) on each of
    # the three requests that carried it, and nothing on the others; none as the tagger's
    mask_saved = event["masks"][0][2]
    assert mask_saved > len(OLD) - 400
    assert sorted(saved) == [0] * (len(saved) - 3) + [mask_saved] * 3  # recorded in any order
    assert wait_for_saved(xdg, len(saved), "saved_amnesia") == [0] * len(saved)
    with sqlite3.connect(xdg.db) as db:
        assert list(db.execute("SELECT tool_call_id FROM edits WHERE kind='mask'")) == [
            ("toolu_old",)
        ]
        # the default 5-minute markers: the daemon's cache_ttl_s prices these calls
        assert list(db.execute("SELECT DISTINCT cache_ttl_s FROM llm_calls")) == [(None,)]
        handle = tomb.split("ctxwrap recall ")[1].split()[0]
        (stored,) = db.execute("SELECT tool_call_id FROM raw_outputs WHERE handle=?", (handle,))
        assert stored == ("toolu_old",)

    # `claude --continue` inside the TTL (a long one: a daemon restart takes a while): a new
    # proxy replays the same view and masks nothing new.
    with daemon_process(xdg, WARM), ScriptedModelServer([{"text": "ok"}] * 5) as srv2:
        proxy = new_proxy(srv2, xdg)
        conv.proxy = proxy
        try:
            conv.answer("tests look fine")
            conv.prompt("one more thing")
        finally:
            proxy.close()
        resumed = srv2.main_requests[0].body
    assert results(resumed) == results(after[-1])
    assert_extends([after[-1], resumed])
    assert len(mask_events(xdg)) == 1

    # ... and after a gap past the TTL, the state kept across processes makes it cold again:
    # now task two's read belongs to an earlier task.
    time.sleep(3.5)
    with daemon_process(xdg, TTL), ScriptedModelServer([{"text": "ok"}] * 5) as srv3:
        proxy = new_proxy(srv3, xdg)
        conv.proxy = proxy
        try:
            conv.answer("noted")
            conv.prompt("task three")
            conv.read("toolu_third", "third.py", THIRD, reminder=True)
            # A gap in the middle of task three: its own results stay whole (the reminder
            # riding along with a tool result starts no new task).
            time.sleep(3.5)
            conv.read("toolu_more", "new.py", NEW)
        finally:
            proxy.close()
        later = [r.body for r in srv3.main_requests]
    assert "new-marker" not in json.dumps(later[0]["messages"])
    assert results(later[0])["toolu_old"] == tomb
    assert results(later[1])["toolu_third"] == THIRD
    assert results(later[2])["toolu_third"] == THIRD and results(later[2])["toolu_more"] == NEW
    assert_extends(later)
    events = mask_events(xdg)
    assert len(events) == 2 and events[1]["masks"][0][:2] == ["toolu_new", "earlier_task"]
    state_dir = xdg.state / "ctxwrap" / "claude"
    for path in state_dir.iterdir():
        assert path.stat().st_mode & 0o777 == 0o600
        assert KEY.encode() not in path.read_bytes()


def test_a_warm_session_and_its_sub_agent_mask_nothing(tmp_path: Path, xdg: Xdg) -> None:
    """A sub-agent (its own first message and tools) interleaved with the main conversation
    is neither a head change nor a tool-set change for it; within the TTL nothing is masked."""
    with (
        daemon_process(xdg, WARM),
        ScriptedModelServer([{"text": "ok"}] * 40) as srv,
    ):
        proxy = new_proxy(srv, xdg)
        conv = Conversation(proxy, tmp_path)
        sub = Conversation(proxy, tmp_path)
        sub.tools = TOOLS[1:]
        try:
            conv.prompt("task one: look at old.py")
            conv.read("toolu_old", "old.py", OLD)
            conv.answer("task one done")
            sub.prompt("sub-agent: search the code")
            sub.read("toolu_sub", "third.py", THIRD)
            conv.prompt("task two")
            conv.read("toolu_new", "new.py", NEW)
        finally:
            proxy.close()
        main = [r.body for r in srv.main_requests if r.body["tools"] == TOOLS]
    assert all("old-marker" in json.dumps(b["messages"]) for b in main[1:])
    assert_extends(main)
    assert mask_events(xdg) == []


def _warm_session(tmp_path: Path, xdg: Xdg, env: dict[str, str]) -> list[dict[str, Any]]:
    """A read in the first task, then 20 short tasks in a warm cache: the requests sent."""
    with (
        daemon_process(xdg, {**WARM, "PI_CTX_MASK_WARM": "1", **env}),
        ScriptedModelServer([{"text": "ok"}] * 40) as srv,
    ):
        proxy = new_proxy(srv, xdg)
        conv = Conversation(proxy, tmp_path)
        try:
            conv.prompt("task one: look at old.py")
            conv.read("toolu_old", "old.py", OLD)
            conv.answer("task one done")
            for i in range(20):
                conv.prompt(f"task {i + 2}")
                conv.answer(f"done {i + 2}")
                wait_for_saved(xdg, calls=len(srv.main_requests))
        finally:
            proxy.close()
        return [r.body for r in srv.main_requests]


def test_a_warm_rewrite_bets_no_more_than_the_session_can_lose(tmp_path: Path, xdg: Xdg) -> None:
    """The same session with the account on (the default): nothing else saved, and the
    rewrite would put more at risk than a tenth of what plain has cost (mechanisms/budget.py),
    so the read stays whole in every request and no rewrite is paid."""
    main = _warm_session(tmp_path, xdg, {})
    carried = [i for i, b in enumerate(main) if "toolu_old" in results(b)]
    assert len(carried) > 15
    assert all("old-marker" in json.dumps(main[i]["messages"]) for i in carried)
    assert_extends(main)
    assert mask_events(xdg) == []


def test_warm_rewrite_only_with_mask_warm_and_once_it_pays(tmp_path: Path, xdg: Xdg) -> None:
    """`mask_warm` on: warm requests ask too, and the daemon masks once the rewrite pays back
    (the removed tokens x cache-read weight x expected calls exceed the suffix rewritten)."""
    # (the account's bound on a bet off: a session that saved nothing else; the next test)
    main = _warm_session(tmp_path, xdg, {"PI_CTX_REWRITE_WITHIN_SAVINGS": "false"})
    carried = [i for i, b in enumerate(main) if "toolu_old" in results(b)]
    whole = [i for i in carried if "old-marker" in json.dumps(main[i]["messages"])]
    # whole on the first warm requests, then masked once and for good
    assert whole == carried[: len(whole)] and 5 < len(whole) < len(carried)
    first = whole[-1] + 1
    assert_extends(main[:first])
    assert_extends(main[first:])
    (event,) = mask_events(xdg)
    assert event["trigger"] == "warm" and event["masks"][0][:2] == ["toolu_old", "earlier_task"]
    assert event["cost_tokens"] > 0  # a warm rewrite costs its extra cache write
