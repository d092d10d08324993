"""Claude Code adapter pieces with plain data: the wire layer, the hook client, the session."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path
from typing import Any

import pytest

from ctxwrap.agents._proxy import DaemonLink
from ctxwrap.agents._proxy.cache_state import head_key
from ctxwrap.agents.claude import anthropic_wire as wire
from ctxwrap.agents.claude.hook import run_hook
from ctxwrap.agents.claude.launcher import (
    hook_command,
    hook_settings,
    lifecycle_settings,
    merged_settings,
    split_settings_arg,
)
from ctxwrap.agents.claude.session import ClaudeSession, recall_hint
from ctxwrap.engine.edits import (
    Edit,
    MaskEdit,
    StripEditEdit,
    StripWriteEdit,
    TombstoneEdit,
    describe_tail,
    tail_ids,
)

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
    neutral = wire.to_neutral(MESSAGES).messages
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


def test_an_edit_strip_replaces_old_string_only_in_edit_and_multiedit() -> None:
    old = "a line the edit replaced\n" * 20
    body: dict[str, Any] = {
        "messages": [
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": "e1", "name": "Edit",
                     "input": {"file_path": "/a", "old_string": old, "new_string": "n",
                               "replace_all": False}},
                    {"type": "tool_use", "id": "e2", "name": "MultiEdit",
                     "input": {"file_path": "/b", "edits": [
                         {"old_string": "short", "new_string": "s"},
                         {"old_string": old, "new_string": "m"}]},
                     "cache_control": {"type": "ephemeral"}},
                ],
            }
        ]
    }  # fmt: skip
    edits: dict[str, list[Edit]] = {
        cid: [StripEditEdit(toolCallId=cid, text="[gone]", minChars=200)] for cid in ("e1", "e2")
    }
    assert len(wire.apply_edits(body, edits)) == 2
    first, second = body["messages"][0]["content"]
    assert first["input"] == {
        "file_path": "/a", "old_string": "[gone]", "new_string": "n", "replace_all": False
    }  # fmt: skip
    assert second["input"]["edits"] == [
        {"old_string": "short", "new_string": "s"},
        {"old_string": "[gone]", "new_string": "m"},
    ]
    assert second["cache_control"] == {"type": "ephemeral"}


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


def bash_succeeded(cid: str, command: str, stdout: str) -> dict[str, Any]:
    """Claude Code's PostToolUse event for a Bash command it counts as succeeded."""
    return {
        "hook_event_name": "PostToolUse",
        "tool_name": "Bash",
        "tool_use_id": cid,
        "tool_input": {"command": command},
        "tool_response": {"stdout": stdout, "stderr": "", "interrupted": False},
    }


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
    assert "PreToolUse" not in merged["hooks"]
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


class FakeDaemon(DaemonLink):
    """Answers /v1/tool_result with a digest and /v1/context with no edits, registration with
    `config`; records calls."""

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        super().__init__(None)
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.config = config or {}

    def call(
        self, path: str, body: dict[str, Any], timeout: float, *, retry: bool = True
    ) -> dict[str, Any] | None:
        self.calls.append((path, body))
        if path == "/v1/tool_result":
            return {"action": "replace", "text": f"[digest of {len(body['text'])} chars]"}
        if path == "/v1/sessions/start":
            return {"config": self.config}
        return {"edits": []}


def _bash_round(cid: str, command: str, result: dict[str, Any]) -> dict[str, Any]:
    tool_use = {"type": "tool_use", "id": cid, "name": "Bash", "input": {"command": command}}
    return {
        "model": "m",
        "tools": [{"name": "Bash"}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "go"}]},
            {"role": "assistant", "content": [tool_use]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": cid, **result}]},
        ],
    }


def test_no_bash_command_is_ever_rewritten(tmp_path: Path) -> None:
    """Claude Code's permission rules must see the model's own command (issue 20)."""
    settings = hook_settings("HOOK")["hooks"]
    assert "PreToolUse" not in settings
    assert "Bash" in settings["PostToolUse"][0]["matcher"].split("|")
    assert "Bash" in settings["PostToolUseFailure"][0]["matcher"].split("|")
    # a PreToolUse event (a settings file of an older ctxwrap) gets no answer at all
    sess = _session(tmp_path)
    event = {
        "hook_event_name": "PreToolUse",
        "tool_name": "Bash",
        "tool_use_id": "b1",
        "tool_input": {"command": "seq 1 5"},
    }
    assert sess.handle_hook(event) == {}


