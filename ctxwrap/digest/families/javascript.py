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
    rule(r"^Found \d+ errors?\b", "Found ", SUMMARY),
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
    rule(r"^✖ \d+ problems?", "problem", SUMMARY, after=1, context_priority=NOTE),
    rule(r"^\s+\d+:\d+\s+error\s", "error", FAILURE),
    rule(r"^\s+\d+:\d+\s+warning\s", "warning", WARNING),
    rule(
        r"^(?:/|[A-Za-z]:\\|\.{0,2}/?[\w@.-]+/)\S*\.(?:[cm]?[jt]sx?|vue|svelte)$",
        (".ts", ".js", ".mjs", ".cjs", ".vue", ".svelte"),
        LOCATION,
    ),
)
JEST_RULES = (
    rule(
        r"^(?:Tests|Test Suites|Test Files):\s+", ("Tests:", "Test Suites:", "Test Files:"), SUMMARY
    ),
    rule(r"^\s*● ", "● ", FAILURE, after=4, context_priority=DETAIL),
    rule(r"^\s*(?:FAIL|×|✕) \S", ("FAIL", "×", "✕"), FAILURE),
)
NPM_RULES = (
    rule(r"^npm (?:ERR!|error) ", ("npm ERR", "npm error"), FAILURE),
    rule(r"^npm (?:warn|WARN) ", ("npm warn", "npm WARN"), WARNING),
    rule(
        r"^(?:added|removed|changed|up to date|audited)\b.*\b(?:packages?|in \d)",
        ("added ", "removed ", "changed ", "up to date", "audited "),
        SUMMARY,
    ),
    rule(r"\d+ (?:\w+ severity )?vulnerabilit", "vulnerabilit", NOTE),
    rule(r"^> \S+@\S+ \S+", "> ", NOTE, after=1, context_priority=NOTE),
    rule(r"ERR_PNPM_\w+", "ERR_PNPM", FAILURE),
    rule(r"^error (?:Command failed|An unexpected error)", "error ", FAILURE),
    rule(r"^npm http ", "npm http", IGNORE),
)


class NodeFamily(Family):
    name = "npm"
    rules = NPM_RULES + TSC_RULES + ESLINT_RULES + JEST_RULES

    @classmethod
    def claims_command(cls, program: str, args: Sequence[str]) -> bool:
        return program in ("npm", "pnpm", "yarn", "bun", "jest", "vitest")

    @classmethod
    def sniff(cls, sample: str) -> bool:
        return (
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
        return re.search(r"(?:\(\d+,\d+\): |:\d+:\d+ - )error TS\d+", sample) is not None


class EslintFamily(Family):
    name = "eslint"
    rules = ESLINT_RULES

    @classmethod
    def claims_command(cls, program: str, args: Sequence[str]) -> bool:
        return program in ("eslint", "next") and (program == "eslint" or args[:1] == ["lint"])

    @classmethod
    def sniff(cls, sample: str) -> bool:
        return (
            re.search(r"^\s+\d+:\d+\s+(?:error|warning)\s+.+\s{2}[\w@/-]+$", sample, re.M)
            is not None
        )
