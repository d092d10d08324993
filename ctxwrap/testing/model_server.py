r"""Scripted model server (OpenAI chat completions and Anthropic Messages) for tests and the demo.

No LLM is reachable from the test machines, so pi runs against this server on 127.0.0.1.
Main-agent requests consume a script of assistant steps in order; ctxwrap's out-of-band
"aux" requests (system prompt starting ``[ctxwrap-aux:<task>]``) are answered by rules and
never consume the script. Standard library only, because it ships in the wheel.

Script (JSON list, or an object ``{"steps": [...], "aux_rules": [...], "aux_delay_s": 0,
"aux_status": null, "main_delay_s": 0}``); each step is one assistant reply::

    {"text": "done"}
    {"tool_calls": [{"name": "bash", "arguments": {"command": "ls"}}], "text": "optional"}
    {"text": "slow", "delay_s": 1.5}          # sleep before answering
    {"status": 500, "text": "boom"}           # answer HTTP 500 with an error body
    {"status": 429, "text": "slow down", "headers": {"retry-after": "1"},
     "error_type": "rate_limit_error"}        # extra response headers, the error's type
    {"fault": "reset"}                        # reset the connection, no response at all
    {"fault": "down", "down_s": 3}            # reset it and refuse connections for 3 s
    {"text": "...", "fault": "cut"}           # stream half the reply, then reset
    {"text": "...", "fault": "stall", "delay_s": 30}  # stream half, go quiet, then reset
    {"tool_calls": [{"name": "Bash", "arguments": {"command": "ctxwrap recall {fill} x"}}],
     "fill": "ctxwrap recall (r[0-9a-f]+)"}  # {fill}: the regex's group, last match in the request

``fill`` is how a script answers with what only the run knows (a recall handle a digest named):
its one group, from the last match in the request's JSON text, replaces every ``{fill}`` in the
step's call arguments; with no match they get ``(fill: no match)``, so the test fails plainly.

A fault step is one try of the agent's (recorded as a main request) like an error status;
``down`` also cuts every open connection (keep-alive ones included), so the next try of any
client is refused until the server listens again on the same port.

Several ``tool_calls`` in one step are parallel calls; their ids are ``call_<step>_<i>``
(0-based script index, 0-based position). Past the end every main request gets the text
``(script exhausted)``. Usage: ``prompt_tokens = ceil((len(json.dumps(messages)) +
len(json.dumps(tools)))/4)`` (tools term only when present), ``completion_tokens =
ceil(len(output)/4)`` where output is the text plus each call's name and argument JSON —
see :func:`estimate_prompt_tokens` and :func:`estimate_completion_tokens`.

Aux rules ``{"task": "tag"|"digest"|"fact"|"*", "match": "substring", "answer": str|obj}``:
first rule whose task matches and whose ``match`` (optional) occurs in the text of the
non-system messages wins; an object answer is sent as its JSON. A batched tag (results under
``### result N (key)`` headers) is answered per item: each item is matched on the task text
plus its own text, a ``{"decision": X}`` rule answer becomes ``"N": X`` of one JSON object
(unmatched items RETAIN), any other rule answer is sent whole (a malformed reply). Defaults: tag →
``{"decision": "RETAIN"}``; digest → ``Digest: <n> lines.`` plus ``First error: <line>`` for
the first line containing "error" (any case) or "FAIL" — only lines after the last line
starting "Output" when there is one; fact → ``Wrote <path> — file written``, the path being
the first ``Path: X`` / ``"path": "X"`` (any case) or else the first path-like token.

What pi sends (verified with real pi 1.6.0 and 0.73.1 in ``-p`` mode, models.json from
:mod:`ctxwrap.testing.pi_home`; 1.6 and 0.73 differ only where noted)
-------------------------------------------------------------------------------------------
``POST <baseUrl>/chat/completions`` (so baseUrl ends in ``/v1``) through the openai JS SDK:
``authorization: Bearer <apiKey>``, keep-alive, ``user-agent: pi/1.6.0 (linux; node/…)`` on
1.6 and ``OpenAI/JS 6.26.0`` on 0.73. Always streaming; nothing else reaches the server (no
``GET /models``, no title request) with ``PI_OFFLINE=1``. Body keys, in order::

    model, messages, stream: true, stream_options: {"include_usage": true},
    [store: false,] max_completion_tokens: <model maxTokens, 16384>, tools

No ``temperature``, no ``tool_choice``; ``store: false`` is sent unless models.json sets
compat.supportsStore false, as pi_home does. ``tools`` = read, bash, edit, write as
``{"type": "function", "function": {"name", "description", "parameters"}}``.

``messages`` (each request repeats the whole conversation):

- ``{"role": "system", "content": "<pi system prompt, a string>"}`` first. 1.6 starts "You
  are a coding assistant running inside pi" with ``<tools>``/``<rules>``/``<docs>``/``<cwd>``
  sections; 0.73 starts "You are an expert coding assistant operating inside pi" and ends
  with "Current date:" / "Current working directory:" lines.
- user: ``{"role": "user", "content": [{"type": "text", "text": "<prompt>"}]}`` — parts.
- assistant: ``{"role": "assistant", "content": null | "<text>", "tool_calls": [{"id":
  "call_0_0", "type": "function", "function": {"name": "bash", "arguments":
  "{\"command\":\"echo hi\"}"}}]}`` — content is null when the step had no text;
  arguments are compact JSON text.
- tool results, one message per call in call order, right after their assistant message:
  ``{"role": "tool", "content": "hello-from-bash\n", "tool_call_id": "call_0_0"}`` —
  content is a plain string, no ``name``.

Parallel calls in one step run and come back as consecutive tool messages. Error steps: a
4xx makes ``pi -p`` exit 1 with the error on stderr; a 5xx is retried (1.6: pi's auto-retry
after ~2 s; 0.73: the openai SDK, ``x-stainless-retry-count: 1``) and the retry consumes
the next step. This server
accepts content as str or as a list of ``{"type": "text", "text"}`` parts everywhere.

OpenAI Responses (what Codex CLI sends): ``POST /v1/responses`` answers from the same script,
with usage from a simulated automatic prefix cache; see :mod:`ctxwrap.testing.responses_api`.

Anthropic Messages (what Claude Code 2.1 sends; see docs/research/claude-code-notes.md)
-------------------------------------------------------------------------------------------
``POST /v1/messages`` (any query, e.g. ``?beta=true``) answers from the same script: a step's
``tool_calls`` become ``tool_use`` blocks with ids ``toolu_<step>_<i>`` and the arguments as
``input``; ``stop_reason`` is ``tool_use`` or ``end_turn``. ``stream: true`` → SSE
(``message_start``, ``content_block_start/delta/stop`` with ``text_delta`` and
``input_json_delta``, ``message_delta``, ``message_stop``); otherwise one JSON message. An
error step answers ``{"type": "error", "error": {...}}``. Aux requests are recognised by a
``system`` (string or text blocks) starting with ``[ctxwrap-aux:<task>]``.
``POST /v1/messages/count_tokens`` answers ``{"input_tokens": N}`` (kind ``count_tokens``);
``HEAD /`` answers 200 with no body. With ``side_text`` set, a request without ``tools``
(Claude Code's title and other side requests) gets that text, as kind ``side``, and never a
script step; so does a Responses request of the Codex TUI's title thread.
:attr:`ScriptedModelServer.all_requests` records every HTTP request (method, path, headers,
body); :attr:`requests` only the model calls.

Usage comes from a simulated prompt cache (:class:`PromptCacheSim`), so cache figures behave
like the provider's: the request is cut into blocks in cache order (each tool, each system
block, each content block of each message), ``cache_control`` keys removed for identity.
``chars(k)`` = the JSON length of the first k blocks; tokens of a prefix =
``ceil(chars(k)/4)``. Read = the longest prefix ending at a block boundary that an earlier
request (same model, within ``cache_ttl_s``) wrote; write = from there up to the request's
last ``cache_control`` breakpoint; ``input_tokens`` = the rest. Every breakpoint's prefix is
then cached. No minimum cacheable length. So ``input_tokens + cache_read_input_tokens +
cache_creation_input_tokens = ceil(chars(all)/4)`` = the ``count_tokens`` answer.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import math
import os
import re
import signal
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any, Literal, Self

from ctxwrap.agents._proxy import body_encoding
from ctxwrap.testing import responses_api
from ctxwrap.testing.model_server_thinking import ModelView, model_view, thinking_rules_error

__all__ = [
    "EXHAUSTED_TEXT",
    "MODEL_ID",
    "AuxRule",
    "CacheUsage",
    "PromptCacheSim",
    "RecordedRequest",
    "ScriptError",
    "ScriptStep",
    "ScriptedModelServer",
    "ToolCall",
    "estimate_completion_tokens",
    "estimate_prompt_tokens",
    "load_script_file",
    "main",
]

EXHAUSTED_TEXT = "(script exhausted)"
# Connection-level faults a script step can inject (see the module docstring).
FAULTS = ("reset", "down", "cut", "stall")
MODEL_ID = "scripted-model"
AUX_MARKER_RE = re.compile(r"^\s*\[ctxwrap-aux:([A-Za-z0-9_-]+)\]")
_STREAM_TEXT_CHUNK = 32

JsonObj = dict[str, Any]
RequestKind = Literal["main", "aux", "summary", "side", "count_tokens", "other"]
ApiKind = Literal["openai", "anthropic", "responses"]  # responses: see responses_api.py
# pi's compaction summariser (1.6 and 0.73 core/compaction/utils.js): answered with
# `summary_text`, never from the script, so a session that compacts keeps its steps.
SUMMARY_PROMPT_PREFIX = "You are a context summarization assistant"
DEFAULT_SUMMARY_TEXT = "## Goal\nScripted session summary.\n\n## Progress\n" + "- step done\n" * 40


class ScriptError(ValueError):
    """A script or aux rule that cannot be understood."""


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: str  # JSON text, exactly as it goes on the wire


@dataclass(frozen=True)
class ScriptStep:
    text: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    delay_s: float = 0.0
    status: int | None = None
    headers: tuple[tuple[str, str], ...] = ()  # extra response headers (an error's retry-after)
    error_type: str | None = None
    fault: str | None = None  # one of FAULTS
    down_s: float = 0.0
    fill: str | None = None  # a regex of one group: its match replaces {fill} in the arguments

    @classmethod
    def from_json(cls, raw: object, index: int) -> ScriptStep:
        if not isinstance(raw, Mapping):
            raise ScriptError(f"script step {index} must be an object, got {raw!r}")
        unknown = set(raw) - {
            "text",
            "tool_calls",
            "delay_s",
            "status",
            "headers",
            "error_type",
            "fault",
            "down_s",
            "fill",
        }
        if unknown:
            raise ScriptError(f"script step {index} has unknown keys {sorted(unknown)}")
        text = raw.get("text")
        if text is not None and not isinstance(text, str):
            raise ScriptError(f"script step {index}: text must be a string")
        calls: list[ToolCall] = []
        for j, call in enumerate(raw.get("tool_calls") or []):
            if not isinstance(call, Mapping) or not isinstance(call.get("name"), str):
                raise ScriptError(f"script step {index} tool call {j} needs a string name")
            args = call.get("arguments", {})
            calls.append(
                ToolCall(call["name"], args if isinstance(args, str) else json.dumps(args))
            )
        fault = raw.get("fault")
        if fault is not None and fault not in FAULTS:
            raise ScriptError(f"script step {index}: fault must be one of {FAULTS}")
        if text is None and not calls and raw.get("status") is None and fault is None:
            raise ScriptError(f"script step {index} needs text, tool_calls, status or fault")
        status = raw.get("status")
        if status is not None and not isinstance(status, int):
            raise ScriptError(f"script step {index}: status must be an integer")
        headers = raw.get("headers") or {}
        if not isinstance(headers, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in headers.items()
        ):
            raise ScriptError(f"script step {index}: headers must map strings to strings")
        error_type = raw.get("error_type")
        if error_type is not None and not isinstance(error_type, str):
            raise ScriptError(f"script step {index}: error_type must be a string")
        fill = raw.get("fill")
        if fill is not None:
            try:
                groups = re.compile(fill).groups if isinstance(fill, str) else -1
            except re.error:
                groups = -1
            if groups != 1:
                raise ScriptError(f"script step {index}: fill must be a regex of one group")
        return cls(
            text,
            tuple(calls),
            float(raw.get("delay_s", 0.0)),
            status,
            tuple(headers.items()),
            error_type,
            fault,
            float(raw.get("down_s", 0.0)),
            fill,
        )

    def arguments(self, body: Mapping[str, object]) -> list[str]:
        """The calls' arguments, with ``{fill}`` replaced from the request (see ``fill``)."""
        if self.fill is None:
            return [c.arguments for c in self.tool_calls]
        found = re.findall(self.fill, json.dumps(body))
        value = json.dumps(found[-1] if found else "(fill: no match)")[1:-1]
        return [c.arguments.replace("{fill}", value) for c in self.tool_calls]