def test_small_bash_output_is_claude_codes_own(tmp_path: Path) -> None:
    sess = ClaudeSession("s", daemon=FakeDaemon(), state_file=None, aux=None, start_info={})
    assert sess.handle_hook(bash_succeeded("b1", "echo hi", "hi")) == {}
    failed = {
        "hook_event_name": "PostToolUseFailure",
        "tool_name": "Bash",
        "tool_use_id": "b2",
        "tool_input": {"command": "false"},
        "error": "Exit code 2\nboom",
    }
    assert sess.handle_hook(failed) == {}
    body = _bash_round("b2", "false", {"content": "Exit code 2\nboom", "is_error": True})
    sess.prepare({**body, "messages": body["messages"][:1]})
    want = json.loads(json.dumps(body))
    assert sess.prepare(body) == []
    assert body == want  # "Exit code 2" stays an error, as plain Claude Code sent it


def test_a_short_bash_output_is_kept_for_recall_off_the_hooks_path() -> None:
    """Under the digest threshold and over `mask_min_chars`: Claude Code's own output stays
    (the hook answers nothing at once), and the daemon is asked to store it behind a recall
    handle in the background, so masking may take it once old. Not with masking off, not for
    a shorter output."""
    listing = "".join(f"module_{i:03d}  ok\n" for i in range(80))  # 1,120 chars, 280 tokens

    for cfg, stored in (({}, True), ({"mask": False}, False), ({"mask_min_chars": 5000}, False)):
        daemon = FakeDaemon(cfg)
        sess = ClaudeSession("s", daemon=daemon, state_file=None, aux=None, start_info={})
        assert sess.handle_hook(bash_succeeded("b1", "make modules", listing)) == {}
        deadline = time.monotonic() + 5
        while stored and not daemon.calls and time.monotonic() < deadline:
            time.sleep(0.01)
        if not stored:
            time.sleep(0.2)  # a background store would have been sent by now
        sent = [b for p, b in daemon.calls if p == "/v1/tool_result"]
        assert bool(sent) is stored
        if stored:
            assert sent[0]["text"] == listing and sent[0]["input"] == {"command": "make modules"}


def test_large_bash_outputs_are_digested_with_their_own_status(tmp_path: Path) -> None:
    daemon = FakeDaemon()
    sess = ClaudeSession("s", daemon=daemon, state_file=None, aux=None, start_info={})
    big = "".join(f"line {i}\n" for i in range(2000))
    ok = bash_succeeded("b1", "seq 1 2000", big)
    out = sess.handle_hook(ok)["hookSpecificOutput"]["updatedToolOutput"]
    assert out == {"stdout": f"[digest of {len(big)} chars]", "stderr": "", "interrupted": False}
    [(_, req)] = [c for c in daemon.calls if c[0] == "/v1/tool_result"]
    assert (req["is_error"], req["exit_code"], req["input"]) == (
        False,
        None,
        {"command": "seq 1 2000"},
    )
    # a failing one: digested now, applied to the tool_result when it is first sent
    error = "Exit code 1\n" + big[:10_000]
    failed = {
        "hook_event_name": "PostToolUseFailure",
        "tool_name": "Bash",
        "tool_use_id": "b2",
        "tool_input": {"command": "make test"},
        "error": error,
    }
    assert sess.handle_hook(failed) == {}
    req = [c for c in daemon.calls if c[0] == "/v1/tool_result"][-1][1]
    assert (req["is_error"], req["exit_code"], req["text"]) == (True, 1, big[:10_000])
    body = _bash_round("b2", "make test", {"content": error, "is_error": True})
    sess.prepare({**body, "messages": body["messages"][:1]})  # the session's first request
    [edit] = sess.prepare(body)
    block = body["messages"][2]["content"][0]
    assert block["content"] == "[digest of 10000 chars]"
    assert block["is_error"] is True  # the agent's own flag, untouched
    assert edit.savedChars == len(error) - len(block["content"])


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
    assert [(c.name, c.level) for c in checks[:3]] == [
        ("claude", "ok"),
        ("claude proxy", "ok"),
        ("claude hook", "ok"),
    ]  # then recall (test_claude_recall_permission.py) and what differs from plain Claude
    # Code (test_claude_launch_same_agent.py)
    assert checks[3].name == "claude recall"
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


