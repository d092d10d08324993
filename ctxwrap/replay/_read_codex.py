"""Codex rollouts (`~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl`) → replay events.

Three generations are read (the corpus has one of each): 0.77 `codex exec` (tool `shell` with
an argv, outputs as JSON `{"output", "metadata"}`, `ghost_snapshot` items), 0.125 codex-tui
(unified exec: `exec_command` / `write_stdin`, the freeform `apply_patch` custom tool) and
0.128 Codex Desktop (no token counts; a JavaScript `js` tool beside `exec_command`). Rollouts
older than the `{"type", "payload"}` envelope (bare items after an `{"id", "instructions"}`
line) are read the same way.

The model's requests are not written down; a request is rebuilt as: everything before it
(inputs), then the output items of one response (reasoning, assistant text, tool calls) up to
the next input. The `token_count` event after a response is its provider usage (`input_tokens`
includes the cached part; a repeated event with unchanged totals is the same one).

Codex reads files through the shell, so each command is classified (`_shellcmd.classify`):
`cat`/`sed -n`/`head` become "read", `rg`/`grep` "grep", `ls`/`find`/`rg --files` "ls"/"find",
anything else "bash"; `write_stdin` polling a running command takes that command's kind. An
`apply_patch` becomes one call per file: "write" (an added file's body) or "edit".
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ctxwrap.agents.codex.commands import (
    heredoc_patch,
    lookup_of,
    lookup_text,
    patch_calls,
    shell_command_of,
    split_exec_output,
)
from ctxwrap.engine.shellcmd import classify, unwrap_argv
from ctxwrap.replay._events import (
    Compaction,
    Event,
    Header,
    Message,
    ReadStats,
    SystemPrompt,
    ToolCall,
    content_text,
    parse_ts,
)

# Item types of a model response (the rest of the response items are inputs).
_OUTPUT_ITEMS = frozenset(
    {
        "reasoning",
        "function_call",
        "custom_tool_call",
        "local_shell_call",
        "web_search_call",
        "image_generation_call",
        "tool_search_call",
    }
)
_RESULT_ITEMS = frozenset(
    {"function_call_output", "custom_tool_call_output", "local_shell_call_output"}
)
# Recorded, never sent to the model.
_IGNORED_ITEMS = frozenset({"ghost_snapshot", "other"})
# Rollout entries of Codex's own state (0.171: world_state, a snapshot of what the context
# items already say).
_IGNORED_ENTRIES = frozenset({"world_state"})
# Context Codex adds as user-role messages; not the person's prompt.
_CONTEXT_PREFIXES = (
    "# AGENTS.md instructions",
    "<environment_context>",
    "<user_instructions>",
    "<permissions instructions>",
    "<turn_aborted>",
    "<user_shell_command>",
    "<INSTRUCTIONS>",
)
_EXIT_RE = re.compile(r"(?:Process exited with code|Exit code:) (-?\d+)")
_SESSION_RE = re.compile(r"Process running with session ID (\d+)")
_NESTED_EXIT_RE = re.compile(r'"exit_code"\s*:\s*(-?\d+)')


def is_codex_start(entry: dict[str, Any]) -> bool:
    """The first entry of a rollout: `session_meta`, or the bare header of the oldest ones."""
    if entry.get("type") == "session_meta":
        return True
    keys = set(entry)
    return (
        "id" in keys and "timestamp" in keys and keys <= {"id", "timestamp", "instructions", "git"}
    )


def _text(content: object) -> str:
    return content_text(content)


def _kept_chars(item: dict[str, Any]) -> int:
    """What one item of a compaction's replacement history adds to the context: its text, or
    for remote compaction's opaque `compaction` item (0.171: the summary, encrypted, in
    base64) the bytes it decodes to — an estimate of the summary it stands for."""
    blob = item.get("encrypted_content")
    if item.get("type") == "compaction" and isinstance(blob, str):
        return len(blob) * 3 // 4
    return len(_text(item.get("content")))


def _reasoning_chars(item: dict[str, Any]) -> int:
    n = 0
    for key in ("summary", "content"):
        parts = item.get(key)
        if isinstance(parts, list):
            n += sum(
                len(p["text"])
                for p in parts
                if isinstance(p, dict) and isinstance(p.get("text"), str)
            )
    return n


def _patch_calls(call_id: str, agent_tool: str, patch: str, total_chars: int) -> list[ToolCall]:
    ops = patch_calls(patch)
    if not ops:
        return [ToolCall(call_id, "edit", {"patch": patch}, total_chars, agent_tool)]
    calls = []
    rest = total_chars
    for i, (op, path, body) in enumerate(ops):
        if op == "add":
            name, args = "write", {"path": path, "content": body}
        else:
            name, args = "edit", {"path": path, "patch": body, "op": op}
        # the patch is one argument; each file's share of its size, the rest on the first
        chars = min(rest, len(body) + len(path)) if i else 0
        calls.append(
            ToolCall(call_id if i == 0 else f"{call_id}#{i}", name, args, chars, agent_tool)
        )
        rest -= chars
    first = calls[0]
    calls[0] = ToolCall(first.call_id, first.name, first.args, rest, agent_tool)
    return calls


class _Response:
    """One model response being collected (its items arrive one by one)."""

    def __init__(self, key: str, ts: float, model: str | None) -> None:
        self.key = key
        self.ts = ts
        self.model = model
        self.chars = 0
        self.text = ""
        self.calls: list[ToolCall] = []
        self.usage: dict[str, Any] | None = None

    def message(self) -> Message:
        out = Message(
            self.key,
            None,
            "assistant",
            self.ts,
            self.chars + sum(c.chars for c in self.calls),
            calls=self.calls,
            request_key=self.key,
            model=self.model,
            text=self.text,
        )
        u = self.usage
        if u is not None:
            prompt = _n(u.get("input_tokens"))
            cached = min(prompt, _n(u.get("cached_input_tokens")))
            out.usage_prompt_tokens = prompt
            out.usage_input_tokens = prompt - cached
            out.usage_cache_read_tokens = cached
            # OpenAI caches without a write charge; 0.171 reports cache_write_input_tokens
            out.usage_cache_write_tokens = _n(u.get("cache_write_input_tokens"))
            out.output_tokens = _n(u.get("output_tokens"))
        return out


def _n(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return 0
    return max(0, int(value))


class CodexReader:
    """Rollout entries → events, one entry at a time. A round (one response and the inputs
    after it) is held until the next response starts, so the usage reported after a response
    lands on it; nothing older is kept."""

    def __init__(self, path: Path, stats: ReadStats) -> None:
        self.path = path
        self.stats = stats
        self.header_done = False
        self.base_chars = 0  # Codex's own instructions, when the rollout records them
        self.system_sent = False
        self.model: str | None = None
        self.resp: _Response | None = None
        self.held: list[Event] = []  # inputs after the open response (or before the first)
        self.responses = 0
        self.last_totals: object = None
        self.calls: dict[str, ToolCall] = {}  # call id → call, for the results
        self.processes: dict[str, ToolCall] = {}  # exec session id → the command's call
        self.user_texts: list[str] = []  # user prompts recorded as items in this round
        self.n = 0

    # -- header ---------------------------------------------------------------------------

    def header(self, entry: dict[str, Any]) -> Header:
        self.header_done = True
        meta = entry.get("payload") if entry.get("type") == "session_meta" else entry
        meta = meta if isinstance(meta, dict) else {}
        base = meta.get("base_instructions")
        if isinstance(base, dict) and isinstance(base.get("text"), str):
            self.base_chars = len(base["text"])
        elif isinstance(base, str):
            self.base_chars = len(base)
        origin = str(meta.get("originator") or "codex")
        version = str(meta["cli_version"]) if meta.get("cli_version") else None
        return Header(
            "codex",
            str(meta.get("id") or self.path.stem),
            meta.get("cwd") if isinstance(meta.get("cwd"), str) else None,
            parse_ts(meta.get("timestamp")) or parse_ts(entry.get("timestamp")),
            version,
            source=f"codex {origin}" + (f" {version}" if version else ""),
        )

    # -- entries --------------------------------------------------------------------------

    def feed(self, entry: dict[str, Any]) -> Iterator[Event]:
        self.n += 1
        kind = entry.get("type")
        ts = parse_ts(entry.get("timestamp")) or 0.0
        if not self.header_done:
            yield self.header(entry)
            if kind == "session_meta" or "payload" not in entry:
                return
        payload = entry.get("payload")
        if kind == "session_meta":
            return  # a resumed or forked session's earlier header
        if kind == "turn_context":
            if isinstance(payload, dict) and payload.get("model"):
                self.model = str(payload["model"])
            return
        if kind == "event_msg":
            if isinstance(payload, dict):
                yield from self._event(payload, ts)
            return
        if kind == "compacted":
            yield from self._compacted(payload if isinstance(payload, dict) else {}, ts)
            return
        if kind == "token_usage_record":
            # 0.171+: one per response, right after it (the token_count event comes later)
            usage = payload.get("usage") if isinstance(payload, dict) else None
            if self.resp is not None and self.resp.usage is None and isinstance(usage, dict):
                self.resp.usage = usage
            return
        if kind in _IGNORED_ENTRIES:
            return
        if kind == "response_item":
            if not isinstance(payload, dict):
                self.stats.skip("Codex response item without a payload object")
                return
            yield from self._item(payload, ts)
            return
        if kind is None and "record_type" in entry:
            return  # the oldest rollouts' state records
        if kind in ("message", *_OUTPUT_ITEMS, *_RESULT_ITEMS, *_IGNORED_ITEMS):
            yield from self._item(entry, ts)  # the oldest rollouts: bare items
            return
        self.stats.skip(f"unknown Codex rollout entry type {str(kind)[:40]!r}")

    def finish(self) -> Iterator[Event]:
        yield from self._flush()

    # -- rounds ---------------------------------------------------------------------------

    def _flush(self) -> Iterator[Event]:
        if self.resp is not None:
            if not self.system_sent and self.resp.usage is None and self.base_chars:
                # no usage to estimate Codex's prompt from: its recorded instructions instead
                yield SystemPrompt(self.resp.ts, self.base_chars, 0, 0)
            self.system_sent = True
            yield self.resp.message()
            self.resp = None
        yield from self.held
        self.held = []

    def _open(self, ts: float) -> Iterator[Event]:
        """An output item: part of the open response, or the first of the next one (after an
        input, or after the open one's usage was reported)."""
        if self.resp is None or self.held or self.resp.usage is not None:
            yield from self._flush()
            self.responses += 1
            self.resp = _Response(f"codex-response-{self.responses}", ts, self.model)
            self.user_texts = []
        self.resp.ts = ts

    def _input(self, ev: Event) -> None:
        """An input the next request carries: held until that request's response begins."""
        self.held.append(ev)

    # -- items ----------------------------------------------------------------------------

    def _item(self, item: dict[str, Any], ts: float) -> Iterator[Event]:
        itype = item.get("type")
        if itype in _IGNORED_ITEMS:
            return
        if itype == "message":
            role = item.get("role")
            text = _text(item.get("content"))
            if role == "assistant":
                yield from self._open(ts)
                assert self.resp is not None
                self.resp.chars += len(text)
                self.resp.text += text
                return
            eid = f"codex-{self.n}"
            if role == "user" and not text.lstrip().startswith(_CONTEXT_PREFIXES):
                self.user_texts.append(text.strip())
                self._input(Message(eid, None, "user", ts, len(text), text=text[:2000]))
            else:  # developer/system instructions, AGENTS.md, environment context
                self._input(Message(eid, None, "custom", ts, len(text)))
            return
        if itype in _OUTPUT_ITEMS:
            yield from self._open(ts)
            assert self.resp is not None
            if itype == "reasoning":
                self.resp.chars += _reasoning_chars(item)
            elif itype == "web_search_call":
                self.resp.chars += len(json.dumps(item.get("action") or {}, ensure_ascii=False))
            else:
                self.resp.calls += self._calls(item)
            return
        if itype in _RESULT_ITEMS:
            self._input(self._result(item, ts))
            return
        if itype == "additional_tools":
            # newer model entries: the tool definitions travel as an input item
            tools = json.dumps(item.get("tools") or [], ensure_ascii=False)
            self._input(Message(f"codex-{self.n}", None, "custom", ts, len(tools)))
            return
        self.stats.skip(f"unknown Codex response item type {str(itype)[:40]!r}")

    def _calls(self, item: dict[str, Any]) -> list[ToolCall]:
        itype = item.get("type")
        call_id = str(item.get("call_id") or item.get("id") or f"codex-call-{self.n}")
        name = str(item.get("name") or ("shell" if itype == "local_shell_call" else ""))
        if itype == "custom_tool_call":
            raw = item.get("input")
            raw = raw if isinstance(raw, str) else ""
            args: dict[str, Any] = {"input": raw}
        elif itype == "local_shell_call":
            action = item.get("action")
            args = action if isinstance(action, dict) else {}
            raw = json.dumps(args, ensure_ascii=False)
        else:
            raw = item.get("arguments")
            raw = raw if isinstance(raw, str) else json.dumps(raw or {}, ensure_ascii=False)
            try:
                parsed = json.loads(raw) if raw else {}
            except ValueError:
                parsed = {"input": raw}
            args = parsed if isinstance(parsed, dict) else {"input": parsed}
        chars = len(name) + len(raw)
        calls = self._classify(call_id, name, args, chars)
        # neither a command nor a patch: a lookup (an MCP or web tool's call) is read-like, as
        # the proxy sees it (agents/codex/responses_wire.call_info)
        tool = lookup_of(name, raw if itype == "custom_tool_call" else args, item.get("namespace"))
        if tool is not None and len(calls) == 1 and calls[0].name == name.lower():
            query = raw if itype == "custom_tool_call" else json.dumps(args, ensure_ascii=False)
            calls = [ToolCall(call_id, "fetch", {"tool": tool, "input": query}, chars, name)]
        for c in calls:
            self.calls[c.call_id] = c
        return calls

    def _classify(
        self, call_id: str, name: str, args: dict[str, Any], chars: int
    ) -> list[ToolCall]:
        low = name.lower()
        command: str | None = None
        if low in ("shell", "container.exec", "local_shell"):
            cmd = args.get("command")
            if isinstance(cmd, list):
                command = unwrap_argv([str(x) for x in cmd])
            elif isinstance(cmd, str):
                command = cmd
        elif low in ("exec_command", "shell_command"):
            cmd = args.get("cmd", args.get("command"))
            command = cmd if isinstance(cmd, str) else None
        elif low == "apply_patch":
            patch = args.get("input", args.get("patch"))
            if isinstance(patch, str):
                return _patch_calls(call_id, name, patch, chars)
        elif low == "write_stdin":
            sid = str(args.get("session_id", ""))
            started = self.processes.get(sid)
            if started is not None:
                extra = {"session_id": args.get("session_id"), "chars": args.get("chars")}
                return [ToolCall(call_id, started.name, {**started.args, **extra}, chars, name)]
            return [ToolCall(call_id, "bash", {**args, "command": ""}, chars, name)]
        elif low in ("js", "exec"):
            # the JavaScript exec tool (Desktop's js, the custom `exec` of newer model entries)
            # (the proxy's own rule: a script of one `tools.exec_command` call is its command)
            code = args.get("code", args.get("input"))
            command = shell_command_of("exec", code) if isinstance(code, str) else None
        if command is None:
            return [ToolCall(call_id, low, args, chars, name if name != low else None)]
        patch = heredoc_patch(command)
        if patch is not None:
            return _patch_calls(call_id, name, patch, chars)
        kind, cargs = classify(command)
        return [ToolCall(call_id, kind, cargs, chars, name)]

    def _result(self, item: dict[str, Any], ts: float) -> Message:
        call_id = str(item.get("call_id") or "")
        out = item.get("output")
        raw = out if isinstance(out, str) else json.dumps(out, ensure_ascii=False)
        text = raw
        exit_code: int | None = None
        if isinstance(out, list):
            text = _text(out)
        elif isinstance(out, dict):
            text = _text([out]) or raw
        elif raw.startswith('{"output"'):
            # 0.77 shell and apply_patch: {"output": …, "metadata": {"exit_code": …}}
            try:
                doc = json.loads(raw)
            except ValueError:
                doc = None
            if isinstance(doc, dict) and isinstance(doc.get("output"), str):
                text = doc["output"]
                meta = doc.get("metadata")
                if isinstance(meta, dict) and isinstance(meta.get("exit_code"), int):
                    exit_code = meta["exit_code"]
        if exit_code is None:
            m = _EXIT_RE.search(text[:400])
            exit_code = int(m.group(1)) if m else None
        call = self.calls.pop(call_id, None)  # answered: forget it (memory stays bounded)
        if exit_code is None and call is not None and call.agent_tool in ("js", "exec"):
            m = _NESTED_EXIT_RE.search(text[:600])  # the exec tool's nested result, before "output"
            exit_code = int(m.group(1)) if m else None
        if call is not None and call.agent_tool in ("exec_command", "js", "exec"):
            running = _SESSION_RE.search(text[:400])
            if running is not None:
                self.processes[running.group(1)] = call
        if call is not None and call.name == "fetch":  # as the proxy stores and tags it
            text = lookup_text(split_exec_output(text).body)
        return Message(
            f"codex-{self.n}",
            None,
            "tool_result",
            ts,
            len(raw),
            tool_call_id=call_id,
            tool_name=call.name if call is not None else None,
            text=text,
            is_error=bool(exit_code),
        )

    # -- events ---------------------------------------------------------------------------

    def _event(self, payload: dict[str, Any], ts: float) -> Iterator[Event]:
        etype = payload.get("type")
        if etype == "token_count":
            info = payload.get("info")
            if not isinstance(info, dict):
                return
            totals = info.get("total_token_usage")
            if totals is not None and totals == self.last_totals:
                return  # the same count, reported again
            self.last_totals = totals
            last = info.get("last_token_usage")
            if self.resp is not None and self.resp.usage is None and isinstance(last, dict):
                self.resp.usage = last
            return
        if etype == "user_message":
            # the person's prompt; Codex Desktop records it only here
            text = payload.get("message")
            text = text if isinstance(text, str) else ""
            if text.strip() and text.strip() not in self.user_texts:
                self.user_texts.append(text.strip())
                self._input(
                    Message(f"codex-{self.n}", None, "user", ts, len(text), text=text[:2000])
                )
        return
        yield  # a generator, like the other handlers

    def _compacted(self, payload: dict[str, Any], ts: float) -> Iterator[Event]:
        yield from self._flush()
        history = payload.get("replacement_history")
        if isinstance(history, list):
            chars = sum(_kept_chars(h) for h in history if isinstance(h, dict))
        else:
            chars = len(str(payload.get("message") or ""))
        yield Compaction(ts, chars, None)
