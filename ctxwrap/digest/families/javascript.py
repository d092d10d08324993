"""npm/pnpm/yarn, tsc, eslint and jest: package manager errors, TypeScript diagnostics with
their code frame, lint problems per file, failing test names and the summary lines."""

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

TSC_RULES = (
    rule(r"^Found \d+ errors?\b", "error", SUMMARY),
    rule(r"^\S+\(\d+,\d+\): error TS\d+", "error TS", FAILURE),
    # --pretty: the code frame is a blank line, the source line, the squiggle.
    rule(
        r"^\S+:\d+:\d+ - error TS\d+",
        "error TS",
        FAILURE,
        after=3,
        after_stops_at_blank=False,
        context_priority=LOCATION,
    ),
)
ESLINT_RULES = (
    rule(r"^✖ \d+ problems?", "error", SUMMARY, after=1, context_priority=NOTE),
    rule(r"^\s+\d+:\d+\s+error\s", "error", FAILURE),
    rule(r"^\s+\d+:\d+\s+warning\s", "warning", WARNING),
    rule(
        r"^(?:/|[A-Za-z]:\\|\.{0,2}/?[\w@.-]+/)\S*\.(?:[cm]?[jt]sx?|vue|svelte)$",
        (".ts", ".js"),
        FAILURE,  # an error line says nothing without the file heading it
    ),
)
JEST_RULES = (
    # Jest's and vitest's summary lines come last, where the tail keeps them.
    rule(r"^\s*● ", "● ", FAILURE, after=4, context_priority=DETAIL),
    rule(r"^\s*(?:FAIL|×|✕) \S", ("fail", "×", "✕"), FAILURE),
)
NPM_RULES = (
    rule(r"^npm (?:ERR!|error) ", ("npm ERR", "error"), FAILURE),
    rule(r"^npm (?:warn|WARN) ", "warn", WARNING),
    rule(r"ERR_PNPM_\w+", "ERR_PNPM", FAILURE),
    rule(r"^error (?:Command failed|An unexpected error)", "error", FAILURE),
    # Verbose fetch logs name packages like http-errors; they are not errors.
    rule(r"^npm (?:http|timing|verb|sill) ", ("error", "fail", "warn"), IGNORE),
)


class NodeFamily(Family):
    name = "npm"
    rules = NPM_RULES + TSC_RULES + ESLINT_RULES + JEST_RULES

    @classmethod
    def claims_command(cls, program: str, args: Sequence[str]) -> bool:
        return program in ("npm", "pnpm", "yarn", "bun", "jest", "vitest")

    @classmethod
    def sniff(cls, sample: str) -> bool:
        markers = ("npm ERR!", "npm error ", "npm warn ", "npm WARN ", "added ")
        return any(marker in sample for marker in markers) and (
            re.search(r"^(?:npm (?:ERR!|error|warn|WARN) |added \d+ packages)", sample, re.M)
            is not None
        )


class TscFamily(Family):
    name = "tsc"
    rules = TSC_RULES

    @classmethod
    def claims_command(cls, program: str, args: Sequence[str]) -> bool:
        return program in ("tsc", "vue-tsc", "tsgo")

    @classmethod
    def sniff(cls, sample: str) -> bool:
        return "error TS" in sample and (
            re.search(r"(?:\(\d+,\d+\): |:\d+:\d+ - )error TS\d+", sample) is not None
        )


class EslintFamily(Family):
    name = "eslint"
    rules = ESLINT_RULES

    @classmethod
    def claims_command(cls, program: str, args: Sequence[str]) -> bool:
        return program in ("eslint", "next") and (program == "eslint" or args[:1] == ["lint"])

    @classmethod
    def sniff(cls, sample: str) -> bool:
        return ("  error  " in sample or "  warning  " in sample) and (
            re.search(r"^\s+\d+:\d+\s+(?:error|warning)\s+.+\s{2}[\w@/-]+$", sample, re.M)
            is not None
        )
