"""The Anthropic Messages wire format, and nothing else: no decisions, no I/O.

The edit engine (``ctxwrap.engine.edits``) and the session logic speak the neutral,
pi-shaped message list (``toolCall`` / ``toolResult``). This module converts a Messages
request body into that shape, applies frozen edits back onto the wire body, measures it, and
reads the provider's usage out of a response: the :class:`~ctxwrap.agents._proxy.wire.Wire`
contract, which ``agents/codex/responses_wire.py`` implements for OpenAI Responses. What is
Anthropic's alone lives here too: the cache lifetimes a request asks for (``marked_ttl_s``),
thinking blocks' bound prefixes, Claude Code's compaction request.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ctxwrap.agents._proxy import body_encoding
from ctxwrap.agents._proxy.cache_state import request_blocks
from ctxwrap.agents._proxy.sse import JsonEventStream
from ctxwrap.agents._proxy.wire import BodySize as BodySize
from ctxwrap.agents._proxy.wire import Neutral, json_chars
from ctxwrap.agents._proxy.wire import Usage as Usage
from ctxwrap.engine.edits import (
    Edit,
    MaskEdit,
    StripEditEdit,
    StripWriteEdit,
    Tail,
    TombstoneEdit,
    describe_tail,
    strip_call_args,
)

JsonDict = dict[str, Any]

# Claude Code's tool names → the names ctxwrap's mechanisms know (pi's).
NEUTRAL_TOOL_NAMES = {
    "Bash": "bash",
    "Read": "read",
    "Grep": "grep",
    "Glob": "find",
    "Write": "write",
}

# The tools whose answer is data the model reads once, as it reads a file (issue 41): the web
# tools and any MCP server's (`mcp__SERVER__TOOL`). Their results are tagged and stored behind
# a recall handle like a Read's, so masking may take them once old; the mechanisms know such a
# call as a lookup, "fetch", as under Codex (agents/codex/commands.lookup_of).
WEB_LOOKUPS = frozenset({"WebFetch", "WebSearch"})


def is_lookup(name: str) -> bool:
    return name in WEB_LOOKUPS or (name.startswith("mcp__") and len(name) > 5)


def lookup_input(name: str, tool_input: Any) -> JsonDict:
    """A lookup's arguments as the mechanisms see them, the call and its tag item alike (so the
    daemon's "asked again" guard matches): the tool and what it was asked, as Codex's."""
    asked = (
        tool_input if isinstance(tool_input, str) else json.dumps(tool_input, ensure_ascii=False)
    )
    return {"tool": name, "input": asked}


def neutral_tool_name(name: str) -> str:
    return "fetch" if is_lookup(name) else NEUTRAL_TOOL_NAMES.get(name, name)


_SESSION_ID_RE = re.compile(r"^[A-Za-z0-9_-]{1,128}$")


def is_messages_call(path: str) -> bool:
    """POST /v1/messages (any query), the only request whose body ctxwrap edits."""
    return path.split("?", 1)[0].rstrip("/").endswith("/v1/messages")


def is_count_tokens(path: str) -> bool:
    return path.split("?", 1)[0].rstrip("/").endswith("/v1/messages/count_tokens")


def session_id_of(headers: Mapping[str, str], body: Mapping[str, Any]) -> str | None:
    """Claude Code's session id: the header, else metadata.user_id's JSON. Validated as a name."""
    sid = headers.get("x-claude-code-session-id")
    if not sid:
        meta = body.get("metadata")
        raw = meta.get("user_id") if isinstance(meta, dict) else None
        if isinstance(raw, str) and raw.startswith("{"):
            try:
                parsed = json.loads(raw)
                sid = parsed.get("session_id") if isinstance(parsed, dict) else None
            except ValueError:
                sid = None
    return sid if isinstance(sid, str) and _SESSION_ID_RE.match(sid) else None


# Claude Code 2.1.197's compaction instruction (its compact prompt, after the history it
# summarises; read from its bundle, seen on a real compaction).
COMPACT_INSTRUCTION = "Your task is to create a detailed summary of the conversation so far"


def is_compaction_request(messages: list[Any]) -> bool:
    """Claude Code's summarisation request: its last user message ends in the compaction
    instruction (the request otherwise shares the conversation's prefix and tools)."""
    last = messages[-1] if messages else None
    if not isinstance(last, dict) or last.get("role") != "user":
        return False
    content = last.get("content")
    if isinstance(content, str):
        return COMPACT_INSTRUCTION in content
    if not isinstance(content, list) or not content:
        return False
    block = content[-1]
    text = block.get("text") if isinstance(block, dict) and block.get("type") == "text" else None
    return isinstance(text, str) and COMPACT_INSTRUCTION in text


def encode_body(body: Any) -> bytes:
    # JSON.stringify's shape (compact, no ASCII escaping): an edited body differs from what
    # Claude Code sent only where an edit applies.
    return body_encoding.compact_json(body)


def tool_result_text(block: Mapping[str, Any]) -> str:
    content = block.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(b.get("text", ""))
            for b in content
            if isinstance(b, dict) and b.get("type") == "text"
        )
    return ""


