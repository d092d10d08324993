"""What every session-file reader yields (pi and Claude Code in `_read.py`, Codex in
`_read_codex.py`): the normalised events, the reader's counters, and the two field readers they
all use. Below the readers: it imports none of them."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


@dataclass(frozen=True, slots=True)
class ToolCall:
    call_id: str
    name: str  # lower-case tool name: bash, read, write, edit, grep, …
    args: dict[str, Any]
    chars: int  # name + JSON arguments, as the provider sees them
    # The agent's own name for the tool when `name` is what it does (Codex: a shell command
    # that reads a file is "read", its agent_tool "exec_command"); None: the same as name.
    agent_tool: str | None = None


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
    # tool results (the digester and the tagger bound need it), a user's prompt (its first
    # 2,000 chars), the assistant's own text (needed again: what it quotes)
    text: str = ""
    is_error: bool = False
    # assistant only: one provider request produced it
    request_key: str | None = None
    usage_prompt_tokens: int | None = None
    output_tokens: int = 0
    model: str | None = None
    # assistant only: it holds a thinking block, and the ids of its calls one follows (Opus 5.5
    # returns its text between two tool calls as thinking): on a model that checks thinking
    # prefixes, what a thinking block follows stays as sent (engine: `keep`)
    thinking: bool = False
    calls_before_thinking: tuple[str, ...] = ()
    # of `chars`, the thinking text and redacted data the file kept (Claude Code 2.1 keeps only
    # a signature: 0): not visible output, for the estimate of the response's thinking tokens
    thinking_chars: int = 0
    # assistant only: the provider's own split of usage_prompt_tokens, where the file records
    # it (None: not recorded). Cache writes with a 1-hour TTL are billed 2x input, 5-minute ones
    # 1.25x; Claude Code records the split in usage.cache_creation.
    usage_input_tokens: int | None = None  # uncached input
    usage_cache_read_tokens: int | None = None
    usage_cache_write_tokens: int | None = None  # all cache writes (5 m + 1 h)
    usage_cache_write_1h_tokens: int | None = None  # of which with a 1-hour TTL


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
    # "manual" (the user asked: it happens whatever the context size), "auto" (the context
    # crossed the agent's threshold), or None: not recorded (pi, Codex; see `tokens_before`)
    trigger: str | None = None
    tokens_before: int | None = None  # the context size the agent recorded (pi's tokensBefore)


@dataclass(frozen=True, slots=True)
class Header:
    fmt: str  # "pi" | "claude"
    session_id: str
    cwd: str | None
    ts: float | None
    version: str | None = None
    # how the file was written: "pi v1" (migrated as pi does), "pi v3", "claude", "claude
    # sub-agent", …
    source: str | None = None
    # pi: the session file this one was branched from (its earlier entries are copies of it)
    branched_from: str | None = None
    # Claude Code sub-agent transcript: its parent session and its own agent id
    parent_session_id: str | None = None
    agent_id: str | None = None


@dataclass(frozen=True, slots=True)
class ClearedResults:
    """The agent replaced tool results itself (Claude Code's microcompact and its
    content-replacement of results over its per-message budget, pi's context_edit): from here
    on each listed result or entry is `replacement_chars` long in the context (or its own size
    in `sizes`). A head change where a call already carried it."""

    ts: float
    tool_call_ids: tuple[str, ...]
    replacement_chars: int
    tokens_saved: int | None = None  # as the agent recorded it
    # pi's context_edit: the entries (by id) whose content is replaced; 0 chars: removed
    entry_ids: tuple[str, ...] = ()
    sizes: tuple[int, ...] = ()  # per tool_call_id, where each has its own replacement


Event = Message | SystemPrompt | Compaction | Header | ClearedResults


@dataclass
class ReadStats:
    lines: int = 0
    bytes: int = 0
    skipped: Counter[str] = field(default_factory=Counter)
    entries: int = 0  # JSON objects read (a line may hold two)
    notes: Counter[str] = field(default_factory=Counter)  # read, but worth saying
    # Signs that the session already ran under ctxwrap (our markers in its transcript, its id
    # in ctxwrap's database): what, how many times. Replaying it as plain would count twice.
    ctxwrap: Counter[str] = field(default_factory=Counter)
    header: Header | None = None  # the file's header, once read
    path: str | None = None  # the file read

    def skip(self, reason: str) -> None:
        self.skipped[reason] += 1

    @property
    def ran_under_ctxwrap(self) -> str | None:
        """Why the session counts as one that already ran under ctxwrap (None: it did not)."""
        if not self.ctxwrap:
            return None
        return "ran under ctxwrap: " + ", ".join(
            f"{what} ({n:,})" if n > 1 else what for what, n in self.ctxwrap.most_common()
        )

    def summary(self) -> dict[str, Any]:
        """What the reader found out about the file beyond its events (JSON-ready)."""
        h = self.header
        out: dict[str, Any] = {
            "source": h.source if h else None,
            "entries": self.entries,
            "ran_under_ctxwrap": self.ran_under_ctxwrap,
        }
        if h is not None:
            for key in ("parent_session_id", "agent_id", "branched_from"):
                if getattr(h, key):
                    out[key] = getattr(h, key)
        if self.notes:
            out["notes"] = dict(self.notes)
        return out


def parse_ts(value: object) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value) / 1000.0 if value > 1e11 else float(value)
    if isinstance(value, str) and value:
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return None
    return None


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
