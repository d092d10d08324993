"""Claude Code adapter pieces with plain data: the wire layer, the hook client, the session."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

from ctxwrap.agents.claude import anthropic_wire as wire
from ctxwrap.agents.claude.hook import run_hook
from ctxwrap.agents.claude.launcher import hook_settings, merged_settings, split_settings_arg
from ctxwrap.agents.claude.session import ClaudeSession, DaemonLink, recall_hint
from ctxwrap.engine.edits import StripWriteEdit, TombstoneEdit, describe_tail, tail_ids

MESSAGES: list[dict[str, Any]] = [
    {"role": "user", "content": [{"type": "text", "text": "go"}]},
    {"role": "system", "content": "agent types"},
    {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "two"},
            {"type": "tool_use", "id": "t1", "name": "Read", "input": {"file_path": "/a"}},
            {
                "type": "tool_use",
                "id": "t2",
                "name": "Write",
                "input": {"file_path": "/b", "content": "x" * 500},
            },
        ],
    },
    {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": "1\thello"},
            {
                "type": "tool_result",
                "tool_use_id": "t2",
                "content": "File created",
                "is_error": False,
                "cache_control": {"type": "ephemeral"},
            },
        ],
    },
]


def test_to_neutral_maps_names_and_shapes_for_the_engine() -> None:
    neutral = wire.to_neutral(MESSAGES)
    assert [m["role"] for m in neutral] == [
        "user",
        "system",
        "assistant",
        "toolResult",
        "toolResult",
    ]
    calls = neutral[2]["content"]
    assert [c.get("name") for c in calls] == [None, "read", "write"]
    assert calls[2]["arguments"] == {"path": "/b", "content": "x" * 500}
    assert neutral[3] == {
        "role": "toolResult",
        "toolCallId": "t1",
        "toolName": "read",
        "content": [{"type": "text", "text": "1\thello"}],
        "isError": False,
    }
    tail = describe_tail(neutral, set())
    assert tail_ids(tail) == {"t1", "t2"}
    [write] = [c for m in tail.messages for c in m.toolCalls or () if c.name == "write"]
    assert (write.writePath, write.writeContentBytes) == ("/b", 500)


def test_apply_edits_touches_only_the_edited_key() -> None:
    body = {"messages": json.loads(json.dumps(MESSAGES))}
    edits = {
        "t1": [TombstoneEdit(toolCallId="t1", text="[gone]")],
        "t2": [
            StripWriteEdit(toolCallId="t2", text="[stub]"),
            TombstoneEdit(toolCallId="t2", text="T"),
        ],
    }
    applied = wire.apply_edits(body, edits)
    assert len(applied) == 3
    result = body["messages"][3]["content"]
    assert result[0] == {"type": "tool_result", "tool_use_id": "t1", "content": "[gone]"}
    assert result[1]["cache_control"] == {"type": "ephemeral"} and result[1]["is_error"] is False
    assert body["messages"][2]["content"][2]["input"] == {"file_path": "/b", "content": "[stub]"}
    # nothing else changed
    assert body["messages"][:2] == MESSAGES[:2]
    again = json.loads(json.dumps(body))
    wire.apply_edits(again, edits)
    assert again == body  # replay is idempotent and byte-stable


def test_session_id_is_validated_as_a_name() -> None:
    assert wire.session_id_of({"x-claude-code-session-id": "ab-12"}, {}) == "ab-12"
    assert wire.session_id_of({"x-claude-code-session-id": "../../etc"}, {}) is None
    meta = {"metadata": {"user_id": json.dumps({"session_id": "s-1"})}}
    assert wire.session_id_of({}, meta) == "s-1"


def test_encode_body_is_compact_and_keeps_unicode() -> None:
    assert wire.encode_body({"a": "é", "b": [1, 2]}) == '{"a":"é","b":[1,2]}'.encode()


def test_recall_hint_names_the_cli() -> None:
    text = 'hidden; recall with ctx_recall(handle="r0a1b2c3d", pattern=...)]'
    assert recall_hint(text) == "hidden; recall with `ctxwrap recall r0a1b2c3d PATTERN`]"


def test_hook_without_a_proxy_prints_nothing() -> None:
    out = io.StringIO()
    event = json.dumps({"tool_name": "Bash", "tool_use_id": "t"}).encode()
    assert run_hook(io.BytesIO(event), out, env={}) == 0
    assert out.getvalue() == ""
    # a non-loopback URL is never contacted (hostile env or config): nothing happens
    env = {"CTXWRAP_CLAUDE_HOOK": "http://example.com:80/s/_ctxwrap/hook"}
    assert run_hook(io.BytesIO(event), out, env=env) == 0
    assert out.getvalue() == ""
    # nothing listening: fail open, fast
    env = {"CTXWRAP_CLAUDE_HOOK": "http://127.0.0.1:9/s/_ctxwrap/hook"}
    assert run_hook(io.BytesIO(event), out, env=env) == 0
    assert out.getvalue() == ""


def test_user_settings_are_merged_not_replaced(tmp_path: Path) -> None:
    user = {"model": "x", "hooks": {"PostToolUse": [{"matcher": "Edit", "hooks": []}]}}
    f = tmp_path / "s.json"
    f.write_text(json.dumps(user))
    rest, value = split_settings_arg(["-p", "hi", "--settings", str(f), "--verbose"])
    assert rest == ["-p", "hi", "--verbose"] and value == str(f)
    merged = merged_settings(value, hook_settings("HOOK"))
    assert merged["model"] == "x"
    post = merged["hooks"]["PostToolUse"]
    assert post[0]["matcher"] == "Edit" and post[1]["hooks"][0]["command"] == "HOOK"
    assert merged["hooks"]["PreToolUse"][0]["matcher"] == "Bash"
    assert split_settings_arg(["--settings={}", "--", "--settings", "x"]) == (
        ["--", "--settings", "x"],
        "{}",
    )


def _session(tmp_path: Path) -> ClaudeSession:
    sess = ClaudeSession(
        "s", daemon=DaemonLink(None), state_file=tmp_path / "s.jsonl", aux=None, start_info={}
    )
    sess.registered = True  # as if the daemon had answered
    return sess


def test_wrapped_bash_reports_its_exit_status_and_is_unwrapped(tmp_path: Path) -> None:
    sess = _session(tmp_path)
    pre = sess.handle_hook(
        {
            "hook_event_name": "PreToolUse",
            "tool_name": "Bash",
            "tool_use_id": "b1",
            "tool_input": {"command": "make test", "description": "d"},
        }
    )
    wrapped = pre["hookSpecificOutput"]["updatedInput"]
    assert wrapped["description"] == "d"
    assert wrapped["command"].startswith("{ make test\n}; ")
    # a small failing output: unwrapped to what plain Claude Code shows, no digest
    marker = f"\n{sess.exit_marker} 2\n"
    post = sess.handle_hook(
        {
            "hook_event_name": "PostToolUse",
            "tool_name": "Bash",
            "tool_use_id": "b1",
            "tool_input": wrapped,
            "tool_response": {"stdout": "boom" + marker, "stderr": "", "interrupted": False},
        }
    )
    out = post["hookSpecificOutput"]["updatedToolOutput"]
    assert out == {"stdout": "Exit code 2\nboom", "stderr": "", "interrupted": False}
    # output that merely prints a marker-like line is not taken for ours
    forged = "CTXWRAP-EXIT-000000000000 0"
    assert sess._exit_status("x\n" + forged) == ("x\n" + forged, None)


def test_no_wrap_while_the_daemon_is_unknown(tmp_path: Path) -> None:
    sess = _session(tmp_path)
    sess.registered = False
    event = {
        "hook_event_name": "PreToolUse",
        "tool_name": "Bash",
        "tool_use_id": "b1",
        "tool_input": {"command": "ls"},
    }
    assert sess.handle_hook(event) == {}
    sess.registered = True
    assert sess.handle_hook(event) != {}
    background = {**event, "tool_input": {"command": "ls", "run_in_background": True}}
    assert sess.handle_hook(background) == {}


def test_daemon_down_above_the_cap_gives_head_and_tail(tmp_path: Path) -> None:
    sess = _session(tmp_path)
    saved = tmp_path / "proj" / "tool-results" / "abc.txt"
    saved.parent.mkdir(parents=True)
    lines = [f"line {i}" for i in range(20000)] + ["= 3 failed, 9 passed ="]
    saved.write_text("\n".join(lines) + f"\n\n{sess.exit_marker} 1\n")
    post = sess.handle_hook(
        {
            "hook_event_name": "PostToolUse",
            "tool_name": "Bash",
            "tool_use_id": "b9",
            "tool_input": {"command": "wrapped"},
            "tool_response": {
                "stdout": "\n".join(lines)[:30000],
                "stderr": "",
                "persistedOutputPath": str(saved),
                "persistedOutputSize": saved.stat().st_size,
            },
        }
    )
    out = post["hookSpecificOutput"]["updatedToolOutput"]
    assert "persistedOutputPath" not in out
    text = out["stdout"]
    assert text.startswith("Exit code 1\nline 0\n")
    assert text.rstrip().endswith("= 3 failed, 9 passed =")
    assert sess.exit_marker not in text
    assert len(text) < 6000


def test_doctor_checks_claude(monkeypatch: Any) -> None:
    import pytest

    from ctxwrap.agents.claude.doctor_check import check_claude
    from ctxwrap.testing.claude_home import find_claude

    monkeypatch.delenv("CTXWRAP_CLAUDE", raising=False)
    real = find_claude()
    monkeypatch.setenv("CTXWRAP_CLAUDE", "/nonexistent/claude")
    [missing] = check_claude()
    assert (missing.name, missing.level) == ("claude", "warn")
    if real is None:
        pytest.skip("claude not installed")
    monkeypatch.setenv("CTXWRAP_CLAUDE", str(real))
    checks = check_claude()
    assert [(c.name, c.level) for c in checks] == [
        ("claude", "ok"),
        ("claude proxy", "ok"),
        ("claude hook", "ok"),
    ]
    assert "2.1." in checks[0].summary


def test_the_hook_command_starts_without_the_cli_framework(tmp_path: Path) -> None:
    """`ctxwrap hook claude` runs twice per Bash call: it must not pay click's import."""
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "ctxwrap", "hook", "claude"],
        input=b"{}",
        capture_output=True,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        timeout=60,
    )
    assert proc.returncode == 0 and proc.stdout == b""  # no proxy: nothing, exit 0
    imported = {line.split("|")[-1].strip() for line in proc.stderr.decode().splitlines()}
    assert "ctxwrap.agents.claude.hook" in imported
    assert "click" not in imported and "ctxwrap.cli" not in imported
