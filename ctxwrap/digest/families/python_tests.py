"""pytest and unittest: failing test names, assertion lines, tracebacks, the summary line."""

from __future__ import annotations

import re
from collections.abc import Sequence

from ctxwrap.digest._rules import (
    DETAIL,
    FAILURE,
    IGNORE,
    LOCATION,
    LOW,
    NOTE,
    SUMMARY,
    Family,
    rule,
)

_PYTEST_OUTCOMES = ("passed", "failed", "error", "skipped", "deselected", "no tests ran")


class PytestFamily(Family):
    name = "pytest"
    rules = (
        rule(
            r"^=+ .*\b(?:passed|failed|errors?|skipped|deselected|xfailed|xpassed|no tests ran)\b.* in [\d.]+s",
            ("passed", "fail", "error"),
            SUMMARY,
        ),
        # -q prints the summary without the ===== frame.
        rule(
            r"^\d+ (?:passed|failed|errors?|skipped)\b.* in [\d.]+s",
            ("passed", "fail", "error"),
            SUMMARY,
        ),
        rule(r"^(?:FAILED|ERROR) \S", ("fail", "error"), FAILURE),
        rule(r"^!{3,} .* !{3,}$", "!!!", FAILURE),
        rule(r"^_{3,} .+ _{3,}$", "___", LOCATION),
        rule(r"^E {2,}", "\nE ", DETAIL, before=1, context_priority=NOTE),
        rule(r"^[\w/.\\-]+\.py:\d+: \w", ".py:", LOCATION),
        rule(r"^\S+::\S+.* (?:FAILED|ERROR)\b", ("fail", "error"), LOW),
        # A passing test whose name says "error" or "fail" is not a failure.
        rule(r"^\S+::\S+.* (?:PASSED|SKIPPED|XFAIL)\b", ("fail", "error"), IGNORE),
    )

    @classmethod
    def claims_command(cls, program: str, args: Sequence[str]) -> bool:
        return program in ("pytest", "py.test")

    @classmethod
    def sniff(cls, sample: str) -> bool:
        return "test session starts" in sample


class UnittestFamily(Family):
    name = "unittest"
    rules = (
        rule(r"^FAILED \(.*\)$", "fail", SUMMARY),
        rule(r"^(?:FAIL|ERROR): \S+", ("fail", "error"), FAILURE),
        rule(r" \.\.\. (?:FAIL|ERROR)$", ("fail", "error"), NOTE),
        rule(r"^\w*(?:Error|Exception)\b", ("error", "exception"), DETAIL),
    )

    @classmethod
    def claims_command(cls, program: str, args: Sequence[str]) -> bool:
        if program == "unittest":
            return True
        return program in ("setup.py", "manage.py") and "test" in args[:1]

    @classmethod
    def sniff(cls, sample: str) -> bool:
        if "Ran " not in sample:
            return False
        return re.search(r"^Ran \d+ tests? in ", sample, re.M) is not None or (
            "-" * 70 in sample and " ... " in sample
        )
