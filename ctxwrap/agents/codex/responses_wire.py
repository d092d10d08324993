"""The OpenAI Responses wire format, and nothing else: no decisions, no I/O.

Sibling of ``agents/claude/anthropic_wire.py``, implementing the same contract
(:class:`~ctxwrap.agents._proxy.wire.Wire`): a request body's ``input`` items → the neutral,
pi-shaped message list the edit engine describes; frozen edits → back onto the wire body (only
the edited key changes); sizes; usage read from the response stream.

Three tool shapes (docs/research/codex-0.171.md): ``function_call`` (exec_command, shell,
write_stdin …) with ``function_call_output``; freeform ``custom_tool_call`` (apply_patch, the
``additional_tools`` JS ``exec`` tool) with ``custom_tool_call_output``, whose output may be a
list of content items; ``local_shell_call`` (older models).
"""

from __future__ import annotations

import contextlib
import functools
import json
import re
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ctxwrap.agents._proxy import body_encoding
from ctxwrap.agents._proxy.cache_state import request_blocks
from ctxwrap.agents._proxy.sse import JsonEventStream
from ctxwrap.agents._proxy.wire import BodySize as BodySize
from ctxwrap.agents._proxy.wire import Neutral, json_chars
from ctxwrap.agents._proxy.wire import Usage as Usage
from ctxwrap.agents.codex import commands
from ctxwrap.engine import shellcmd
from ctxwrap.engine.edits import (
    Edit,
    MaskEdit,
    StripWriteEdit,
    Tail,
    TombstoneEdit,
    describe_tail,
)

JsonDict = dict[str, Any]
CALL_TYPES = ("function_call", "custom_tool_call", "local_shell_call")
OUTPUT_TYPES = ("function_call_output", "custom_tool_call_output", "local_shell_call_output")
_SESSION_ID_RE = re.compile(r"^[A-Za-z0-9_-]{1,128}$")
_RUNNING_RE = re.compile(r"^Process running with session ID (\d+)$", re.M)


def is_responses_call(path: str) -> bool:
    """POST …/responses (any query): the only request whose body ctxwrap decides edits for."""
    return path.split("?", 1)[0].rstrip("/").endswith("/responses")


def is_compact_call(path: str) -> bool:
    """Codex's remote compaction (…/responses/compact): frozen edits replayed, nothing decided."""
    return path.split("?", 1)[0].rstrip("/").endswith("/responses/compact")


# The head of Codex 0.171's compaction instruction (its default `compact_prompt`).
COMPACT_PROMPT_HEAD = "You are performing a CONTEXT CHECKPOINT COMPACTION."
COMPACTION_TRIGGERS = ("auto", "manual")


def is_local_compaction(body: Mapping[str, Any]) -> bool:
    """Codex's own compaction through a custom provider: a POST …/responses whose last input
    item is its checkpoint instruction (with or without tools, by model family)."""
    items = body.get("input")
    if not isinstance(items, list) or not items or not isinstance(items[-1], dict):
        return False
    last = items[-1]
    content = last.get("content")
    if last.get("type") != "message" or last.get("role") != "user" or not isinstance(content, list):
        return False
    first = content[0] if content else None
    text = first.get("text") if isinstance(first, dict) else None
    return isinstance(text, str) and text.startswith(COMPACT_PROMPT_HEAD)


def is_remote_compaction(body: Mapping[str, Any]) -> bool:
    """Codex's remote compaction (v2) through the built-in OpenAI provider: a POST
    …/responses whose last input item is ``{"type": "compaction_trigger"}``; the reply is one
    ``compaction`` item (encrypted) that replaces the history."""
    items = body.get("input")
    return (
        isinstance(items, list)
        and bool(items)
        and isinstance(items[-1], dict)
        and items[-1].get("type") == "compaction_trigger"
    )


