"""git log / show / diff / status. A log becomes one line per commit (hash, date, subject);
a diff keeps per-file change counts, hunk headers and their first lines; status keeps the
state of each path and counts per state."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

from ctxwrap.digest._rules import (
    CONTEXT,
    FAILURE,
    LOCATION,
    NOTE,
    SUMMARY,
    Family,
    rule,
)

# git's own options that come before the subcommand: `git -C dir --no-pager log`.
_GIT_OPTIONS_WITH_VALUE = frozenset({"-C", "-c", "--git-dir", "--work-tree", "--namespace"})
_COMMIT = re.compile(r"^commit ([0-9a-f]{7,40})\b", re.M)
_DATE = re.compile(r"^(?:Date|AuthorDate):\s+(.*)$", re.M)
_SUBJECT = re.compile(r"\n\n    (.*)")
_MAX_COMMITS_LISTED = 25
_MAX_DIFF_FILES = 2000
_FILE_HEADER = re.compile(r"^diff --git a/(.*?) b/", re.M)
_STATUS_ENTRY = re.compile(
    r"^\t(modified|new file|deleted|renamed|copied|typechange|both modified|both added|deleted by us|deleted by them):",
    re.M,
)
_PORCELAIN_ENTRY = re.compile(r"^([ MADRCU?!]{2}) \S", re.M)
_FATAL = rule(r"^(?:fatal|error): ", ("fatal:", "error:"), FAILURE)


def git_subcommand(args: Sequence[str]) -> str:
    skip_value = False
    for word in args:
        if skip_value:
            skip_value = False
        elif word in _GIT_OPTIONS_WITH_VALUE:
            skip_value = True
        elif not word.startswith("-"):
            return word
    return ""


class GitLogFamily(Family):
    name = "git-log"
    uses_generic_rules = False
    head_lines = 0
    tail_lines = 3
    rules = (_FATAL,)

    def __init__(self) -> None:
        self._commits = 0
        self._listed: list[str] = []

    @classmethod
    def claims_command(cls, program: str, args: Sequence[str]) -> bool:
        return program == "git" and git_subcommand(args) in ("log", "reflog", "whatchanged")

    @classmethod
    def sniff(cls, sample: str) -> bool:
        return re.match(r"commit [0-9a-f]{40}\b", sample) is not None

    def scan(self, block: str) -> None:
        for match in _COMMIT.finditer(block):
            self._commits += 1
            if len(self._listed) >= _MAX_COMMITS_LISTED:
                continue
            window = block[match.end() : match.end() + 4000]
            next_commit = window.find("\ncommit ")
            if next_commit >= 0:
                window = window[:next_commit]
            date = _DATE.search(window)
            subject = _SUBJECT.search(window)
            when = " ".join(date.group(1).split()[:5]) if date else ""
            title = subject.group(1).strip() if subject else "(subject not shown)"
            self._listed.append(
                "  ".join(part for part in (match.group(1)[:12], when, title) if part)
            )

    def summary_lines(self) -> list[str]:
        if not self._commits:
            return []
        lines = [f"git log: {self._commits:,} commit{'s' if self._commits != 1 else ''}"]
        lines += self._listed
        if self._commits > len(self._listed):
            lines.append(f"… {self._commits - len(self._listed):,} more commits")
        return lines


class GitDiffFamily(Family):
    name = "git-diff"
    uses_generic_rules = False
    head_lines = 0
    tail_lines = 2
    rules = (
        _FATAL,
        rule(r"^diff --git ", "diff --git", LOCATION),
        rule(
            r"^(?:new|deleted) file mode|^rename (?:from|to) |^Binary files ",
            ("file mode", "rename ", "Binary files"),
            NOTE,
        ),
        rule(r"^@@ .* @@", "@@ ", NOTE),
        rule(r"^[-+](?![-+]{2} )", ("\n+", "\n-"), CONTEXT),
        # `git show`: the commit being shown.
        rule(
            r"^commit [0-9a-f]{7,}",
            "commit ",
            SUMMARY,
            after=4,  # author, date, blank line, subject
            after_stops_at_blank=False,
            context_priority=NOTE,
        ),
    )

    def __init__(self) -> None:
        self._changes: dict[str, list[int]] = {}
        self._current = ""

    @classmethod
    def claims_command(cls, program: str, args: Sequence[str]) -> bool:
        return (program == "git" and git_subcommand(args) in ("diff", "show")) or program == "diff"

    @classmethod
    def sniff(cls, sample: str) -> bool:
        return sample.startswith("diff --git ") or "\ndiff --git " in sample[:2000]

    def scan(self, block: str) -> None:
        sections = _FILE_HEADER.split(block)
        # split() alternates text and captured paths: [before, path1, text1, path2, text2, …]
        self._count(self._current, sections[0])
        for index in range(1, len(sections), 2):
            self._current = sections[index]
            self._count(self._current, sections[index + 1])

    def _count(self, path: str, text: str) -> None:
        if not path or (path not in self._changes and len(self._changes) >= _MAX_DIFF_FILES):
            return
        counts = self._changes.setdefault(path, [0, 0])
        counts[0] += text.count("\n+") - text.count("\n+++ ")
        counts[1] += text.count("\n-") - text.count("\n--- ")

    def summary_lines(self) -> list[str]:
        if not self._changes:
            return []
        added = sum(c[0] for c in self._changes.values())
        removed = sum(c[1] for c in self._changes.values())
        lines = [f"diff: {len(self._changes):,} files, +{added:,} -{removed:,}"]
        for path, (plus, minus) in list(self._changes.items())[:40]:
            lines.append(f"  {path}  +{plus} -{minus}")
        if len(self._changes) > 40:
            lines.append(f"  … {len(self._changes) - 40:,} more files")
        return lines


class GitStatusFamily(Family):
    name = "git-status"
    uses_generic_rules = False
    head_lines = 4
    tail_lines = 4
    rules = (
        _FATAL,
        rule(
            r"^(?:On branch|HEAD detached|Your branch|You have unmerged|All conflicts)",
            ("On branch", "HEAD detached", "Your branch", "unmerged", "conflicts"),
            SUMMARY,
        ),
        rule(
            r"^(?:Changes to be committed|Changes not staged|Untracked files|Unmerged paths):",
            ("Changes", "Untracked", "Unmerged"),
            LOCATION,
        ),
        rule(r"^\t\S", "\t", NOTE),
        rule(
            r"^(?:nothing to commit|no changes added)",
            ("nothing to commit", "no changes added"),
            SUMMARY,
        ),
    )

    def __init__(self) -> None:
        self._states: Counter[str] = Counter()

    @classmethod
    def claims_command(cls, program: str, args: Sequence[str]) -> bool:
        return program == "git" and git_subcommand(args) == "status"

    @classmethod
    def sniff(cls, sample: str) -> bool:
        return sample.startswith(("On branch ", "HEAD detached "))

    def scan(self, block: str) -> None:
        self._states.update(_STATUS_ENTRY.findall(block))
        self._states.update(f"'{code.strip()}'" for code in _PORCELAIN_ENTRY.findall(block))

    def summary_lines(self) -> list[str]:
        if sum(self._states.values()) < 20:
            return []
        counts = ", ".join(f"{state}: {n:,}" for state, n in self._states.most_common())
        return [f"status: {counts}"]