def test_side_requests_are_no_agent_calls(tmp_path: Path) -> None:
    """The interactive title request (no tools) is paid for but is not a call of the agent."""
    daemon = FakeDaemon()
    sess = ClaudeSession("s", daemon=daemon, state_file=None, aux=None, start_info={})
    usage = wire.Usage(input_tokens=10, output_tokens=2, model="claude-x", seen=True)
    title = {"model": "claude-x", "system": "Generate a concise title", "messages": []}
    sess.record_call(title, [], usage)
    main = {**title, "tools": [{"name": "Bash"}]}
    sess.record_call(main, [], usage)
    sess.record_call(main, [], usage)
    calls = [b for p, b in daemon.calls if p == "/v1/llm_call"]
    turns = [b for p, b in daemon.calls if p == "/v1/turn_end"]
    assert [c["call_index"] for c in calls] == [0, 1]
    assert [t["turn_index"] for t in turns] == [0, 1, 2]
    assert turns[0]["input_tokens"] == 10


def test_first_party_is_claude_codes_own_test() -> None:
    from ctxwrap.agents.claude.launcher import first_party_env, talks_to_anthropic

    yes = [
        "",
        "https://api.anthropic.com",
        "https://API.anthropic.com:443/",
        "http://api.anthropic.com:80",
    ]
    no = [
        "https://api.anthropic.com:8443",
        "https://api.anthropic.com.example.org",
        "http://127.0.0.1:8080",
        "not a url",
    ]
    for base in yes:
        assert talks_to_anthropic({"ANTHROPIC_BASE_URL": base}), base
    for base in no:
        assert not talks_to_anthropic({"ANTHROPIC_BASE_URL": base}), base
    assert not talks_to_anthropic({"CLAUDE_CODE_USE_BEDROCK": "1"})
    assert talks_to_anthropic({"CLAUDE_CODE_USE_BEDROCK": "0"})
    assert first_party_env({}) == {"ENABLE_TOOL_SEARCH": "true"}
    assert first_party_env({"ENABLE_TOOL_SEARCH": "0"}) == {}  # theirs
    # empty is unset to Claude Code: tool search on at Anthropic's endpoint
    assert first_party_env({"ENABLE_TOOL_SEARCH": ""}) == {"ENABLE_TOOL_SEARCH": "true"}


def test_the_model_and_window_reach_the_daemon_once_and_again_after_a_miss(
    tmp_path: Path,
) -> None:
    """The cost model's plain compaction needs the window: told once per model and window,
    again when the daemon did not take it (down) or lost the session (409 → register again)."""

    class Flaky(FakeDaemon):
        down = True

        def call(
            self, path: str, body: dict[str, Any], timeout: float, *, retry: bool = True
        ) -> dict[str, Any] | None:
            if path == "/v1/sessions/model" and self.down:
                self.calls.append((path, body))
                return None
            return super().call(path, body, timeout, retry=retry)

    daemon = Flaky()
    sess = ClaudeSession("s", daemon=daemon, state_file=None, aux=None, start_info={})
    body = _bash_round("b1", "true", {"content": "ok"})
    sent = lambda: [b for p, b in daemon.calls if p == "/v1/sessions/model"]  # noqa: E731
    sess.prepare(body)
    daemon.down = False
    sess.prepare(body)
    sess.prepare(body)
    assert len(sent()) == 2  # the miss, then once
    assert sent()[-1]["model"]["context_window"] == 200_000
    sess.betas = "context-1m-2025-08-07"
    sess.prepare(body)
    assert len(sent()) == 3 and sent()[-1]["model"]["context_window"] == 1_000_000
    sess._register_again()
    sess.prepare(body)
    assert len(sent()) == 4