def turn_metadata(headers: Mapping[str, str], body: Mapping[str, Any]) -> JsonDict:
    """Codex's ``x-codex-turn-metadata`` (a JSON object in a header, and again in the body's
    ``client_metadata``); {} where absent or not an object."""
    raw: Any = headers.get("x-codex-turn-metadata")
    if not raw:
        client = body.get("client_metadata")
        raw = client.get("x-codex-turn-metadata") if isinstance(client, dict) else None
    if not isinstance(raw, str):
        return {}
    try:
        meta = json.loads(raw)
    except ValueError:
        return {}
    return meta if isinstance(meta, dict) else {}


def compaction_request(headers: Mapping[str, str], body: Mapping[str, Any]) -> str | None:
    """Whether a POST …/responses is Codex's own summarisation, and its trigger: "auto" or
    "manual" (the user's `/compact`), else None.

    Codex 0.171 says so in its turn metadata (``request_kind: "compaction"``, with
    ``compaction.trigger``) for every way it compacts: locally through a custom provider
    (its checkpoint instruction after the history, or a custom ``compact_prompt``) and
    remotely (v2) through the built-in one. The body is the fallback where the metadata is
    missing: the trigger item, or the default instruction (then taken as automatic).
    """
    meta = turn_metadata(headers, body)
    if meta.get("request_kind") == "compaction":
        info = meta.get("compaction")
        trigger = info.get("trigger") if isinstance(info, dict) else None
        return trigger if trigger in COMPACTION_TRIGGERS else "auto"
    if is_remote_compaction(body) or is_local_compaction(body):
        return "auto"
    return None


def session_id_of(headers: Mapping[str, str], body: Mapping[str, Any]) -> str | None:
    """Codex's thread id: the ``session-id`` header, else ``prompt_cache_key``; a safe name."""
    sid = headers.get("session-id") or body.get("prompt_cache_key")
    return sid if isinstance(sid, str) and _SESSION_ID_RE.match(sid) else None


def side_thread(headers: Mapping[str, str]) -> bool:
    """A thread Codex starts on the side (the TUI's title: ``thread_source: thread_title`` in
    ``x-codex-turn-metadata``): not the user's conversation, so never a session of ours."""
    return turn_metadata(headers, {}).get("thread_source") == "thread_title"


def encode_body(body: Any) -> bytes:
    # serde_json's shape (compact, UTF-8 unescaped): an edited body differs from what Codex
    # sent only where an edit applies.
    return body_encoding.compact_json(body)


def output_text(output: Any) -> str:
    if isinstance(output, str):
        return output
    if isinstance(output, list):
        return "\n".join(
            str(p.get("text", ""))
            for p in output
            if isinstance(p, dict) and isinstance(p.get("text"), str)
        )
    if isinstance(output, dict) and isinstance(output.get("content"), str):
        return str(output["content"])
    return ""


@dataclass(frozen=True)
class CallInfo:
    """What one tool call is, for the mechanisms."""

    call_id: str
    wire_name: str  # Codex's tool name
    kind: str  # "bash" | "read" | "grep" | "find" | "write" | "fetch" | "other"
    command: str | None = None  # a shell command; for "fetch", the tool it looks up with
    query: str | None = None  # "fetch": what the tool was asked (its arguments as text)
    added: commands.AddedFile | None = None  # apply_patch: the largest added file
    path: str | None = None  # "read": the file a shell read prints (`cat f`, `sed -n …p f`)
    # apply_patch: (op, path) of each file it touches (`commands.patch_calls`' order)
    files: tuple[tuple[str, str], ...] = ()


def _arguments(item: Mapping[str, Any]) -> Any:
    if item.get("type") == "custom_tool_call":
        return item.get("input") if isinstance(item.get("input"), str) else ""
    if item.get("type") == "local_shell_call":
        return {"action": item.get("action")}
    raw = item.get("arguments")
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except ValueError:
            return raw
    return raw


