"""Streaming readers of agent session files: pi (1.x and 0.73, session format v3) and Claude
Code transcripts. Each yields normalised events; nothing here holds more than one entry.

A line longer than MAX_LINE_BYTES is skipped without being read into memory whole; a line that
is not JSON, not an object, or of an unknown type is counted with a reason and skipped. The
files are opened read-only and never written.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, BinaryIO

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
        "context_edit",
    }
)
# Claude Code transcript entry types with no effect on the model's context.
_CLAUDE_IGNORED = frozenset(
    {"summary", "file-history-snapshot", "queue-operation", "progress", "last-prompt"}
)
_CLAUDE_TYPES = frozenset({"user", "assistant", "system", "attachment"}) | _CLAUDE_IGNORED


@dataclass(frozen=True, slots=True)
class ToolCall:
    call_id: str
    name: str  # lower-case tool name: bash, read, write, edit, grep, …
    args: dict[str, Any]
    chars: int  # name + JSON arguments, as the provider sees them


@dataclass(slots=True)
class Message:
    """One message of the conversation, as the model would receive it."""

    entry_id: str
    parent_id: str | None
    role: str  # system | user | assistant | tool_result | custom
    ts: float
    chars: int
    calls: list[ToolCall] = field(default_factory=list)
    tool_call_id: str | None = None
    tool_name: str | None = None
    text: str = ""  # tool results only (the digester and the tagger bound need it)
    is_error: bool = False
    # assistant only: one provider request produced it
    request_key: str | None = None
    usage_prompt_tokens: int | None = None
    output_tokens: int = 0
    model: str | None = None


@dataclass(frozen=True, slots=True)
class SystemPrompt:
    ts: float
    chars: int
    tools_chars: int
    skills_chars: int


@dataclass(frozen=True, slots=True)
class Compaction:
    ts: float
    summary_chars: int
    first_kept_id: str | None


@dataclass(frozen=True, slots=True)
class Header:
    fmt: str  # "pi" | "claude"
    session_id: str
    cwd: str | None
    ts: float | None
    version: str | None = None


Event = Message | SystemPrompt | Compaction | Header


@dataclass
class ReadStats:
    lines: int = 0
    bytes: int = 0
    skipped: Counter[str] = field(default_factory=Counter)

    def skip(self, reason: str) -> None:
        self.skipped[reason] += 1


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


def parse_ts(value: object) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value) / 1000.0 if value > 1e11 else float(value)
    if isinstance(value, str) and value:
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return None
    return None


def _json_len(value: object) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")))


def content_text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for block in content:
            if isinstance(block, dict):
                if isinstance(block.get("text"), str):
                    parts.append(block["text"])
                elif block.get("type") == "tool_result":
                    parts.append(content_text(block.get("content")))
        return "".join(parts)
    return ""


def _content_chars(content: object) -> int:
    """Characters the provider receives for a content field (text parts; images by size)."""
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
            elif isinstance(block.get("data"), str):
                n += len(block["data"])
    return n


# -- pi -----------------------------------------------------------------------------------------


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
            prompt = None
            if usage:
                prompt = sum(int(usage.get(k) or 0) for k in ("input", "cacheRead", "cacheWrite"))
            chars = _content_chars(content) + sum(c.chars for c in calls)
            return Message(
                eid,
                parent,
                "assistant",
                ts,
                chars,
                calls=calls,
                request_key=eid,
                usage_prompt_tokens=prompt,
                output_tokens=int(usage.get("output") or 0) if usage else 0,
                model=str(msg["model"]) if msg.get("model") else None,
            )
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
        if role in ("bashExecution", "custom", "branchSummary", "compactionSummary"):
            # user-run `!cmd`, extension messages: in the context as user text
            return Message(
                eid, parent, "custom", ts, _content_chars(content) + len(str(msg.get("output", "")))
            )
        stats.skip(f"pi message of unknown role {str(role)[:40]!r}")
        return None
    if kind == "compaction":
        return Compaction(ts, len(str(entry.get("summary", ""))), entry.get("firstKeptEntryId"))
    if kind == "custom_message":
        return Message(eid, parent, "custom", ts, _content_chars(entry.get("content")))
    if kind == "branch_summary":
        return Message(eid, parent, "custom", ts, len(str(entry.get("summary", ""))))
    if kind in _PI_IGNORED:
        return None
    stats.skip(f"unknown pi entry type {str(kind)[:40]!r}")
    return None


# -- Claude Code --------------------------------------------------------------------------------


def claude_events(entry: dict[str, Any], stats: ReadStats) -> Iterator[Event]:
    kind = entry.get("type")
    if kind in _CLAUDE_IGNORED:
        return
    if kind not in _CLAUDE_TYPES:
        stats.skip(f"unknown Claude Code entry type {str(kind)[:40]!r}")
        return
    if entry.get("isSidechain"):
        stats.skip("Claude Code sub-agent entry (its own context)")
        return
    ts = parse_ts(entry.get("timestamp")) or 0.0
    eid = str(entry.get("uuid", ""))
    parent = entry.get("parentUuid")
    parent = str(parent) if parent is not None else None
    if kind == "system":
        if entry.get("subtype") == "compact_boundary":
            yield Compaction(ts, 0, None)
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
        stats.skip("Claude Code entry without a message object")
        return
    content = msg.get("content")
    if kind == "user":
        if isinstance(content, list) and any(
            isinstance(b, dict) and b.get("type") == "tool_result" for b in content
        ):
            for b in content:
                if not isinstance(b, dict) or b.get("type") != "tool_result":
                    continue
                text = content_text(b.get("content"))
                yield Message(
                    eid,
                    parent,
                    "tool_result",
                    ts,
                    len(text),
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
                calls.append(
                    ToolCall(str(b.get("id", "")), name.lower(), args, len(name) + _json_len(args))
                )
    usage = msg.get("usage") if isinstance(msg.get("usage"), dict) else {}
    prompt = None
    if usage:
        prompt = sum(
            int(usage.get(k) or 0)
            for k in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
        )
    yield Message(
        eid,
        parent,
        "assistant",
        ts,
        _content_chars(content) + sum(c.chars for c in calls),
        calls=calls,
        request_key=str(msg.get("id") or entry.get("requestId") or eid),
        usage_prompt_tokens=prompt,
        output_tokens=int(usage.get("output_tokens") or 0) if usage else 0,
        model=str(msg["model"]) if msg.get("model") else None,
    )


# -- a whole file -------------------------------------------------------------------------------


class NotASession(Exception):
    """The file is not a session file replay can read (the reason is the message)."""


def read_session(path: Path, stats: ReadStats) -> Iterator[Event]:
    """Events of one session file, in file order. Raises NotASession before the first event."""
    with open(path, "rb") as fh:
        head = fh.read(SNIFF_BYTES)
        if not head:
            raise NotASession("empty file")
        if looks_binary(head):
            raise NotASession("binary file")
        fh.seek(0)
        fmt: str | None = None
        seen_system = False
        for raw in iter_lines(fh, stats):
            if not raw.strip():
                continue
            try:
                entry = json.loads(raw)
            except (ValueError, RecursionError):
                stats.skip("line is not JSON (truncated or corrupt)")
                continue
            if not isinstance(entry, dict):
                stats.skip("line is not a JSON object")
                continue
            if fmt is None:
                if entry.get("type") == "session" and "version" in entry:
                    fmt = "pi"
                    yield Header(
                        "pi",
                        str(entry.get("id", path.stem)),
                        entry.get("cwd") if isinstance(entry.get("cwd"), str) else None,
                        parse_ts(entry.get("timestamp")),
                        str(entry.get("version")),
                    )
                    continue
                if "sessionId" in entry or entry.get("type") in _CLAUDE_TYPES:
                    fmt = "claude"
                    yield Header(
                        "claude",
                        str(entry.get("sessionId") or path.stem),
                        entry.get("cwd") if isinstance(entry.get("cwd"), str) else None,
                        parse_ts(entry.get("timestamp")),
                        str(entry.get("version")) if entry.get("version") else None,
                    )
                else:
                    raise NotASession("no pi session header or Claude Code entry")
            try:
                if fmt == "pi":
                    ev = pi_event(entry, stats, seen_system)
                    if ev is not None:
                        if isinstance(ev, SystemPrompt):
                            seen_system = True
                        yield ev
                else:
                    yield from claude_events(entry, stats)
            except (TypeError, ValueError, AttributeError) as exc:
                stats.skip(f"malformed entry ({type(exc).__name__})")
        if fmt is None:
            raise NotASession("no parseable entry")
