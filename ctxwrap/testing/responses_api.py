r"""The OpenAI Responses API side of the scripted model server (what Codex CLI speaks).

:mod:`ctxwrap.testing.model_server` routes ``POST /v1/responses`` (and ``/responses``) here;
the script, aux rules and recording are the server's own. Standard library only.

What Codex CLI 0.171.0 sends (verified offline, docs/research/codex-0.171.md)
--------------------------------------------------------------------------
``POST <base_url>/responses``, ``accept: text/event-stream``, ``authorization: Bearer <key>``,
``session-id`` = ``prompt_cache_key`` = the thread id. Body keys, in order: ``model, stream:
true, input, tools, tool_choice, parallel_tool_calls, reasoning, store: false, include,
prompt_cache_key, text, client_metadata``; no ``instructions`` (the system prompt is the first
``developer`` message of ``input``), no ``previous_response_id``: every request carries the
whole conversation as ``input`` items::

    {"type": "message", "role": "developer"|"user"|"assistant", "content": [{"type":
        "input_text"|"output_text", "text": …}]}
    {"type": "function_call", "call_id": …, "name": "exec_command", "arguments": "{…}"}
    {"type": "function_call_output", "call_id": …, "output": "Chunk ID: …\nOutput:\n…"}
    {"type": "custom_tool_call", "call_id": …, "name": "apply_patch", "input": "*** Begin…"}
    {"type": "custom_tool_call_output", "call_id": …, "output": …}

How this server answers
-----------------------
A step's ``tool_calls`` become output items with ``call_id`` ``call_<step>_<i>``: a
``custom_tool_call`` (``input`` = the step's arguments string, raw) when the request declares
that name as a ``{"type": "custom"}`` tool (top-level ``tools`` or an ``additional_tools``
input item); a call named ``tool_search``, where the request offers Codex's client-side
``{"type": "tool_search"}``, a ``tool_search_call`` (``execution: "client"``, ``arguments`` the
object); else a ``function_call`` (``arguments`` = the JSON text), with ``namespace`` where a
``namespace`` tool or a ``tool_search_output`` item declares that name (MCP tools). Text becomes one
assistant ``message`` item, streamed as ``response.output_text.delta`` events. Events:
``response.created``, ``response.in_progress``, per item ``response.output_item.added`` (…
deltas …) ``response.output_item.done``, then ``response.completed`` with the whole response
and its ``usage``. ``stream: false`` → the response object as JSON. A request whose last input
item is ``{"type": "compaction_trigger"}`` (Codex's remote compaction v2, built-in provider)
is answered with one ``compaction`` item: the step's text in base64 as ``encrypted_content``. An error step answers
``{"error": {…}}`` with its status.

Usage comes from a simulated automatic prefix cache (:class:`ResponsesCacheSim`), as OpenAI
reports it: ``input_tokens`` = all prompt tokens (cached included),
``input_tokens_details.cached_tokens`` = the longest prefix, at an item boundary, that an
earlier request with the same model and ``prompt_cache_key`` sent within ``cache_ttl_s``. The
prompt is cut into blocks in order: the tools (one block each), ``instructions``, then each
``input`` item (JSON with sorted keys); tokens = ``ceil(chars/4)``. No minimum length, no
128-token granularity: a prefix that changes shows at once.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import math
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

JsonObj = dict[str, Any]
RESPONSES_ROUTES = ("/v1/responses", "/responses")


def is_responses_route(route: str) -> bool:
    return route in RESPONSES_ROUTES


def _item_text(item: Mapping[str, Any]) -> str:
    content = item.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(p.get("text", "")) for p in content if isinstance(p, dict) and "text" in p
        )
    return ""


def system_text(body: Mapping[str, Any]) -> str:
    """``instructions``, else the first system/developer message of ``input``."""
    if isinstance(body.get("instructions"), str) and body["instructions"]:
        return str(body["instructions"])
    for item in body.get("input") or []:
        if isinstance(item, dict) and item.get("role") in ("system", "developer"):
            return _item_text(item)
    return ""


# Codex 0.171's TUI names each new thread in a side thread of its own (probed on the pinned
# binary: docs/research/codex-0.171.md, "TUI"); it races the user's first request.
TITLE_PROMPT_PREFIX = "Generate a concise, single-line task title"


def is_title_request(body: Mapping[str, Any], headers: Mapping[str, str]) -> bool:
    """A request of the TUI's title thread: its turn metadata says `thread_source:
    "thread_title"`, or (metadata absent or unreadable) its last user message asks for it."""
    with contextlib.suppress(ValueError, TypeError, AttributeError):
        meta = json.loads(headers.get("x-codex-turn-metadata") or "null")
        if isinstance(meta, dict) and "thread_source" in meta:
            return bool(meta["thread_source"] == "thread_title")
    users = [i for i in body.get("input") or [] if isinstance(i, dict) and i.get("role") == "user"]
    return bool(users) and _item_text(users[-1]).lstrip().startswith(TITLE_PROMPT_PREFIX)


def conversation_text(body: Mapping[str, Any]) -> str:
    """The text of every non-system input item (messages, call outputs), for aux rules."""
    raw = body.get("input")
    if isinstance(raw, str):
        return raw
    parts: list[str] = []
    for item in raw or []:
        if not isinstance(item, dict) or item.get("role") in ("system", "developer"):
            continue
        if item.get("type") in ("function_call_output", "custom_tool_call_output"):
            out = item.get("output")
            parts.append(out if isinstance(out, str) else json.dumps(out))
        else:
            parts.append(_item_text(item))
    return "\n".join(parts)


def custom_tool_names(body: Mapping[str, Any]) -> set[str]:
    """Names the request declares as freeform (`custom`) tools."""
    names: set[str] = set()
    tools: list[Any] = list(body.get("tools") or [])
    for item in body.get("input") or []:
        if isinstance(item, dict) and item.get("type") == "additional_tools":
            tools += item.get("tools") or []
    while tools:
        tool = tools.pop()
        if isinstance(tool, dict) and tool.get("type") == "namespace":
            tools += tool.get("tools") or []  # Codex nests `exec` in a "functions" namespace
        elif isinstance(tool, dict) and tool.get("type") == "custom":
            name = tool.get("name")
            if isinstance(name, str):
                names.add(name)
    return names


def cache_blocks(body: Mapping[str, Any]) -> list[str]:
    blocks = [json.dumps(t, sort_keys=True) for t in body.get("tools") or []]
    if body.get("instructions"):
        blocks.append(json.dumps(body["instructions"]))
    raw = body.get("input")
    items = [{"role": "user", "content": raw}] if isinstance(raw, str) else raw or []
    blocks += [json.dumps(i, sort_keys=True) for i in items]
    return blocks


def prompt_tokens(body: Mapping[str, Any]) -> int:
    return math.ceil(sum(len(b) for b in cache_blocks(body)) / 4)


class ResponsesCacheSim:
    """OpenAI-style automatic prefix cache: every prefix of a request is cached."""

    def __init__(self, ttl_s: float = 300.0) -> None:
        self.ttl_s = ttl_s
        self._written: dict[str, float] = {}  # prefix hash → last use
        self._lock = threading.Lock()

    def usage(self, body: Mapping[str, Any], now: float | None = None) -> tuple[int, int]:
        """(input tokens, cached tokens) of one request; caches its prefixes."""
        now = time.time() if now is None else now
        key = f"{body.get('model', '')}\x00{body.get('prompt_cache_key', '')}"
        h = hashlib.sha256(key.encode("utf-8", "surrogatepass"))
        chars = [0]
        hashes: list[str] = []
        for block in cache_blocks(body):
            h.update(b"\x00" + block.encode("utf-8", "surrogatepass"))
            hashes.append(h.hexdigest())
            chars.append(chars[-1] + len(block))
        with self._lock:
            self._written = {k: t for k, t in self._written.items() if now - t <= self.ttl_s}
            read_k = 0
            for k in range(len(hashes), 0, -1):
                if hashes[k - 1] in self._written:
                    read_k = k
                    break
            for digest in hashes:
                self._written[digest] = now
        return math.ceil(chars[-1] / 4), chars[read_k] // 4


@dataclass(frozen=True)
class ScriptedCall:
    call_id: str
    name: str
    arguments: str


def is_compaction_trigger(body: Mapping[str, Any]) -> bool:
    """Codex 0.171's remote compaction (v2) through the built-in OpenAI provider: a
    ``…/responses`` request whose last input item is ``{"type": "compaction_trigger"}``.
    The server's own check, not the proxy's (`responses_wire`): it stands in for OpenAI, so a
    mistake in the proxy's must not pass on both sides."""
    items = body.get("input")
    return (
        isinstance(items, list)
        and bool(items)
        and isinstance(items[-1], dict)
        and items[-1].get("type") == "compaction_trigger"
    )


def compaction_item(summary: str, serial: int) -> JsonObj:
    """The one output item a remote compaction answers with. OpenAI's is encrypted; this
    one is the scripted summary in base64, opaque to Codex all the same."""
    encoded = base64.b64encode(summary.encode("utf-8", "surrogatepass")).decode()
    return {"type": "compaction", "id": f"cmp_scripted_{serial}", "encrypted_content": encoded}


def declares_tool_search(body: Mapping[str, Any]) -> bool:
    """The request offers Codex's client-side ``tool_search`` (its deferred MCP tools)."""
    return any(
        isinstance(t, dict) and t.get("type") == "tool_search" for t in body.get("tools") or []
    )


def tool_namespaces(body: Mapping[str, Any]) -> dict[str, str]:
    """Function name → its namespace, for the functions Codex groups in one: MCP tools that
    a ``tool_search_output`` item loaded (``mcp__<server>``), or a top-level namespace tool.
    A model calls them by the bare name with ``namespace`` beside it."""
    found: dict[str, str] = {}
    groups: list[Any] = list(body.get("tools") or [])
    for item in body.get("input") or []:
        if isinstance(item, dict) and item.get("type") == "tool_search_output":
            groups += item.get("tools") or []
    for group in groups:
        if not isinstance(group, dict) or group.get("type") != "namespace":
            continue
        for tool in group.get("tools") or []:
            if isinstance(tool, dict) and tool.get("type") == "function":
                name, namespace = tool.get("name"), group.get("name")
                if isinstance(name, str) and isinstance(namespace, str):
                    found.setdefault(name, namespace)
    return found


def output_items(
    body: Mapping[str, Any], text: str | None, calls: Sequence[ScriptedCall], serial: int
) -> list[JsonObj]:
    if is_compaction_trigger(body):
        return [compaction_item(text or "", serial)]
    custom = custom_tool_names(body)
    search = declares_tool_search(body)
    namespaces = tool_namespaces(body)
    items: list[JsonObj] = []
    if text:
        items.append(
            {
                "type": "message",
                "id": f"msg_scripted_{serial}",
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            }
        )
    for i, call in enumerate(calls):
        if call.name == "tool_search" and search:
            items.append(
                {
                    "type": "tool_search_call",
                    "id": f"tsc_scripted_{serial}_{i}",
                    "status": "completed",
                    "call_id": call.call_id,
                    "execution": "client",
                    "arguments": json.loads(call.arguments),
                }
            )
        elif call.name in custom:
            items.append(
                {
                    "type": "custom_tool_call",
                    "id": f"ctc_scripted_{serial}_{i}",
                    "status": "completed",
                    "call_id": call.call_id,
                    "name": call.name,
                    "input": call.arguments,
                }
            )
        else:
            item = {
                "type": "function_call",
                "id": f"fc_scripted_{serial}_{i}",
                "status": "completed",
                "call_id": call.call_id,
                "name": call.name,
                "arguments": call.arguments,
            }
            if call.name in namespaces:
                item["namespace"] = namespaces[call.name]
            items.append(item)
    return items


def usage_json(input_tokens: int, cached: int, output_tokens: int) -> JsonObj:
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": input_tokens + output_tokens,
    }


def response_object(
    body: Mapping[str, Any], items: list[JsonObj], usage: JsonObj | None, serial: int
) -> JsonObj:
    return {
        "id": f"resp_scripted_{serial}",
        "object": "response",
        "created_at": int(time.time()),
        "status": "completed",
        "model": body.get("model"),
        "output": items,
        "usage": usage,
    }


def _chunks(text: str, size: int = 32) -> Iterator[str]:
    size = max(size, -(-len(text) // 64))
    for i in range(0, len(text), size):
        yield text[i : i + size]


def sse_events(
    body: Mapping[str, Any], items: list[JsonObj], usage: JsonObj | None, serial: int
) -> Iterator[tuple[str, JsonObj]]:
    """(event name, data) in the order the Responses API streams them."""
    seq = 0

    def ev(name: str, data: JsonObj) -> tuple[str, JsonObj]:
        nonlocal seq
        seq += 1
        return name, {"type": name, "sequence_number": seq, **data}

    final = response_object(body, items, usage, serial)
    start = {**final, "status": "in_progress", "output": [], "usage": None}
    yield ev("response.created", {"response": start})
    yield ev("response.in_progress", {"response": start})
    for index, item in enumerate(items):
        if item["type"] == "message":
            text = item["content"][0]["text"]
            yield ev(
                "response.output_item.added",
                {"output_index": index, "item": {**item, "status": "in_progress", "content": []}},
            )
            part = {"type": "output_text", "text": "", "annotations": []}
            where = {"item_id": item["id"], "output_index": index, "content_index": 0}
            yield ev("response.content_part.added", {**where, "part": part})
            for piece in _chunks(text):
                yield ev("response.output_text.delta", {**where, "delta": piece})
            yield ev("response.output_text.done", {**where, "text": text})
            yield ev("response.content_part.done", {**where, "part": {**part, "text": text}})
        elif item["type"] == "function_call":
            yield ev(
                "response.output_item.added",
                {"output_index": index, "item": {**item, "status": "in_progress", "arguments": ""}},
            )
            where = {"item_id": item["id"], "output_index": index}
            for piece in _chunks(item["arguments"]):
                yield ev("response.function_call_arguments.delta", {**where, "delta": piece})
            yield ev(
                "response.function_call_arguments.done", {**where, "arguments": item["arguments"]}
            )
        elif item["type"] in ("compaction", "tool_search_call"):
            yield ev("response.output_item.added", {"output_index": index, "item": item})
        else:
            yield ev(
                "response.output_item.added",
                {"output_index": index, "item": {**item, "status": "in_progress", "input": ""}},
            )
            where = {"item_id": item["id"], "output_index": index}
            for piece in _chunks(item["input"]):
                yield ev("response.custom_tool_call_input.delta", {**where, "delta": piece})
            yield ev("response.custom_tool_call_input.done", {**where, "input": item["input"]})
        yield ev("response.output_item.done", {"output_index": index, "item": item})
    yield ev("response.completed", {"response": final})


def write_sse(
    write: Callable[[bytes], None],
    body: Mapping[str, Any],
    items: list[JsonObj],
    usage: JsonObj | None,
    serial: int,
) -> None:
    """Each event as one HTTP chunk (the caller sent ``Transfer-Encoding: chunked``)."""
    for name, data in sse_events(body, items, usage, serial):
        frame = f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()
        write(f"{len(frame):x}\r\n".encode() + frame + b"\r\n")
    write(b"0\r\n\r\n")