@dataclass(frozen=True)
class AuxRule:
    task: str  # "digest" | "tag" | "fact" | "*"
    answer: str
    match: str | None = None

    @classmethod
    def from_json(cls, raw: object, index: int) -> AuxRule:
        if not isinstance(raw, Mapping) or not isinstance(raw.get("task"), str):
            raise ScriptError(f"aux rule {index} must be an object with a string task")
        if "answer" not in raw:
            raise ScriptError(f"aux rule {index} needs an answer")
        answer = raw["answer"]
        match = raw.get("match")
        if match is not None and not isinstance(match, str):
            raise ScriptError(f"aux rule {index}: match must be a string")
        return cls(raw["task"], answer if isinstance(answer, str) else json.dumps(answer), match)


@dataclass(frozen=True)
class RecordedRequest:
    kind: RequestKind
    body: JsonObj
    timestamp: float
    aux_task: str | None = None
    step_index: int | None = None  # script index served; None when exhausted or aux
    path: str = "/v1/chat/completions"
    headers: dict[str, str] = field(default_factory=dict)  # lower-cased names
    method: str = "POST"
    usage: JsonObj | None = None  # what the server reported (model calls)
    # thinking_rules: the (message, block) of each thinking block the provider's rules left
    # out of what the model read (server-side: the body above is as sent)
    thinking_cleared: tuple[tuple[int, int], ...] = ()

    def to_json(self) -> JsonObj:
        return {
            "ts": self.timestamp,
            "method": self.method,
            "kind": self.kind,
            "usage": self.usage,
            "aux_task": self.aux_task,
            "step_index": self.step_index,
            "path": self.path,
            "headers": self.headers,
            "body": self.body,
        }


