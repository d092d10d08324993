"""find / ls -R / tree / grep -rn: listings are data, not errors. The digest says how many
entries there are and where they are (counts per directory, per file for grep, per
extension), then shows the first and last few lines."""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Sequence

from ctxwrap.digest._rules import FAILURE, SUMMARY, Family, rule

# Counters are bounded: past this many keys, directories are merged into their parents.
_MAX_KEYS = 20000
_SHOWN = 12
_PARENT_DIR = re.compile(r"^(.*)/[^/\n]*$", re.M)
# Starts with a literal "." so the regex engine can skip ahead instead of trying each offset.
_EXTENSION = re.compile(r"\.([A-Za-z0-9]{1,8})$", re.M)
_GREP_FILE = re.compile(r"^([^:\n]+):\d+[:-]", re.M)
_LS_SECTION = re.compile(r"^(\S.*):$", re.M)
_TREE_SUMMARY = rule(r"^\d+ director(?:y|ies)(?:, \d+ files?)?$", ("director",), SUMMARY)


def _bounded_update(counter: Counter[str], keys: list[str]) -> None:
    counter.update(keys)
    while len(counter) > _MAX_KEYS:
        merged: Counter[str] = Counter()
        for key, count in counter.items():
            merged[os.path.dirname(key.rstrip("/")) or key] += count
        if len(merged) == len(counter):
            break
        counter.clear()
        counter.update(merged)


def _top(counter: Counter[str], label: str, suffix: str = "") -> list[str]:
    if not counter:
        return []
    lines = [f"{label} (top {min(_SHOWN, len(counter))} of {len(counter):,}):"]
    lines += [f"  {count:>7,}  {key}{suffix}" for key, count in counter.most_common(_SHOWN)]
    return lines


def _top_level(counter: Counter[str]) -> Counter[str]:
    """Roll directory counts up to one level below their common prefix."""
    keys = list(counter)
    if not keys:
        return Counter()
    prefix = (
        os.path.commonpath(keys)
        if all(k.startswith("/") for k in keys) or not any(k.startswith("/") for k in keys)
        else ""
    )
    depth = len([p for p in prefix.split("/") if p]) + (1 if prefix.startswith("/") else 0)
    rolled: Counter[str] = Counter()
    for key, count in counter.items():
        parts = key.split("/")
        rolled["/".join(parts[: depth + 1]) or key] += count
    return rolled


class _ListingFamily(Family):
    uses_generic_rules = False
    head_lines = 8
    tail_lines = 4

    def __init__(self) -> None:
        self._entries = 0
        self._by_directory: Counter[str] = Counter()
        self._by_extension: Counter[str] = Counter()

    def _count_extensions(self, block: str) -> None:
        _bounded_update(self._by_extension, _EXTENSION.findall(block))

    def _extension_lines(self) -> list[str]:
        if len(self._by_extension) < 2:
            return []
        top = ", ".join(f".{ext} {n:,}" for ext, n in self._by_extension.most_common(8))
        return [f"by extension: {top}"]


class FindFamily(_ListingFamily):
    name = "find"
    rules = (rule(r"^(?:find|fd): ", ("find: ", "fd: "), FAILURE),)

    @classmethod
    def claims_command(cls, program: str, args: Sequence[str]) -> bool:
        return program in ("find", "fd", "fdfind", "locate")

    def scan(self, block: str) -> None:
        self._entries += block.count("\n") + 1
        _bounded_update(self._by_directory, _PARENT_DIR.findall(block))
        self._count_extensions(block)

    def summary_lines(self) -> list[str]:
        lines = [f"{self._entries:,} paths in {len(self._by_directory):,} directories"]
        rolled = _top_level(self._by_directory)
        if 1 < len(rolled) < len(self._by_directory):
            lines += _top(rolled, "by top-level directory", "/")
        lines += _top(self._by_directory, "largest directories", "/")
        return lines + self._extension_lines()


class LsFamily(_ListingFamily):
    name = "ls"
    rules = (rule(r"^ls: ", "ls: ", FAILURE),)

    def __init__(self) -> None:
        super().__init__()
        self._section = "."

    @classmethod
    def claims_command(cls, program: str, args: Sequence[str]) -> bool:
        return program in ("ls", "dir", "exa", "eza", "lsd")

    def scan(self, block: str) -> None:
        parts = _LS_SECTION.split(block)
        # split() alternates entries and captured section names: [entries, name1, entries1, …]
        self._count_section(self._section, parts[0])
        for index in range(1, len(parts), 2):
            self._section = parts[index]
            self._count_section(self._section, parts[index + 1])
        self._count_extensions(block)

    def _count_section(self, section: str, text: str) -> None:
        entries = sum(
            1 for line in text.split("\n") if line.strip() and not line.startswith("total ")
        )
        if entries:
            self._entries += entries
            self._by_directory[section] += entries
            _bounded_update(self._by_directory, [])

    def summary_lines(self) -> list[str]:
        if len(self._by_directory) <= 1:
            return [f"{self._entries:,} entries", *self._extension_lines()]
        lines = [f"{self._entries:,} entries in {len(self._by_directory):,} directories"]
        return (
            lines + _top(self._by_directory, "largest directories", "/") + self._extension_lines()
        )


class TreeFamily(_ListingFamily):
    name = "tree"
    rules = (_TREE_SUMMARY,)

    @classmethod
    def claims_command(cls, program: str, args: Sequence[str]) -> bool:
        return program == "tree"

    def scan(self, block: str) -> None:
        self._count_extensions(block)

    def summary_lines(self) -> list[str]:
        return self._extension_lines()


class GrepFamily(_ListingFamily):
    name = "grep"
    head_lines = 10
    rules = (rule(r"^(?:grep|rg): ", ("grep: ", "rg: "), FAILURE),)

    @classmethod
    def claims_command(cls, program: str, args: Sequence[str]) -> bool:
        if program == "git":
            return [a for a in args if not a.startswith("-")][:1] == ["grep"]
        return program in ("grep", "egrep", "fgrep", "rg", "ag", "ack", "zgrep")

    def scan(self, block: str) -> None:
        self._entries += block.count("\n") + 1
        _bounded_update(self._by_directory, _GREP_FILE.findall(block))

    def summary_lines(self) -> list[str]:
        files = len(self._by_directory)
        if not files:
            return [f"{self._entries:,} matching lines"]
        lines = [f"{self._entries:,} matching lines in {files:,} files"]
        rolled = _top_level(self._by_directory)
        if 1 < len(rolled) < files:
            lines += _top(rolled, "matches by top-level directory", "/")
        return lines + _top(self._by_directory, "matches by file")
