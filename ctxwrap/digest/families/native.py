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
    NOTE,
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
            "error:",
            FAILURE,
            after=2,
            after_stops_at_blank=False,
            context_priority=LOCATION,
        ),
        rule(
            r"^\S+:\d+(?::\d+)?: warning: ",
            "warning:",
            WARNING,
            after=2,
            after_stops_at_blank=False,
            context_priority=CONTEXT,
        ),
        rule(r"^\S+:\d+(?::\d+)?: note: ", "note:", NOTE),
        rule(
            r"^\S+: In (?:function|member function|constructor|destructor|instantiation)",
            ": In ",
            NOTE,
        ),
        rule(r"^\S*make(?:\[\d+\])?: \*\*\*", "***", FAILURE),
        rule(
            r"undefined reference to|multiple definition of|ld returned \d+ exit status|^collect2: error|\bld: ",
            ("undefined reference", "multiple definition", "ld returned", "ld: "),
            FAILURE,
        ),
        rule(r"^compilation terminated", "compilation terminated", DETAIL),
        rule(
            r"^\d+ (?:errors?|warnings?)(?: and \d+ warnings?)? generated\.", "generated.", SUMMARY
        ),
        rule(r"^\S*make(?:\[\d+\])?: Target .* not remade", "not remade", SUMMARY),
        rule(r"^FAILED: ", "FAILED:", FAILURE),
        rule(r"^CMake (?:Error|Warning)", "CMake ", FAILURE, after=4, context_priority=DETAIL),
    )

    @classmethod
    def claims_command(cls, program: str, args: Sequence[str]) -> bool:
        return program in _PROGRAMS

    @classmethod
    def sniff(cls, sample: str) -> bool:
        return (
            re.search(
                r"^\S+:\d+:\d+: (?:fatal )?(?:error|warning): |^make(?:\[\d+\])?: \*\*\*",
                sample,
                re.M,
            )
            is not None
        )
