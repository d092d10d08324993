"""The Codex adapter's pure parts: command classification, the Responses wire, the launcher's
reading of the user's config and arguments."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ctxwrap.agents.codex import commands, launcher
from ctxwrap.agents.codex import responses_wire as wire
from ctxwrap.agents.codex.launcher import (
    CodexInstall,
    Unsupported,
    effective_config,
    parse_args,
    resume_args,
    route_for,
    without_override,
)
from ctxwrap.engine.edits import StripWriteEdit, TombstoneEdit, describe_tail
from ctxwrap.engine.masking import call_paths


@pytest.mark.parametrize(
    ("command", "kind"),
    [
        ("cat notes.txt", "read"),
        ("sed -n '1,200p' src/app.py", "read"),
        ("nl -ba src/app.py", "read"),
        ("head -50 README.md", "read"),
        ("rg -n TODO src", "grep"),
        ("ls -la", "find"),
        ("find . -name '*.py'", "find"),
        ("bash -lc 'cat x.txt'", "read"),
        ("sed -i s/a/b/ f.txt", None),
        ("sed 's/a/b/' f.txt", None),
        ("cat a.txt > b.txt", None),
        ("cat a.txt | wc -l", "read"),
        ("nl -ba src/app.py | sed -n '1,200p'", "read"),
        ('rg -n "TODO|FIXME" src', "grep"),
        ("rg --files src | rg test", "grep"),
        ("cat f | sh", None),
        ("cat f | tee g", None),
        # what only lays out or passes on what it is given keeps a read a read (one list of
        # filters, shellread.FILTERS, for both shell readers)
        ("ls -la | column -t", "find"),
        ("cat f.json | jq . | cat -n", "read"),
        ("rg -n x src | sed -n '1,40p'", "grep"),
        ("cat f | sed 's/a/b/'", None),  # sed without -n prints an edited copy: left alone
        ("cat f | sed -n -i 1p", None),
        ("ls && rm -rf x", None),
        # a list each part of which reads is a read: Codex printed two files, or a range and
        # a search, in one call, and the digest hid the lines its next patch changed
        ("sed -n '70,150p' a.ts && sed -n '1,220p' b.ts", "read"),
        ("sed -n '220,420p' t.ts && rg -n \"x|y\" src -g '*test.ts'", "read"),
        ("rg -n x src; ls", "grep"),
        ("cd src && cat a.py || true", "read"),
        ("sed -n '1,5p' a.py\nsed -n '1,5p' b.py\n", "read"),
        ("cat a.py\nrm -rf b", None),  # a new line separates commands
        ("cat a.py & rm -rf b", None),
        ("echo done", None),
        # its errors dropped or shown with it: still a read (Claude Code's `cat f 2>/dev/null |
        # head -40`, `ls d 2>/dev/null || echo none`: 101 commands of the corpus and beyond)
        ("rg x 2>/dev/null", "grep"),
        ("cat f 2>&1 | head -40", "read"),
        ("ls d 2>/dev/null || echo none", "find"),
        ("rg x 2>/tmp/err", None),
        ("cat f 1>/dev/null", None),
        ("cat f 2>&1 | tee log", None),
        # a loop or an if is what it runs (Codex printed READMEs of five repositories in one
        # loop outside the corpus, and the digest kept 10 % of them)
        ('for f in a.ts b.ts; do echo "== $f"; sed -n \'1,80p\' "$f"; done', "read"),
        ('for d in a b; do if [ -d "$d" ]; then ls "$d"; fi; done | sort -u', "find"),
        ("[ -f x.py ] && cat x.py", "read"),
        ("if [ -f x ]; then cat x; else echo none; fi", "read"),
        ('for d in a b; do git -C "$d" log -1; done', None),
        ('for f in *.ts; do mv "$f" old/; done', None),
        ('for f in a; do cat "$f"', None),  # never closed
        ("while true; do cat x; done", None),
        ("done; cat x", None),
        ("for 1x in a; do cat x; done", None),
        ("cat $(ls)", None),
        ("find . -delete", None),
        # a find that prints the files it finds is a read (pi printed its skill files so)
        ('find skills -name SKILL.md -exec echo "=== {} ===" \\; -exec cat {} \\;', "read"),
        ("find . -name '*.py' -exec cat {} ';'", "read"),
        ("find . -name '*.py' -exec grep -l TODO {} +", "grep"),
        ("find . -type f -exec wc -l {} + | sort -n", "find"),
        ("find . -name '*.py' -exec rm {} \\;", None),
        ("find . -exec sed -i s/a/b/ {} +", None),
        ("find . -exec cat {} ; rm -rf x", None),  # the shell's `;`: a list
        ("find . -exec cat {}", None),  # no terminator
        ("find . -name x -ok cat {} \\;", None),
        ("pytest -q", None),
        ("cat 'unterminated", None),
        # what ctxwrap gives back on request is never a log to digest again
        ("ctxwrap recall r1a2b3c4d 'FAIL|Error'", "grep"),
        ("ctxwrap show r1a2b3c4d", "read"),
        ("/home/u/.venv/bin/ctxwrap recall r1a2b3c4d x | head -5", "grep"),
        ("ctxwrap stats", None),
        ("ctxwrap recall r1a2b3c4d x; rm -rf ~", None),  # a list may run anything
        ("ctxwrap", None),
    ],
)
def test_read_kind(command: str, kind: str | None) -> None:
    assert commands.read_kind(command) == kind


def test_split_exec_output() -> None:
    text = (
        "Chunk ID: ab12\nWall time: 0.1 seconds\nProcess exited with code 2\n"
        "Original token count: 3\nOutput:\nboom\n"
    )
    out = commands.split_exec_output(text)
    assert out.header.endswith("Output:\n") and out.body == "boom\n" and out.exit_code == 2
    assert commands.split_exec_output("plain").header == ""


def test_shell_command_of_every_shape() -> None:
    assert commands.shell_command_of("exec_command", {"cmd": "ls"}) == "ls"
    assert commands.shell_command_of("shell", {"command": ["bash", "-lc", "rg x"]}) == "rg x"
    assert commands.shell_command_of("shell", {"command": ["ls", "-la", "a b"]}) == "ls -la 'a b'"
    js = 'const r = await tools.exec_command({cmd: "cat \\"a b\\".txt"});\ntext(r);'
    assert commands.shell_command_of("exec", js) == 'cat "a b".txt'
    assert commands.shell_command_of("exec", "await tools.exec_command({cmd: 'ls'})") == "ls"
    two = "await tools.exec_command({cmd: 'ls'}); await tools.exec_command({cmd: 'pwd'})"
    assert commands.shell_command_of("exec", two) is None
    assert commands.shell_command_of("view_image", {"path": "x"}) is None


def test_a_js_exec_call_with_a_json_argument_is_its_command() -> None:
    """Codex 0.152's model wrote the nested call's argument as JSON, `cmd` quoted and not
    always first: a read through it was classified as nothing (its output never masked)."""
    js = (
        'const r = await tools.exec_command({"cmd":"sed -n \'1,240p\' docs/SKILL.md",'
        '"workdir":"/home/u/p","yield_time_ms":10000});\ntext(r.output);\n'
    )
    assert commands.shell_command_of("exec", js) == "sed -n '1,240p' docs/SKILL.md"
    later = 'await tools.exec_command({"workdir": "/w", "cmd": "cat a.txt"}); text(r)'
    assert commands.shell_command_of("exec", later) == "cat a.txt"
    quoted_key_js = "await tools.exec_command({'cmd': 'ls -la'})"
    assert commands.shell_command_of("exec", quoted_key_js) == "ls -la"
    # an object without a string `cmd` is no command; nor is a script of two calls
    assert commands.shell_command_of("exec", 'await tools.exec_command({"cmd": 1})') is None
    two = 'await tools.exec_command({"cmd": "ls"}); await tools.exec_command({"cmd": "pwd"})'
    assert commands.shell_command_of("exec", two) is None
    item = {"type": "custom_tool_call", "call_id": "c1", "name": "exec", "input": js}
    info = wire.call_info(item, {})
    assert info is not None and info.kind == "read" and info.command is not None


PATCH = (
    "*** Begin Patch\n*** Update File: a.py\n@@\n-x\n+y\n"
    "*** Add File: small.txt\n+hi\n"
    "*** Add File: big.txt\n" + "".join(f"+line {i}\n" for i in range(50)) + "*** End Patch\n"
)


# What a recorded edgerunner rollout (Codex, newer model entries) and code mode under 0.171 send.
WEB_SCRIPT = (
    'const r = await tools.web__run({"open":[{"ref_id":"https://example.org/docs"}],'
    '"response_length":"long"}); text(r);'
)
MCP_SCRIPT = "const r = await tools.mcp__many__probe_tool_03({record_id: 'r3'});\ntext(r);"


@pytest.mark.parametrize(
    ("name", "arguments", "namespace", "tool"),
    [
        ("exec", WEB_SCRIPT, None, "web__run"),
        ("exec", MCP_SCRIPT, None, "mcp__many__probe_tool_03"),
        ("probe_tool_03", {"record_id": "r3"}, "mcp__many", "mcp__many__probe_tool_03"),
        # a shell command, two calls in one script, a tool that is no lookup: not lookups
        ("exec", "const r = await tools.exec_command({cmd: 'ls'}); text(r);", None, None),
        ("exec", MCP_SCRIPT + "\nawait tools.mcp__many__probe_tool_04({});", None, None),
        ("exec", "const r = await tools.view_image({path: 'a.png'}); text(r);", None, None),
        ("update_plan", {"plan": []}, None, None),
        # Codex Desktop's code runner: its scripts run commands (replay reads them as such)
        (
            "js",
            {"code": "const r = await tools.exec_command({cmd: 'ls'});"},
            "mcp__node_repl__",
            None,
        ),
    ],
)
def test_a_lookup_is_an_mcp_or_web_tool_call(
    name: str, arguments: object, namespace: str | None, tool: str | None
) -> None:
    assert commands.lookup_of(name, arguments, namespace) == tool


def test_a_lookups_answer_is_its_text_and_its_call_reads_like_a_fetch() -> None:
    answer = {"content": [{"type": "text", "text": "line one\nline two"}], "isError": False}
    assert commands.lookup_text(json.dumps(answer)) == "line one\nline two"
    assert commands.lookup_text("plain page text") == "plain page text"
    assert commands.lookup_text("{not json") == "{not json"
    # an answer nested past the parser's recursion limit is text, not a crash of the proxy
    deep = '{"content": ' + "[" * 100_000 + "]" * 100_000 + "}"
    assert commands.lookup_text(deep) == deep
    items: list[Any] = [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]},
        {"type": "custom_tool_call", "call_id": "c1", "name": "exec", "input": MCP_SCRIPT},
        {
            "type": "custom_tool_call_output",
            "call_id": "c1",
            "output": [
                {
                    "type": "input_text",
                    "text": "Script completed\nWall time 0.0 seconds\nOutput:\n",
                },
                {"type": "input_text", "text": json.dumps(answer)},
            ],
        },
    ]
    conv = wire.to_neutral(items)
    info = conv.calls["c1"]
    assert (info.kind, info.command) == ("fetch", "mcp__many__probe_tool_03")
    [call] = conv.messages[1]["content"]
    # the call's arguments are exactly the tag item's input: the "asked again" guard matches
    assert call["name"] == "fetch" and call["arguments"] == wire.fetch_input(info)
    assert call["arguments"] == {"tool": "mcp__many__probe_tool_03", "input": MCP_SCRIPT}
    result = conv.messages[2]
    assert result["toolName"] == "fetch" and result["isError"] is False
    failed = {**answer, "isError": True}
    items[2]["output"][1]["text"] = json.dumps(failed)
    assert wire.to_neutral(items).messages[2]["isError"] is True  # kept whole, as errors are


def test_added_files() -> None:
    files = commands.added_files(PATCH)
    assert [f.path for f in files] == ["small.txt", "big.txt"]
    big = commands.largest_added_file(PATCH)
    assert big is not None and big.content.startswith("line 0\n") and big.content.count("\n") == 50
    assert PATCH[big.start : big.end].startswith("+line 0\n")
    assert commands.patch_succeeded("Exit code: 0\nWall time: 0.1 seconds\nOutput:\nSuccess. ")
    assert not commands.patch_succeeded("Exit code: 1\nOutput:\nerror: no such file")


def _body() -> dict[str, Any]:
    ok = "Exit code: 0\nWall time: 0.2 seconds\nOutput:\nSuccess. Updated the following files:\n"
    return {
        "model": "gpt-test",
        "input": [
            {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "sys"}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]},
            {"type": "reasoning", "summary": [], "encrypted_content": "x"},
            {"type": "function_call", "name": "exec_command", "arguments": '{"cmd":"cat n.txt"}', "call_id": "c1"},
            {"type": "custom_tool_call", "name": "apply_patch", "input": PATCH, "call_id": "c2"},
            {"type": "function_call_output", "call_id": "c1", "output": "Output:\nnotes\n"},
            {"type": "custom_tool_call_output", "call_id": "c2", "output": ok},
            {"type": "custom_tool_call", "name": "exec", "input": "await tools.exec_command({cmd: 'ls'})", "call_id": "c3"},
            {"type": "custom_tool_call_output", "call_id": "c3", "output": [
                {"type": "input_text", "text": "Script completed\nOutput:\n"},
                {"type": "input_text", "text": '{"chunk_id":"a","exit_code":0,"output":"x\\n"}'},
            ]},
        ],
    }  # fmt: skip


def test_to_neutral_and_tail() -> None:
    conv = wire.to_neutral(_body()["input"])
    roles = [m["role"] for m in conv.messages]
    assert roles == [
        "custom",
        "user",
        "assistant",
        "toolResult",
        "toolResult",
        "assistant",
        "toolResult",
    ]
    assert conv.calls["c1"].kind == "read" and conv.calls["c2"].kind == "write"
    assert conv.calls["c3"].kind == "find" and conv.calls["c3"].command == "ls"
    calls = conv.messages[2]["content"]
    assert calls[0] == {
        "type": "toolCall",
        "id": "c1",
        "name": "read",
        "arguments": {"command": "cat n.txt", "path": "n.txt"},
    }
    assert calls[1]["name"] == "write" and calls[1]["arguments"]["path"] == "big.txt"
    tail = describe_tail(conv.messages, set())
    write = tail.messages[2].toolCalls[1]  # type: ignore[index]
    assert write.writeContentLines == 50
    assert wire.all_call_ids(_body()["input"]) == {"c1", "c2", "c3"}


def test_masking_sees_the_file_each_shell_read_prints_and_each_patch_touches() -> None:
    """Masking's read rules (superseded, untouched) need each read's file: a Codex read is a
    command, an edit a patch of several files. Before, only an added file had a path, so a
    shell read was never masked live while replay masked it."""
    patch = (
        "*** Begin Patch\n*** Update File: src/a.py\n@@\n-x\n+y\n"
        "*** Add File: src/small.py\n+one\n*** Add File: src/big.py\n+one\n+two\n+three\n"
        "*** Delete File: old.py\n*** End Patch\n"
    )
    items = [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]},
        {
            "type": "function_call",
            "call_id": "r1",
            "name": "exec_command",
            "arguments": json.dumps({"cmd": "nl -ba src/a.py | sed -n '1,80p'"}),
        },
        {"type": "function_call_output", "call_id": "r1", "output": "1 x\n"},
        {"type": "custom_tool_call", "call_id": "p1", "name": "apply_patch", "input": patch},
        {"type": "custom_tool_call_output", "call_id": "p1", "output": "Exit code: 0\nSuccess."},
        {
            "type": "function_call",
            "call_id": "g1",
            "name": "exec_command",
            "arguments": json.dumps({"cmd": "rg -n y src"}),
        },
        {"type": "function_call_output", "call_id": "g1", "output": "src/a.py:1:y\n"},
    ]
    conv = wire.to_neutral(items)
    blocks = [c for m in conv.messages if m["role"] == "assistant" for c in m["content"]]
    assert [(b["id"], b["name"]) for b in blocks] == [
        ("r1", "read"),
        ("p1", "write"),  # the largest added file is the call's own (the write strip's body)
        ("p1#1", "edit"),
        ("p1#2", "write"),
        ("p1#3", "edit"),
        ("g1", "grep"),
    ]
    assert blocks[0]["arguments"] == {
        "command": "nl -ba src/a.py | sed -n '1,80p'",
        "path": "src/a.py",
    }
    assert call_paths(conv.messages) == {
        "r1": "src/a.py",
        "p1": "src/big.py",
        "p1#1": "src/a.py",
        "p1#2": "src/small.py",
        "p1#3": "old.py",
    }
    # the tag item's input is the call's arguments: "asked again" (argsSig) still matches
    assert wire.shell_input(conv.calls["r1"]) == blocks[0]["arguments"]
    assert wire.shell_input(conv.calls["g1"]) == {"command": "rg -n y src"}


def test_apply_edits_every_shape_touches_one_key() -> None:
    body = _body()
    edits = {
        "c1": [TombstoneEdit(toolCallId="c1", text="Output:\n[gone]")],
        "c2": [StripWriteEdit(toolCallId="c2", text="[stripped]")],
        "c3": [TombstoneEdit(toolCallId="c3", text="Script completed\nOutput:\n[gone]")],
    }
    applied = wire.apply_edits(body, edits)
    assert len(applied) == 3
    items = body["input"]
    assert items[5]["output"] == "Output:\n[gone]"
    patch = items[4]["input"]
    assert "*** Add File: big.txt\n[stripped]\n*** End Patch\n" in patch
    assert "*** Add File: small.txt\n+hi\n" in patch  # only the largest added file
    assert items[8]["output"] == [
        {"type": "input_text", "text": "Script completed\nOutput:\n[gone]"}
    ]
    # replayed on the edited body: the same bytes
    again = json.loads(wire.encode_body(body))
    wire.apply_edits(again, edits)
    assert wire.encode_body(again) == wire.encode_body(body)


def test_usage_reader_sse() -> None:
    reader = wire.UsageReader(streaming=True)
    seen: list[tuple[str, str]] = []
    reader.on_call = lambda cid, name: seen.append((cid, name))
    item = {"type": "function_call", "call_id": "c9", "name": "exec_command", "arguments": "{}"}
    done = {"type": "response.output_item.done", "item": item}
    usage = {"input_tokens": 100, "input_tokens_details": {"cached_tokens": 60}, "output_tokens": 7}
    completed = {"type": "response.completed", "response": {"model": "m", "usage": usage}}
    data = b"".join(f"event: x\ndata: {json.dumps(e)}\n\n".encode() for e in (done, completed))
    for i in range(0, len(data), 7):
        reader.feed(data[i : i + 7])
    u = reader.finish()
    assert (u.input_tokens, u.cache_read_tokens, u.output_tokens, u.model) == (40, 60, 7, "m")
    assert seen == [("c9", "exec_command")]


def test_the_prefix_two_requests_share_is_what_the_cache_reads() -> None:
    """`sent_prefix_chars` of the Codex proxy's llm_call: tools, instructions, then the input
    items in order, as long as they equal the previous request's."""
    from ctxwrap.agents._proxy.cache_state import shared_prefix_chars

    items = [
        {"role": "developer", "content": [{"type": "input_text", "text": "be brief"}]},
        {"role": "user", "content": [{"type": "input_text", "text": "go " * 40}]},
        {"type": "function_call", "call_id": "c1", "name": "exec_command", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "x" * 500},
    ]
    body = {
        "tools": [{"type": "function", "name": "exec_command"}],
        "instructions": "You are Codex.",
    }
    first, second = {**body, "input": items[:2]}, {**body, "input": items}
    a, b = wire.prefix_blocks(first), wire.prefix_blocks(second)
    size = wire.measure(first)
    assert shared_prefix_chars(a, b) == sum(n for _, n in a)
    # the same chars the stats measure, but for the JSON framing of the lists
    assert 0 <= size.system + size.tools + size.messages - sum(n for _, n in a) <= 8
    # the tool output rewritten (a mask): everything before it is shared
    masked = {**body, "input": [*items[:3], {**items[3], "output": "[masked]"}]}
    assert shared_prefix_chars(b, wire.prefix_blocks(masked)) == sum(n for _, n in b[:-1])


