"""Tokens per character of one session, fitted on its own recorded usage.

Replay sizes what ctxwrap keeps out in characters; the provider bills tokens. A fixed chars/4
is off by a third on real sessions (code, logs and JSON tokenise denser than prose: the corpus
measures 1.3-1.5 tokens per 4 characters of tool output), so each session converts with its
own rate where its transcript records usage, and with the rate of its provider's family where
it does not (docs/accounting.md, "Plain from the record").

The fit: between two consecutive requests of a tool loop, the context grows by the previous
response (its recorded output tokens) and the tool results that answer it. Over the pairs
where tool results are most of the new characters, (growth - previous output) / result chars
is the rate of tool-result text — the kind of content ctxwrap removes. The median of those
pairs is robust to the pairs where something unseen (an attachment, a reminder) also grew the
context; subtracting the previous output where it was re-sent whole keeps the rate from
counting hidden thinking as tool output, which would overstate every saving.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass

from ctxwrap.replay._events import ClearedResults, Compaction, Event, Header, Message

# Rates of tool-result text measured on the corpus's sessions (median per provider family):
# used where a session records no usage, or too few clean pairs to fit its own.
FAMILY_RATE = {"anthropic": 0.37, "openai": 0.28, "other": 0.30}
MIN_PAIRS = 3  # fewer clean pairs than this: the family's rate
MIN_RESULT_CHARS = 3000  # a pair counts when its tool results are at least this long …
MAX_OTHER_SHARE = 0.2  # … and everything else new is at most this share of them
# A fitted rate outside this range is a transcript whose usage does not describe its text
# (a proxy's placeholder counts, a truncated file): the family's rate instead.
RATE_BOUNDS = (0.15, 0.8)


@dataclass(frozen=True)
class Calibration:
    rate: float  # tokens per character of tool-result text
    source: str  # "fitted" | "family"
    pairs: int  # clean request pairs the fit used


# a transcript format whose model is always one provider's
_FORMAT_FAMILY = {"claude": "anthropic", "codex": "openai"}


def family(model: str | None, fmt: str | None = None) -> str:
    name = (model or "").lower()
    if "claude" in name:
        return "anthropic"
    if name.startswith(("gpt", "o1", "o3", "o4", "codex")) or "gpt" in name:
        return "openai"
    return _FORMAT_FAMILY.get(fmt or "", "other")


def calibrate(events: Iterable[Event]) -> Calibration:
    """The session's rate of tool-result text (tokens per character), from its usage."""
    ratios: list[float] = []
    seen: set[str] = set()
    prev_tokens: int | None = None
    prev_output = 0
    results = other = 0
    model: str | None = None
    fmt: str | None = None
    for ev in events:
        if isinstance(ev, Header):
            fmt = ev.fmt
            continue
        if isinstance(ev, (Compaction, ClearedResults)):
            prev_tokens, results, other = None, 0, 0
            continue
        if not isinstance(ev, Message):
            continue
        if ev.role == "assistant":
            key = ev.request_key or ev.entry_id
            if key in seen:
                other += ev.chars
                continue
            seen.add(key)
            model = ev.model or model
            if ev.usage_prompt_tokens is None:
                prev_tokens = None
                continue
            grown = ev.usage_prompt_tokens - (prev_tokens or 0)
            if (
                prev_tokens is not None
                and results >= MIN_RESULT_CHARS
                and other <= MAX_OTHER_SHARE * results
                and grown > 0
            ):
                ratios.append(max(0, grown - prev_output) / results)
            prev_tokens, prev_output = ev.usage_prompt_tokens, ev.output_tokens
            results, other = 0, ev.chars
        elif ev.role == "tool_result":
            results += ev.chars
        else:
            other += ev.chars
    fallback = FAMILY_RATE[family(model, fmt)]
    if len(ratios) < MIN_PAIRS:
        return Calibration(fallback, "family", len(ratios))
    rate = statistics.median(ratios)
    if not RATE_BOUNDS[0] <= rate <= RATE_BOUNDS[1]:
        return Calibration(fallback, "family", len(ratios))
    return Calibration(round(rate, 4), "fitted", len(ratios))
