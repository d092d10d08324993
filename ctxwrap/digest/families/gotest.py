"""go test / go build / go vet: failing tests, t.Errorf lines, compile errors, panics."""

from __future__ import annotations

import re
from collections.abc import Sequence

from ctxwrap.digest._rules import DETAIL, FAILURE, IGNORE, LOCATION, SUMMARY, Family, rule


class GoFamily(Family):
    name = "go"
    rules = (
        rule(r"^FAIL\s+\S+\s+(?:[\d.]+s|\[)", "fail", SUMMARY),
        rule(r"^FAIL$", "fail", FAILURE),
        rule(r"^\s*--- FAIL: ", "fail", FAILURE),
        rule(
            r"^(?:vet: )?(?:\./)?\S+\.go:\d+:\d+: ",
            ".go:",
            FAILURE,
            before=1,
            context_priority=LOCATION,
        ),
        rule(r"^\s+\S+\.go:\d+: ", ".go:", DETAIL),
        rule(r"^panic: ", "panic", FAILURE, after=6, after_stops_at_blank=False),
        # Test names containing "Fail" or "Error" on passing or running tests are not failures.
        rule(r"^\s*--- (?:PASS|SKIP): |^=== (?:RUN|PAUSE|CONT)\b", ("fail", "error"), IGNORE),
    )

    @classmethod
    def claims_command(cls, program: str, args: Sequence[str]) -> bool:
        return program == "go" and args[:1] in (["test"], ["build"], ["vet"], ["run"], ["install"])

    @classmethod
    def sniff(cls, sample: str) -> bool:
        if "=== RUN" in sample:
            return True
        return ("FAIL\t" in sample or "ok  \t" in sample) and (
            re.search(r"^(?:ok|FAIL)\s+\S+\s+[\d.]+s", sample, re.M) is not None
        )