def test_session_id_is_validated() -> None:
    assert wire.session_id_of({"session-id": "01a2-b"}, {}) == "01a2-b"
    assert wire.session_id_of({}, {"prompt_cache_key": "abc"}) == "abc"
    assert wire.session_id_of({"session-id": "../etc"}, {}) is None


# -- the launcher ---------------------------------------------------------------------------------


def test_parse_args_finds_subcommand_profile_and_overrides() -> None:
    inv = parse_args(["-c", "model=x", "-p", "work", "--config=a.b=1", "exec", "-c", "k=v", "hi"])
    assert inv.subcommand == "exec" and inv.profile == "work"
    assert inv.overrides == [("model", "x"), ("a.b", "1"), ("k", "v")]
    assert parse_args(["-m", "gpt", "resume", "--last"]).subcommand == "resume"
    assert parse_args(["--oss"]).oss


def test_routes(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text(
        'model_provider = "corp"\n'
        "[model_providers.corp]\n"
        'base_url = "https://llm.corp/v1"\nwire_api = "responses"\n'
        "[model_providers.chat]\n"
        'base_url = "http://x"\nwire_api = "chat"\n'
        '[profiles.plain]\nmodel_provider = "openai"\n'
    )
    route = route_for(effective_config(tmp_path, parse_args([])), {})
    assert (route.provider, route.upstream) == ("corp", "https://llm.corp/v1")
    assert route.override_key == "model_providers.corp.base_url"
    user = parse_args(["-c", 'model_providers.corp.base_url="https://other/v1"'])
    assert route_for(effective_config(tmp_path, user), {}).upstream == "https://other/v1"
    openai = route_for(effective_config(tmp_path, parse_args(["-p", "plain"])), {})
    assert (openai.provider, openai.upstream, openai.override_key) == (
        "openai",
        None,
        "openai_base_url",
    )
    with pytest.raises(Unsupported):
        route_for(effective_config(tmp_path, parse_args(["-c", "model_provider=chat"])), {})
    with pytest.raises(Unsupported):
        route_for(effective_config(tmp_path, parse_args(["-c", "model_provider=ollama"])), {})


def test_without_override_removes_only_that_key() -> None:
    args = ["-c", "model_providers.corp.base_url=x", "-c", "model=y", "exec", "hi"]
    assert without_override(args, "model_providers.corp.base_url") == [
        "-c",
        "model=y",
        "exec",
        "hi",
    ]


TID = "019a2b3c-4d5e-7f60-8a9b-0c1d2e3f4a5b"


def test_resume_hint_is_codexs_own_form() -> None:
    tui = ["-m", "gpt-5.5", "fix the tests"]
    assert resume_args(parse_args(tui), tui, TID) == ["resume", TID]
    again = ["resume", "--last"]
    assert resume_args(parse_args(again), again, TID) == ["resume", TID]
    for run in (["exec", "--json", "hi"], ["e", "hi"], ["exec", "resume", "--last", "more"]):
        assert resume_args(parse_args(run), run, TID) == ["exec", "resume", TID]
    ephemeral = ["exec", "--ephemeral", "hi"]
    assert resume_args(parse_args(ephemeral), ephemeral, TID) is None  # no rollout kept
    quoted = ["exec", "hi", "--", "--ephemeral"]
    assert resume_args(parse_args(quoted), quoted, TID) == ["exec", "resume", TID]


class _Proxy:
    def __init__(self, *ids: str) -> None:
        self.sessions = dict.fromkeys(ids)


def test_exit_line_names_the_last_thread_unless_quiet(monkeypatch: pytest.MonkeyPatch) -> None:
    printed: list[tuple[str, str | None, list[str] | None]] = []

    def fake(agent: str, sid: str | None, resume: list[str] | None, **_: Any) -> None:
        printed.append((agent, sid, resume))

    monkeypatch.setattr("ctxwrap.launch.exit_line.print_exit_line", fake)
    args = ["exec", "hi"]
    launcher._exit_line(_Proxy("a-thread", TID), False, parse_args(args), args)
    assert printed == [("codex", TID, ["exec", "resume", TID])]
    launcher._exit_line(_Proxy(TID), True, parse_args(args), args)  # --ctxwrap-quiet
    launcher._exit_line(_Proxy(), False, parse_args(args), args)  # no thread reached us
    assert len(printed) == 1


def test_quiet_flag_never_reaches_codex(monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[list[str]] = []

    def fake_run(argv: list[str], env: dict[str, str]) -> int:
        ran.append(argv)
        return 3

    monkeypatch.setattr(launcher, "find_codex", lambda: CodexInstall(["/x/codex"]))
    monkeypatch.setattr(launcher, "run_child", fake_run)
    assert launcher.run_codex(["--ctxwrap-off", "--ctxwrap-quiet", "exec", "hi"]) == 3
    assert launcher.run_codex(["--ctxwrap-quiet", "--version"]) == 3
    assert ran == [["/x/codex", "exec", "hi"], ["/x/codex", "--version"]]


def test_write_stdin_polls_know_their_command() -> None:
    running = "Chunk ID: a2\nWall time: 1.0 seconds\nProcess running with session ID 48230\n"
    items = [
        {"type": "function_call", "name": "exec_command", "arguments": '{"cmd":"npm test"}', "call_id": "a"},
        {"type": "function_call_output", "call_id": "a", "output": running + "Original token count: 0\nOutput:\n"},
        {"type": "function_call", "name": "write_stdin", "arguments": '{"session_id":48230,"chars":""}', "call_id": "b"},
        {"type": "function_call_output", "call_id": "b", "output": "Output:\nPASS\n"},
    ]  # fmt: skip
    conv = wire.to_neutral(items)
    assert conv.calls["b"].kind == "bash" and conv.calls["b"].command == "npm test"


def test_side_thread() -> None:
    meta = '{"thread_source":"thread_title","session_id":"x"}'
    assert wire.side_thread({"x-codex-turn-metadata": meta})
    assert not wire.side_thread({"x-codex-turn-metadata": '{"thread_source":"user"}'})
    assert not wire.side_thread({"x-codex-turn-metadata": "not json"})
    assert not wire.side_thread({})


def test_agent_binaries_are_found_by_override_then_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """launch/child.find_executable, which `ctxwrap claude` and `ctxwrap codex` share."""
    from ctxwrap.agents.claude.launcher import ClaudeNotFound, find_claude
    from ctxwrap.agents.codex.launcher import CodexNotFound, find_codex

    exe = tmp_path / "bin" / "codex"
    exe.parent.mkdir()
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", str(exe.parent))
    monkeypatch.delenv("CTXWRAP_CODEX", raising=False)
    assert find_codex().argv == [str(exe)]
    with pytest.raises(ClaudeNotFound, match="claude is not on PATH"):
        find_claude()
    monkeypatch.setenv("CTXWRAP_CODEX", str(tmp_path / "nope"))
    with pytest.raises(CodexNotFound, match=r"CTXWRAP_CODEX=.* is not an executable") as err:
        find_codex()
    assert err.value.hint  # says how to install
    monkeypatch.setenv("CTXWRAP_CLAUDE", str(exe))  # a path, not a name on PATH
    assert find_claude().argv == [str(exe)]


def test_codexs_local_compaction_request_is_recognised() -> None:
    def msg(role: str, text: str) -> dict[str, Any]:
        return {"type": "message", "role": role, "content": [{"type": "input_text", "text": text}]}

    ask = msg("user", "You are performing a CONTEXT CHECKPOINT COMPACTION. Create a handoff …")
    history = [msg("developer", "rules"), msg("user", "run gen.py")]
    # gpt-5.5 (tools: []) and the additional_tools model family (the item stays first)
    assert wire.is_local_compaction({"tools": [], "input": [*history, ask]})
    assert wire.is_local_compaction({"input": [{"type": "additional_tools"}, *history, ask]})
    # the instruction anywhere but last, quoted by the user, or no input: an ordinary request
    assert not wire.is_local_compaction({"input": [*history, ask, msg("user", "next")]})
    assert not wire.is_local_compaction(
        {"input": [*history, msg("user", "why " + ask["content"][0]["text"])]}
    )
    assert not wire.is_local_compaction(
        {"input": [*history, msg("developer", ask["content"][0]["text"])]}
    )
    for odd in (
        {},
        {"input": "x"},
        {"input": []},
        {"input": [None]},
        {"input": [{"type": "message", "role": "user", "content": "s"}]},
    ):
        assert not wire.is_local_compaction(odd)


def test_codexs_compaction_requests_are_told_by_their_turn_metadata() -> None:
    """Codex 0.171 names every summarisation request in its turn metadata (seen on the real
    binary: local with a custom provider, remote v2 with the built-in one), with the trigger;
    the body is the fallback where the metadata is missing."""

    def meta(**fields: Any) -> dict[str, str]:
        return {"x-codex-turn-metadata": json.dumps({"thread_source": "user", **fields})}

    turn = {"input": [{"type": "message", "role": "user", "content": []}]}
    trigger = {"input": [*turn["input"], {"type": "compaction_trigger"}]}
    auto = {
        "trigger": "auto",
        "reason": "context_limit",
        "implementation": "responses_compaction_v2",
    }
    assert (
        wire.compaction_request(meta(request_kind="compaction", compaction=auto), trigger) == "auto"
    )
    manual = {"trigger": "manual", "reason": "user_requested"}
    # a custom compact_prompt: the body says nothing, the metadata does
    assert (
        wire.compaction_request(meta(request_kind="compaction", compaction=manual), turn)
        == "manual"
    )
    # an unknown or missing trigger is taken as automatic
    assert (
        wire.compaction_request(meta(request_kind="compaction", compaction={"trigger": "x"}), turn)
        == "auto"
    )
    assert wire.compaction_request(meta(request_kind="compaction"), turn) == "auto"
    # the same metadata in the body's client_metadata
    body = {
        **turn,
        "client_metadata": {"x-codex-turn-metadata": json.dumps({"request_kind": "compaction"})},
    }
    assert wire.compaction_request({}, body) == "auto"
    # no metadata: the trigger item, or the default instruction
    assert wire.compaction_request({}, trigger) == "auto"
    assert wire.compaction_request({"x-codex-turn-metadata": "not json"}, trigger) == "auto"
    # ordinary turns
    assert wire.compaction_request(meta(request_kind="turn"), turn) is None
    assert wire.compaction_request({}, turn) is None
    assert wire.compaction_request({"x-codex-turn-metadata": "[1]"}, {"input": "x"}) is None
    # the trigger item anywhere but last is no request to compact
    assert (
        wire.compaction_request({}, {"input": [{"type": "compaction_trigger"}, *turn["input"]]})
        is None
    )


def test_a_command_is_parsed_once_however_many_requests_describe_it() -> None:
    """The proxy describes the whole history at every request: each shell call's kind and file
    come from a parse kept per command (to_neutral of 300 calls: 22 ms before, 3 ms after),
    bounded in what it keeps (a long command, such as a heredoc, is parsed each time)."""
    from ctxwrap.engine import shellcmd, shellread

    cmd = "sed -n '1,40p' src/parsed_once_probe.py"
    items = [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]},
        {"type": "function_call", "call_id": "c1", "name": "exec_command",
         "arguments": json.dumps({"cmd": cmd})},
        {"type": "function_call_output", "call_id": "c1", "output": "x\n"},
    ]  # fmt: skip
    kinds, reads = shellread._cached_kind.cache_info(), shellcmd._cached_read.cache_info()
    for _ in range(3):
        conv = wire.to_neutral(items)
    assert conv.calls["c1"].path == "src/parsed_once_probe.py"
    assert shellread._cached_kind.cache_info().misses - kinds.misses <= 2  # this command, once
    assert shellcmd._cached_read.cache_info().misses - reads.misses == 1
    long = "cat big.py # " + "x" * shellread.CACHED_COMMAND_CHARS
    size = shellread._cached_kind.cache_info().currsize
    assert shellread.read_kind(long) == "read"
    assert shellread._cached_kind.cache_info().currsize == size


def test_a_patch_is_parsed_once_however_many_requests_describe_it() -> None:
    """100 patches of 20 KB each cost 145 ms of every request's description before; each is now
    parsed once (a patch over 64 KB each time)."""
    body = "".join(f"+line {j} of the probe file\n" for j in range(300))
    patch = f"*** Begin Patch\n*** Add File: src/parsed_once.py\n{body}*** End Patch\n"
    items = [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]},
        {"type": "custom_tool_call", "call_id": "p1", "name": "apply_patch", "input": patch},
        {"type": "custom_tool_call_output", "call_id": "p1", "output": "Exit code: 0\nSuccess."},
    ]
    before = wire._kept_patch_info.cache_info()
    for _ in range(3):
        conv = wire.to_neutral(items)
    assert conv.calls["p1"].files == (("add", "src/parsed_once.py"),)
    assert (
        conv.calls["p1"].added is not None and conv.calls["p1"].added.path == "src/parsed_once.py"
    )
    after = wire._kept_patch_info.cache_info()
    assert (after.misses - before.misses, after.hits - before.hits) == (1, 2)