def call_info(
    item: Mapping[str, Any],
    outputs: Mapping[str, str],
    running: Mapping[int, str] | None = None,
) -> CallInfo | None:
    """`running`: the command of each exec session still running (for write_stdin polls)."""
    cid = item.get("call_id")
    if not isinstance(cid, str):
        return None
    name = str(item.get("name") or item.get("type") or "")
    args = _arguments(item)
    if name == "apply_patch" and isinstance(args, str):
        files, added = _patch_info(args)
        # Only a patch that applied leaves the file whole on disk: only then is its body a
        # write the model need not carry.
        if added is not None and commands.patch_succeeded(outputs.get(cid, "")):
            return CallInfo(cid, name, "write", added=added, files=files)
        return CallInfo(cid, name, "other", files=files)
    command = commands.shell_command_of(
        "local_shell_call" if item.get("type") == "local_shell_call" else name, args
    )
    if command is not None:
        patch = commands.heredoc_patch(command)  # `apply_patch <<'EOF'` (older Codex)
        if patch is not None:
            return CallInfo(cid, name, "other", command=command, files=_patch_files(patch))
        kind = commands.read_kind(command) or "bash"
        # the file a read prints, as replay reads it: masking's rules for reads need it
        # (superseded by a later patch of the file, untouched for rounds)
        path = shellcmd.shell_read(command)[1] if kind == "read" else None
        return CallInfo(cid, name, kind, command=command, path=path)
    if name == "write_stdin":
        session = args.get("session_id") if isinstance(args, dict) else None
        command = (running or {}).get(session, "") if isinstance(session, int) else ""
        return CallInfo(cid, name, "bash", command=command)
    tool = commands.lookup_of(name, args, item.get("namespace"))
    if tool is not None:
        query = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
        return CallInfo(cid, name, "fetch", command=tool, query=query)
    return CallInfo(cid, name, "other")


def _patch_files(patch: str) -> tuple[tuple[str, str], ...]:
    return _patch_info(patch)[0]


# The whole history is described at every request: a patch is parsed once (kept for patches up
# to this long, at most ~16 MB in all; 100 patches of 20 KB cost 145 ms a request unkept)
_KEPT_PATCH_CHARS = 65536


def _patch_info(patch: str) -> tuple[tuple[tuple[str, str], ...], commands.AddedFile | None]:
    """(op, path) of each file a patch touches (`commands.patch_calls`' order), and its
    largest added file."""
    if len(patch) <= _KEPT_PATCH_CHARS:
        return _kept_patch_info(patch)
    return _parse_patch(patch)


def _parse_patch(patch: str) -> tuple[tuple[tuple[str, str], ...], commands.AddedFile | None]:
    files = tuple((op, path) for op, path, _ in commands.patch_calls(patch))
    return files, commands.largest_added_file(patch)


_kept_patch_info = functools.lru_cache(maxsize=256)(_parse_patch)


def shell_input(info: CallInfo) -> JsonDict:
    """A command's arguments as the mechanisms see them (the call and its tag item alike, so
    the daemon's "asked again" guard matches): the command, and the file a read prints."""
    out: JsonDict = {"command": info.command or ""}
    if info.path is not None:
        out["path"] = info.path
    return out


def fetch_input(info: CallInfo) -> JsonDict:
    """A lookup's arguments as the mechanisms see them (the call and its tag item alike, so
    the daemon's "asked again" guard matches): the tool and what it was asked."""
    return {"tool": info.command or "", "input": info.query or ""}


def neutral_name(info: CallInfo) -> str:
    """The name the mechanisms know the call by (pi's tool names)."""
    if info.kind == "other":
        return info.wire_name
    return info.kind


def call_name(info: CallInfo) -> str:
    """The name of the call's first toolCall block (`neutral_calls`): a patch's first file's
    operation, else `neutral_name`. What masking knows the call, and so its result, by."""
    return _patch_name(info.files[0][0]) if info.files else neutral_name(info)


