"""Streaming readers of agent session files: pi (1.x and 0.73: session formats v1, v2 and v3,
the older ones migrated as pi migrates them on load) and Claude Code transcripts, and
`read_session`, which picks the reader of a file (Codex rollouts: `_read_codex.py`). Each yields
the normalised events of `_events.py`; nothing here holds more than one entry.

A line longer than MAX_LINE_BYTES is skipped without being read into memory whole; a line that
is not JSON, not an object, or of an unknown type is counted with a reason and skipped. A line
holding several JSON objects written back to back (a real pi write race) yields each of them.
The files are opened read-only and never written.
"""

from __future__ import annotations

import functools
import itertools
import json
import math
import re
from collections.abc import Callable, Collection, Iterable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

from ctxwrap.agents.claude import anthropic_wire
from ctxwrap.replay._events import (
    ClearedResults,
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
from ctxwrap.replay._read_codex import CodexReader, is_codex_start

MAX_LINE_BYTES = 16 << 20
# Bytes sniffed to tell a binary file from a session file.
SNIFF_BYTES = 4096

# pi entry types that carry nothing replay needs (their presence is not an error).
_PI_IGNORED = frozenset(
    {
        "model_change",
        "thinking_level_change",
        "usage",
        "custom",
        "label",
        "session_info",
    }
)
# Claude Code transcript entry types with no effect on the model's context: session metadata
# (2.1.197 lists these as always kept on resume). Its context-collapse entries
# (`marble-origami-*`) and fork references do change the context: still reported as unknown.
_CLAUDE_IGNORED = frozenset(
    {
        "summary",
        "file-history-snapshot",
        "queue-operation",
        "progress",
        "last-prompt",
        "custom-title",
        "ai-title",
        "ended-by-model",
        "tag",
        "relocated",
        "agent-name",
        "agent-color",
        "agent-setting",
        "pr-link",
        "frame-link",
        "bridge-session",
        "attribution-snapshot",
        "speculation-accept",
        "mode",
        "permission-mode",
        "isolation-latch",
        "worktree-state",
    }
)
_CLAUDE_TYPES = (
    frozenset({"user", "assistant", "system", "attachment", "content-replacement"})
    | _CLAUDE_IGNORED
)


def iter_lines(fh: BinaryIO, stats: ReadStats) -> Iterator[bytes]:
    """Lines of a file, each at most MAX_LINE_BYTES; longer ones are skipped unread."""
    while True:
        line = fh.readline(MAX_LINE_BYTES + 1)
        if not line:
            return
        stats.bytes += len(line)
        if len(line) > MAX_LINE_BYTES and not line.endswith(b"\n"):
            # Drain the rest of the oversized line in bounded pieces.
            while True:
                more = fh.readline(1 << 20)
                stats.bytes += len(more)
                if not more or more.endswith(b"\n"):
                    break
            stats.lines += 1
            stats.skip(f"line over {MAX_LINE_BYTES >> 20} MiB")
            continue
        stats.lines += 1
        yield line


def looks_binary(head: bytes) -> bool:
    if b"\x00" in head:
        return True
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc.start < len(head) - 4  # a cut multi-byte character at the end is fine
    return False


def _thinking_chars(content: object) -> int:
    """Chars of `_content_chars` that are a thinking block's text or a redacted one's data."""
    n = 0
    for b in content if isinstance(content, list) else ():
        if isinstance(b, dict) and b.get("type") in ("thinking", "redacted_thinking"):
            v = b.get("thinking") if b.get("type") == "thinking" else b.get("data")
            n += len(v) if isinstance(v, str) else 0
    return n


def _thinking_order(content: object, call_type: str) -> tuple[bool, tuple[str, ...]]:
    """(holds a thinking block, the ids of the calls a thinking block follows) of an assistant
    message's content (`call_type`: Anthropic's tool_use or pi's toolCall)."""
    seen: list[str] = []
    bound: list[str] = []
    thinking = False
    for b in content if isinstance(content, list) else ():
        if not isinstance(b, dict):
            continue
        if b.get("type") in ("thinking", "redacted_thinking"):
            thinking = True
            bound += seen
            seen = []
        elif b.get("type") == call_type and isinstance(b.get("id"), str):
            seen.append(b["id"])
    return thinking, tuple(bound)


def _json_len(value: object) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")))


def _content_chars(content: object) -> int:
    """Characters the provider receives for a content field (text parts; an image as the
    characters its tokens stand for, see image_chars)."""
    if isinstance(content, str):
        return len(content)
    n = 0
    if isinstance(content, list):
        for block in content:
            if not isinstance(block, dict):
                continue
            if isinstance(block.get("text"), str):
                n += len(block["text"])
            elif isinstance(block.get("thinking"), str):
                n += len(block["thinking"])
            elif block.get("type") == "image":
                n += image_chars(block)
            elif isinstance(block.get("data"), str):
                n += len(block["data"])
    return n


# Anthropic's image cost: about width x height / 750 tokens, after scaling the image down to a
# long edge of 1568 px and 1.15 megapixels (docs.anthropic.com, vision); at most ~1,600.
IMAGE_MAX_TOKENS = 1600


def image_chars(block: dict[str, Any]) -> int:
    """An image block (pi: data + mimeType; Anthropic: source.data) as 4 characters per token
    it costs, so the chars/4 token estimate prices it right (its base64 length would make one
    screenshot look like 20k tokens)."""
    data = block.get("data")
    source = block.get("source")
    if not isinstance(data, str) and isinstance(source, dict):
        data = source.get("data")
    size = image_size(data) if isinstance(data, str) else None
    if size is None:
        return 4 * IMAGE_MAX_TOKENS
    w, h = size
    scale: float = min(1.0, 1568 / max(w, h), math.sqrt(1_150_000 / (w * h)))
    tokens = int(w * scale * h * scale / 750 + 0.5)
    return 4 * max(1, min(IMAGE_MAX_TOKENS, tokens))


def image_size(b64: str) -> tuple[int, int] | None:
    """(width, height) from the header of a base64 PNG, GIF or JPEG; None if unknown."""
    import base64
    import binascii

    try:
        head = base64.b64decode(b64[:96] + "=" * (-len(b64[:96]) % 4))
    except (binascii.Error, ValueError):
        return None
    if head[:8] == b"\x89PNG\r\n\x1a\n" and len(head) >= 24:
        w, h = int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")
    elif head[:4] == b"GIF8" and len(head) >= 10:
        w, h = int.from_bytes(head[6:8], "little"), int.from_bytes(head[8:10], "little")
    elif head[:2] == b"\xff\xd8":
        return _jpeg_size(b64)
    else:
        return None
    return (w, h) if w > 0 and h > 0 else None


def _jpeg_size(b64: str) -> tuple[int, int] | None:
    import base64
    import binascii

    part = b64[: 4 * 24576]  # the frame header is near the start: 72 KiB is plenty
    try:
        data = base64.b64decode(part[: len(part) - len(part) % 4])
    except (binascii.Error, ValueError):
        return None
    i = 2
    while i + 9 < len(data):
        if data[i] != 0xFF:
            return None
        marker = data[i + 1]
        length = int.from_bytes(data[i + 2 : i + 4], "big")
        if marker in (0xC0, 0xC1, 0xC2, 0xC3):
            h, w = (
                int.from_bytes(data[i + 5 : i + 7], "big"),
                int.from_bytes(data[i + 7 : i + 9], "big"),
            )
            return (w, h) if w > 0 and h > 0 else None
        i += 2 + length
    return None


def _int(value: object) -> int:
    """A token count as recorded (numbers only; anything else is 0)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return 0
    return max(0, int(value))


def _has_counts(usage: dict[str, Any], keys: tuple[str, ...]) -> bool:
    """Whether a usage record holds any token count at all (else it says nothing)."""
    return any(_int(usage.get(k)) or usage.get(k) == 0 for k in keys)


# -- pi -----------------------------------------------------------------------------------------

# What pi puts around a summary in the context (pi-coding-agent core/messages.js).
_PI_SUMMARY_WRAP = {
    "compaction": (
        "The conversation history before this point was compacted into the following summary:"
        "\n\n<summary>\n",
        "\n</summary>",
    ),
    "branch": (
        "The following is a summary of a branch that this conversation came back from:"
        "\n\n<summary>\n",
        "</summary>",
    ),
}


def _summary_chars(summary: object, kind: str = "compaction") -> int:
    head, tail = _PI_SUMMARY_WRAP[kind]
    return len(head) + len(summary if isinstance(summary, str) else "") + len(tail)


def bash_execution_text(msg: dict[str, Any]) -> str:
    """The user text pi sends for a `!cmd` it ran (core/messages.js bashExecutionToText)."""
    text = f"Ran `{msg.get('command', '')}`\n"
    output = msg.get("output")
    text += f"```\n{output}\n```" if output else "(no output)"
    exit_code = msg.get("exitCode")
    if msg.get("cancelled"):
        text += "\n\n(command cancelled)"
    elif exit_code is not None and exit_code != 0:
        text += f"\n\nCommand exited with code {exit_code}"
    if msg.get("truncated") and msg.get("fullOutputPath"):
        text += f"\n\n[Output truncated. Full output: {msg['fullOutputPath']}]"
    return text


class PiMigration:
    """pi's own migration of older session files, one entry at a time (pi-coding-agent
    core/session-manager.js migrateV1ToV2 and migrateV2ToV3, which pi runs on load).

    v1 → v2: every entry after the header gets an id and the previous entry as its parent (a
    v1 session is a line); a compaction's `firstKeptEntryIndex` (an index into the file's
    entries, the header being 0) becomes `firstKeptEntryId`. v2 → v3: the role `hookMessage`
    is renamed `custom`. The ids are synthetic ("v1-<index>"); pi draws random ones.
    """

    def __init__(self, version: int) -> None:
        self.version = version
        self.index = 0  # the header is entry 0
        self.prev_id: str | None = None

    def __call__(self, entry: dict[str, Any]) -> dict[str, Any]:
        self.index += 1
        if self.version >= 3:
            return entry
        entry = dict(entry)
        if self.version < 2:
            eid = f"v1-{self.index}"
            entry["id"], entry["parentId"] = eid, self.prev_id
            self.prev_id = eid
            if entry.get("type") == "compaction":
                k = entry.pop("firstKeptEntryIndex", None)
                if isinstance(k, int) and not isinstance(k, bool) and k >= 1:
                    entry["firstKeptEntryId"] = f"v1-{k}"
        msg = entry.get("message")
        if isinstance(msg, dict) and msg.get("role") == "hookMessage":
            entry["message"] = {**msg, "role": "custom"}
        return entry


def pi_version(header: dict[str, Any]) -> int:
    """The session format version of a pi header (no `version`: v1, as pi reads it)."""
    v = header.get("version")
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return 1
    return int(v)


def _pi_tools_chars(tools: object) -> int:
    if not isinstance(tools, list):
        return 0
    n = 0
    for t in tools:
        if isinstance(t, dict):
            n += len(str(t.get("name", ""))) + len(str(t.get("description", "")))
            n += _json_len(t.get("parameters", {}))
    return n


def _pi_calls(content: object) -> list[ToolCall]:
    calls = []
    if isinstance(content, list):
        for block in content:
            if isinstance(block, dict) and block.get("type") == "toolCall":
                args = block.get("arguments")
                args = args if isinstance(args, dict) else {}
                name = str(block.get("name", ""))
                calls.append(
                    ToolCall(
                        str(block.get("id", "")), name.lower(), args, len(name) + _json_len(args)
                    )
                )
    return calls


def pi_event(entry: dict[str, Any], stats: ReadStats, seen_system: bool) -> Event | None:
    kind = entry.get("type")
    ts = parse_ts(entry.get("timestamp")) or 0.0
    eid = str(entry.get("id", ""))
    parent = entry.get("parentId")
    parent = str(parent) if parent is not None else None
    if kind == "message":
        msg = entry.get("message")
        if not isinstance(msg, dict):
            stats.skip("pi message without a message object")
            return None
        role = msg.get("role")
        content = msg.get("content")
        if role == "system":
            raw_sections = msg.get("sections")
            sections: dict[str, Any] = raw_sections if isinstance(raw_sections, dict) else {}
            text_chars = _content_chars(content) + sum(
                len(v) for v in sections.values() if isinstance(v, str)
            )
            raw_skills = sections.get("skills")
            skills = raw_skills if isinstance(raw_skills, str) else ""
            tools = _pi_tools_chars(msg.get("toolsAdded"))
            if not seen_system:
                return SystemPrompt(ts, text_chars, tools, len(skills))
            # a later system message is a mid-conversation delta: part of the message list
            return Message(eid, parent, "system", ts, text_chars + tools)
        if role == "user":
            # the user's request, quoted (≤ 2000 chars) by a real tagger's prompt
            return Message(
                eid, parent, "user", ts, _content_chars(content), text=content_text(content)[:2000]
            )
        if role == "assistant":
            calls = _pi_calls(content)
            usage = msg.get("usage") if isinstance(msg.get("usage"), dict) else {}
            chars = _content_chars(content) + sum(c.chars for c in calls)
            out = Message(
                eid,
                parent,
                "assistant",
                ts,
                chars,
                calls=calls,
                request_key=eid,
                model=str(msg["model"]) if msg.get("model") else None,
                text=content_text(content),
            )
            out.thinking, out.calls_before_thinking = _thinking_order(content, "toolCall")
            out.thinking_chars = _thinking_chars(content)
            if usage and _has_counts(usage, ("input", "cacheRead", "cacheWrite")):
                uncached, read, write = (
                    _int(usage.get(k)) for k in ("input", "cacheRead", "cacheWrite")
                )
                out.usage_prompt_tokens = uncached + read + write
                out.usage_input_tokens, out.usage_cache_read_tokens = uncached, read
                out.usage_cache_write_tokens = write
                out.output_tokens = _int(usage.get("output"))
            return out
        if role == "toolResult":
            text = content_text(content)
            return Message(
                eid,
                parent,
                "tool_result",
                ts,
                _content_chars(content),
                tool_call_id=str(msg.get("toolCallId", "")),
                tool_name=str(msg.get("toolName", "")).lower(),
                text=text,
                is_error=bool(msg.get("isError")),
            )
        if role == "bashExecution":
            # a user-run `!cmd`: in the context as user text (`!!cmd` is kept out of it)
            if msg.get("excludeFromContext"):
                return None
            return Message(eid, parent, "custom", ts, len(bash_execution_text(msg)))
        if role in ("custom", "hookMessage"):  # hookMessage: v2's name (migrateV2ToV3)
            return Message(eid, parent, "custom", ts, _content_chars(content))
        if role == "branchSummary":
            return Message(eid, parent, "custom", ts, _summary_chars(msg.get("summary"), "branch"))
        if role == "compactionSummary":
            return Message(eid, parent, "custom", ts, _summary_chars(msg.get("summary")))
        stats.skip(f"pi message of unknown role {str(role)[:40]!r}")
        return None
    if kind == "compaction":
        first_kept = entry.get("firstKeptEntryId")
        return Compaction(
            ts,
            _summary_chars(entry.get("summary")),
            str(first_kept) if first_kept is not None else None,
            tokens_before=_int(entry.get("tokensBefore")) or None,
        )
    if kind == "context_edit":
        # an extension replaced (or, with null, removed) an earlier entry's content in the
        # context from here on (pi core/session-manager.js projectContextEntry)
        target = entry.get("targetId")
        repl = entry.get("replacement")
        chars = _content_chars(repl.get("content")) if isinstance(repl, dict) else 0
        stats.notes["pi context edits (replacements of earlier entries)"] += 1
        return ClearedResults(ts, (), chars, None, (str(target),) if target else ())
    if kind == "custom_message":
        return Message(eid, parent, "custom", ts, _content_chars(entry.get("content")))
    if kind == "branch_summary":
        if not entry.get("summary"):
            return None  # pi puts nothing in the context for an empty one
        return Message(eid, parent, "custom", ts, _summary_chars(entry.get("summary"), "branch"))
    if kind in _PI_IGNORED:
        return None
    stats.skip(f"unknown pi entry type {str(kind)[:40]!r}")
    return None


# -- Claude Code --------------------------------------------------------------------------------

# What Claude Code puts in place of a tool result it cleared (microcompact).
CLAUDE_CLEARED_TEXT = "[Old tool result content cleared]"


_CLAUDE_PROMPT_KEYS = ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")


def _claude_usage(out: Message, usage: dict[str, Any]) -> None:
    if not _has_counts(usage, _CLAUDE_PROMPT_KEYS):
        return
    uncached, read, write = (_int(usage.get(k)) for k in _CLAUDE_PROMPT_KEYS)
    out.usage_prompt_tokens = uncached + read + write
    out.usage_input_tokens, out.usage_cache_read_tokens = uncached, read
    out.usage_cache_write_tokens = write
    out.output_tokens = _int(usage.get("output_tokens"))
    split = usage.get("cache_creation")
    if isinstance(split, dict):
        # 1-hour writes cost 2x input, 5-minute ones 1.25x: the split says which were which
        out.usage_cache_write_1h_tokens = _int(split.get("ephemeral_1h_input_tokens"))


class ClaudeReader:
    """Claude Code transcript entries → events. One transcript is one context: the main
    session's file, or a sub-agent's (`<session>/subagents/agent-*.jsonl`, every entry a
    sidechain), which is read as a session of its own. Sidechain entries inside a main
    session's file (older Claude Code) are another context and are counted, not mixed in.

    A compaction is a `compact_boundary` entry followed by the summary Claude Code sends in
    place of the history (`isCompactSummary`): the two become one Compaction. A
    `microcompact_boundary` lists tool results Claude Code cleared itself: ClearedResults.
    """

    def __init__(self, path: Path, stats: ReadStats) -> None:
        self.path = path
        self.stats = stats
        self.header_done = False
        self.subagent: bool | None = None
        self.pending_boundary: float | None = None  # ts of a boundary awaiting its summary
        self.pending_trigger: str | None = None  # its compactMetadata.trigger

    def header(self, entry: dict[str, Any]) -> Header:
        sid = str(entry.get("sessionId") or self.path.stem)
        agent = entry.get("agentId")
        self.subagent = (
            bool(self.subagent)
            or bool(entry.get("isSidechain"))
            or self.path.name.startswith("agent-")
        )
        agent_id = str(agent) if agent else None
        if self.subagent and agent_id is None and self.path.name.startswith("agent-"):
            agent_id = self.path.stem.removeprefix("agent-")
        return Header(
            "claude",
            f"agent-{agent_id}" if self.subagent and agent_id else sid,
            entry.get("cwd") if isinstance(entry.get("cwd"), str) else None,
            parse_ts(entry.get("timestamp")),
            str(entry.get("version")) if entry.get("version") else None,
            source="claude sub-agent" if self.subagent else "claude",
            parent_session_id=sid if self.subagent and entry.get("sessionId") else None,
            agent_id=agent_id if self.subagent else None,
        )

    def feed(self, entry: dict[str, Any]) -> Iterator[Event]:
        kind = entry.get("type")
        if kind in _CLAUDE_IGNORED:
            return
        if kind not in _CLAUDE_TYPES:
            self.stats.skip(f"unknown Claude Code entry type {str(kind)[:40]!r}")
            return
        if not self.header_done:
            self.header_done = True
            yield self.header(entry)
        if entry.get("isSidechain") and not self.subagent:
            self.stats.skip(
                "Claude Code sub-agent entry inside the main transcript (its own context)"
            )
            return
        if self.pending_boundary is not None and not entry.get("isCompactSummary"):
            yield Compaction(self.pending_boundary, 0, None, self.pending_trigger)
            self.pending_boundary = None
        yield from self._events(entry, kind)

    def finish(self) -> Iterator[Event]:
        if self.pending_boundary is not None:
            yield Compaction(self.pending_boundary, 0, None, self.pending_trigger)
            self.pending_boundary = None

    def _events(self, entry: dict[str, Any], kind: object) -> Iterator[Event]:
        ts = parse_ts(entry.get("timestamp")) or 0.0
        eid = str(entry.get("uuid", ""))
        parent = entry.get("parentUuid")
        parent = str(parent) if parent is not None else None
        if kind == "system":
            subtype = entry.get("subtype")
            if subtype == "compact_boundary":
                self.pending_boundary = ts
                meta = entry.get("compactMetadata")
                trigger = meta.get("trigger") if isinstance(meta, dict) else None
                self.pending_trigger = trigger if trigger in ("auto", "manual") else None
            elif subtype == "microcompact_boundary":
                meta = entry.get("microcompactMetadata")
                meta = meta if isinstance(meta, dict) else {}
                ids = meta.get("compactedToolIds")
                ids = ids if isinstance(ids, list) else []
                yield ClearedResults(
                    ts,
                    tuple(str(i) for i in ids if isinstance(i, str)),
                    len(CLAUDE_CLEARED_TEXT),
                    _int(meta.get("tokensSaved")) or None,
                )
            return
        if kind == "content-replacement":
            # results over Claude Code's per-message budget, saved to a file and replaced by a
            # preview before the request that would first carry them (2.1.x)
            agent = entry.get("agentId")
            if agent and not self.subagent:
                self.stats.skip("Claude Code content replacement of a sub-agent's result")
                return
            replacements = entry.get("replacements")
            if not isinstance(replacements, list):
                self.stats.skip("Claude Code content replacement without a list")
                return
            replaced: list[str] = []
            sizes: list[int] = []
            for r in replacements:
                if not isinstance(r, dict) or r.get("kind") != "tool-result":
                    self.stats.skip("Claude Code content replacement of an unknown kind")
                    continue
                if isinstance(r.get("toolUseId"), str):
                    replaced.append(r["toolUseId"])
                    sizes.append(_content_chars(r.get("replacement")))
            if replaced:
                yield ClearedResults(ts, tuple(replaced), 0, None, (), tuple(sizes))
            return
        if kind == "attachment":
            # skill and agent listings, file changes …: sent to the model as reminder text
            att = entry.get("attachment")
            if isinstance(att, dict):
                chars = len(att["content"]) if isinstance(att.get("content"), str) else 0
                lines = att.get("addedLines")
                if isinstance(lines, list):
                    chars += sum(len(x) + 1 for x in lines if isinstance(x, str))
                yield Message(eid, None, "custom", ts, chars)
            return
        msg = entry.get("message")
        if not isinstance(msg, dict):
            self.stats.skip("Claude Code entry without a message object")
            return
        content = msg.get("content")
        if kind == "user":
            if entry.get("isCompactSummary"):
                # the summary the model receives in place of the history before it
                yield Compaction(
                    self.pending_boundary if self.pending_boundary is not None else ts,
                    _content_chars(content),
                    None,
                    self.pending_trigger,
                )
                self.pending_boundary = None
                return
            if isinstance(content, list) and any(
                isinstance(b, dict) and b.get("type") == "tool_result" for b in content
            ):
                for b in content:
                    if not isinstance(b, dict) or b.get("type") != "tool_result":
                        continue
                    text = content_text(b.get("content"))
                    inner = b.get("content")
                    images = (
                        sum(
                            image_chars(x)
                            for x in inner
                            if isinstance(x, dict) and x.get("type") == "image"
                        )
                        if isinstance(inner, list)
                        else 0
                    )
                    yield Message(
                        eid,
                        parent,
                        "tool_result",
                        ts,
                        len(text) + images,
                        tool_call_id=str(b.get("tool_use_id", "")),
                        text=text,
                        is_error=bool(b.get("is_error")),
                    )
                return
            yield Message(
                eid, parent, "user", ts, _content_chars(content), text=content_text(content)[:2000]
            )
            return
        # assistant: Claude Code writes one entry per content block; entries of one response
        # share message.id, which is what makes them one request.
        calls = []
        if isinstance(content, list):
            for b in content:
                if isinstance(b, dict) and b.get("type") == "tool_use":
                    raw_args = b.get("input")
                    args: dict[str, Any] = raw_args if isinstance(raw_args, dict) else {}
                    name = str(b.get("name", ""))
                    size = len(name) + _json_len(args)
                    if anthropic_wire.is_lookup(name):
                        # a web or MCP tool's answer: a lookup, as the proxy tags and stores it
                        lookup = anthropic_wire.lookup_input(name, args)
                        calls.append(ToolCall(str(b.get("id", "")), "fetch", lookup, size, name))
                        continue
                    calls.append(ToolCall(str(b.get("id", "")), name.lower(), args, size))
        chars = _content_chars(content) + sum(c.chars for c in calls)
        if msg.get("model") == "<synthetic>":
            # written by Claude Code itself (an API error, an interrupt): no provider request
            yield Message(eid, parent, "custom", ts, chars)
            return
        out = Message(
            eid,
            parent,
            "assistant",
            ts,
            chars,
            calls=calls,
            request_key=str(msg.get("id") or entry.get("requestId") or eid),
            model=str(msg["model"]) if msg.get("model") else None,
            text=content_text(content),
        )
        out.thinking, out.calls_before_thinking = _thinking_order(content, "tool_use")
        out.thinking_chars = _thinking_chars(content)
        usage = msg.get("usage")
        if isinstance(usage, dict) and usage:
            _claude_usage(out, usage)
        yield out


def claude_events(entry: dict[str, Any], stats: ReadStats) -> Iterator[Event]:
    """The events of one entry of a main session's transcript (no header; see ClaudeReader)."""
    reader = ClaudeReader(Path("session.jsonl"), stats)
    reader.header_done, reader.subagent = True, False
    yield from reader.feed(entry)
    yield from reader.finish()


