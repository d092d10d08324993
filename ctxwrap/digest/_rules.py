"""What a command family is: anchored line rules, optional whole-stream counters, a summary.

A rule only runs on lines that contain one of its anchors (plain substrings found with
``str.find`` over a whole block), which keeps the digester at C speed on lines nobody keeps.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

# Priorities: what survives when the budget is tight (higher wins).
SUMMARY = 9  # "3 failed, 120 passed", "test result:", "Found 4 errors"
FAILURE = 8  # a failing test's name, a compiler "error:" line, the final error
DETAIL = 7  # assertion messages, panics, exception lines
LOCATION = 6  # file:line of an error, caret context
WARNING = 5
NOTE = 4
CONTEXT = 3
LOW = 2
TRIVIA = 1  # floor for context lines
IGNORE = 0  # a rule that claims a line only to keep generic rules off it


@dataclass(frozen=True, slots=True)
class LineRule:
    """A line worth keeping: its pattern, the anchors any match must contain, its priority."""

    pattern: re.Pattern[str]
    anchors: tuple[str, ...]  # case-insensitive substrings; "\n…" anchors a line start
    priority: int
    before: int = 0
    after: int = 0
    # Context after an error usually ends at the first blank line (cargo, tsc, gcc blocks).
    after_stops_at_blank: bool = True
    context_priority: int = 0  # 0: two below the rule's own priority

    @property
    def effective_context_priority(self) -> int:
        return self.context_priority or max(TRIVIA, self.priority - 2)


def rule(
    pattern: str,
    anchors: str | Sequence[str],
    priority: int,
    *,
    before: int = 0,
    after: int = 0,
    after_stops_at_blank: bool = True,
    context_priority: int = 0,
    flags: int = 0,
) -> LineRule:
    return LineRule(
        pattern=re.compile(pattern, flags),
        anchors=(anchors,) if isinstance(anchors, str) else tuple(anchors),
        priority=priority,
        before=before,
        after=after,
        after_stops_at_blank=after_stops_at_blank,
        context_priority=context_priority,
    )


class Family:
    """Base of every family; a fresh instance serves one digest, so counters may live on it."""

    name: ClassVar[str] = "generic"
    rules: ClassVar[tuple[LineRule, ...]] = ()
    # Families whose output is data (diffs, listings) must not treat the word "error" as one.
    uses_generic_rules: ClassVar[bool] = True
    head_lines: ClassVar[int] = 6
    tail_lines: ClassVar[int] = 10

    @classmethod
    def claims_command(cls, program: str, args: Sequence[str]) -> bool:
        """Whether this family's rules fit the output of `program args…`."""
        return False

    @classmethod
    def sniff(cls, sample: str) -> bool:
        """Whether the start of an output looks like this family's (command unknown)."""
        return False

    def scan(self, block: str) -> None:
        """Count over a whole cleaned block of complete lines; bounded state only."""

    def summary_lines(self) -> list[str]:
        """Synthesized lines shown first (counts, groupings); empty for most families."""
        return []


# Shared patterns for whatever a family does not know about. Anchors are matched without
# regard to case and stay few: each one costs a pass over every block. Panics and fatal
# signals end a program, so the tail keeps them without an anchor of their own.
GENERIC_RULES: tuple[LineRule, ...] = (
    # An exception line ends a traceback: keep the last frames above it.
    rule(
        r"^[\w.]*(?:Error|Exception)\b(?::|$)",
        ("error", "exception"),
        FAILURE,
        before=6,
        context_priority=LOCATION,
    ),
    rule(r"^(?:error|ERROR|Error)\b", "error", FAILURE, before=1, after=2),
    rule(
        r"(?i)\b(?:error|errors|failed|failure|fatal error|exception)\b",
        ("error", "fail", "exception"),
        DETAIL,
    ),
    rule(r"(?i)\bwarn(?:ing)?\b", "warn", WARNING),
)