def test_a_compaction_is_sent_before_the_next_calls_record_or_at_shutdown(tmp_path: Path) -> None:
    """PostCompact comes while the summarisation call's own record may still be on its way:
    the compaction goes with the next call's record, just before it (or at the end)."""
    daemon = FakeDaemon()
    sess = ClaudeSession("s", daemon=daemon, state_file=None, aux=None, start_info={})
    sess.registered = True
    settings = lifecycle_settings({}, '{"statusLine": {"type": "command", "command": "x"}}')
    assert settings["hooks"]["PostCompact"][0]["hooks"][0]["command"] == hook_command()
    sess.note_compaction(
        {"hook_event_name": "PostCompact", "trigger": "auto", "compact_summary": "s" * 80}
    )
    assert not [p for p, _ in daemon.calls if p == "/v1/compaction"]
    body = _bash_round("b1", "true", {"content": "ok"})
    sess.record_call(body, [], None)
    paths = [p for p, _ in daemon.calls]
    assert paths[-2:] == ["/v1/compaction", "/v1/llm_call"]
    sent = daemon.calls[-2][1]
    assert sent == {
        "session_id": "s",
        "reason": "auto",
        "summary_chars": 80,
        "priced_as_call": True,
    }
    sess.record_call(body, [], None)  # once only
    assert [p for p, _ in daemon.calls].count("/v1/compaction") == 1
    # a manual /compact the session ended with
    sess.note_compaction(
        {"hook_event_name": "PostCompact", "trigger": "manual", "compact_summary": None}
    )
    sess.shutdown()
    compactions = [b for p, b in daemon.calls if p == "/v1/compaction"]
    assert compactions[-1]["reason"] == "manual" and compactions[-1]["summary_chars"] == 0
    assert [p for p, _ in daemon.calls][-1] == "/v1/sessions/shutdown"


def test_each_context_request_names_its_conversation() -> None:
    """Sub-agents share the session: each /v1/context names the conversation it belongs to
    (its first message's key), so the daemon keeps each one's cache entries apart."""
    daemon = FakeDaemon()
    sess = ClaudeSession("s", daemon=daemon, state_file=None, aux=None, start_info={})
    sess.first_request = False
    main = _bash_round("b1", "true", {"content": "ok"})
    sub = _bash_round("b2", "ls", {"content": "a.txt"})
    sub["messages"][0] = {"role": "user", "content": "find the lexer tests"}  # a sub-agent
    sess.prepare(main)
    sess.prepare(sub)
    asked = [b["conversation"] for p, b in daemon.calls if p == "/v1/context"]
    assert len(asked) == 2 and all(asked) and asked[0] != asked[1]
    assert asked[0] == head_key(wire.items(main))


def test_claude_codes_summarisation_request_gets_frozen_edits_only(tmp_path: Path) -> None:
    """Nothing is decided for Claude Code's compaction request (no /v1/context: no mask that
    would hide history from the summary); the request before it is decided as usual."""
    daemon = FakeDaemon()
    sess = ClaudeSession("s", daemon=daemon, state_file=None, aux=None, start_info={})
    sess.first_request = False  # not a resume: its round is the unseen tail
    body = _bash_round("b1", "true", {"content": "ok"})
    sess.prepare(body)
    assert [p for p, _ in daemon.calls].count("/v1/context") == 1
    ask = (
        "CRITICAL: Respond with TEXT ONLY. Do NOT call any tools.\n"
        "Your task is to create a detailed summary of the conversation so far, paying close "
        "attention to the user's explicit requests and your previous actions."
    )
    tail = _bash_round("b2", "ls", {"content": "a.txt"})["messages"][1:]
    summarise = {
        **body,
        "messages": [
            *body["messages"],
            tail[0],
            {"role": "user", "content": [*tail[1]["content"], {"type": "text", "text": ask}]},
        ],
    }
    assert wire.is_compaction_request(summarise["messages"])
    sess.prepare(summarise)
    assert [p for p, _ in daemon.calls].count("/v1/context") == 1
    assert "b2" not in sess.seen  # decided later if it ever comes again, like any tail
    # the instruction as a plain string, or quoted mid-message by the user: only the former
    assert wire.is_compaction_request([{"role": "user", "content": ask}])
    quoted = [
        {"role": "user", "content": [{"type": "text", "text": ask}, {"type": "text", "text": "?"}]}
    ]
    assert not wire.is_compaction_request(quoted)
    assert not wire.is_compaction_request([{"role": "assistant", "content": ask}])
    assert not wire.is_compaction_request([])


