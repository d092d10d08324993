"""The contract between the shared proxy session and an API's wire module.

An adapter's wire module (``agents/claude/anthropic_wire.py`` for Anthropic Messages,
``agents/codex/responses_wire.py`` for OpenAI Responses) knows its request and response
format and nothing else: no decisions, no I/O. :class:`Wire` is what the shared session
(``agents/_proxy/session.py``) asks of it; both modules are checked against it by mypy
(``WIRE: Wire = <module>`` in each adapter's session). The types they share live here: the
neutral view (:class:`Neutral`), the sizes (:class:`BodySize`) and the usage (:class:`Usage`).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from ctxwrap.engine.edits import Edit, Tail

JsonDict = dict[str, Any]
Blocks = list[tuple[str, int]]


@dataclass
class Neutral:
    """A request's conversation as the engine sees it: pi-shaped messages (``toolCall`` blocks,
    one ``toolResult`` per result). A wire may add what it knows of each call."""

    messages: list[JsonDict]


@dataclass(frozen=True)
class BodySize:
    """Chars of what a request carries, by part: the stats' "sent" figure."""

    system: int
    messages: int
    tools: int


def json_chars(value: Any) -> int:
    """Chars of a value's compact JSON (as the stats measure what is sent); 0 for nothing."""
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":"))) if value else 0


@dataclass
class Usage:
    """A response's provider usage, in the daemon's terms (`/v1/turn_end`)."""

    input_tokens: int = 0  # fresh input (not read from the cache)
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    model: str | None = None
    seen: bool = False


class UsageReader(Protocol):
    """Reads a response's usage as its bytes pass through (agents/_proxy/sse.py)."""

    usage: Usage

    def feed(self, chunk: bytes) -> None: ...

    def finish(self) -> Usage: ...


class Wire(Protocol):
    """What the shared proxy session needs of an API's wire format."""

    def items(self, body: Mapping[str, Any]) -> list[Any] | None:
        """The conversation's items (messages, input items); None: not a conversation."""
        ...

    def head(self, body: Mapping[str, Any]) -> tuple[Any, Any]:
        """What comes before the items in the cache order: (tools, system prompt)."""
        ...

    def to_neutral(self, items: list[Any], *, notes_role: str = "user") -> Neutral: ...

    def tail_of(self, items: list[Any], seen: Collection[str]) -> tuple[Tail, int, Neutral | None]:
        """`describe_tail` of the neutral view and the view's length, and the view where it
        was built (a wire may describe the tail without converting the whole history)."""
        ...

    def all_call_ids(self, items: Iterable[Any]) -> set[str]: ...

    def apply_edits(self, body: JsonDict, edits: Mapping[str, list[Edit]]) -> list[Edit]:
        """Apply frozen edits to the wire body in place; returns the edits that applied."""
        ...

    def measure(self, body: Mapping[str, Any]) -> BodySize: ...

    def prefix_blocks(self, body: Mapping[str, Any]) -> Blocks: ...

    def marked_ttl_s(self, body: Any) -> float | None:
        """The cache lifetime the request itself asks for, where the API lets it say."""
        ...

    def usage_reader(self, streaming: bool, encoding: str) -> UsageReader: ...

    def input_tokens(self, event: JsonDict) -> int | None:
        """In-step compaction (in_step.py): the input tokens an answer's event names."""
        ...

    def add_input_tokens(self, event: JsonDict, delta: int) -> bool:
        """In-step compaction: add `delta` to the input an event names (False: none there)."""
        ...
