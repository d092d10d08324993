"""go test / go build / go vet: failing tests, t.Errorf lines, compile errors, panics."""

from __future__ import annotations

import re
from collections.abc import Sequence

from ctxwrap.digest._rules import DETAIL, FAILURE, IGNORE, LOCATION, NOTE, SUMMARY, Family, rule


class GoFamily(Family):
    name = "go"
    rules = (
        rule(r"^(?:FAIL|ok)\s+\S+\s+(?:[\d.]+s|\[)", ("FAIL", "ok "), SUMMARY),
        rule(r"^(?:FAIL|PASS)$", ("FAIL", "PASS"), FAILURE),
        rule(r"^\s*--- FAIL: ", "--- FAIL", FAILURE),
        rule(r"^(?:vet: )?(?:\./)?\S+\.go:\d+:\d+: ", ".go:", FAILURE),
        rule(r"^\s+\S+\.go:\d+: ", ".go:", DETAIL),
        rule(r"^panic: ", "panic", FAILURE, after=6, after_stops_at_blank=False),
        rule(r"^# \S+$", "# ", LOCATION),
        rule(
            r"^\s*--- (?:PASS|SKIP): |^=== (?:RUN|PAUSE|CONT)\b",
            ("--- PASS", "--- SKIP", "=== "),
            IGNORE,
        ),
        rule(r"^go: ", "go: ", NOTE),
    )

    @classmethod
    def claims_command(cls, program: str, args: Sequence[str]) -> bool:
        return program == "go" and args[:1] in (["test"], ["build"], ["vet"], ["run"], ["install"])

    @classmethod
    def sniff(cls, sample: str) -> bool:
        return (
            "=== RUN" in sample
            or re.search(r"^(?:ok|FAIL)\s+\S+\s+[\d.]+s", sample, re.M) is not None
        )