# -- sessions that already ran under ctxwrap ----------------------------------------------------

# How a tool result ctxwrap replaced begins (mechanisms/digest.py, amnesia.py, masking.py,
# writes.py, engine/rereads.py, engine/edits.py): the replacement is the whole result.
CTXWRAP_RESULT_MARKERS = (
    ("[ctxwrap digest of", "digested outputs"),
    ("[content stripped by ctxwrap", "stripped writes"),
    ("[ctxwrap: ", "hidden or pointed results"),
)
CTXWRAP_TOOLS = frozenset({"ctx_recall", "find_capability"})  # the bridge's own tools
# The digest's first line since it names the command first (mechanisms/digest.py digest_header)
CTXWRAP_DIGEST_LINE = re.compile(r"\$ [^\n]* → [^\n]* digested by ctxwrap · ")
PI_CTXWRAP_ENTRIES = {"ctxwrap-state": "ctxwrap state entries", "ctxwm-fact": "ctxwrap facts"}


def note_ctxwrap_marks(ev: Event, stats: ReadStats) -> None:
    """Count ctxwrap's own traces in an event: results that are our replacements, calls of our
    tools, writes whose body we stripped. Text the person typed is never taken as a sign."""
    if not isinstance(ev, Message):
        return
    if ev.role == "tool_result":
        head = ev.text[:64].lstrip()
        for prefix, what in CTXWRAP_RESULT_MARKERS:
            if head.startswith(prefix):
                stats.ctxwrap[what] += 1
                return
        if CTXWRAP_DIGEST_LINE.match(ev.text[:400].lstrip()):
            stats.ctxwrap["digested outputs"] += 1
            return
    elif ev.role == "assistant":
        for c in ev.calls:
            tool = c.agent_tool or c.name
            if tool in CTXWRAP_TOOLS:
                stats.ctxwrap[f"{tool} calls"] += 1
            content = c.args.get("content")
            if isinstance(content, str) and content.startswith("[content stripped by ctxwrap"):
                stats.ctxwrap["stripped writes"] += 1


