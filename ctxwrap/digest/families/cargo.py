"""cargo build/test/clippy and rustc: error blocks with their --> location and carets,
failing tests with their panic message, the "test result:" line."""

from __future__ import annotations

import re
from collections.abc import Sequence

from ctxwrap.digest._rules import (
    DETAIL,
    FAILURE,
    IGNORE,
    LOCATION,
    NOTE,
    SUMMARY,
    TRIVIA,
    WARNING,
    Family,
    rule,
)


class CargoFamily(Family):
    name = "cargo"
    rules = (
        rule(r"^test result: ", "test result:", SUMMARY),
        rule(r"^error: (?:could not compile|test failed|aborting)", "error", SUMMARY),
        rule(r"^error(?:\[E\d+\])?: ", "error", FAILURE, after=8, context_priority=LOCATION),
        rule(r"^warning: .* generated \d+ warnings?", "warn", NOTE),
        rule(r"^warning(?:\[\w+\])?: ", "warn", WARNING, after=2, context_priority=TRIVIA),
        rule(r"^test \S+ \.\.\. FAILED", "fail", FAILURE),
        rule(r"^---- \S+ stdout ----", "---- ", LOCATION),
        rule(r"panicked at ", "panicked at", DETAIL, after=3, context_priority=DETAIL),
        rule(r"^failures:$", "fail", NOTE, after=50, context_priority=FAILURE),
        # Backtrace frames of the standard library mention failures and errors: noise.
        rule(r"^\s+(?:at /rustc/|\d+: (?:std|core|alloc|__rustc|<))", ("fail", "error"), IGNORE),
        rule(
            r"^Some errors have detailed explanations|^For more information about", "error", IGNORE
        ),
    )

    @classmethod
    def claims_command(cls, program: str, args: Sequence[str]) -> bool:
        return program in ("cargo", "rustc", "cargo-nextest")

    @classmethod
    def sniff(cls, sample: str) -> bool:
        if "   Compiling " in sample or "test result:" in sample:
            return True
        return "error[E" in sample and re.search(r"^error\[E\d{4}\]", sample, re.M) is not None
