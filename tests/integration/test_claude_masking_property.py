"""Property test of the Claude Code proxy's masking, against a real daemon.

Generated multi-task conversations with idle gaps, re-reads, writes after reads, error results
and parallel rounds go through `ClaudeSession.prepare` (the proxy's request path) as Claude
Code would send them (reminders riding along with some results). An idle gap is made by moving
the session's recorded cache state back past the TTL (what the clock would have done). Checked
on every request: pairing intact, errors never masked, the latest round never masked, the
current task's reads masked only when superseded, between two cold boundaries every request
extends the previous one byte for byte, a re-requested result is kept, and at a boundary every
earlier task's read is masked (the policy runs at all).
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import daemon_process, make_xdg

from ctxwrap.agents._proxy import DaemonLink
from ctxwrap.agents.claude.session import ClaudeSession

TOOLS = [{"name": n, "input_schema": {"type": "object"}} for n in ("Bash", "Read", "Write")]
FILES = ["/w/a.py", "/w/b.py", "/w/c.py"]


def content(path: str, version: int) -> str:
    return "".join(f"{i:6d}\u2192{path} v{version} line {i} of text\n" for i in range(90))


Op = tuple[Any, ...]
ops = st.lists(
    st.one_of(
        st.just(("prompt",)),
        st.just(("gap",)),
        st.tuples(st.just("read"), st.sampled_from(FILES)),
        st.tuples(st.just("pair"), st.sampled_from(FILES), st.sampled_from(FILES)),
        st.tuples(st.just("error"), st.sampled_from(FILES)),
        st.tuples(st.just("write"), st.sampled_from(FILES)),
    ),
    min_size=3,
    max_size=14,
)


class Sim:
    def __init__(self, session: ClaudeSession) -> None:
        self.s = session
        self.messages: list[dict[str, Any]] = []
        self.n = 0
        self.versions = dict.fromkeys(FILES, 0)
        self.kind: dict[str, str] = {}  # id → read / error / write
        self.path: dict[str, str] = {}
        self.task_of: dict[str, int] = {}
        self.task = 0
        self.prev: list[str] | None = None
        self.cold_next = False
        self.masked_paths: set[str] = set()  # paths with a mask decided at a boundary
        self.kept_repeats: set[str] = set()  # reads issued after their path was masked

    def call(self, kind: str, path: str) -> tuple[dict[str, Any], dict[str, Any]]:
        cid = f"toolu_{self.n:03d}"
        self.n += 1
        name = {"read": "Read", "error": "Read", "write": "Write"}[kind]
        args: dict[str, Any] = {"file_path": path}
        if kind == "write":
            self.versions[path] += 1
            args["content"] = "x = 1\n"
        self.kind[cid], self.path[cid], self.task_of[cid] = kind, path, self.task
        if kind == "read" and path in self.masked_paths:
            self.kept_repeats.add(cid)
        text = content(path, self.versions[path])
        if kind == "read":
            self.s.handle_hook(
                {
                    "session_id": self.s.session_id,
                    "hook_event_name": "PostToolUse",
                    "tool_name": "Read",
                    "tool_use_id": cid,
                    "tool_input": {"file_path": path},
                    "tool_response": {"type": "text", "file": {"content": text}},
                }
            )
        use = {"type": "tool_use", "id": cid, "name": name, "input": args}
        result: dict[str, Any] = {"type": "tool_result", "tool_use_id": cid, "content": text}
        if kind == "error":
            result = {**result, "is_error": True}
        elif kind == "write":
            result["content"] = f"File created successfully at: {path}"
        return use, result

    def superseded(self, cid: str) -> bool:
        path = self.path[cid]
        return any(
            other > cid and self.path[other] == path and self.kind[other] in ("read", "write")
            for other in self.kind
        )

    def round(self, calls: list[tuple[str, str]]) -> None:
        pairs = [self.call(k, p) for k, p in calls]
        self.messages.append({"role": "assistant", "content": [u for u, _ in pairs]})
        blocks: list[dict[str, Any]] = [r for _, r in pairs]
        if self.n % 3 == 0:  # Claude Code's reminders ride along with results: no new task
            blocks.append({"type": "text", "text": "<system-reminder>x</system-reminder>"})
        self.messages.append({"role": "user", "content": blocks})
        self.request()

    def prompt(self) -> None:
        self.task += 1
        self.messages.append(
            {"role": "user", "content": [{"type": "text", "text": f"task {self.task}"}]}
        )
        self.request()

    def gap(self) -> None:
        with self.s.lock:
            self.s.conversations = {
                k: replace(v, at=v.at - 400.0) for k, v in self.s.conversations.items()
            }
        self.cold_next = True

    def request(self) -> None:
        body = {"model": "m", "system": [{"type": "text", "text": "sys"}], "tools": TOOLS,
                "messages": copy.deepcopy(self.messages)}  # fmt: skip
        self.s.prepare(body)
        sent = body["messages"]
        self.check(sent)
        now = [json.dumps(m) for m in sent]
        if self.prev is not None and not self.cold_next:
            assert now[: len(self.prev)] == self.prev, "a warm request rewrote the history"
        self.prev, self.cold_next = now, False

    def check(self, sent: list[dict[str, Any]]) -> None:
        uses: set[str] = set()
        original = {
            b["tool_use_id"]: b["content"]
            for m in self.messages
            for b in m["content"]
            if b.get("type") == "tool_result"
        }
        changed: set[str] = set()
        for m in sent:
            for b in m["content"]:
                if b.get("type") == "tool_use":
                    uses.add(b["id"])
                elif b.get("type") == "tool_result":
                    assert b["tool_use_id"] in uses, "a result without its call"
                    if b["content"] != original[b["tool_use_id"]]:
                        changed.add(b["tool_use_id"])
        for cid in changed:
            assert self.kind[cid] == "read", f"{self.kind[cid]} result {cid} changed"
            if self.task_of[cid] == self.task:  # the current task: only a superseded read
                assert self.superseded(cid), f"current task's {cid} was masked"
            assert cid not in self.kept_repeats, f"re-requested {cid} was masked"
            text = sent_text(sent, cid)
            assert text.startswith("[ctxwrap: ") and "ctxwrap recall r" in text
        if sent[-1]["content"][0].get("type") == "tool_result":
            last_round = {b["id"] for b in sent[-2]["content"] if b.get("type") == "tool_use"}
            assert not changed & last_round, "the latest round was masked"
        if self.cold_next:
            # At the boundary every earlier task's read whose path was never masked before is
            # masked now (the newest task's own results may stay whole).
            current = self.task
            for cid, kind in self.kind.items():
                if kind == "read" and self.task_of[cid] < current and cid not in self.kept_repeats:
                    assert cid in changed or self.path[cid] in self.masked_paths, cid
            self.masked_paths |= {self.path[c] for c in changed}


def sent_text(sent: list[dict[str, Any]], cid: str) -> str:
    for m in sent:
        for b in m["content"]:
            if b.get("type") == "tool_result" and b["tool_use_id"] == cid:
                return str(b["content"])
    raise AssertionError(cid)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(program=ops)
def test_masking_properties_over_generated_sessions(
    program: list[Op], shared: tuple[DaemonLink, Path]
) -> None:
    link, state = shared
    sid = f"prop-{os.urandom(6).hex()}"
    session = ClaudeSession(
        sid,
        daemon=link,
        state_file=state / f"{sid}.jsonl",
        aux=None,
        start_info={"cwd": "/w", "pid": os.getpid(), "agent": "claude"},
    )
    sim = Sim(session)
    sim.prompt()
    for op in program:
        if op[0] == "prompt":
            sim.prompt()
        elif op[0] == "gap":
            sim.gap()
        elif op[0] == "pair":
            sim.round([("read", op[1]), ("read", op[2])])
        else:
            sim.round([(op[0], op[1])])


@pytest.fixture(scope="module")
def shared() -> Iterator[tuple[DaemonLink, Path]]:
    root = Path(tempfile.mkdtemp(prefix="ctxwrap-claude-prop-"))
    xdg = make_xdg(root)
    try:
        # the cold-boundary rules before issue 21 (earlier tasks, stale reads, no warm masking)
        rules = {"PI_CTX_MASK_EARLIER_TASKS": "1", "PI_CTX_MASK_WARM": "0",
                 "PI_CTX_MASK_STALE_READS": "1", "PI_CTX_MASK_OLDER_ROUNDS": "0",
                 "PI_CTX_MASK_READ_IDLE_ROUNDS": "0"}  # fmt: skip
        with daemon_process(xdg, {"PI_CTX_AUX_BACKEND": "none", **rules}):
            link = DaemonLink(xdg.socket)
            yield link, root / "claude"
            link.close()
    finally:
        shutil.rmtree(xdg.runtime, ignore_errors=True)
        shutil.rmtree(root, ignore_errors=True)