def test_each_call_says_what_it_shares_with_the_previous_as_sent_and_as_plain(
    tmp_path: Path,
) -> None:
    """`sent_prefix_chars` / `plain_prefix_chars` of the proxy's llm_call: a mask's rewrite
    cuts the first, not the second; the plain one counts a digested output at its full size;
    a proxy's first call knows neither."""
    from ctxwrap.engine.edits import MaskEdit

    daemon = FakeDaemon()
    sess = ClaudeSession("s", daemon=daemon, state_file=None, aux=None, start_info={})
    big = "".join(f"line {i}\n" for i in range(2000))
    hook = bash_succeeded("b1", "seq 1 2000", big)
    digest = sess.handle_hook(hook)["hookSpecificOutput"]["updatedToolOutput"]["stdout"]
    first = _bash_round("b1", "seq 1 2000", {"content": digest})
    more = [
        {"role": "assistant", "content": [{"type": "text", "text": "done " * 100}]},
        {"role": "user", "content": [{"type": "text", "text": "and now?"}]},
    ]
    second = {**first, "messages": [*first["messages"], *more]}
    # a sub-agent's request between two of the main conversation's: its own first message
    # and tools; the main one's next request is measured against the main one's previous
    sub = {
        "model": "m",
        "tools": [{"name": "Read"}],
        "messages": [{"role": "user", "content": [{"type": "text", "text": "count the lines"}]}],
    }
    sess.record_call(first, [], None)
    sess.record_call(sub, [], None)
    sess.record_call(second, [], None)
    # the third as sent: the digested result masked; as Claude Code sent it: unchanged
    third = json.loads(json.dumps(second))
    third["messages"][2]["content"][0]["content"] = "[masked]"
    mask = MaskEdit(toolCallId="b1", text="[masked]", savedChars=len(digest) - 8)
    sess.record_call(third, [mask], None, json.dumps(second).encode())
    calls = [body for path, body in daemon.calls if path == "/v1/llm_call"]
    assert [(c["sent_prefix_chars"], c["plain_prefix_chars"]) for c in calls[:1]] == [(None, None)]
    sub_call = calls.pop(1)
    assert sub_call["sent_prefix_chars"] == 0 and sub_call["prefix_of"] is None  # the one before
    assert [c["prefix_of"] for c in calls] == [None, 0, None]
    whole_first = len(json.dumps(first["tools"], separators=(",", ":"))) + sum(
        len(json.dumps(m, separators=(",", ":"))) for m in first["messages"]
    )
    saved = len(big) - len(digest)
    assert calls[1]["sent_prefix_chars"] == whole_first
    assert calls[1]["plain_prefix_chars"] == whole_first + saved  # the output as plain had it
    before_mask = len(json.dumps(first["tools"], separators=(",", ":"))) + sum(
        len(json.dumps(m, separators=(",", ":"))) for m in first["messages"][:2]
    )
    assert calls[2]["sent_prefix_chars"] == before_mask
    assert calls[2]["plain_prefix_chars"] == calls[1]["plain_prefix_chars"] + sum(
        len(json.dumps(m, separators=(",", ":"))) for m in more
    )


class _MaskingDaemon(FakeDaemon):
    """Answers every /v1/context that asks for masks with a mask of the first round's result."""

    def call(
        self, path: str, body: dict[str, Any], timeout: float, *, retry: bool = True
    ) -> dict[str, Any] | None:
        if path == "/v1/context" and "mask" in body:
            self.calls.append((path, body))
            mask = {"kind": "mask", "toolCallId": "b1", "text": "[masked]", "savedChars": 90}
            return {"edits": [mask]}
        return super().call(path, body, timeout, retry=retry)


def _thinking_conversation(model: str, *, thinking_after: bool) -> dict[str, Any]:
    """Round b1 (seen), then the model thinks and calls b2, whose result is the new tail."""
    body = _bash_round("b1", "seq 1 100", {"content": "\n".join(map(str, range(100)))})
    think = {"type": "thinking", "thinking": "next: list", "signature": "c2ln"}
    tool_use = {"type": "tool_use", "id": "b2", "name": "Bash", "input": {"command": "ls"}}
    result = {"type": "tool_result", "tool_use_id": "b2", "content": "a.txt"}
    second = [think, tool_use] if thinking_after else [tool_use]
    if not thinking_after:  # the model's thinking came before the first result only
        body["messages"][1]["content"].insert(0, think)
    body["messages"] += [
        {"role": "assistant", "content": second},
        {"role": "user", "content": [result]},
    ]
    return {**body, "model": model}