@dataclass
class _Reply:
    text: str | None
    tool_calls: list[JsonObj] = field(default_factory=list)
    status: int | None = None
    delay_s: float = 0.0
    cached_tokens: int | None = None  # simulated automatic prompt cache (cache_simulation)
    usage: JsonObj | None = None  # Anthropic: computed when the request is recorded
    thinking_signature: str | None = None  # Anthropic, `thinking`: the block's prefix key
    context_management: JsonObj | None = None  # Anthropic: what the context edits cleared
    headers: tuple[tuple[str, str], ...] = ()
    error_type: str | None = None
    fault: str | None = None
    down_s: float = 0.0


# -- simulated Anthropic prompt cache -------------------------------------------------------


@dataclass(frozen=True)
class CacheUsage:
    input_tokens: int
    cache_read_input_tokens: int
    cache_creation_input_tokens: int


def _strip_cache_control(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_cache_control(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_strip_cache_control(v) for v in value]
    return value


# -- simulated preserved thinking (Claude Fable 5.1, the 5.5 models) ------------------------

PREFIX_MISMATCH = (
    "messages.{i}.content.{j}: Invalid `signature` in `thinking` block. The block is bound to "
    "a different conversation. Remove the block, or set "
    '`thinking.block_binding.prefix_mismatch_behavior` to "drop_block".'
)


def _canonical_message(message: Any) -> Any:
    """A message as the prefix check compares it: no cache markers (Claude Code moves them on
    every request), a lone text block the same as a string."""
    m = _strip_cache_control(message)
    c = m.get("content") if isinstance(m, dict) else None
    lone = c[0] if isinstance(c, list) and len(c) == 1 else None
    if isinstance(lone, dict) and set(lone) == {"type", "text"} and lone["type"] == "text":
        m = {**m, "content": lone["text"]}
    return m


def thinking_prefix_key(body: Mapping[str, Any], messages: Sequence[Any]) -> str:
    """What a thinking block written after `messages` (of `body`'s system and tools) is bound
    to: its signature here, checked when the block comes back."""
    system = body.get("system")
    if isinstance(system, str):
        system = [{"type": "text", "text": system}]
    canon = {
        "system": _strip_cache_control(system or []),
        "tools": _strip_cache_control(body.get("tools") or []),
        "messages": [_canonical_message(m) for m in messages],
    }
    raw = json.dumps(canon, sort_keys=True, ensure_ascii=False).encode()
    return "sig-" + hashlib.sha256(raw).hexdigest()[:40]


def thinking_prefix_failure(body: Mapping[str, Any]) -> tuple[int, int] | None:
    """(message, block) of the first returned thinking block whose prefix changed since the
    server wrote it, or None when every one still matches."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        return None
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") != "assistant":
            continue
        content = m.get("content")
        if not isinstance(content, list):
            continue
        for j, b in enumerate(content):
            if not isinstance(b, dict) or b.get("type") != "thinking":
                continue
            before = (
                [*messages[:i], {"role": "assistant", "content": content[:j]}]
                if j
                else messages[:i]
            )
            if b.get("signature") != thinking_prefix_key(body, before):
                return i, j
    return None


def anthropic_cache_blocks(body: Mapping[str, Any]) -> list[tuple[str, bool]]:
    """(identity JSON, has a cache_control breakpoint) per block, in the provider's cache order."""
    blocks: list[Any] = []
    for tool in body.get("tools") or []:
        blocks.append(tool)
    system = body.get("system")
    if isinstance(system, str):
        blocks.append({"type": "text", "text": system})
    elif isinstance(system, list):
        blocks.extend(system)
    for msg in body.get("messages") or []:
        if not isinstance(msg, dict):
            continue
        content = msg.get("content")
        role = msg.get("role")
        if isinstance(content, str):
            blocks.append({"role": role, "type": "text", "text": content})
        elif isinstance(content, list):
            # the role joins each block's identity: the same text from another role is not a hit
            blocks.extend({"role": role, **b} if isinstance(b, dict) else b for b in content)
    out = []
    for b in blocks:
        marked = isinstance(b, dict) and b.get("cache_control") is not None
        out.append((json.dumps(_strip_cache_control(b), sort_keys=True), marked))
    return out


def anthropic_prompt_tokens(body: Mapping[str, Any]) -> int:
    return math.ceil(sum(len(j) for j, _ in anthropic_cache_blocks(body)) / 4)


CACHE_LOSSES = ("none", "older")  # `PromptCacheSim.forget`


class PromptCacheSim:
    """Anthropic-style prefix cache: breakpoints write, later identical prefixes read."""

    def __init__(self, ttl_s: float = 300.0) -> None:
        self.ttl_s = ttl_s
        self._written: dict[str, float] = {}  # prefix hash → last write/read time
        self._last_written: list[str] = []  # what the latest remembered request wrote, not read
        self._lock = threading.Lock()

    def forget(self, how: str) -> None:
        """Lose entries the way a real provider does (docs/accounting.md, "The cache as
        recorded"): "none", everything (the next request reads nothing); "older", what the
        latest request wrote (the next one reads an older request's entry)."""
        with self._lock:
            if how == "none":
                self._written.clear()
            elif how == "older":
                for h in self._last_written:
                    self._written.pop(h, None)
            else:
                raise ValueError(f"unknown cache loss {how!r}")

    def usage(
        self, body: Mapping[str, Any], now: float | None = None, *, remember: bool = True
    ) -> CacheUsage:
        """The request's usage; `remember`: it is the one `forget("older")` would lose the
        entry of (the agent's conversation, not an aux model's request in between)."""
        now = time.time() if now is None else now
        blocks = anthropic_cache_blocks(body)
        h = hashlib.sha256(str(body.get("model", "")).encode())
        chars = [0]
        hashes: list[str] = []
        for ident, _ in blocks:
            h.update(b"\x00" + ident.encode("utf-8", "surrogatepass"))
            hashes.append(h.hexdigest())
            chars.append(chars[-1] + len(ident))
        marks = [i + 1 for i, (_, marked) in enumerate(blocks) if marked]
        with self._lock:
            self._written = {k: t for k, t in self._written.items() if now - t <= self.ttl_s}
            read_k = 0
            for k in range(len(hashes), 0, -1):
                if hashes[k - 1] in self._written:
                    read_k = k
                    break
            last_mark = max(marks, default=0)
            write_k = max(last_mark, read_k)
            for k in marks:
                self._written[hashes[k - 1]] = now
            if remember:
                self._last_written = [hashes[k - 1] for k in marks if k != read_k]
            if read_k:
                self._written[hashes[read_k - 1]] = now  # a hit refreshes the TTL
        tok = [math.ceil(c / 4) for c in chars]
        return CacheUsage(
            input_tokens=tok[-1] - tok[write_k],
            cache_read_input_tokens=tok[read_k],
            cache_creation_input_tokens=tok[write_k] - tok[read_k],
        )


def estimate_prompt_tokens(body: Mapping[str, Any]) -> int:
    """Usage the server reports as ``prompt_tokens`` for a request body."""
    n = len(json.dumps(body.get("messages", [])))
    if body.get("tools"):
        n += len(json.dumps(body["tools"]))
    return math.ceil(n / 4)


def estimate_completion_tokens(text: str | None, tool_calls: Sequence[ToolCall] = ()) -> int:
    """Usage the server reports as ``completion_tokens`` for one reply."""
    n = len(text or "") + sum(len(c.name) + len(c.arguments) for c in tool_calls)
    return math.ceil(n / 4)


def _content_text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(p.get("text", "")) for p in content if isinstance(p, dict) and "text" in p
        )
    return ""


