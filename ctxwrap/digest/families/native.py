"""gcc/clang/make/cmake/ninja: diagnostics with file:line:col and the caret lines below
them, linker errors, and make's "***" lines that say which target failed."""

from __future__ import annotations

import re
from collections.abc import Sequence

from ctxwrap.digest._rules import (
    CONTEXT,
    DETAIL,
    FAILURE,
    LOCATION,
    SUMMARY,
    WARNING,
    Family,
    rule,
)

_PROGRAMS = frozenset(
    {
        "make",
        "gmake",
        "cmake",
        "ninja",
        "gcc",
        "g++",
        "cc",
        "c++",
        "clang",
        "clang++",
        "ld",
        "meson",
    }
)


class NativeBuildFamily(Family):
    name = "cc"
    rules = (
        rule(
            r"^\S+:\d+(?::\d+)?: (?:fatal )?error: ",
            "error",
            FAILURE,
            after=2,
            after_stops_at_blank=False,
            context_priority=LOCATION,
        ),
        rule(
            r"^\S+:\d+(?::\d+)?: warning: ",
            "warn",
            WARNING,
            after=2,
            after_stops_at_blank=False,
            context_priority=CONTEXT,
        ),
        rule(r"^\S*make(?:\[\d+\])?: \*\*\*", "***", SUMMARY),
        rule(
            r"undefined reference to|multiple definition of",
            ("undefined reference", "multiple definition"),
            FAILURE,
            before=1,
            context_priority=LOCATION,
        ),
        rule(r"ld returned \d+ exit status|^collect2: error", "error", FAILURE),
        rule(
            r"^\d+ (?:errors?|warnings?)(?: and \d+ warnings?)? generated\.",
            ("error", "warn"),
            SUMMARY,
        ),
        rule(r"^\S*make(?:\[\d+\])?: Target .* not remade", "error", SUMMARY),
        rule(r"^FAILED: ", "fail", FAILURE),
        rule(
            r"^CMake (?:Error|Warning)",
            ("error", "warn"),
            FAILURE,
            after=4,
            context_priority=DETAIL,
        ),
    )

    @classmethod
    def claims_command(cls, program: str, args: Sequence[str]) -> bool:
        return program in _PROGRAMS

    @classmethod
    def sniff(cls, sample: str) -> bool:
        markers = (": error: ", ": warning: ", ": fatal error: ", "make: ***", "make[")
        return any(marker in sample for marker in markers) and (
            re.search(
                r"^\S+:\d+:\d+: (?:fatal )?(?:error|warning): |^make(?:\[\d+\])?: \*\*\*",
                sample,
                re.M,
            )
            is not None
        )