def _neutral_args(name: str, tool_input: Any) -> Any:
    if is_lookup(name):
        return lookup_input(name, tool_input)
    if name == "Write" and isinstance(tool_input, dict):
        # pi's write takes `path`; the engine reads writePath from it.
        out = {k: v for k, v in tool_input.items() if k != "file_path"}
        if "file_path" in tool_input:
            out = {"path": tool_input["file_path"], **out}
        return out
    return tool_input


def items(body: Mapping[str, Any]) -> list[Any] | None:
    messages = body.get("messages")
    return messages if isinstance(messages, list) else None


def head(body: Mapping[str, Any]) -> tuple[Any, Any]:
    return body.get("tools"), body.get("system")


def to_neutral(
    messages: Iterable[Any], *, notes_role: str = "user", names: Mapping[str, str] | None = None
) -> Neutral:
    """The pi-shaped list the engine describes: toolCall blocks, one toolResult per result.

    `notes_role`: the role of other blocks that ride along with tool results in one user
    message (Claude Code's system reminders, text queued while tools ran). "user" keeps them
    as they are; masking passes "custom" so that they do not start a new task. `names`: the
    tool names of calls made before `messages` (a suffix of the conversation).
    """
    names = dict(names or {})
    out: list[JsonDict] = []
    for msg in messages:
        if not isinstance(msg, dict):
            out.append({"role": ""})
            continue
        role = msg.get("role")
        content = msg.get("content")
        blocks = content if isinstance(content, list) else [{"type": "text", "text": content}]
        if role == "assistant":
            neutral: list[JsonDict] = []
            for b in blocks:
                if not isinstance(b, dict):
                    continue
                if b.get("type") == "tool_use" and isinstance(b.get("id"), str):
                    raw_name = str(b.get("name", ""))
                    names[b["id"]] = raw_name
                    neutral.append(
                        {
                            "type": "toolCall",
                            "id": b["id"],
                            "name": neutral_tool_name(raw_name),
                            "arguments": _neutral_args(raw_name, b.get("input")),
                        }
                    )
                elif b.get("type") == "text":
                    neutral.append({"type": "text", "text": b.get("text")})
            out.append({"role": "assistant", "content": neutral})
            continue
        if role == "user":
            rest: list[Any] = []
            has_results = False
            for b in blocks:
                if isinstance(b, dict) and b.get("type") == "tool_result":
                    has_results = True
                    cid = b.get("tool_use_id")
                    raw_name = names.get(cid, "") if isinstance(cid, str) else ""
                    out.append(
                        {
                            "role": "toolResult",
                            "toolCallId": cid,
                            "toolName": neutral_tool_name(raw_name),
                            "content": [{"type": "text", "text": tool_result_text(b)}],
                            "isError": b.get("is_error") is True,
                        }
                    )
                else:
                    rest.append(b)
            if rest:
                out.append({"role": notes_role if has_results else "user", "content": rest})
            continue
        out.append({"role": role if isinstance(role, str) else "", "content": content})
    return Neutral(out)


def _neutral_count(msg: Any) -> int:
    """How many neutral messages `to_neutral` makes of one wire message."""
    if not isinstance(msg, dict) or msg.get("role") != "user":
        return 1
    content = msg.get("content")
    if not isinstance(content, list):
        return 1
    results = 0
    for b in content:
        if isinstance(b, dict) and b.get("type") == "tool_result":
            results += 1
    return results + (1 if results < len(content) else 0)