def ctxwrap_known_sessions(db: Path | None = None) -> frozenset[str]:
    """Session ids and session files in ctxwrap's database (read-only; none when it is absent
    or unreadable). Read once per process and database."""
    if db is None:
        from ctxwrap.paths import db_path

        db = db_path()
    return _known_sessions(str(db))


@functools.lru_cache(maxsize=4)
def _known_sessions(db: str) -> frozenset[str]:
    if not Path(db).is_file():
        return frozenset()
    import sqlite3

    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=2.0)
        try:
            rows = conn.execute("SELECT session_id, session_file FROM sessions").fetchall()
        finally:
            conn.close()
    except sqlite3.Error:
        return frozenset()
    out: set[str] = set()
    for sid, file in rows:
        if sid:
            out.add(str(sid))
        if file:
            out.add(str(file))
    return frozenset(out)


# -- a whole file -------------------------------------------------------------------------------


class NotASession(Exception):
    """The file is not a session file replay can read (the reason is the message)."""


_DECODER = json.JSONDecoder()


def parse_line(raw: bytes, stats: ReadStats) -> list[dict[str, Any]]:
    """The JSON objects of one line: usually one; several written back to back (a write race
    that left out the newline) each count. What is not JSON or not an object is counted."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = raw.decode("utf-8", "replace")
    try:
        value = json.loads(text)
    except RecursionError:
        stats.skip("line is not JSON (truncated or corrupt)")
        return []
    except ValueError:
        return _parse_concatenated(text, stats)
    if not isinstance(value, dict):
        stats.skip("line is not a JSON object")
        return []
    stats.entries += 1
    return [value]


def _parse_concatenated(text: str, stats: ReadStats) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    pos, end = 0, len(text.rstrip())
    while pos < end:
        while pos < end and text[pos] in " \t\r\n":
            pos += 1
        if pos >= end:
            break
        try:
            value, pos = _DECODER.raw_decode(text, pos)
        except (ValueError, RecursionError):
            stats.skip("line is not JSON (truncated or corrupt)")
            break  # the objects before the damage still count
        if isinstance(value, dict):
            out.append(value)
        else:
            stats.skip("line is not a JSON object")
    if len(out) > 1:
        stats.notes[f"line holding {len(out)} JSON objects written together (each read)"] += 1
    stats.entries += len(out)
    return out


def iter_entries(fh: BinaryIO, stats: ReadStats) -> Iterator[dict[str, Any]]:
    for raw in iter_lines(fh, stats):
        if raw.strip():
            yield from parse_line(raw, stats)


def read_session(
    path: Path, stats: ReadStats, *, known_sessions: Collection[str] | None = None
) -> Iterator[Event]:
    """Events of one session file, in file order. Raises NotASession before the first event.

    `known_sessions`: session ids (and session file paths) ctxwrap's database knows; by
    default read from the database of this user, if there is one. A session found there, or
    whose transcript shows ctxwrap's markers, is flagged in `stats.ctxwrap`."""
    stats.path = str(path)
    known = ctxwrap_known_sessions() if known_sessions is None else known_sessions
    for ev in _read_events(path, stats):
        if isinstance(ev, Header):
            stats.header = ev
            ids = {ev.session_id, ev.parent_session_id, str(path), str(path.resolve())}
            if any(i in known for i in ids if i):
                stats.ctxwrap["its session is in ctxwrap's database"] += 1
        else:
            note_ctxwrap_marks(ev, stats)
        yield ev