@pytest.mark.parametrize(
    ("model", "thinking_after", "masked"),
    [
        ("claude-opus-5-5", True, False),  # the block after b1 would fail its prefix check
        ("claude-fable-5-1-20261001", True, False),
        ("claude-mythos-6", True, False),  # a later model is taken to check too
        ("claude-opus-4-8", True, True),  # no prefix check before Fable 5.1 / 5.5
        ("claude-opus-5-5", False, True),  # no thinking block has b1 in its prefix
        ("gpt-5.5", True, True),
    ],
)
def test_no_mask_rewrites_a_thinking_blocks_prefix_on_models_that_check_it(
    tmp_path: Path, model: str, thinking_after: bool, masked: bool
) -> None:
    """Claude Fable 5.1 and the 5.5 models refuse a request (400, "bound to a different
    conversation") when anything before a returned thinking block changed since the model
    wrote it; a mask of an older result is such a change. Masks decided before the block
    was written stay (the model wrote it after the masked text)."""
    sess = ClaudeSession("s", daemon=_MaskingDaemon(), state_file=None, aux=None, start_info={})
    sess.registered = True
    sess.seen = {"b1"}
    sess.first_request = False
    sess._cache_boundary = lambda body, messages: ("cold", 600.0)  # type: ignore[method-assign]
    body = _thinking_conversation(model, thinking_after=thinking_after)
    applied = sess.prepare(body)
    assert any(isinstance(e, MaskEdit) for e in applied) is masked
    # the daemon is told what to keep, so it neither decides nor records an edit of it
    [asked] = [b for p, b in sess.daemon.calls if p == "/v1/context" and "mask" in b]  # type: ignore[attr-defined]
    kept = set(asked.get("keep", []))
    assert ("b1" in kept) is not masked
    assert (body["messages"][2]["content"][0]["content"] == "[masked]") is masked


def test_which_models_check_a_thinking_blocks_prefix() -> None:
    from ctxwrap.engine.thinking import checks_thinking_prefix as checks

    assert checks("claude-sonnet-5-5") and checks("claude-haiku-5-5-20261101")
    assert checks("anthropic.claude-opus-5-5-v1:0") and checks("claude-mythos-preview")
    assert checks("anthropic/claude-opus-5.5") and not checks("anthropic/claude-opus-4.8")
    assert not checks("claude-opus-5") and not checks("claude-fable-5")
    assert not checks("claude-opus-4-5-20251101") and not checks("claude-sonnet-4-6")
    assert not checks("qwen3-coder") and not checks(None)
    assert not checks("claude-3-7-sonnet-20250219") and not checks("claude-3-opus-20240229")
    messages = _thinking_conversation("claude-opus-5-5", thinking_after=True)["messages"]
    # b1's call and result precede the thinking block; b2's call and result follow it
    assert wire.bound_by_thinking(messages) == {"b1"}


class _StripDaemon(FakeDaemon):
    """Answers /v1/context with a strip of the write w1's body."""

    def call(
        self, path: str, body: dict[str, Any], timeout: float, *, retry: bool = True
    ) -> dict[str, Any] | None:
        if path == "/v1/context":
            self.calls.append((path, body))
            strip = {
                "kind": "strip_write",
                "toolCallId": "w1",
                "text": "[written]",
                "savedChars": 900,
            }
            return {"edits": [strip]}
        return super().call(path, body, timeout, retry=retry)


@pytest.mark.parametrize(
    ("model", "stripped"), [("claude-opus-5-5", False), ("claude-opus-4-8", True)]
)
def test_no_strip_of_a_call_a_thinking_block_of_its_own_message_follows(
    model: str, stripped: bool
) -> None:
    """Opus 5.5 returns its text between two tool calls as a thinking block: that block has
    the first call in its prefix, so stripping the write's body — a tail edit, decided before
    any later block was written — would still fail its check."""
    sess = ClaudeSession("s", daemon=_StripDaemon(), state_file=None, aux=None, start_info={})
    sess.registered = True
    sess.first_request = False
    write = {"type": "tool_use", "id": "w1", "name": "Write",
             "input": {"file_path": "/w/a.py", "content": "x = 1\n" * 200}}  # fmt: skip
    between = {"type": "thinking", "thinking": "now run it", "signature": "c2ln"}
    run = {"type": "tool_use", "id": "b1", "name": "Bash", "input": {"command": "python a.py"}}
    body = {
        "model": model,
        "tools": [{"name": "Write"}, {"name": "Bash"}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "go"}]},
            {"role": "assistant", "content": [write, between, run]},
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "w1", "content": "File created"},
                    {"type": "tool_result", "tool_use_id": "b1", "content": "ok"},
                ],
            },
        ],
    }
    applied = sess.prepare(body)
    assert any(isinstance(e, StripWriteEdit) for e in applied) is stripped
    content = body["messages"][1]["content"][0]["input"].get("content", "")
    assert ("x = 1" in content) is not stripped
    [asked] = [b for p, b in sess.daemon.calls if p == "/v1/context"]  # type: ignore[attr-defined]
    assert ("w1" in asked.get("keep", [])) is not stripped