def _references(msg: Any, seen: Collection[str]) -> bool:
    """Whether a wire message's neutral messages reference a seen id (`describe_tail`'s rule:
    an assistant's tool call, a result's call id)."""
    if not isinstance(msg, dict):
        return False
    content = msg.get("content")
    if not isinstance(content, list):
        return False
    role = msg.get("role")
    if role == "assistant":
        for b in content:
            if isinstance(b, dict) and b.get("type") == "tool_use":
                cid = b.get("id")
                if isinstance(cid, str) and cid in seen:
                    return True
    elif role == "user":
        for b in content:
            if (
                isinstance(b, dict)
                and b.get("type") == "tool_result"
                and b.get("tool_use_id") in seen
            ):
                return True
    return False


def tail_of(items: list[Any], seen: Collection[str]) -> tuple[Tail, int, Neutral | None]:
    """`describe_tail` of the neutral view and its length, converting only the messages from
    the last one that references a seen id (what a request adds to the previous one): the
    whole view is built only where the whole conversation is the tail (then it is returned)."""
    k = next((i for i in range(len(items) - 1, -1, -1) if _references(items[i], seen)), None)
    if k is None:
        neutral = to_neutral(items)
        return describe_tail(neutral.messages, seen), len(neutral.messages), neutral
    suffix = items[k:]
    # the names of calls made before the suffix, for its results that come before any call
    # of their id in it (as `to_neutral` of the whole would know them)
    wanted: set[str] = set()
    called: set[str] = set()
    for msg in suffix:
        role = msg.get("role") if isinstance(msg, dict) else None
        for b in _blocks((msg,)):
            # a call is an assistant's block, as `to_neutral` reads it (one in a user message
            # names nothing)
            if b.get("type") == "tool_use" and role == "assistant" and isinstance(b.get("id"), str):
                called.add(b["id"])
            elif b.get("type") == "tool_result":
                cid = b.get("tool_use_id")
                if isinstance(cid, str) and cid not in called:
                    wanted.add(cid)
    names: dict[str, str] = {}
    for msg in reversed(items[:k]):  # the latest call of each id, just before the suffix
        if not wanted:
            break
        if isinstance(msg, dict) and msg.get("role") == "assistant":
            for b in reversed(list(_blocks((msg,)))):
                cid = b.get("id")
                if b.get("type") == "tool_use" and cid in wanted and isinstance(cid, str):
                    names[cid] = str(b.get("name", ""))
                    wanted.discard(cid)
    view = to_neutral(suffix, names=names).messages
    before = k
    for m in items[:k]:  # a user message of n results and other blocks is n + 1 messages
        if isinstance(m, dict) and m.get("role") == "user" and isinstance(m.get("content"), list):
            before += _neutral_count(m) - 1
    tail = describe_tail(view, seen)
    return tail.model_copy(update={"start": before + tail.start}), before + len(view), None


def _blocks(messages: Iterable[Any]) -> Iterator[JsonDict]:
    """Every content block of every message, in order (string contents have none)."""
    for msg in messages:
        content = msg.get("content") if isinstance(msg, dict) else None
        for b in content if isinstance(content, list) else ():
            if isinstance(b, dict):
                yield b


def result_texts(messages: Sequence[Any], ids: Collection[str]) -> dict[str, str]:
    """The text of each tool result of `ids`, looked for from the end (a request's new results
    are in its last messages)."""
    want = set(ids)
    out: dict[str, str] = {}
    for msg in reversed(messages):
        if not want:
            break
        for b in _blocks((msg,)):
            cid = b.get("tool_use_id")
            if b.get("type") == "tool_result" and cid in want and isinstance(cid, str):
                out[cid] = tool_result_text(b)
                want.discard(cid)
    return out


def tool_inputs(messages: Sequence[Any], ids: Collection[str]) -> dict[str, Any]:
    """The input of each tool_use of `ids`."""
    return {
        b["id"]: b.get("input")
        for b in _blocks(messages)
        if b.get("type") == "tool_use" and isinstance(b.get("id"), str) and b["id"] in ids
    }


def all_tool_ids(messages: Iterable[Any]) -> set[str]:
    ids: set[str] = set()
    for b in _blocks(messages):
        if b.get("type") == "tool_use" and isinstance(b.get("id"), str):
            ids.add(b["id"])
        elif b.get("type") == "tool_result" and isinstance(b.get("tool_use_id"), str):
            ids.add(b["tool_use_id"])
    return ids


all_call_ids = all_tool_ids  # the Wire contract's name


# On a model that checks a returned thinking block's prefix (engine/thinking.py) a request
# whose system, tools or any message before such a block differs from what the model saw when
# it wrote the block is refused with a 400 ("bound to a different conversation").
_THINKING_TYPES = ("thinking", "redacted_thinking")