def _read_events(path: Path, stats: ReadStats) -> Iterator[Event]:
    with open(path, "rb") as fh:
        head = fh.read(SNIFF_BYTES)
        if not head:
            raise NotASession("empty file")
        if looks_binary(head):
            raise NotASession("binary file")
        fh.seek(0)
        entries = iter_entries(fh, stats)
        first = next(entries, None)
        if first is None:
            raise NotASession("no parseable entry")
        if first.get("type") == "session":
            yield from _read_pi(path, first, entries, stats)
        elif "sessionId" in first or first.get("type") in _CLAUDE_TYPES:
            yield from _read_claude(path, first, entries, stats)
        else:
            if not is_codex_start(first):
                raise NotASession("no pi session header, Claude Code entry or Codex rollout start")
            codex = CodexReader(path, stats)
            for entry in itertools.chain([first], entries):
                yield from _guarded(stats, codex.feed, entry)
            yield from _guarded(stats, codex.finish)


def _guarded(
    stats: ReadStats, produce: Callable[..., Iterable[Event] | Event | None], *args: Any
) -> list[Event]:
    """One entry's events; a malformed entry is counted, never raised."""
    try:
        out = produce(*args)
        if out is not None and not isinstance(
            out, (Message, SystemPrompt, Compaction, Header, ClearedResults)
        ):
            out = list(out)
    except (TypeError, ValueError, AttributeError, KeyError) as exc:
        stats.skip(f"malformed entry ({type(exc).__name__})")
        return []
    if out is None:
        return []
    if isinstance(out, (Message, SystemPrompt, Compaction, Header, ClearedResults)):
        return [out]
    return list(out)


