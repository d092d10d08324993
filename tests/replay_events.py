"""Synthetic sessions for replay's simulator: a pi session of one prompt and one tool call a
round, each answered, then a last answer without calls."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ctxwrap.replay._events import Compaction, Header, Message, ToolCall


def pi_rounds(
    calls: Sequence[ToolCall],
    texts: Mapping[int, str],
    *,
    step_s: float = 2.0,
    compact_before: int | None = None,
    idle_s: float = 0.0,
) -> list[Any]:
    """Round i calls `calls[i]` and gets `texts[i]` back (else a one-line output), `step_s`
    apart (a warm cache below the TTL); pi's compaction just before round `compact_before`;
    with `idle_s`, a second prompt that long after the last round (past the TTL: a cold
    boundary) before the last answer."""
    ev: list[Any] = [Header("pi", "s", "/w", 0.0), Message("u1", None, "user", 1.0, 2)]
    t = 2.0
    for i, c in enumerate(calls):
        text = texts.get(i, f"{i}\n")
        if i == compact_before:
            ev.append(Compaction(t - step_s / 10, 2_000, f"a{i}", None, 40_000))
        ev.append(Message(f"a{i}", None, "assistant", t, 40, [c], request_key=f"q{i}"))
        ev.append(
            Message(f"t{i}", None, "tool_result", t + step_s / 2, len(text), [], c.call_id,
                    c.name, text)
        )  # fmt: skip
        t += step_s
    if idle_s:
        t += idle_s
        ev.append(Message("u2", None, "user", t - 10, 12))
    ev.append(Message("end", None, "assistant", t, 10, [], request_key="qend"))
    return ev