def bound_by_thinking(messages: Iterable[Any]) -> set[str]:
    """The ids of the tool calls and results that a later thinking block has in its prefix
    (one in a later message, or later in the same one: Opus 5.5 returns its text between tool
    calls as thinking): changing any of them invalidates that block on a model that checks it."""
    before: set[str] = set()
    pending: set[str] = set()
    for b in _blocks(messages):
        if b.get("type") in _THINKING_TYPES:
            before |= pending
            pending = set()
        elif b.get("type") == "tool_use" and isinstance(b.get("id"), str):
            pending.add(b["id"])
        elif b.get("type") == "tool_result" and isinstance(b.get("tool_use_id"), str):
            pending.add(b["tool_use_id"])
    return before


def apply_edits(body: JsonDict, edits: Mapping[str, list[Edit]]) -> list[Edit]:
    """Apply frozen edits to the wire body in place; returns the edits that applied.

    Only the edited key changes: `cache_control`, `is_error` and every other key of the block
    stay, so Claude Code's moving cache marker and its own context edits are left alone. A
    result gets at most one replacement (a tombstone or a history mask, the first frozen).
    """
    applied: list[Edit] = []
    if not edits:
        return applied
    done: set[tuple[str, str]] = set()
    for msg in body.get("messages") or ():
        content = msg.get("content") if isinstance(msg, dict) else None
        if not isinstance(content, list):
            continue
        for b in content:
            if not isinstance(b, dict):
                continue
            kind = b.get("type")
            if kind == "tool_result":
                cid = b.get("tool_use_id")
                if not isinstance(cid, str) or cid not in edits:
                    continue
                for e in edits[cid]:
                    if isinstance(e, TombstoneEdit | MaskEdit) and ("result", cid) not in done:
                        done.add(("result", cid))
                        b["content"] = e.text
                        applied.append(e)
            elif kind == "tool_use":
                cid = b.get("id")
                if not isinstance(cid, str) or cid not in edits:
                    continue
                for e in edits[cid]:
                    if not isinstance(e, StripWriteEdit | StripEditEdit) or (e.kind, cid) in done:
                        continue
                    stripped = strip_call_args(b.get("input"), e)
                    if stripped is not None:
                        done.add((e.kind, cid))
                        b["input"] = stripped
                        applied.append(e)
    return applied


def measure(body: Mapping[str, Any]) -> BodySize:
    """Chars of what the request carries (JSON of each part), the stats' "sent" figure."""
    return BodySize(
        json_chars(body.get("system")),
        json_chars(body.get("messages")),
        json_chars(body.get("tools")),
    )


def prefix_blocks(body: Mapping[str, Any]) -> list[tuple[str, int]]:
    """The request in the provider's cache order (tools, system, each message), each a
    `prefix_block`: what `shared_prefix_chars` compares with the previous call's."""
    return request_blocks((body.get("tools"), body.get("system")), body.get("messages"))


def update_usage(into: Usage, usage: Any, model: Any = None) -> None:
    """Take a Messages `usage` object's counts (a later event repeats or adds to them)."""
    if not isinstance(usage, dict):
        return
    into.seen = True

    def num(key: str, current: int) -> int:
        v = usage.get(key)
        return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else current

    into.input_tokens = num("input_tokens", into.input_tokens)
    into.output_tokens = num("output_tokens", into.output_tokens)
    into.cache_read_tokens = num("cache_read_input_tokens", into.cache_read_tokens)
    into.cache_write_tokens = num("cache_creation_input_tokens", into.cache_write_tokens)
    if isinstance(model, str):
        into.model = model