def neutral_calls(info: CallInfo, item: Mapping[str, Any]) -> list[JsonDict]:
    """The engine's toolCall blocks of one call. A read's arguments are exactly the tag item's
    input, so the daemon's "asked again" guard (argsSig) matches. A patch is one block per
    file it touches, as replay splits it: the call's own id for the first (its largest added
    file, else the first file), `ID#1`, `ID#2`… for the others (they carry no result), so
    masking sees each file written or edited (a read of it is superseded)."""
    args: Any
    name = call_name(info)
    if info.kind == "write" and info.added is not None:
        args = {"path": info.added.path, "content": info.added.content}
    elif info.kind in ("read", "grep", "find", "bash"):
        args = shell_input(info)
    elif info.kind == "fetch":
        args = fetch_input(info)
    elif info.files:
        args = {"path": info.files[0][1]}
    else:
        args = _arguments(item)
    out = [{"type": "toolCall", "id": info.call_id, "name": name, "arguments": args}]
    lead = args.get("path") if info.files and isinstance(args, dict) else None
    for op, path in info.files:
        if path == lead:
            lead = None  # the first block's file, once
            continue
        out.append(
            {
                "type": "toolCall",
                "id": f"{info.call_id}#{len(out)}",
                "name": _patch_name(op),
                "arguments": {"path": path},
            }
        )
    return out


def _patch_name(op: str) -> str:
    return "write" if op == "add" else "edit"