def _system_text(body: Mapping[str, Any]) -> str:
    if "input" in body:  # OpenAI Responses (Codex CLI)
        return responses_api.system_text(body)
    if body.get("system") is not None:  # Anthropic: messages may hold mid-conversation system
        return _content_text(body["system"])
    for msg in body.get("messages") or []:
        if isinstance(msg, dict) and msg.get("role") in ("system", "developer"):
            return _content_text(msg.get("content"))
    return ""


def _conversation_text(body: Mapping[str, Any]) -> str:
    if "input" in body:  # OpenAI Responses (Codex CLI)
        return responses_api.conversation_text(body)
    parts = [
        _content_text(m.get("content"))
        for m in body.get("messages") or []
        if isinstance(m, dict) and m.get("role") not in ("system", "developer")
    ]
    return "\n".join(parts)


# A batched tag request (ctxwrap.aux.prompts.TAG_BATCH_HEADER): items under numbered headers
# that all carry the same per-request key.
_TAG_BATCH_HEADER_RE = re.compile(r"^### result ([1-9][0-9]*) \(([0-9a-f]+)\)$", re.M)


def tag_batch_items(text: str) -> tuple[str, list[tuple[str, str]]] | None:
    """(the text above the items, [(number, item text)]) of a batched tag request; None for a
    single-result tag. A header with another key than the first one's is item text."""
    first = _TAG_BATCH_HEADER_RE.search(text)
    if first is None:
        return None
    heads = [m for m in _TAG_BATCH_HEADER_RE.finditer(text) if m.group(2) == first.group(2)]
    items = [
        (m.group(1), text[m.end() : heads[i + 1].start() if i + 1 < len(heads) else len(text)])
        for i, m in enumerate(heads)
    ]
    return text[: first.start()], items


def aux_task_of(body: Mapping[str, Any]) -> str | None:
    """The ``<task>`` of a ``[ctxwrap-aux:<task>]`` system prompt, or None for main requests."""
    m = AUX_MARKER_RE.match(_system_text(body))
    return m.group(1) if m else None


_PATH_KEY_RE = re.compile(r"""["']?path["']?\s*[:=]\s*["']?([^\s"',}]+)""", re.IGNORECASE)
_PATH_LIKE_RE = re.compile(r"(?:~|\.{1,2})?(?:/?[\w.@+-]+)*/[\w.@+-]+|\b[\w-]+\.[A-Za-z0-9]{1,8}\b")


def default_aux_answer(task: str, body: Mapping[str, Any]) -> str:
    text = _conversation_text(body)
    if task == "tag":
        return json.dumps({"decision": "RETAIN"})
    if task == "digest":
        lines = text.splitlines()
        # ctxwrap's digest prompt puts the command output after an "Output…:" line; the
        # request text above it may say "error" too.
        starts = [i for i, line in enumerate(lines) if line.startswith("Output")]
        lines = lines[starts[-1] + 1 :] if starts else lines
        summary = f"Digest: {len(lines)} lines."
        for line in lines:
            if "error" in line.lower() or "FAIL" in line:
                return f"{summary} First error: {line.strip()}"
        return summary
    if task == "fact":
        m = _PATH_KEY_RE.search(text) or _PATH_LIKE_RE.search(text)
        path = m.group(1) if m and m.groups() else (m.group(0) if m else "<unknown>")
        return f"Wrote {path} — file written"
    return f"(aux {task})"


def _iter_text_chunks(text: str) -> Iterator[str]:
    # Small deltas like a real model, but at most ~64 of them: pi re-parses partial tool-call
    # JSON on every delta, so 32-char deltas of a 50 MB argument would take minutes.
    size = max(_STREAM_TEXT_CHUNK, -(-len(text) // 64))
    for i in range(0, len(text), size):
        yield text[i : i + size]


class _StreamFault(Exception):
    """Raised inside a reply's writer where a scripted `cut` or `stall` ends the stream."""


class _QuietHTTPServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], handler: Any) -> None:
        super().__init__(address, handler)
        self.open_connections: set[socket.socket] = set()
        self.to_reset: set[socket.socket] = set()
        self.conn_lock = threading.Lock()

    def shutdown_request(self, request: Any) -> None:
        with self.conn_lock:
            self.open_connections.discard(request)
            reset = request in self.to_reset
            self.to_reset.discard(request)
        if reset:  # no FIN first: the peer sees a reset, as from a crashed server
            request.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.close_request(request)
            return
        super().shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that aborts (pi cancelling an aux call at exit) resets the connection;
        # that is normal here, not worth a traceback on the demo's terminal.
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionResetError, BrokenPipeError, TimeoutError)):
            return
        super().handle_error(request, client_address)