def _read_pi(
    path: Path, header: dict[str, Any], entries: Iterator[dict[str, Any]], stats: ReadStats
) -> Iterator[Event]:
    version = pi_version(header)
    branched = header.get("branchedFrom") or header.get("parentSession")
    yield Header(
        "pi",
        str(header.get("id") or path.stem),
        header.get("cwd") if isinstance(header.get("cwd"), str) else None,
        parse_ts(header.get("timestamp")),
        str(header["version"]) if "version" in header else None,
        source=f"pi v{version}" + (" (migrated as pi does)" if version < 3 else ""),
        branched_from=str(branched) if isinstance(branched, str) else None,
    )
    migrate = PiMigration(version)
    seen_system = False
    # a branched or forked file starts with copies of its parent's entries (written before it)
    born = parse_ts(header.get("timestamp")) if isinstance(branched, str) else None
    for raw_entry in entries:
        entry = migrate(raw_entry)
        if entry.get("customType") in PI_CTXWRAP_ENTRIES:
            stats.ctxwrap[PI_CTXWRAP_ENTRIES[str(entry["customType"])]] += 1
        for ev in _guarded(stats, pi_event, entry, stats, seen_system):
            if isinstance(ev, SystemPrompt):
                seen_system = True
            elif isinstance(ev, Message) and ev.role == "assistant" and 0 < ev.ts < (born or 0):
                stats.notes["calls copied from the session this one was branched from"] += 1
            yield ev


