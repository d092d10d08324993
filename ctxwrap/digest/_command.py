"""Choose a family from the command line, or else from the first bytes of its output."""

from __future__ import annotations

import os
import re
import shlex

from ctxwrap.digest._rules import Family
from ctxwrap.digest.families import FAMILIES, SNIFF_ORDER

_SEQUENCE = re.compile(r"&&|\|\||;|\n|(?<![<>&|])&(?![>&])")
_PIPE = re.compile(r"(?<!\|)\|(?!\|)")
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
# Prefixes that run the real program: `sudo pytest`, `timeout 60 cargo test`.
_WRAPPERS = frozenset({"sudo", "env", "time", "nice", "nohup", "command", "exec", "stdbuf"})
_WRAPPERS_WITH_ARGUMENT = frozenset({"timeout"})
_RUNNERS = frozenset({"npx", "bunx", "pnpx"})
_RUNNERS_WITH_VERB = {
    "uv": "run",
    "poetry": "run",
    "pipenv": "run",
    "pdm": "run",
    "hatch": "run",
    "rye": "run",
    "pnpm": "exec",
    "yarn": "exec",
}
_PYTHON = re.compile(r"^python(?:\d+(?:\.\d+)?)?$")


def _words(segment: str) -> list[str]:
    try:
        return shlex.split(segment)
    except ValueError:
        return segment.split()


def program_and_args(segment: str) -> tuple[str, list[str]]:
    """The program a shell segment really runs, with its arguments, wrappers removed."""
    words = _words(segment.strip().lstrip("({").strip())
    while words:
        head = os.path.basename(words[0])
        if _ASSIGNMENT.match(words[0]) or head in _WRAPPERS:
            words = words[1:]
            while words and head != "time" and words[0].startswith("-"):
                words = words[1:]
        elif head in _WRAPPERS_WITH_ARGUMENT:
            words = _skip_timeout_options(words[1:])
        elif head in _RUNNERS:
            words = [w for w in words[1:] if w not in ("--yes", "-y", "--no-install")]
        elif words[1:2] == [_verb_before_program(head)]:
            # `uv run pytest`, `poetry run x`, `python -m pytest`: the program comes next.
            words = words[2:]
        else:
            return head, words[1:]
    return "", []


def _verb_before_program(head: str) -> str | None:
    if _PYTHON.match(head):
        return "-m"
    return _RUNNERS_WITH_VERB.get(head)


def _skip_timeout_options(words: list[str]) -> list[str]:
    """Drop `timeout`'s options and its duration: `-s KILL -k 5 30 cmd…` → `cmd…`."""
    while words and words[0].startswith("-"):
        takes_value = words[0] in ("-s", "--signal", "-k", "--kill-after")
        words = words[2:] if takes_value else words[1:]
    return words[1:] if words and words[0][:1].isdigit() else words


def family_for_command(command: str) -> Family | None:
    """The family of the last command in a sequence that some family claims."""
    try:
        for segment in reversed(_SEQUENCE.split(command)):
            program, args = program_and_args(_PIPE.split(segment)[0])
            if not program:
                continue
            for family in FAMILIES:
                if family.claims_command(program, args):
                    return family()
    except Exception:
        # Choosing a family is a refinement; on a bug the output is sniffed instead.
        return None
    return None


def family_for_output(sample: str) -> Family:
    try:
        for family in SNIFF_ORDER:
            if family.sniff(sample):
                return family()
    except Exception:
        pass  # a sniffer bug: the generic rules still apply
    return Family()