@dataclass
class UsageReader(JsonEventStream):
    """Reads usage from a response as its bytes pass through (SSE or JSON; gzip tolerated).

    It also reports the model's tool calls (``on_tool_use(id, name)``) and the end of the
    message (``on_end()``), each before the bytes that carry them are passed on: a tool's
    PostToolUse hook can then never arrive before its call is known.
    """

    usage: Usage = field(default_factory=Usage)
    on_tool_use: Callable[[str, str], None] | None = None
    on_end: Callable[[], None] | None = None
    # the thinking turns the provider's clear_thinking edit says it cleared (None: not said)
    cleared_thinking_turns: int | None = None

    def _event(self, data: dict[str, Any]) -> None:
        if data.get("type") == "message_start" and isinstance(data.get("message"), dict):
            m = data["message"]
            update_usage(self.usage, m.get("usage"), m.get("model"))
        elif data.get("type") == "message_delta":
            update_usage(self.usage, data.get("usage"))
            self._context_management(data.get("context_management"))
        elif data.get("type") == "content_block_start":
            self._tool_use(data.get("content_block"))
        elif data.get("type") == "message_stop" and self.on_end is not None:
            with contextlib.suppress(Exception):  # never at the cost of the stream
                self.on_end()

    def _context_management(self, cm: Any) -> None:
        edits = cm.get("applied_edits") if isinstance(cm, dict) else None
        for e in edits if isinstance(edits, list) else ():
            n = e.get("cleared_thinking_turns") if isinstance(e, dict) else None
            if isinstance(n, int) and e.get("type") == "clear_thinking_20251015":
                self.cleared_thinking_turns = n

    def _tool_use(self, block: Any) -> None:
        if not isinstance(block, dict) or block.get("type") != "tool_use":
            return
        cid, name = block.get("id"), block.get("name")
        if self.on_tool_use is not None and isinstance(cid, str) and isinstance(name, str):
            with contextlib.suppress(Exception):  # never at the cost of the stream
                self.on_tool_use(cid, name)

    def finish(self) -> Usage:
        data = self.body()
        if data is not None and data.get("type") == "message":
            update_usage(self.usage, data.get("usage"), data.get("model"))
            self._context_management(data.get("context_management"))
            content = data.get("content")
            for block in content if isinstance(content, list) else []:
                self._tool_use(block)
            if self.on_end is not None:
                with contextlib.suppress(Exception):
                    self.on_end()
        return self.usage


def usage_reader(streaming: bool, encoding: str) -> UsageReader:
    return UsageReader(streaming, encoding)


def stream_input_tokens(event: JsonDict) -> int | None:
    """In-step compaction (agents/_proxy/in_step.py): the input tokens a Messages stream names in `message_start` (fresh + cache)."""
    if event.get("type") != "message_start":
        return None
    msg = event.get("message")
    usage = msg.get("usage") if isinstance(msg, dict) else None
    if not isinstance(usage, dict):
        return None
    return sum(
        v
        for k in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
        if isinstance(v := usage.get(k), int)
    )


input_tokens = stream_input_tokens  # the Wire contract's name


def add_input_tokens(event: JsonDict, delta: int) -> bool:
    """Add `delta` to the fresh input of `message_start`, and of a `message_delta` that
    repeats the input counts (Claude Code keeps the latest)."""
    usage: Any = None
    if event.get("type") == "message_start" and isinstance(event.get("message"), dict):
        usage = event["message"].get("usage")
    elif event.get("type") == "message_delta":
        usage = event.get("usage")
    if not isinstance(usage, dict) or not isinstance(usage.get("input_tokens"), int):
        return False
    usage["input_tokens"] += delta
    return True


# Anthropic's cache lifetimes, by the `ttl` of a `cache_control` marker (none: 5 minutes).
_TTL_S = {"5m": 300.0, "1h": 3600.0}
# Markers sit on the system prompt, the tools and the newest messages (Claude Code moves its
# marker to the last block): older messages are not walked, on a request of any length.
_MARKED_MESSAGES = 4


def marked_ttl_s(body: Any) -> float | None:
    """The cache lifetime a request asked for, from its `cache_control` markers (the longest),
    or None when no marker says. Claude Code 2.1 asks for the 1-hour cache for subscription
    logins (and with ENABLE_PROMPT_CACHING_1H): a 20-minute pause leaves that cache warm, so it
    is no idle boundary there."""
    found: list[float] = []

    def walk(value: Any, depth: int) -> None:
        if depth > 5:  # list → message → content → block → its content → block
            return
        if isinstance(value, dict):
            marker = value.get("cache_control")
            if isinstance(marker, dict) and marker.get("type") == "ephemeral":
                ttl = marker.get("ttl", "5m")
                if isinstance(ttl, str) and ttl in _TTL_S:  # another value: not known here
                    found.append(_TTL_S[ttl])
            walk(value.get("content"), depth + 1)
        elif isinstance(value, list):
            for item in value:
                walk(item, depth + 1)

    if not isinstance(body, dict):
        return None
    messages = body.get("messages")
    for part in (
        body.get("system"),
        body.get("tools"),
        messages[-_MARKED_MESSAGES:] if isinstance(messages, list) else None,
    ):
        walk(part, 0)
    return max(found) if found else None
