"""`ctxwrap replay` on rollouts the real Codex CLI 0.171 writes against the scripted Responses
server: one LLM call per request the server received, the provider usage of each, shell reads
as reads, the added file as a write; the same script under `ctxwrap codex` is flagged as a
session that already ran under ctxwrap.

Needs the Responses side of the scripted server and `ctxwrap.testing.codex_home` (branch
`codex`); skipped until both are there.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from support import CTXWRAP, Xdg

from ctxwrap.replay._events import Message, ReadStats
from ctxwrap.replay._read import ctxwrap_known_sessions, read_session
from ctxwrap.testing.model_server import ScriptedModelServer

codex_home = pytest.importorskip(
    "ctxwrap.testing.codex_home", reason="needs ctxwrap.testing.codex_home (branch codex)"
)

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(codex_home.find_codex() is None, reason="codex is not installed"),
]

NOTES = "".join(f"- item {i}: the parking rota for week {i}\n" for i in range(300))
PATCH = "*** Begin Patch\n*** Add File: big.txt\n"
PATCH += "".join(f"+row {i}: the quick brown fox\n" for i in range(200)) + "*** End Patch\n"
STEPS = [
    {"tool_calls": [{"name": "exec_command", "arguments": {"cmd": "seq 1 3000"}}]},
    {"tool_calls": [{"name": "exec_command", "arguments": {"cmd": "cat notes.txt"}}]},
    {"tool_calls": [{"name": "apply_patch", "arguments": PATCH}]},
    {"text": "all done"},
]


# The added file's strip is off under Codex by default (`write = "auto"`): these tests check
# that replay and the live proxy agree on it, so both run with it on.
WRITE_ON = {"PI_CTX_WRITE": "1"}


def _run(
    tmp_path: Path,
    xdg: Xdg,
    *,
    wrapped: bool,
    steps: list[dict[str, Any]] = STEPS,
    files: dict[str, str] | None = None,
    env_extra: dict[str, str] = WRITE_ON,
) -> tuple[Path, ScriptedModelServer]:
    work = tmp_path / "work"
    work.mkdir(parents=True)
    for name, text in (files or {"notes.txt": NOTES}).items():
        (work / name).write_text(text)
    home = tmp_path / "home"
    with ScriptedModelServer(steps) as srv:
        env = codex_home.codex_env(
            xdg.env({**os.environ, **env_extra}), home=home, base_url=srv.base_url
        )
        exe = [*CTXWRAP, "codex"] if wrapped else [env.get("CTXWRAP_CODEX", "codex")]
        proc = subprocess.run(
            [*exe, *codex_home.codex_exec_args("look at the notes")],
            cwd=work,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
    [rollout] = sorted((home / ".codex" / "sessions").rglob("rollout-*.jsonl"))
    return rollout, srv


def _ctxwrap_json(xdg: Xdg, *args: str, env_extra: dict[str, str] = WRITE_ON) -> Any:
    """`ctxwrap ARGS` (a --json command) under the test's XDG dirs, its output decoded."""
    out = subprocess.run(
        [*CTXWRAP, *args],
        env=xdg.env({**os.environ, **env_extra}),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_replay_of_a_real_codex_rollout(tmp_path: Path, xdg: Xdg) -> None:
    rollout, srv = _run(tmp_path / "plain", xdg, wrapped=False)
    reqs = srv.main_requests
    assert len(reqs) == len(STEPS)
    stats = ReadStats()
    evs = list(read_session(rollout, stats, known_sessions=()))
    assert stats.skipped == {} and stats.ran_under_ctxwrap is None
    asst = []
    for e in evs:
        if (
            isinstance(e, Message)
            and e.role == "assistant"
            and e.request_key not in {a.request_key for a in asst}
        ):
            asst.append(e)
    assert len(asst) == len(reqs)
    # the provider usage the rollout recorded is what the server answered
    assert [a.usage_prompt_tokens for a in asst] == [
        r.usage["input_tokens"] if r.usage else None for r in reqs
    ]
    kinds = [(c.agent_tool or c.name, c.name) for a in asst for c in a.calls]
    assert kinds == [("exec_command", "bash"), ("exec_command", "read"), ("apply_patch", "write")]
    # each call's context, as replay rebuilds it, against the input the server received
    doc = _ctxwrap_json(xdg, "replay", "--json", "--per-call", str(rollout))
    [s] = doc["groups"]
    assert s["format"] == "codex" and s["llm_calls"] == len(reqs)
    assert s["interventions"]["digest"] == 1 and s["interventions"]["strip"] == 1
    # Codex 0.171 sends its base instructions as the first input message; the rollout keeps
    # them (templated slightly differently) in session_meta: replay counts them with the fixed
    # prefix (system, estimated from the first call's usage), not among the messages
    meta = json.loads(rollout.read_text().splitlines()[0])["payload"]
    base = (meta.get("base_instructions") or {}).get("text")

    def text(item: dict[str, object]) -> int:
        if item.get("type") == "message":
            parts = item.get("content") or []
            assert isinstance(parts, list)
            body = "".join(str(c.get("text", "")) for c in parts)
            return 0 if base and body[:200] == base[:200] else len(body)
        if item.get("type") == "function_call":
            return len(str(item.get("name"))) + len(str(item.get("arguments")))
        if item.get("type") == "custom_tool_call":
            return len(str(item.get("name"))) + len(str(item.get("input")))
        return len(str(item.get("output", "")))

    for call, req in zip(s["calls"], reqs, strict=True):
        sent = sum(text(i) for i in req.body["input"] if i.get("type") != "reasoning")
        assert abs(call["messages_chars"] - sent) <= 0.02 * sent + 50, (call["index"], sent)


def test_a_codex_rollout_under_ctxwrap_is_flagged(tmp_path: Path, xdg: Xdg) -> None:
    rollout, _ = _run(tmp_path / "wrapped", xdg, wrapped=True)
    # the proxy edits requests, not the rollout Codex writes: the daemon's database knows it
    known = ctxwrap_known_sessions(xdg.state / "ctxwrap" / "ctxwrap.db")
    stats = ReadStats()
    list(read_session(rollout, stats, known_sessions=known))
    assert stats.ctxwrap == {"its session is in ctxwrap's database": 1}


def test_replay_of_plain_codex_agrees_with_what_ctxwrap_codex_saved(
    tmp_path: Path, xdg: Xdg
) -> None:
    """Issue 42: live and replay run the same mechanism objects, so the replay of plain
    Codex's rollout and `ctxwrap stats` of the same script under `ctxwrap codex` agree on
    what each mechanism kept out (the digest of `seq`, the added file's strip) and on the
    calls."""
    plain, _ = _run(tmp_path / "plain", xdg, wrapped=False)
    _run(tmp_path / "wrapped", xdg, wrapped=True)
    replay = _ctxwrap_json(xdg, "replay", "--json", str(plain))["totals"]
    sessions = _ctxwrap_json(xdg, "sessions", "--all", "--json")["sessions"]
    [live_id] = [s["session_id"] for s in sessions if s.get("agent") == "codex"]
    live = _ctxwrap_json(xdg, "stats", "--session", live_id, "--json")["totals"]
    assert replay["llm_calls"] == live["llm_calls"] == len(STEPS)
    by_replay = {m["mechanism"]: m["saved_chars"] for m in replay["mechanisms"]}
    by_live = {m["mechanism"]: m["saved_chars"] for m in live["mechanisms"]}
    for mech in ("bash", "writes"):
        assert by_live[mech] > 0, (mech, by_live)
        assert abs(by_replay[mech] - by_live[mech]) <= 0.10 * by_live[mech], (
            mech,
            by_replay[mech],
            by_live[mech],
        )


APP = "# the app\n" + "".join(f"def handler_{i}(): return {i}  # app-marker\n" for i in range(80))
APP_PATCH = (
    "*** Begin Patch\n*** Update File: app.py\n@@\n-def handler_0(): return 0  # app-marker\n"
    "+def handler_0(): return 100  # patched\n*** End Patch\n"
)
READ = {"name": "exec_command", "arguments": {"cmd": "sed -n '1,200p' app.py"}}
MASK_STEPS: list[dict[str, Any]] = [
    {"tool_calls": [READ]},
    {"tool_calls": [{"name": "apply_patch", "arguments": APP_PATCH}]},
    {"tool_calls": [READ]},
    # answered after the cache's lifetime: the request after it is cold
    {"tool_calls": [{"name": "exec_command", "arguments": {"cmd": "echo ok"}}], "delay_s": 2.5},
    {"text": "patched"},
]


def test_replay_of_plain_codex_masks_the_shell_read_ctxwrap_codex_masked(
    tmp_path: Path, xdg: Xdg
) -> None:
    """A read through the shell, a patch of its file, the same read again, a cold boundary:
    `ctxwrap codex` masks the first read (superseded), and replay of plain Codex's rollout
    masks it too, by as much. Before, replay masked it and the proxy, which described a shell
    read without its file, did not."""
    env = {"PI_CTX_CACHE_TTL_S": "2"}
    files = {"app.py": APP}
    plain, _ = _run(tmp_path / "plain", xdg, wrapped=False, steps=MASK_STEPS, files=files,
                    env_extra=env)  # fmt: skip
    _run(tmp_path / "wrapped", xdg, wrapped=True, steps=MASK_STEPS, files=files, env_extra=env)
    replay = _ctxwrap_json(xdg, "replay", "--json", str(plain), env_extra=env)["totals"]
    sessions = _ctxwrap_json(xdg, "sessions", "--all", "--json", env_extra=env)["sessions"]
    [live_id] = [s["session_id"] for s in sessions if s.get("agent") == "codex"]
    live = _ctxwrap_json(xdg, "stats", "--session", live_id, "--json", env_extra=env)["totals"]
    assert replay["llm_calls"] == live["llm_calls"] == len(MASK_STEPS)
    by_replay = {m["mechanism"]: m["saved_chars"] for m in replay["mechanisms"]}
    by_live = {m["mechanism"]: m["saved_chars"] for m in live["mechanisms"]}
    assert by_replay["masking"] > 3000 and by_live["masking"] > 3000, (by_replay, by_live)
    assert abs(by_replay["masking"] - by_live["masking"]) <= 0.10 * by_live["masking"], (
        by_replay,
        by_live,
    )