def test_a_bool_is_no_integer_setting() -> None:
    """Issue 42: `True` for an integer setting (bash_min_tokens: true) is the default, not 1
    (Python's bool is an int): under Claude Code as under Codex, every output would be
    digested otherwise."""
    daemon = FakeDaemon()
    sess = ClaudeSession("s", daemon=daemon, state_file=None, aux=None, start_info={})
    sess.cfg = {"bash_min_tokens": True, "tag_wait_ms": False, "aux_timeout_ms": 7}
    assert sess._cfg_int("bash_min_tokens", 2000) == 2000
    assert sess._cfg_int("tag_wait_ms", 400) == 400
    assert sess._cfg_int("aux_timeout_ms", 20000) == 7
    event = {
        "hook_event_name": "PostToolUse",
        "tool_name": "Bash",
        "tool_use_id": "b1",
        "tool_input": {"command": "echo hi"},
        "tool_response": {"stdout": "short output", "stderr": ""},
    }
    sess.registered = True
    assert sess.handle_hook(event) == {}  # under the default threshold: Claude Code's own
    assert not [p for p, _ in daemon.calls if p == "/v1/tool_result"]


@pytest.mark.parametrize(
    ("tool", "response", "text"),
    [
        (
            "mcp__docs__search",
            [{"type": "text", "text": "page one"}, {"type": "text", "text": "page two"}],
            "page one\npage two",
        ),
        (
            "WebFetch",
            {
                "bytes": 9,
                "code": 200,
                "codeText": "OK",
                "result": "summary",
                "durationMs": 5,
                "url": "https://example.org",
            },
            "summary",
        ),
        (
            "WebSearch",
            {
                "query": "q",
                "durationSeconds": 1.0,
                "results": [
                    "Some commentary.",
                    {
                        "tool_use_id": "srv",
                        "content": [{"title": "Result A", "url": "https://a.example"}],
                    },
                ],
            },
            "Some commentary.\nResult A https://a.example",
        ),
        ("mcp__shots__take", [{"type": "image", "source": {}}], None),  # kept as it is
    ],
)
def test_a_web_or_mcp_answer_is_tagged_and_stored_as_a_lookup(
    tool: str, response: Any, text: str | None
) -> None:
    """Claude Code's WebFetch, WebSearch and MCP tools answer data the model reads once, like
    a file: the PostToolUse hook sends it in its round's tag batch as a lookup ("fetch", the
    tool and what it was asked), so the daemon stores it behind a recall handle and masking
    may take it once old. An answer with an image is not stored: recall could not give it
    back."""
    daemon = FakeDaemon()
    sess = ClaudeSession("s", daemon=daemon, state_file=None, aux=None, start_info={})
    event = {
        "hook_event_name": "PostToolUse",
        "tool_name": tool,
        "tool_use_id": "t1",
        "tool_input": {"query": "records of 2026"},
        "tool_response": response,
    }
    assert sess.handle_hook(event) == {}
    deadline = time.monotonic() + 5
    while text is not None and not daemon.calls and time.monotonic() < deadline:
        time.sleep(0.01)
    if text is None:
        time.sleep(0.2)  # a background batch would have been sent by now
    batches = [b for p, b in daemon.calls if p == "/v1/tag_batch"]
    assert bool(batches) is (text is not None)
    if text is not None:
        [item] = batches[0]["results"]
        assert item["tool_name"] == "fetch" and item["text"] == text
        assert item["input"] == {"tool": tool, "input": '{"query": "records of 2026"}'}