def _read_claude(
    path: Path, first: dict[str, Any], entries: Iterator[dict[str, Any]], stats: ReadStats
) -> Iterator[Event]:
    """One transcript file may hold several contexts: sessions joined in one file (each its
    own `sessionId`), and older Claude Code's sub-agents inline (`isSidechain`, each its own
    `agentId`). Each becomes a session of its own, in the order it first appears, starting
    with its Header; an entry without a session id belongs to the one before it."""
    groups: dict[tuple[str, str | None], list[dict[str, Any]]] = {}
    sid = ""
    for entry in itertools.chain([first], entries):
        if isinstance(entry.get("sessionId"), str):
            sid = entry["sessionId"]
        side = None
        if entry.get("isSidechain") and not path.name.startswith("agent-"):
            side = str(entry.get("agentId") or "sidechain")
        groups.setdefault((sid, side), []).append(entry)
    for (_sid, side), group in groups.items():
        reader = ClaudeReader(path, stats)
        if side is not None:
            reader.subagent = True
        for entry in group:
            # the header comes from the first entry that is not a snapshot or queue record
            yield from _guarded(stats, reader.feed, entry)
        if not reader.header_done:
            if side is None and len(groups) > 1:
                continue  # records of no conversation (snapshots, queue) before a session
            reader.header_done = True
            yield reader.header(group[0])
        yield from reader.finish()
