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
    # Repeats are lines equal but for numbers (default: also paths and quoted names alike).
    repeats_keep_paths: bool = False

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
    repeats_keep_paths: bool = False,
) -> LineRule:
    return LineRule(
        pattern=re.compile(pattern, flags),
        anchors=(anchors,) if isinstance(anchors, str) else tuple(anchors),
        priority=priority,
        before=before,
        after=after,
        after_stops_at_blank=after_stops_at_blank,
        context_priority=context_priority,
        repeats_keep_paths=repeats_keep_paths,
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
# CI logs (GitHub Actions) prefix every line with a timestamp; line-start patterns allow it.
_TS = r"(?:\d{4}-\d\d-\d\dT[\d:.]+Z ?)?(?:\d+ )?"
GENERIC_RULES: tuple[LineRule, ...] = (
    # The verdict of a build or a test run, in the words of the common runners: mocha,
    # jest/vitest, maven/surefire, gradle, minitest, sbt, unittest/nose, mypy, eslint, make,
    # rpmbuild, Travis and GitHub Actions.
    rule(
        r"(?i)^" + _TS + r"\W*\d+ failing\b",
        "failing",
        SUMMARY,
        after=8,
        after_stops_at_blank=False,
        context_priority=FAILURE,
    ),
    *(
        rule(pattern, anchors, SUMMARY)
        for pattern, anchors in (
            (r"\b\d+ (?:passing|pending)\b", ("passing", "pending")),
            (
                r"^" + _TS + r"\W*(?:Tests?|Test Files|Test Suites|Snapshots):?\s+\d",
                ("tests:", "tests  ", "test files", "test suites", "snapshots:"),
            ),
            (r"Tests run: \d+, Failures: \d+, Errors: \d+, Skipped: \d+\s*$", "tests run:"),
            (r"Found \d+ errors? in\b", "errors in"),
            (
                r"BUILD (?:FAILED|FAILURE|SUCCESSFUL)\b",
                ("build failed", "build failure", "build successful"),
            ),
            (r"\d+ tests? completed\b", "tests completed"),
            (r"\d+ runs?, \d+ assertions\b", "assertions"),
            (r"Failed: Total \d+", "failed: total"),
            (r"^Ran \d+ tests? in\b", "tests in"),
            (r"^" + _TS + r"\W*(?:FAILED|OK) \(", ("failed (", "ok (")),
            (r"\d+ problems?\b", "problem"),
            (r"\*\*\* \[.*\] Error \d+", "] error "),
            (r"Bad exit status\b", "bad exit"),
            (r"exited with [1-9]\d*\.", "exited with"),
            (r"exit code [1-9]\d*\.", "exit code"),
            (r"^" + _TS + r"\s*error Command failed\b", "command failed"),
            (r"TestsFailedException\b", "testsfailedexception"),
        )
    ),
    # A failing test or step: its id, and the line or two after it (the assertion, a frame).
    *(
        rule(pattern, anchors, FAILURE, after=2, context_priority=DETAIL)
        for pattern, anchors in (
            (r"^" + _TS + r"\W*(?:FAIL|FAILED|ERROR)(?::|\s{1,2}\S)", ("fail", "error")),
            (r"FAILED\s*$", "failed"),
            (r"<<< (?:FAILURE|ERROR)!", "<<< "),
            (r"^" + _TS + r"\s*[✕×●]\s", ("✕", "×", "●")),
            (r"undefined reference to\b", "undefined reference"),
            (r"^" + _TS + r"_{3,} \S.* _{3,}\s*$", "____"),
            (r"^\[info\] x \S", "] x "),
            (r"^\w+(?:::\w+)*#test_\w+", "#test_"),
        )
    ),
    # An error at a location: `path:line[:col]: [fatal] error`, MSBuild/tsc `path(line,col):
    # error CODE`, an error code alone (CS1234, TS2307, MSB3073, NU1101, LNK2019), Kotlin's
    # `e: path:line:col`.
    rule(
        r"(?::\d+(?::\d+)?:|\(\d+,\d+\):?) *(?:\w+ )?(?:fatal )?error\b|\berror [A-Z]{1,4}\d{3,5}\b",
        "error",
        FAILURE,
        after=2,
        context_priority=LOCATION,
    ),
    rule(r"^e: \S+", "\ne: ", FAILURE),
    rule(r"^\s*\d+ Error\(s\)|^Build FAILED\.", ("error(s)", "build failed"), SUMMARY),
    # Maven's closing lists of failing tests.
    rule(
        r"^" + _TS + r"(?:\[ERROR\] )?(?:Failed tests|Tests in error|Failures|Errors): *$",
        ("failed tests", "tests in error", "failures:", "errors:"),
        FAILURE,
        after=3,
        context_priority=FAILURE,
    ),
    # A frame of a stack trace in the project's own code (not a dependency's).
    rule(
        r"^" + _TS + r"\s+(?:at |❯ )(?!.*(?:node_modules|site-packages|internal/))"
        r".*?[\w.-]+\.\w+:\d+:\d+",
        ("  at ", "❯ "),
        DETAIL,
        repeats_keep_paths=True,  # frames differ by their file
    ),
    # pytest's assertion details and the location line under them.
    rule(r"^" + _TS + r"E {2,}\S", "E  ", DETAIL),
    rule(r"^" + _TS + r"\S+\.py:\d+: ", ".py:", DETAIL),
    # An exception line ends a traceback: keep the last frames above it and the first after.
    rule(
        r"^[\w.:]*(?:Error|Exception)\b(?::|$)",
        ("error", "exception"),
        FAILURE,
        before=6,
        after=2,
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