def outputs_by_call(items: Iterable[Any]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        if isinstance(item, dict) and item.get("type") in OUTPUT_TYPES:
            cid = item.get("call_id")
            if isinstance(cid, str):
                out[cid] = output_text(item.get("output"))
    return out


@dataclass
class Conversation(Neutral):
    """A request's ``input`` as the engine sees it, and each call's meaning."""

    calls: dict[str, CallInfo] = field(default_factory=dict)
    outputs: dict[str, str] = field(default_factory=dict)  # call_id → output text as sent


def items(body: Mapping[str, Any]) -> list[Any] | None:
    raw = body.get("input")
    return raw if isinstance(raw, list) else None


def head(body: Mapping[str, Any]) -> tuple[Any, Any]:
    return body.get("tools"), body.get("instructions")


def marked_ttl_s(body: Any) -> float | None:
    """A Responses request names no cache lifetime of its own: the daemon's setting holds."""
    return None


def to_neutral(items: list[Any], *, notes_role: str = "user") -> Conversation:
    """The pi-shaped list: consecutive assistant items (text, reasoning, calls) form one
    assistant message; each output is one toolResult. Developer/system messages become
    `custom` (no task boundary); user messages stay `user` (``notes_role`` for the ones
    Codex injects, e.g. ``<environment_context>``)."""
    outputs = outputs_by_call(items)
    calls: dict[str, CallInfo] = {}
    running: dict[int, str] = {}  # exec session id → its command (Codex's write_stdin polls)
    out: list[JsonDict] = []
    current: list[JsonDict] | None = None
    for item in items:
        if not isinstance(item, dict):
            out.append({"role": ""})
            current = None
            continue
        kind = item.get("type")
        role = item.get("role")
        if kind in CALL_TYPES or kind == "reasoning" or (kind == "message" and role == "assistant"):
            if current is None:
                current = []
                out.append({"role": "assistant", "content": current})
            if kind in CALL_TYPES:
                info = call_info(item, outputs, running)
                if info is not None:
                    calls[info.call_id] = info
                    current.extend(neutral_calls(info, item))
            elif kind == "message":
                text = output_text(item.get("content"))
                current.append({"type": "text", "text": text})
            continue
        current = None
        if kind in OUTPUT_TYPES:
            cid = item.get("call_id")
            info = calls.get(cid) if isinstance(cid, str) else None
            name = neutral_name(info) if info else ""
            if info is not None and info.command and isinstance(cid, str):
                m = _RUNNING_RE.search(commands.split_exec_output(outputs.get(cid, "")).header)
                if m is not None:
                    running[int(m.group(1))] = info.command
            out.append(
                {
                    "role": "toolResult",
                    "toolCallId": cid,
                    "toolName": name,
                    "content": [{"type": "text", "text": output_text(item.get("output"))}],
                    "isError": _is_error(
                        info, outputs.get(cid, "") if isinstance(cid, str) else ""
                    ),
                }
            )
            continue
        if kind == "message" and role == "user":
            text = output_text(item.get("content"))
            injected = text.lstrip().startswith("<")  # <environment_context>, <user_instructions>
            out.append({"role": notes_role if injected else "user", "content": text})
            continue
        out.append({"role": "custom", "content": output_text(item.get("content"))})
    return Conversation(out, calls, outputs)


def tail_of(items: list[Any], seen: Collection[str]) -> tuple[Tail, int, Conversation]:
    """`describe_tail` of the neutral view, its length, and the view (the session's tool work
    reads each call's meaning from it)."""
    conv = to_neutral(items)
    return describe_tail(conv.messages, seen), len(conv.messages), conv


def _is_error(info: CallInfo | None, text: str) -> bool:
    if info is None or info.kind not in ("bash", "read", "grep", "find", "fetch"):
        return False
    if info.kind == "fetch":
        return '"isError":true' in text[:4000].replace(" ", "")  # an MCP tool's own error
    code = commands.split_exec_output(text).exit_code
    return code is not None and code != 0


def all_call_ids(items: Iterable[Any]) -> set[str]:
    ids: set[str] = set()
    for item in items:
        if isinstance(item, dict) and (
            item.get("type") in CALL_TYPES or item.get("type") in OUTPUT_TYPES
        ):
            cid = item.get("call_id")
            if isinstance(cid, str):
                ids.add(cid)
    return ids


def _replace_output(item: JsonDict, text: str) -> None:
    output = item.get("output")
    if isinstance(output, list):
        kind = next(
            (p.get("type") for p in output if isinstance(p, dict) and "text" in p), "input_text"
        )
        item["output"] = [{"type": kind, "text": text}]
    elif isinstance(output, dict) and "content" in output:
        item["output"] = {**output, "content": text}
    else:
        item["output"] = text


def apply_edits(body: JsonDict, edits: Mapping[str, list[Edit]]) -> list[Edit]:
    """Apply frozen edits to the wire body in place; returns the edits that applied.

    A result gets at most one replacement (a mask, else its tombstone or digest); a write strip
    replaces the largest added file's body inside the apply_patch text; every other key of
    every item stays as Codex sent it.
    """
    applied: list[Edit] = []
    done: set[tuple[str, str]] = set()
    for item in body.get("input") or ():
        if not isinstance(item, dict):
            continue
        cid = item.get("call_id")
        if not isinstance(cid, str) or cid not in edits:
            continue
        if item.get("type") in OUTPUT_TYPES:
            # A history mask outranks the digest it was decided over (the proxy accepts a mask
            # only for a result whose one edit is a digest); otherwise the first edit stays.
            replacement = next((e for e in edits[cid] if isinstance(e, MaskEdit)), None) or next(
                (e for e in edits[cid] if isinstance(e, TombstoneEdit)), None
            )
            if replacement is not None and ("result", cid) not in done:
                done.add(("result", cid))
                _replace_output(item, replacement.text)
                applied.append(replacement)
        elif item.get("type") == "custom_tool_call" and isinstance(item.get("input"), str):
            for e in edits[cid]:
                if isinstance(e, StripWriteEdit) and (e.kind, cid) not in done:
                    patch: str = item["input"]
                    if f"\n{e.text}\n" in patch:  # already stripped: never a second file
                        done.add((e.kind, cid))
                        applied.append(e)
                        continue
                    added = commands.largest_added_file(patch)
                    if added is None:
                        continue
                    done.add((e.kind, cid))
                    item["input"] = patch[: added.start] + e.text + "\n" + patch[added.end :]
                    applied.append(e)
    return applied


def measure(body: Mapping[str, Any]) -> BodySize:
    """Chars of what the request carries: instructions + developer messages as "system"."""
    size = json_chars
    raw = body.get("input")
    items: list[Any] = raw if isinstance(raw, list) else []
    system = [i for i in items if isinstance(i, dict) and i.get("role") in ("developer", "system")]
    rest = [
        i for i in items if not (isinstance(i, dict) and i.get("role") in ("developer", "system"))
    ]
    return BodySize(
        size(body.get("instructions")) + size(system), size(rest), size(body.get("tools"))
    )


def prefix_blocks(body: Mapping[str, Any]) -> list[tuple[str, int]]:
    """The request in the cache's order (tools, instructions, each input item), each a
    `prefix_block`: what `shared_prefix_chars` compares with the previous call's."""
    return request_blocks((body.get("tools"), body.get("instructions")), body.get("input"))


def update_usage(into: Usage, usage: Any, model: Any = None) -> None:
    """Take a Responses `usage` object: fresh input is OpenAI's input_tokens minus the cached
    ones; the cache write is not reported (0)."""
    if not isinstance(usage, dict):
        return

    def num(value: Any) -> int:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        return int(value) if ok else 0

    details = usage.get("input_tokens_details")
    cached = num(details.get("cached_tokens")) if isinstance(details, dict) else 0
    total = num(usage.get("input_tokens"))
    into.seen = True
    into.cache_read_tokens = cached
    into.input_tokens = max(0, total - cached)
    into.output_tokens = num(usage.get("output_tokens"))
    if isinstance(model, str):
        into.model = model


@dataclass
class UsageReader(JsonEventStream):
    """Reads usage and tool calls from a response as its bytes pass through (SSE or JSON)."""

    usage: Usage = field(default_factory=Usage)
    on_call: Callable[[str, str], None] | None = None

    def _event(self, data: dict[str, Any]) -> None:
        if data.get("type") == "response.output_item.done":
            self._item(data.get("item"))
        elif data.get("type") in ("response.completed", "response.incomplete"):
            resp = data.get("response")
            if isinstance(resp, dict):
                update_usage(self.usage, resp.get("usage"), resp.get("model"))

    def _item(self, item: Any) -> None:
        if not isinstance(item, dict) or item.get("type") not in CALL_TYPES:
            return
        cid, name = item.get("call_id"), item.get("name") or item.get("type")
        if self.on_call is not None and isinstance(cid, str) and isinstance(name, str):
            with contextlib.suppress(Exception):  # never at the cost of the stream
                self.on_call(cid, name)

    def finish(self) -> Usage:
        data = self.body()
        # "response.compaction": the answer of remote compaction v1 (…/responses/compact)
        if data is not None and data.get("object") in ("response", "response.compaction"):
            update_usage(self.usage, data.get("usage"), data.get("model"))
            for item in data.get("output") or []:
                self._item(item)
        return self.usage


def usage_reader(streaming: bool, encoding: str) -> UsageReader:
    return UsageReader(streaming, encoding)


def completed_input_tokens(event: Mapping[str, Any]) -> int | None:
    """In-step compaction (agents/_proxy/in_step.py): the input tokens `response.completed`
    names (cached included), the count Codex compacts by."""
    if event.get("type") != "response.completed":
        return None
    resp = event.get("response")
    usage = resp.get("usage") if isinstance(resp, Mapping) else None
    n = usage.get("input_tokens") if isinstance(usage, Mapping) else None
    return n if isinstance(n, int) and not isinstance(n, bool) else None


input_tokens = completed_input_tokens  # the Wire contract's name


def add_input_tokens(event: dict[str, Any], delta: int) -> bool:
    """Add `delta` to the input (and total) tokens of `response.completed`."""
    resp = event.get("response")
    usage = resp.get("usage") if isinstance(resp, dict) else None
    if event.get("type") != "response.completed" or not isinstance(usage, dict):
        return False
    if not isinstance(usage.get("input_tokens"), int):
        return False
    usage["input_tokens"] += delta
    if isinstance(usage.get("total_tokens"), int):
        usage["total_tokens"] += delta
    return True
