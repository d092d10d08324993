"""The report's words for what ctxwrap does: the user's words first, the mechanism's name
second (as `ctxwrap stats` and the config call it), and one sentence saying what it means."""

from __future__ import annotations

from typing import NamedTuple


class Words(NamedTuple):
    user: str  # what a person reads first: "old results masked"
    name: str  # the mechanism's name in stats, config and docs: "masking"
    explain: str
    doing: str  # for the hero sentence: "mostly by masking old results"


MECHANISM_WORDS: dict[str, Words] = {
    "bash": Words(
        "big outputs summarised",
        "bash digest",
        "A long command output is replaced by a short digest; the full text stays recallable.",
        "summarising big outputs",
    ),
    "amnesia": Words(
        "reads the task no longer needs hidden",
        "tagger · amnesia",
        "A small aux model tags file reads the task does not need; they are replaced by a "
        "one-line stub. Unchanged re-reads point to the earlier copy.",
        "hiding reads the task no longer needs",
    ),
    "dedup": Words(
        "repeated reads point to the first copy",
        "dedup · amnesia",
        "A file read again unchanged is replaced by a pointer to the earlier, identical result.",
        "pointing repeated reads to the first copy",
    ),
    "writes": Words(
        "written files kept as one line",
        "write facts",
        "A file the agent wrote is kept in the context as one line saying what it holds.",
        "keeping written files as one line",
    ),
    "masking": Words(
        "old results masked",
        "masking",
        "After an idle gap long enough for the provider's cache to expire, old tool results "
        "are replaced by stubs (the cache would be rewritten anyway).",
        "masking old results",
    ),
    "skills": Words(
        "skills loaded on demand",
        "lazy skills",
        "Skill descriptions are loaded when needed instead of sitting in every request.",
        "loading skills on demand",
    ),
    "tools": Words(
        "ctxwrap's own tool definitions",
        "tools",
        "The recall tool ctxwrap adds to every request (negative: it costs a little).",
        "trimming tool definitions",
    ),
}

# Intervention kinds (one row of the interventions table each).
KIND_WORDS: dict[str, tuple[str, str]] = {
    "digest": ("output summarised", "bash digest"),
    "strip": ("written file kept as one line", "write fact"),
    "strip_write": ("written file kept as one line", "write fact"),
    "mask": ("old result masked", "masking"),
    "pointer": ("repeated read points to the first copy", "dedup"),
    "tombstone": ("read hidden: not needed", "tagger"),
}

COST_UNITS = "cost units"
COST_UNITS_EXPLAIN = (
    "No price is known for this model: a cost unit is one fresh input token (a token read "
    "from the provider's cache counts 0.1, one written to it 1.25)."
)


def words(mechanism: str) -> Words:
    return MECHANISM_WORDS.get(mechanism, Words(mechanism, mechanism, "", mechanism))


def kind_words(kind: str) -> tuple[str, str]:
    return KIND_WORDS.get(kind, (kind, kind))
