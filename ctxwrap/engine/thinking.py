"""Which models bind their thinking to the history (pure; every agent and the figures use it).

Claude Fable 5.1 and Opus/Sonnet/Haiku 5.5 refuse a request (400, "bound to a different
conversation") when `system`, `tools` or anything before a returned thinking block changed since
the model wrote it (docs/architecture.md, invariant 3): on them ctxwrap rewrites nothing a later
thinking block follows, and says so where masking saved little.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

_CHECKED_FROM = {
    "opus": (5, 5),
    "sonnet": (5, 5),
    "haiku": (5, 5),
    "fable": (5, 1),
    "mythos": (5, 1),
}
_CLAUDE_MODEL_RE = re.compile(r"^claude-([a-z]+)-(\d+)(?:[-.](\d+))?")  # -5-5, or 5.5 (OpenRouter)


def checks_thinking_prefix(model: object) -> bool:
    """Whether `model` checks its thinking blocks' prefix. A Claude model this cannot place
    (a family or a naming scheme not known here) is taken to check it: refusing a mask costs
    a saving, a rewrite that fails the check costs the session."""
    if not isinstance(model, str):
        return False
    name = model.rsplit("/", 1)[-1].lower()
    if name.startswith("anthropic."):  # Bedrock's `anthropic.claude-…`
        name = name[len("anthropic.") :]
    if not name.startswith("claude-") or name[7:8].isdigit():
        return False  # not Claude, or the old naming (claude-3-7-sonnet-…): no check
    m = _CLAUDE_MODEL_RE.match(name)
    if m is None or m.group(1) not in _CHECKED_FROM:
        return True
    minor = int(m.group(3)) if m.group(3) is not None and len(m.group(3)) <= 2 else 0
    return (int(m.group(2)), minor) >= _CHECKED_FROM[m.group(1)]


# -- old thinking (issue 41, item 3; docs/accounting.md, "Old thinking") -----------------------
#
# Where the API keeps earlier turns' thinking (Opus 4.5 and later, Sonnet 4.6 and later, Haiku
# 5.5 and later, every Fable and Mythos; and on every model when the request asks
# `clear_thinking_20251015` to keep "all", as Claude Code 2.1.x does), each request carries the
# thinking of every earlier response, read from the cache: on two long Claude Code 2.1.1xx
# sessions of the corpus 16-36 % of the recorded bill. The provider's own context edit can
# leave it out server-side; ctxwrap never removes a thinking block itself (on a model that
# checks its thinking prefix an omitted block fails every later block's check).

CLEAR_THINKING = "clear_thinking_20251015"
CONTEXT_MANAGEMENT_BETA = "context-management-2025-06-27"
THINKING_TYPES = ("thinking", "redacted_thinking")
# Signature characters per thinking token, measured on the two Claude Code 2.1.1xx sessions of
# the corpus (claude-sonnet-4-6, thinking stored as a signature only): 4.01 and 4.05. Other
# models' signatures differ (6.8 on an Opus 4.5 session whose thinking text was kept).
SIGNATURE_CHARS_PER_TOKEN = 4.0

_KEEPS_ALL_FROM = {"opus": (4, 5), "sonnet": (4, 6), "haiku": (5, 5), "fable": (0, 0)}
_KEEPS_ALL_FROM["mythos"] = (0, 0)


def _claude_version(model: object) -> tuple[str, tuple[int, int]] | None:
    if not isinstance(model, str):
        return None
    name = model.rsplit("/", 1)[-1].lower().removeprefix("anthropic.")
    m = _CLAUDE_MODEL_RE.match(name)
    if m is None or name[7:8].isdigit():
        return None
    minor = int(m.group(3)) if m.group(3) is not None and len(m.group(3)) <= 2 else 0
    return m.group(1), (int(m.group(2)), minor)


def keeps_earlier_thinking(model: object) -> bool:
    """Whether the API keeps earlier turns' thinking in the context when the request does not
    say (no `clear_thinking_20251015` edit): Opus 4.5+, Sonnet 4.6+, Haiku 5.5+, every Fable
    and Mythos; older models keep only the turn in progress (the assistant messages after the
    last human prompt), as do the old names (claude-3-7-sonnet-…). A model this cannot place
    is taken to keep it (the larger bill)."""
    placed = _claude_version(model)
    if placed is None:
        name = model.rsplit("/", 1)[-1].lower() if isinstance(model, str) else ""
        return not name.removeprefix("anthropic.")[7:8].isdigit()  # claude-3-7-…: no
    family, version = placed
    return family not in _KEEPS_ALL_FROM or version >= _KEEPS_ALL_FROM[family]


def accepts_context_editing(model: object) -> bool:
    """Whether the model accepts the context-management edits (the Claude 4 models and later,
    with the beta header `context-management-2025-06-27`; not the older naming)."""
    placed = _claude_version(model)
    return placed is not None and placed[1] >= (4, 0)


def is_human_prompt(message: object) -> bool:
    """A user message that is more than tool results: it starts a new turn (the API drops or
    keeps earlier turns' thinking from here)."""
    if not isinstance(message, dict) or message.get("role") != "user":
        return False
    content = message.get("content")
    if not isinstance(content, list):
        return True
    return any(not (isinstance(b, dict) and b.get("type") == "tool_result") for b in content)


def turns(messages: Sequence[Any]) -> list[int]:
    """The turn of each message: 0 before the first human prompt, +1 at each one."""
    out: list[int] = []
    turn = 0
    for m in messages:
        if is_human_prompt(m):
            turn += 1
        out.append(turn)
    return out


@dataclass(frozen=True)
class ThinkingBlock:
    message: int  # index in `messages`
    block: int  # index in its content
    turn: int
    text_chars: int  # the thinking text (empty in Claude Code 2.1.1xx transcripts)
    signature_chars: int  # a thinking block's signature, a redacted block's data

    @property
    def tokens(self) -> int:
        """Tokens the block is counted as, estimated: its text at 4 characters a token where
        the text was kept, else its signature (SIGNATURE_CHARS_PER_TOKEN)."""
        if self.text_chars:
            return -(-self.text_chars // 4)
        return round(self.signature_chars / SIGNATURE_CHARS_PER_TOKEN)


def thinking_blocks(messages: Sequence[Any]) -> list[ThinkingBlock]:
    """Every thinking and redacted-thinking block of the assistant messages, in order."""
    out: list[ThinkingBlock] = []
    for i, (m, turn) in enumerate(zip(messages, turns(messages), strict=True)):
        if not isinstance(m, dict) or m.get("role") != "assistant":
            continue
        content = m.get("content")
        for j, b in enumerate(content if isinstance(content, list) else ()):
            if not isinstance(b, dict) or b.get("type") not in THINKING_TYPES:
                continue
            text = b.get("thinking")
            sig = b.get("signature") if b.get("type") == "thinking" else b.get("data")
            out.append(
                ThinkingBlock(
                    i,
                    j,
                    turn,
                    len(text) if isinstance(text, str) else 0,
                    len(sig) if isinstance(sig, str) else 0,
                )
            )
    return out


def old_thinking(messages: Sequence[Any]) -> list[ThinkingBlock]:
    """The thinking blocks of turns before the last human prompt: what the API leaves out on
    a model that keeps only the turn in progress, and what `clear_thinking_20251015` can leave
    out on the others. The turn in progress (a tool loop) always keeps its own."""
    blocks = thinking_blocks(messages)
    if not blocks:
        return []
    last = turns(messages)[-1] if messages else 0
    return [b for b in blocks if b.turn < last]


Keep = Literal["all"] | int


def clear_thinking_keep(body: Mapping[str, Any]) -> Keep | None:
    """The request's `clear_thinking_20251015` edit: "all", the number of thinking turns it
    keeps, or None (no such edit: the model's default, `keeps_earlier_thinking`). Raises
    ValueError on an edit the API would refuse."""
    cm = body.get("context_management")
    if cm is None:
        return None
    edits = cm.get("edits") if isinstance(cm, dict) else None
    if not isinstance(edits, list):
        raise ValueError("context_management.edits: a list is required")
    found: Keep | None = None
    for e in edits:
        if not isinstance(e, dict) or not isinstance(e.get("type"), str):
            raise ValueError("context_management.edits: each edit needs a type")
        if e["type"] != CLEAR_THINKING:
            continue
        if found is not None:
            raise ValueError(f"context_management.edits: {CLEAR_THINKING} given twice")
        keep = e.get("keep", {"type": "thinking_turns", "value": 1})
        if keep == "all" or (isinstance(keep, dict) and keep.get("type") == "all"):
            found = "all"
            continue
        value = keep.get("value") if isinstance(keep, dict) else None
        if (
            not isinstance(keep, dict)
            or keep.get("type") != "thinking_turns"
            or not isinstance(value, int)
            or isinstance(value, bool)
            or value < 1
        ):
            raise ValueError(
                f'context_management.edits: {CLEAR_THINKING}.keep must be "all" or '
                '{"type": "thinking_turns", "value": N >= 1}'
            )
        found = value
    return found


def cleared_by_keep(
    messages: Sequence[Any], keep: Keep | None, model: object
) -> list[ThinkingBlock]:
    """The thinking blocks the API leaves out of a request with `keep` (None: the model's
    default): all but those of the last `keep` turns that hold thinking."""
    blocks = thinking_blocks(messages)
    if keep == "all" or (keep is None and keeps_earlier_thinking(model)):
        return []
    if keep is None:
        return old_thinking(messages)
    kept_turns = sorted({b.turn for b in blocks})[-keep:]
    return [b for b in blocks if b.turn not in kept_turns]


def clearing_point(messages: Sequence[Any], turn: int) -> int | None:
    """Where a clearing that wants to leave out the thinking of turns before `turn` can put
    its point: `keep` counts turns that thought and is at least 1, so the latest turn that
    thought always keeps its thinking (at a new human prompt: the previous turn's, until the
    new one has thought). None: there is nothing before that point to leave out. A policy
    stores this point, not `turn`, and sends `keep_for_clearing` with it on every later
    request, so the cleared part and the cache after it stay the same."""
    thought = sorted({b.turn for b in thinking_blocks(messages)})
    point = min(turn, thought[-1]) if thought else None
    if point is None or not any(t < point for t in thought):
        return None
    return point


def keep_for_clearing(messages: Sequence[Any], point: int) -> Keep:
    """The `keep` that leaves out the thinking of the turns before `point` (from
    `clearing_point`) and keeps every later one's: the number of turns from `point` on that
    thought; "all" when none before it did."""
    thought = {b.turn for b in thinking_blocks(messages)}
    kept = [t for t in thought if t >= point]
    if not any(t < point for t in thought):
        return "all"
    if not kept:
        raise ValueError(f"turn {point}: no turn from there on thought (see clearing_point)")
    return len(kept)


def with_clear_thinking(body: Mapping[str, Any], keep: Keep) -> dict[str, Any]:
    """A copy of `body` whose `clear_thinking_20251015` edit keeps `keep` (added when the
    request has none; other edits kept as they are). The caller adds the beta header."""
    value: object = "all" if keep == "all" else {"type": "thinking_turns", "value": keep}
    cm = body.get("context_management")
    edits = list(cm.get("edits") or []) if isinstance(cm, dict) else []
    edit = {"type": CLEAR_THINKING, "keep": value}
    for i, e in enumerate(edits):
        if isinstance(e, dict) and e.get("type") == CLEAR_THINKING:
            edits[i] = {**e, "keep": value}
            break
    else:
        edits.insert(0, edit)
    return {**body, "context_management": {**(cm if isinstance(cm, dict) else {}), "edits": edits}}
