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
    # Up to this many lines after a match that continue its message (wrapped by a terminal,
    # indented under it, a stack trace under a log record; see _stream.continues) are kept at
    # the rule's own priority: a reader needs the whole message, not its first line.
    continues: int = 0
    # When set, continuation lines are those starting with this prefix instead (a box's `│`).
    continues_with: str = ""

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
    continues: int = 0,
    continues_with: str = "",
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
        continues=continues,
        continues_with=continues_with,
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


# Service logs: a record starts with its time (ISO-8601, bracketed or not; syslog's `Dec  6
# 10:22:33 host app[123]:`; a time of day), a few fields (pid, thread, logger, `---`, `-`)
# and its level. GitHub Actions' timestamp and docker compose's `name  | ` may come first.
_LOG_TIME = (
    r"(?:\[?\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?![.,\d])(?:Z|[+-]\d\d:?\d\d)?"
    r"(?!\w)(?<!\.\d{7}Z)\]?"  # not GitHub Actions' own timestamp
    r"|[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d(?: \S++ [^\s:]++:)?"
    r"|\[?\d\d:\d\d:\d\d(?:[.,]\d+)?\]?)"
)
_LEVELS = r"ERROR|ERRO|EROR|FATAL|FATA|CRITICAL|CRIT|PANIC|PANI|SEVERE|EMERG|ALERT"
_ANY_LEVEL = _LEVELS + r"|WARN|WARNING|INFO|DEBUG|DEBU|TRACE|TRAC|NOTICE"
# Fields are whitespace-separated words or bracketed groups, matched possessively: a line of
# `:`/`-` runs must not make the regex try every way to split it (10 s on one line, once).
_LOG_FIELD = r"(?:\[[^\]]{0,80}\]|[^\s\[]{1,80}+)"
_LOG_SEP = r"(?:[ \t]{1,3}+|$)"
_LOG_PREFIX = (
    r"^(?:\d{4}-\d\d-\d\dT[\d:.]++Z (?=\S))?(?:[\w.-]++ +\| )?"
    + _LOG_TIME
    + r",?[ \t]{0,3}+(?:(?![\[<(]?(?i:"
    + _ANY_LEVEL
    + r")\b)"
    + _LOG_FIELD
    + _LOG_SEP
    + r"){0,3}?[\[<(]?"
)
_LEVEL_END = r"(?:[\]>)]|\b)(?=[\s:|\[\]>)-]|$)"
# A record continues on the lines after it that have no time or level of their own (a stack
# trace, a message with newlines), up to a few.
ANY_LINE = r"(?!\s*$)"
BOX_LINE = "[│╵]"  # a line inside Terraform's box around a diagnostic, or its end
# glog/klog: `E1206 10:22:33.123456   12345 file.go:123] message` (I, W, E, F).
_GLOG = r"\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ [^\]]+\] "
_GLOG_ANCHORS = ("\nE0", "\nE1", "\nF0", "\nF1")
# logfmt `level=error` and JSON `"level":"error"` (also lvl, severity, levelname, log.level;
# pino and bunyan write the level as a number: 50 error, 60 fatal, 40 warn).
_KEYED_LEVEL = r"""(?:level|lvl|severity)(?:name)?(?:=["']?|" ?: ?")"""
_LOG_RECORD_RULES: tuple[LineRule, ...] = (
    *(
        rule(pattern, anchors, priority, continues=5, continues_with=ANY_LINE)
        for pattern, anchors, priority in (
            (
                _LOG_PREFIX + r"(?i:" + _LEVELS + r")" + _LEVEL_END,
                ("erro", "eror", "fata", "crit", "pani", "severe", "emerg", "alert"),
                FAILURE,
            ),
            (_LOG_PREFIX + r"(?i:WARN|WARNING)" + _LEVEL_END, "warn", WARNING),
            (r"^[EF]" + _GLOG, _GLOG_ANCHORS, FAILURE),
            (r"^W" + _GLOG, ("\nW0", "\nW1"), WARNING),
            # logrus and geth text: `ERRO[0042] message`, `WARN [12-01|10:22:33.123] message`
            (
                r"^(?:ERRO|EROR|ERROR|FATA|FATAL|PANI|CRIT) ?\[[\d:|.-]+\] ",
                ("erro", "eror", "fata", "pani", "crit"),
                FAILURE,
            ),
            (r"^WARN ?\[[\d:|.-]+\] ", "warn", WARNING),
            (
                _KEYED_LEVEL + r"(?i:error|err|eror|fatal|crit|critical|panic|alert|emerg)\b",
                # the key's `=` or quote and the level: `errors=0` is no anchor here
                tuple(
                    prefix + level
                    for prefix in ("=", '="', "='", '"', '": "')
                    for level in ("err", "fatal", "crit", "panic", "alert", "emerg")
                ),
                FAILURE,
            ),
            (_KEYED_LEVEL + r"(?i:warn|warning)\b", "warn", WARNING),
            (
                r'^\{.*"level" ?: ?[56]0\b',
                ('"level":5', '"level":6', '"level": 5', '"level": 6'),
                FAILURE,
            ),
            (r'^\{.*"level" ?: ?40\b', ('"level":4', '"level": 4'), WARNING),
        )
    ),
)
# Plan/apply tools: the verdict of Terraform/OpenTofu, Pulumi, Helm, kubectl rollout status.
_PLAN_APPLY_RULES: tuple[LineRule, ...] = (
    *(
        rule(pattern, anchors, SUMMARY)
        for pattern, anchors in (
            (r"^Plan: \d+ to (?:add|import|change|destroy)\b", "\nplan: "),
            (r"^(?:Apply|Destroy) complete! Resources: ", ("apply complete!", "destroy complete!")),
            (r"^No changes\. ", "\nno changes. "),
            (r"has been successfully initialized!", "successfully initialized"),
            (r"^Duration: \d", "\nduration: "),
            (r"^STATUS: [a-z-]+\s*$", "\nstatus: "),
            (r"^Release \S+ has been (?:upgraded|installed)\b|Happy Helming!", "happy helming"),
            (r"^\S+ \S+ successfully rolled out$", "successfully rolled out"),  # kubectl
        )
    ),
    # Pulumi's counts under `Resources:` (`+ 3 created`, `~ 1 updated`, `12 unchanged`).
    rule(r"^Resources:\s*$", "\nresources:", SUMMARY, after=8, context_priority=SUMMARY),
    # Terraform's boxed diagnostics (`╷ │ Error: … ╵`) are kept whole, the box included.
    rule(r"^│ Error: ", "│ error: ", FAILURE, before=1, continues=16, continues_with=BOX_LINE),
    rule(r"^│ Warning: ", "│ warning: ", WARNING, before=1, continues=8, continues_with=BOX_LINE),
    # Pulumi's diagnostics: an indented `error:` under the resource it is about.
    rule(r"^ {2,}error: ", "error: ", FAILURE, before=1, continues=4),
)

# Shared patterns for whatever a family does not know about. Anchors are matched without
# regard to case and stay few: every anchored line is classified in Python. Panics and fatal
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
    *_PLAN_APPLY_RULES,
    *_LOG_RECORD_RULES,
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
        continues=4,
    ),
    rule(r"^(?:error|ERROR|Error)\b", "error", FAILURE, before=1, after=2, continues=4),
    rule(
        r"(?i)\b(?:error|errors|failed|failure|fatal error|exception)\b",
        ("error", "fail", "exception"),
        DETAIL,
    ),
    rule(r"(?i)\bwarn(?:ing)?\b", "warn", WARNING),
)
