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
    WARNING,
    Family,
    rule,
)


class CargoFamily(Family):
    name = "cargo"
    rules = (
        rule(r"^test result: ", "test result:", SUMMARY),
        rule(r"^error: (?:could not compile|test failed|aborting)", "error:", SUMMARY),
        rule(r"^error(?:\[E\d+\])?: ", "error", FAILURE, after=8, context_priority=LOCATION),
        rule(r"^warning: .* generated \d+ warnings?", "generated", NOTE),
        rule(r"^warning(?:\[\w+\])?: ", "warning", WARNING, after=2, context_priority=IGNORE),
        rule(r"^test \S+ \.\.\. FAILED", "FAILED", FAILURE),
        rule(r"^---- \S+ stdout ----", "---- ", LOCATION),
        rule(r"panicked at ", "panicked at", DETAIL, after=3, context_priority=DETAIL),
        rule(r"^failures:$", "failures:", NOTE, after=50, context_priority=FAILURE),
        rule(r"^\s+(?:Finished|Running|Doc-tests) ", ("Finished", "Running", "Doc-tests"), IGNORE),
        # Backtrace frames mention errors and file:line of the standard library: noise.
        rule(
            r"^\s+(?:at /rustc/|\d+: (?:std|core|alloc|__rustc|<)\S*)",
            ("at /rustc/", ": std", ": core", ": alloc", ": __rustc", ": <"),
            0,
        ),
        rule(r"^note: .*RUST_BACKTRACE", "RUST_BACKTRACE", 0),
        rule(
            r"^Some errors have detailed explanations|^For more information about",
            ("detailed explanations", "For more information"),
            IGNORE,
        ),
    )

    @classmethod
    def claims_command(cls, program: str, args: Sequence[str]) -> bool:
        return program in ("cargo", "rustc", "cargo-nextest")

    @classmethod
    def sniff(cls, sample: str) -> bool:
        return (
            "   Compiling " in sample
            or "test result:" in sample
            or re.search(r"^error\[E\d{4}\]", sample, re.M) is not None
        )