class ScriptedModelServer:
    """OpenAI chat-completions server on 127.0.0.1 answering from a script.

    ``script`` and ``aux_rules`` are JSON-shaped (see the module docstring), typed loosely so
    inline literals type-check; they are validated here and raise :class:`ScriptError`.

    ``with ScriptedModelServer(steps) as srv:`` starts it in a daemon thread;
    ``srv.base_url`` is ``http://127.0.0.1:<port>/v1`` (what pi's ``baseUrl`` wants).
    """

    # Claude Code's organization policy endpoints (at Anthropic's API host; research/
    # claude-code-base-url.md): what a GET of each path answers, None → 404 ("no policy").
    POLICY_PATHS = ("/api/claude_code/policy_limits", "/api/claude_code/settings")
    policy_limits: JsonObj | None = None
    managed_settings: JsonObj | None = None

    def __init__(
        self,
        script: Sequence[object] = (),
        *,
        aux_rules: Sequence[object] = (),
        aux_delay_s: float = 0.0,
        aux_status: int | None = None,
        main_delay_s: float = 0.0,
        requests_log: Path | None = None,
        port: int = 0,
        model_id: str = MODEL_ID,
        cache_simulation: bool = False,
        summary_text: str = DEFAULT_SUMMARY_TEXT,
        cache_ttl_s: float = 300.0,
        side_text: str | None = None,
        cache_losses: Mapping[int, str] | None = None,
        preserved_thinking: bool = False,
        tokens_per_s: float = 0.0,
        thinking_rules: bool = False,
    ) -> None:
        """preserved_thinking: every Anthropic main reply starts with a thinking block bound
        to the request it answers (system, tools, messages: `thinking_prefix_key`), and a
        request returning a block whose prefix has changed since is refused with the API's
        400 (`prefix_failures` lists them), as Claude Fable 5.1 and the 5.5 models do.

        thinking_rules: every Anthropic main reply starts with a thinking block, and the
        thinking the request sends back is handled as the provider does
        (`model_server_thinking`): earlier turns' thinking dropped or kept by the model's
        default, or as its `clear_thinking_20251015` edit says (400 on a malformed one),
        server-side — the cache and the usage see the request without the cleared blocks,
        the reply lists them in `context_management.applied_edits`, the recorded request
        in `thinking_cleared`.

        cache_losses: script step → how the simulated Anthropic cache loses entries just
        before that step's request (`PromptCacheSim.forget`): a real provider's misses.

        side_text: answer Claude Code's side requests (an Anthropic request without
        ``tools``: the interactive session's title, …) and the Codex TUI's title thread
        (`responses_api.is_title_request`) with this text, as kind ``side``, without
        consuming the script; None: they take script steps like any request.

        cache_simulation: report ``usage.prompt_tokens_details.cached_tokens`` like an
        OpenAI-style automatic prefix cache: the leading messages (and tools) identical to
        the previous main request's, as prompt tokens (no minimum size, no expiry)."""
        self.steps = tuple(ScriptStep.from_json(s, i) for i, s in enumerate(script))
        self.aux_rules = tuple(AuxRule.from_json(r, i) for i, r in enumerate(aux_rules))
        self.aux_delay_s = aux_delay_s
        self.aux_status = aux_status
        self.main_delay_s = main_delay_s
        self.requests_log = requests_log
        self.model_id = model_id
        self.cache_simulation = cache_simulation
        self.summary_text = summary_text
        self.side_text = side_text
        self.cache_losses = dict(cache_losses or {})
        self.preserved_thinking = preserved_thinking
        self.thinking_rules = thinking_rules
        # a streamed reply's pace (a realistic model; 0: as fast as it can be written): each
        # frame is taken for ~8 tokens (a 32-char delta)
        self.tokens_per_s = tokens_per_s
        self.prefix_failures: list[tuple[int, int]] = []
        for step, how in self.cache_losses.items():
            if how not in CACHE_LOSSES:  # said when the server is made, not mid-session
                raise ScriptError(
                    f"cache loss at step {step}: {how!r} is not one of {CACHE_LOSSES}"
                )
        self._cached_prefix: list[str] = []
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._next_step = 0
        self._requests: list[RecordedRequest] = []
        self._all: list[RecordedRequest] = []
        self.cache = PromptCacheSim(cache_ttl_s)
        self.responses_cache = responses_api.ResponsesCacheSim(cache_ttl_s)
        self._httpd = _QuietHTTPServer(("127.0.0.1", port), _make_handler(self))
        self._httpd.daemon_threads = True
        self._thread: threading.Thread | None = None
        self._closed = False

    # -- lifecycle -------------------------------------------------------------------------

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def root_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        return f"{self.root_url}/v1"

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._httpd.serve_forever,
                kwargs={"poll_interval": 0.05},
                name=f"scripted-model-{self.port}",
                daemon=True,
            )
            self._thread.start()

    def serve_forever(self) -> None:
        self._httpd.serve_forever(poll_interval=0.2)

    def close(self) -> None:
        self._closed = True
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join(timeout=5)
            self._thread = None
        self._httpd.server_close()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- inspection ------------------------------------------------------------------------

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    @property
    def all_requests(self) -> list[RecordedRequest]:
        """Every HTTP request received, model calls or not (HEAD probes, count_tokens, 404s)."""
        with self._lock:
            return list(self._all)

    @property
    def main_requests(self) -> list[RecordedRequest]:
        return [r for r in self.requests if r.kind == "main"]

    @property
    def aux_requests(self) -> list[RecordedRequest]:
        return [r for r in self.requests if r.kind == "aux"]

    @property
    def summary_requests(self) -> list[RecordedRequest]:
        """pi's compaction summarisation requests."""
        return [r for r in self.requests if r.kind == "summary"]

    @property
    def side_requests(self) -> list[RecordedRequest]:
        """Claude Code's tool-less side requests (only told apart with ``side_text``)."""
        return [r for r in self.requests if r.kind == "side"]

    @property
    def side_models(self) -> list[str | None]:
        """The model each side request asked for, in order (what plain Claude Code sends to
        Haiku: titles, prompt hooks, …)."""
        return [r.body.get("model") for r in self.side_requests]

    @property
    def policy_requests(self) -> list[RecordedRequest]:
        """Fetches of the organization policy endpoints (`POLICY_PATHS`)."""
        return [r for r in self.all_requests if r.path.split("?")[0] in self.POLICY_PATHS]

    @property
    def steps_consumed(self) -> int:
        with self._lock:
            return self._next_step

    @property
    def exhausted(self) -> bool:
        return self.steps_consumed >= len(self.steps)

    def wait_for_requests(
        self, count: int, *, kind: RequestKind | None = None, timeout: float = 10.0
    ) -> list[RecordedRequest]:
        """Block until ``count`` requests (of ``kind``) were received; TimeoutError otherwise."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                got = [r for r in self._requests if kind is None or r.kind == kind]
                if len(got) >= count:
                    return got
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"got {len(got)} {kind or 'any'} requests, wanted {count}")
                self._changed.wait(left)

    # -- request handling (called from handler threads) ------------------------------------

    def _record(self, rec: RecordedRequest) -> None:
        with self._changed:
            if rec.kind in ("main", "aux", "summary", "side"):  # model calls
                self._requests.append(rec)
            self._all.append(rec)
            if self.requests_log is not None:
                with self.requests_log.open("a", encoding="utf-8") as fh:
                    fh.write(json.dumps(rec.to_json()) + "\n")
            self._changed.notify_all()

    def _answer(
        self, body: JsonObj, path: str, headers: dict[str, str], api: ApiKind = "openai"
    ) -> _Reply:
        task = aux_task_of(body)
        now = time.time()
        if task is not None:
            reply = self._aux_reply(task, body)
            reply.usage = self._usage_of(api, body, reply, now)
            self._record(
                RecordedRequest("aux", body, now, task, None, path, headers, usage=reply.usage)
            )
            return reply
        if _system_text(body).lstrip().startswith(SUMMARY_PROMPT_PREFIX):
            reply = _Reply(self.summary_text, delay_s=self.main_delay_s)
            reply.usage = self._usage_of(api, body, reply, now)
            self._record(
                RecordedRequest("summary", body, now, None, None, path, headers, usage=reply.usage)
            )
            return reply
        if self.side_text is not None and (
            (api == "anthropic" and not body.get("tools"))
            or (api == "responses" and responses_api.is_title_request(body, headers))
        ):
            reply = _Reply(self.side_text)
            reply.usage = self._usage_of(api, body, reply, now)
            self._record(
                RecordedRequest("side", body, now, None, None, path, headers, usage=reply.usage)
            )
            return reply
        if api == "anthropic" and self.preserved_thinking:
            failed = thinking_prefix_failure(body)
            if failed is not None:
                with self._changed:
                    self.prefix_failures.append(failed)
                i, j = failed
                reply = _Reply(PREFIX_MISMATCH.format(i=i, j=j), status=400)
                self._record(RecordedRequest("main", body, now, None, None, path, headers))
                return reply
        view: ModelView | None = None
        if api == "anthropic" and self.thinking_rules:
            refused = thinking_rules_error(body, headers)
            if refused is not None:
                reply = _Reply(refused, status=400, error_type="invalid_request_error")
                self._record(RecordedRequest("main", body, now, None, None, path, headers))
                return reply
            view = model_view(body, anthropic_prompt_tokens)
        cached = self._simulate_cache(body) if self.cache_simulation and api == "openai" else None
        with self._changed:
            index = self._next_step
            step = self.steps[index] if index < len(self.steps) else None
            if step is not None:
                self._next_step += 1
        served = index if step is not None else None
        if step is None:
            reply = _Reply(EXHAUSTED_TEXT, delay_s=self.main_delay_s)
        else:
            prefix = "toolu" if api == "anthropic" else "call"
            calls = [
                {
                    "id": f"{prefix}_{index}_{i}",
                    "type": "function",
                    "function": {"name": c.name, "arguments": arguments},
                }
                for i, (c, arguments) in enumerate(
                    zip(step.tool_calls, step.arguments(body), strict=True)
                )
            ]
            reply = _Reply(
                step.text,
                calls,
                step.status,
                self.main_delay_s + step.delay_s,
                cached_tokens=cached,
                headers=step.headers,
                error_type=step.error_type,
                fault=step.fault,
                down_s=step.down_s,
            )
        thinks = self.preserved_thinking or self.thinking_rules
        if api == "anthropic" and thinks and step is not None:
            reply.thinking_signature = thinking_prefix_key(body, body.get("messages") or [])
        if served in self.cache_losses and api == "anthropic":
            self.cache.forget(self.cache_losses[served])
        if (reply.status is None or reply.status < 400) and reply.fault not in ("reset", "down"):
            seen = body if view is None else view.body
            reply.usage = self._usage_of(api, seen, reply, now, main=True)
            reply.context_management = None if view is None else view.response
        self._record(
            RecordedRequest(
                "main",
                body,
                now,
                None,
                served,
                path,
                headers,
                usage=reply.usage,
                thinking_cleared=() if view is None else view.cleared,
            )
        )
        return reply

    def _usage_of(
        self, api: ApiKind, body: JsonObj, reply: _Reply, now: float, *, main: bool = False
    ) -> JsonObj:
        if api == "openai":
            return _usage(body, reply)
        if api == "responses":
            total, cached = self.responses_cache.usage(body, now)
            out = estimate_completion_tokens(
                reply.text,
                [
                    ToolCall(c["function"]["name"], c["function"]["arguments"])
                    for c in reply.tool_calls
                ],
            )
            return responses_api.usage_json(total, cached, out)
        cache = self.cache.usage(body, now, remember=main)
        calls = [
            ToolCall(c["function"]["name"], c["function"]["arguments"]) for c in reply.tool_calls
        ]
        return {
            "input_tokens": cache.input_tokens,
            "cache_creation_input_tokens": cache.cache_creation_input_tokens,
            "cache_read_input_tokens": cache.cache_read_input_tokens,
            "output_tokens": estimate_completion_tokens(reply.text, calls),
        }

    # -- faults ------------------------------------------------------------------------------

    def go_down(self, down_s: float, *, resetting: socket.socket | None = None) -> None:
        """Stop listening for `down_s` seconds (connections are refused), cutting every open
        connection, then listen again on the same port: an upstream outage."""
        httpd, port = self._httpd, self.port
        with contextlib.suppress(OSError):  # refused from now on, before any reset is seen
            httpd.socket.shutdown(socket.SHUT_RDWR)
        with httpd.conn_lock:
            conns = [c for c in httpd.open_connections if c is not resetting]
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        threading.Thread(target=self._outage, args=(httpd, port, down_s), daemon=True).start()

    def _outage(self, httpd: _QuietHTTPServer, port: int, down_s: float) -> None:
        running = self._thread is not None
        httpd.shutdown()
        httpd.server_close()
        time.sleep(down_s)
        if self._closed:
            return
        self._httpd = _QuietHTTPServer(("127.0.0.1", port), _make_handler(self))
        if running:
            self._thread = None
            self.start()

    def _record_other(
        self, kind: RequestKind, method: str, path: str, headers: dict[str, str], body: JsonObj
    ) -> None:
        self._record(RecordedRequest(kind, body, time.time(), None, None, path, headers, method))

    def _simulate_cache(self, body: JsonObj) -> int:
        blocks = [json.dumps(body.get("tools") or [])]
        blocks += [json.dumps(m) for m in body.get("messages") or []]
        with self._lock:
            prev, self._cached_prefix = self._cached_prefix, blocks
        chars = 0
        for a, b in zip(prev, blocks, strict=False):
            if a != b:
                break
            chars += len(b)
        # the tools block only counts toward the prefix, as estimate_prompt_tokens counts it
        return min(estimate_prompt_tokens(body), math.floor(chars / 4))

    def _aux_reply(self, task: str, body: JsonObj) -> _Reply:
        if self.aux_status is not None:
            return _Reply(
                f"scripted aux failure {self.aux_status}", [], self.aux_status, self.aux_delay_s
            )
        text = _conversation_text(body)
        batch = tag_batch_items(text) if task == "tag" else None
        if batch is not None:
            return _Reply(self._tag_batch_answer(*batch), delay_s=self.aux_delay_s)
        rule = self._first_rule(task, text)
        if rule is not None:
            return _Reply(rule.answer, delay_s=self.aux_delay_s)
        return _Reply(default_aux_answer(task, body), delay_s=self.aux_delay_s)

    def _first_rule(self, task: str, text: str) -> AuxRule | None:
        for rule in self.aux_rules:
            if rule.task in (task, "*") and (rule.match is None or rule.match in text):
                return rule
        return None

    def _tag_batch_answer(self, preamble: str, items: list[tuple[str, str]]) -> str:
        """Each item answered on its own text (plus the task above the items), as a model
        would: a rule's ``{"decision": X}`` becomes X for that item; a rule whose answer is
        anything else is the whole reply (a malformed answer); no rule: RETAIN."""
        out: dict[str, str] = {}
        for number, item in items:
            rule = self._first_rule("tag", preamble + item)
            if rule is None:
                out[number] = "RETAIN"
                continue
            try:
                decision = json.loads(rule.answer)
            except ValueError:
                return rule.answer
            if not isinstance(decision, dict) or set(decision) != {"decision"}:
                return rule.answer
            out[number] = str(decision["decision"])
        return json.dumps(out)


def _usage(body: Mapping[str, Any], reply: _Reply) -> JsonObj:
    calls = [ToolCall(c["function"]["name"], c["function"]["arguments"]) for c in reply.tool_calls]
    prompt = estimate_prompt_tokens(body)
    completion = estimate_completion_tokens(reply.text, calls)
    usage: JsonObj = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    if reply.cached_tokens is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": reply.cached_tokens}
    return usage


def _make_handler(server: ScriptedModelServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "ctxwrap-scripted-model/1"

        def log_message(self, format: str, *args: Any) -> None:  # quiet by design
            return

        def setup(self) -> None:
            super().setup()
            httpd = self.server
            if isinstance(httpd, _QuietHTTPServer):
                with httpd.conn_lock:
                    httpd.open_connections.add(self.connection)

        def _reset(self) -> None:
            """End this connection with a reset (and no response, unless one started)."""
            httpd = self.server
            if isinstance(httpd, _QuietHTTPServer):
                with httpd.conn_lock:
                    httpd.to_reset.add(self.connection)
            self.close_connection = True

        def _send_json(
            self, status: int, obj: object, headers: Sequence[tuple[str, str]] = ()
        ) -> None:
            data = json.dumps(obj).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            for name, value in headers:
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _frames(self, reply: _Reply, total: int) -> Callable[[bytes], None]:
            """A chunk writer that injects the reply's `cut` or `stall` after half the frames."""
            sent = 0

            def write(data: bytes) -> None:
                nonlocal sent
                if reply.fault in ("cut", "stall") and sent >= max(1, total // 2):
                    # a cut: the frames sent are read before the reset arrives, as over a
                    # network (on loopback a reset right after them would discard them unread)
                    time.sleep((reply.delay_s or 30.0) if reply.fault == "stall" else 0.3)
                    raise _StreamFault
                if server.tokens_per_s > 0 and sent:
                    time.sleep(8 / server.tokens_per_s)
                self.wfile.write(data)
                self.wfile.flush()
                sent += 1

            return write

        def _headers(self) -> dict[str, str]:
            return {k.lower(): v for k, v in self.headers.items()}

        def do_HEAD(self) -> None:
            # Claude Code probes its base URL with HEAD / before the first call.
            server._record_other("other", "HEAD", self.path, self._headers(), {})
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_GET(self) -> None:
            server._record_other("other", "GET", self.path, self._headers(), {})
            if self.path.rstrip("/") in ("/v1/models", "/models"):
                model = {
                    "id": server.model_id,
                    "object": "model",
                    "created": 0,
                    "owned_by": "ctxwrap-scripted",
                }
                self._send_json(200, {"object": "list", "data": [model]})
            elif self.path == "/health":
                self._send_json(200, {"ok": True})
            elif self.path.split("?")[0] in server.POLICY_PATHS:
                policy = (
                    server.policy_limits
                    if self.path.startswith(server.POLICY_PATHS[0])
                    else server.managed_settings
                )
                if policy is None:
                    self._send_json(404, {"error": {"message": "no policy"}})
                else:
                    self._send_json(200, policy)
            else:
                self._send_json(404, {"error": {"message": f"no route {self.path}"}})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            route = self.path.split("?", 1)[0].rstrip("/")
            headers = self._headers()
            api: ApiKind
            if route in ("/v1/chat/completions", "/chat/completions"):
                api = "openai"
            elif route in ("/v1/messages", "/messages", "/v1/messages/count_tokens"):
                api = "anthropic"
            elif responses_api.is_responses_route(route):
                api = "responses"
            else:
                server._record_other("other", "POST", self.path, headers, {})
                self._send_json(404, {"error": {"message": f"no route {self.path}"}})
                return
            try:
                # Codex with a ChatGPT login sends zstd bodies, as OpenAI's servers accept
                plain = body_encoding.decode(raw, self.headers.get("Content-Encoding") or "")
                if plain is None:
                    raise ValueError("body not decodable as its Content-Encoding says")
                body = json.loads(plain)
                if not isinstance(body, dict):
                    raise ValueError("body is not an object")
            except ValueError as exc:
                server._record_other("other", "POST", self.path, headers, {})
                self._send_json(400, {"error": {"message": f"bad JSON: {exc}"}})
                return
            if route.endswith("/count_tokens"):
                server._record_other("count_tokens", "POST", self.path, headers, body)
                self._send_json(200, {"input_tokens": anthropic_prompt_tokens(body)})
                return
            reply = server._answer(body, self.path, headers, api)
            if reply.fault in ("reset", "down"):
                self._reset()
                if reply.fault == "down":
                    server.go_down(reply.down_s, resetting=self.connection)
                return
            if reply.delay_s > 0 and reply.fault != "stall":
                time.sleep(reply.delay_s)
            try:
                if reply.status is not None and reply.status >= 400:
                    msg = reply.text or "scripted error"
                    if api == "anthropic":
                        err = {"type": reply.error_type or "api_error", "message": msg}
                        self._send_json(
                            reply.status, {"type": "error", "error": err}, reply.headers
                        )
                    elif api == "responses":
                        err = {
                            "message": msg,
                            "type": reply.error_type or "server_error",
                            "code": "scripted",
                        }
                        self._send_json(reply.status, {"error": err}, reply.headers)
                    else:
                        err = {"message": msg, "type": reply.error_type or "scripted_error"}
                        self._send_json(reply.status, {"error": err}, reply.headers)
                elif api == "responses":
                    self._responses(body, reply)
                elif api == "anthropic" and body.get("stream"):
                    self._anthropic_stream(body, reply)
                elif api == "anthropic":
                    self._send_json(200, self._anthropic_message(body, reply))
                elif body.get("stream"):
                    self._stream(body, reply)
                else:
                    self._send_json(200, self._completion(body, reply))
            except _StreamFault:
                self._reset()
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True

        # -- OpenAI Responses (Codex CLI); the format lives in responses_api.py ------------

        def _responses(self, body: JsonObj, reply: _Reply) -> None:
            calls = [
                responses_api.ScriptedCall(
                    c["id"], c["function"]["name"], c["function"]["arguments"]
                )
                for c in reply.tool_calls
            ]
            serial = time.monotonic_ns()
            items = responses_api.output_items(body, reply.text, calls, serial)
            if not body.get("stream"):
                obj = responses_api.response_object(body, items, reply.usage, serial)
                self._send_json(200, obj)
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()

            total = sum(1 for _ in responses_api.sse_events(body, items, reply.usage, serial))
            responses_api.write_sse(self._frames(reply, total), body, items, reply.usage, serial)

        def _anthropic_blocks(self, reply: _Reply) -> list[JsonObj]:
            blocks: list[JsonObj] = []
            if reply.thinking_signature is not None:
                thought = "Thinking about the next step."
                blocks.append(
                    {"type": "thinking", "thinking": thought, "signature": reply.thinking_signature}
                )
            if reply.text:
                blocks.append({"type": "text", "text": reply.text})
            for call in reply.tool_calls:
                args = json.loads(call["function"]["arguments"] or "{}")
                blocks.append(
                    {
                        "type": "tool_use",
                        "id": call["id"],
                        "name": call["function"]["name"],
                        "input": args,
                    }
                )
            return blocks

        def _anthropic_message(self, body: JsonObj, reply: _Reply) -> JsonObj:
            return {
                "id": f"msg_scripted_{time.monotonic_ns()}",
                "type": "message",
                "role": "assistant",
                "model": body.get("model", server.model_id),
                "content": self._anthropic_blocks(reply),
                "stop_reason": "tool_use" if reply.tool_calls else "end_turn",
                "stop_sequence": None,
                "usage": reply.usage or {},
                **(
                    {"context_management": reply.context_management}
                    if reply.context_management is not None
                    else {}
                ),
            }

        def _anthropic_stream(self, body: JsonObj, reply: _Reply) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()

            # a cut or stall comes after half of the frames (a reply's text or call: ~2 + 3n)
            out = self._frames(reply, 6 + 3 * len(self._anthropic_blocks(reply)))

            def emit(event: str, data: JsonObj) -> None:
                frame = f"event: {event}\ndata: {json.dumps({'type': event, **data})}\n\n"
                raw = frame.encode()
                out(f"{len(raw):x}\r\n".encode() + raw + b"\r\n")

            usage = dict(reply.usage or {})
            start_usage = {**usage, "output_tokens": 1}
            message = self._anthropic_message(body, reply)
            stop_reason = message["stop_reason"]
            message.update(content=[], stop_reason=None, usage=start_usage)
            message.pop("context_management", None)  # it comes with message_delta
            emit("message_start", {"message": message})
            for i, block in enumerate(self._anthropic_blocks(reply)):
                if block["type"] == "thinking":
                    start = {"type": "thinking", "thinking": "", "signature": ""}
                    emit("content_block_start", {"index": i, "content_block": start})
                    emit(
                        "content_block_delta",
                        {
                            "index": i,
                            "delta": {"type": "thinking_delta", "thinking": block["thinking"]},
                        },
                    )
                    emit(
                        "content_block_delta",
                        {
                            "index": i,
                            "delta": {"type": "signature_delta", "signature": block["signature"]},
                        },
                    )
                elif block["type"] == "text":
                    emit(
                        "content_block_start", {"index": i, "content_block": {**block, "text": ""}}
                    )
                    for piece in _iter_text_chunks(block["text"]):
                        emit(
                            "content_block_delta",
                            {"index": i, "delta": {"type": "text_delta", "text": piece}},
                        )
                else:
                    emit(
                        "content_block_start", {"index": i, "content_block": {**block, "input": {}}}
                    )
                    for piece in _iter_text_chunks(json.dumps(block["input"])):
                        emit(
                            "content_block_delta",
                            {
                                "index": i,
                                "delta": {"type": "input_json_delta", "partial_json": piece},
                            },
                        )
                emit("content_block_stop", {"index": i})
            emit(
                "message_delta",
                {
                    "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                    "usage": {"output_tokens": usage.get("output_tokens", 0)},
                    **(
                        {"context_management": reply.context_management}
                        if reply.context_management is not None
                        else {}
                    ),
                },
            )
            emit("message_stop", {})
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

        def _completion(self, body: JsonObj, reply: _Reply) -> JsonObj:
            message: JsonObj = {"role": "assistant", "content": reply.text}
            if reply.tool_calls:
                message["tool_calls"] = reply.tool_calls
            return {
                "id": f"chatcmpl-scripted-{time.monotonic_ns()}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body.get("model", server.model_id),
                "choices": [
                    {
                        "index": 0,
                        "message": message,
                        "finish_reason": "tool_calls" if reply.tool_calls else "stop",
                    }
                ],
                "usage": _usage(body, reply),
            }

        def _stream(self, body: JsonObj, reply: _Reply) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            base: JsonObj = {
                "id": f"chatcmpl-scripted-{time.monotonic_ns()}",
                "object": "chat.completion.chunk",
                "created": int(time.time()),
                "model": body.get("model", server.model_id),
            }

            def emit(payload: JsonObj | str) -> None:
                if server.tokens_per_s > 0:
                    time.sleep(8 / server.tokens_per_s)
                data = payload if isinstance(payload, str) else json.dumps({**base, **payload})
                frame = f"data: {data}\n\n".encode()
                self.wfile.write(f"{len(frame):x}\r\n".encode() + frame + b"\r\n")
                self.wfile.flush()

            def delta(d: JsonObj, finish: str | None = None) -> None:
                emit({"choices": [{"index": 0, "delta": d, "finish_reason": finish}]})

            delta({"role": "assistant", "content": ""})
            for piece in _iter_text_chunks(reply.text or ""):
                delta({"content": piece})
            for i, call in enumerate(reply.tool_calls):
                head = {"name": call["function"]["name"], "arguments": ""}
                delta(
                    {
                        "tool_calls": [
                            {"index": i, "id": call["id"], "type": "function", "function": head}
                        ]
                    }
                )
                for piece in _iter_text_chunks(call["function"]["arguments"]):
                    delta({"tool_calls": [{"index": i, "function": {"arguments": piece}}]})
            delta({}, "tool_calls" if reply.tool_calls else "stop")
            options = body.get("stream_options") or {}
            if isinstance(options, dict) and options.get("include_usage"):
                emit({"choices": [], "usage": _usage(body, reply)})
            emit("[DONE]")
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

    return Handler


# -- CLI ------------------------------------------------------------------------------------


def load_script_file(path: Path) -> JsonObj:
    """Read a script file: a JSON list of steps, or an object with ``steps`` and options."""
    data = json.loads(path.read_text(encoding="utf-8"))
    if isinstance(data, list):
        return {"steps": data}
    if isinstance(data, dict):
        unknown = set(data) - {"steps", "aux_rules", "aux_delay_s", "aux_status", "main_delay_s"}
        if unknown:
            raise ScriptError(f"{path}: unknown keys {sorted(unknown)}")
        return data
    raise ScriptError(f"{path}: a script is a JSON list or object")


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ctxwrap.testing.model_server",
        description="Scripted OpenAI-compatible chat-completions server on 127.0.0.1.",
    )
    parser.add_argument("--script", type=Path, help="JSON script file (list or object)")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--port-file", type=Path, help="write the bound port here when ready")
    parser.add_argument("--requests-log", type=Path, help="append every request as JSONL")
    parser.add_argument("--aux-delay-s", type=float)
    parser.add_argument("--aux-status", type=int)
    parser.add_argument("--main-delay-s", type=float)
    args = parser.parse_args(argv)

    spec: JsonObj = load_script_file(args.script) if args.script else {"steps": []}
    try:
        srv = ScriptedModelServer(
            spec.get("steps", []),
            aux_rules=spec.get("aux_rules", []),
            aux_delay_s=args.aux_delay_s
            if args.aux_delay_s is not None
            else spec.get("aux_delay_s", 0.0),
            aux_status=args.aux_status if args.aux_status is not None else spec.get("aux_status"),
            main_delay_s=args.main_delay_s
            if args.main_delay_s is not None
            else spec.get("main_delay_s", 0.0),
            requests_log=args.requests_log,
            port=args.port,
        )
    except ScriptError as exc:
        print(f"model_server: error: {exc}", file=sys.stderr)
        return 2

    def stop(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    if args.port_file:
        _write_atomic(args.port_file, f"{srv.port}\n")
    print(f"scripted model server listening on {srv.base_url}", file=sys.stderr, flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        srv.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
