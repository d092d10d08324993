"""Turn the lines a digester kept into the digest text: fold repeats, spend the budget on
the highest priorities first, mark every gap, and never exceed max_chars."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ctxwrap.digest._rules import CONTEXT, FAILURE, WARNING
from ctxwrap.digest._text import display_line
from ctxwrap.digest.redact import redact_secrets

_DIGITS = re.compile(r"\d+")
_NUMBERS = re.compile(r"0x[0-9a-fA-F]+|\b(?=[0-9a-f]*\d)[0-9a-f]{7,}\b|\d+")
# Low-priority lines sharing their first words are the same kind of line (npm fetches,
# compile commands, PASSED tests), so they fold even when their tails differ.
_PREFIX_WORDS = 4
# Rough length of a gap marker, reserved per selected unit so markers fit the budget.
_MARKER_RESERVE = 28


@dataclass(slots=True)
class _Unit:
    first: int  # first and last input line numbers this unit stands for
    last: int
    priority: int
    base: str  # the first line of a folded run
    key: str
    count: int = 1
    exact: bool = True
    later: int = 0  # similar lines seen further on and not kept

    @property
    def text(self) -> str:
        text = self.base
        if self.count > 1:
            text += f"  … ×{self.count}" + ("" if self.exact else " similar")
        if self.later:
            text += f"  (+{self.later:,} more like this later)"
        return text


def fold_key(text: str, priority: int) -> str:
    key = _NUMBERS.sub("#", text)
    if priority < WARNING:
        words = key.split(None, _PREFIX_WORDS)
        if len(words) > _PREFIX_WORDS:
            return " ".join(words[:_PREFIX_WORDS])
    return key


def similarity_key(text: str) -> str:
    """The same for lines that differ only in numbers, paths and quoted names."""
    words = ["_" if "/" in word or word[0] in "'\"‘`" else word for word in text.split()]
    return _DIGITS.sub("#", " ".join(words))


def _fold(lines: list[tuple[int, int, str, int]]) -> list[_Unit]:
    """Fold runs of adjacent, near-identical lines into one unit with a count."""
    units: list[_Unit] = []
    for lineno, priority, text, later in lines:
        key = fold_key(text, priority)
        if units and lineno == units[-1].last + 1 and key == units[-1].key and text:
            run = units[-1]
            run.count += 1
            run.exact = run.exact and text == run.base
            run.last = lineno
            run.priority = max(run.priority, priority)
            run.later += later
            continue
        units.append(_Unit(lineno, lineno, priority, text, key, later=later))
    return units


def _cap_for(priority: int, max_chars: int) -> int:
    if priority >= WARNING:
        return max_chars
    if priority >= CONTEXT:
        return max_chars // 2
    return max_chars // 4


def _gap_marker(count: int) -> str:
    return f"[… {count:,} line{'s' if count != 1 else ''} omitted …]"


def _join(units: list[_Unit], summary: list[str], total_lines: int) -> str:
    out = list(summary)
    previous_last = -1
    for unit in units:
        if unit.first > previous_last + 1:
            out.append(_gap_marker(unit.first - previous_last - 1))
        out.append(unit.text)
        previous_last = unit.last
    if total_lines - 1 > previous_last and (units or not summary):
        out.append(_gap_marker(total_lines - 1 - previous_last))
    return "\n".join(out)


def render_digest(
    kept: dict[int, tuple[int, str]],
    similar_after: dict[int, int],
    summary: list[str],
    total_lines: int,
    max_chars: int,
    *,
    failing: bool = False,
) -> tuple[str, int]:
    """Return the digest text and how many units of input it shows.

    Lines are chosen by priority; among failures and summaries the earliest first (the first
    compiler error is the one to fix), among details of a failed command the latest first
    (a failed run reports its cause at the end, after the noise of the steps that passed)."""
    lines = [
        (lineno, kept[lineno][0], display_line(kept[lineno][1]), similar_after.get(lineno, 0))
        for lineno in sorted(kept)
    ]
    units = _fold(lines)
    summary = [display_line(s) for s in summary]
    used = sum(len(s) + 1 for s in summary)
    chosen: list[_Unit] = []

    def order(unit: _Unit) -> tuple[int, int]:
        latest_first = failing and unit.priority < FAILURE
        return (-unit.priority, -unit.first if latest_first else unit.first)

    for unit in sorted(units, key=order):
        cost = len(unit.text) + 1 + _MARKER_RESERVE
        if used + cost <= _cap_for(unit.priority, max_chars):
            chosen.append(unit)
            used += cost
    chosen.sort(key=lambda u: u.first)
    text = redact_secrets(_join(chosen, summary, total_lines))
    # Redaction can lengthen a line and the marker reserve is an estimate: drop the least
    # important units until the digest fits.
    while len(text) > max_chars and chosen:
        weakest = min(chosen, key=lambda u: (u.priority, -u.first))
        chosen.remove(weakest)
        text = redact_secrets(_join(chosen, summary, total_lines))
    if len(text) > max_chars:
        text = _hard_cut(text, max_chars)
    return text, len(chosen)


def _hard_cut(text: str, max_chars: int) -> str:
    marker = "\n[… digest cut …]"
    if max_chars <= len(marker):
        return text[:max_chars]
    cut = text.rfind("\n", 0, max_chars - len(marker))
    if cut <= 0:
        cut = max_chars - len(marker)
    return text[:cut] + marker
