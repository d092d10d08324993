"""Compaction in step with plain: the agent compacts where it would have without ctxwrap.

Under ctxwrap the context the agent measures is smaller, so its own automatic compaction
comes later than plain's, and until then every request carries what plain's compaction
dropped (on real sessions, the largest single cost of ctxwrap: docs/accounting.md,
"Compaction timing"). The agents decide to compact from the usage the provider reports for
a response: Claude Code from the input (fresh + cache read + cache write) and output tokens
of the last response, Codex from the response's total tokens. So where the request plain
would have sent counts past the agent's own threshold and ctxwrap's does not, the proxy
reports plain's size in that response's usage — the size the agent would have measured
without ctxwrap — and the agent compacts before its next request, by its own rule, with its
own summary and its own transcript entry (resume and `/context` as usual). Nothing else of
the response changes; ctxwrap's own statistics read the provider's counts, not these.

Plain's size is estimated from the request the agent sent: the tokens the provider counted
for ctxwrap's request, scaled by the characters of the agent's request over those sent (what
ctxwrap kept out is at the density of the context it was in). `compact_in_step = false`
turns it off.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

JsonDict = dict[str, Any]


def plain_tokens(counted: int, original_chars: int, sent_chars: int) -> int:
    """The tokens plain's request would have counted: ctxwrap's, scaled by characters."""
    if sent_chars <= 0 or original_chars <= sent_chars:
        return counted
    return round(counted * original_chars / sent_chars)


# From this share of the threshold on, the agent is told plain's size. The agent's check is
# the last response's usage plus its own estimate of the messages added since (Claude Code
# 2.1.197: a tool result read after the response counts too), so a response below the
# threshold may be the last before plain compacts; reporting plain's size changes nothing
# until the agent's own check crosses, which is where plain's did.
NEAR_SHARE = 0.5
# A stream whose frames are longer than this is passed on untouched (nothing held back).
MAX_FRAME_BYTES = 4 << 20


def step_delta(counted: int, plain: int, threshold: int | None) -> int:
    """Tokens to add to the reported input so that the agent measures plain's size, from
    NEAR_SHARE of its threshold on, while ctxwrap's own request is under it; else 0."""
    if threshold is None or threshold <= 0 or counted >= threshold:
        return 0
    if plain <= counted or plain < NEAR_SHARE * threshold:
        return 0
    return plain - counted


class InStepTap:
    """Reads the response as the provider sent it (usage, tool calls: `reader`) and hands the
    agent the same bytes but for the usage of a response at which plain would compact."""

    def __init__(self, reader: Any, rewriter: SseUsageRewriter) -> None:
        self.reader = reader
        self.rewriter = rewriter

    def feed(self, chunk: bytes) -> None:
        self.reader.feed(chunk)

    def rewrite(self, chunk: bytes) -> bytes:
        return self.rewriter.rewrite(chunk)

    def flush(self) -> bytes:
        return self.rewriter.flush()


def usage_tap(
    reader: Any,
    *,
    original: int,
    sent: int,
    threshold: int,
    read_input: Callable[[JsonDict], int | None],
    add_input: Callable[[JsonDict, int], bool],
) -> InStepTap:
    """`reader` (the adapter's usage reader) with the agent told plain's size where it is
    due: `original`/`sent`, the characters of the agent's request and of the one sent;
    `read_input`/`add_input`, how the adapter's wire format names and patches the input."""

    def decide(event: JsonDict) -> int | None:
        counted = read_input(event)
        if counted is None:
            return None
        return step_delta(counted, plain_tokens(counted, original, sent), threshold)

    return InStepTap(reader, SseUsageRewriter(decide, add_input))


def provider_tap(tap: Any) -> Any:
    """What the provider sent, whether or not the agent was told plain's size."""
    return tap.reader if isinstance(tap, InStepTap) else tap


class SseUsageRewriter:
    """Rewrites the usage of one SSE response as it passes: `decide(event)` sees each event
    in order and returns the tokens to add (once, from the first event that names the
    request's input), `patch(event, delta)` says whether it changed an event. Events pass
    through byte for byte until a rewrite is due; after that, frame by frame."""

    def __init__(
        self,
        decide: Callable[[JsonDict], int | None],
        patch: Callable[[JsonDict, int], bool],
    ) -> None:
        self.decide = decide
        self.patch = patch
        self.delta: int | None = None  # None: not decided yet
        self.buf = b""

    def rewrite(self, chunk: bytes) -> bytes:
        if self.delta == 0:
            return chunk  # nothing to change: the stream passes as it came
        self.buf += chunk
        if len(self.buf) > MAX_FRAME_BYTES:
            # no frame end in sight (not SSE as we know it): stop, pass everything as it came
            self.delta, held, self.buf = 0, self.buf, b""
            return held
        out: list[bytes] = []
        while True:
            end = self.buf.find(b"\n\n")
            if end < 0:
                break
            frame, self.buf = self.buf[: end + 2], self.buf[end + 2 :]
            out.append(self._frame(frame))
            if self.delta == 0:
                out.append(self.buf)
                self.buf = b""
                break
        return b"".join(out)

    def flush(self) -> bytes:
        rest, self.buf = self.buf, b""
        return rest

    def _frame(self, frame: bytes) -> bytes:
        lines = frame.split(b"\n")
        for i, line in enumerate(lines):
            if not line.startswith(b"data:"):
                continue
            try:
                event = json.loads(line[5:])
            except ValueError:
                return frame
            if not isinstance(event, dict):
                return frame
            if self.delta is None:
                self.delta = self.decide(event)
                if self.delta is None:
                    return frame  # not the event that names the input yet
            if self.delta and self.patch(event, self.delta):
                lines[i] = b"data: " + json.dumps(event, separators=(",", ":")).encode()
                return b"\n".join(lines)
            return frame
        return frame
