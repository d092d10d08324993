"""The report's words: the user's words first and the mechanism's name second, both from
`ctxwrap.vocabulary` (the CLI, README and man pages say the same), plus what only a page
has room for: one sentence saying what each does, and the phrase of the hero sentence."""

from __future__ import annotations

from typing import NamedTuple

from ctxwrap.vocabulary import MECHANISM_NAMES, MECHANISM_WORDS


class Words(NamedTuple):
    user: str  # what a person reads first: "old results masked"
    name: str  # the mechanism's name in stats, config and docs: "history masking"
    explain: str
    doing: str  # for the hero sentence: "mostly by masking old results"


_EXPLAIN: dict[str, tuple[str, str]] = {
    "bash": (
        "A long command output is replaced by a short digest; the full text stays recallable.",
        "summarising big outputs",
    ),
    "amnesia": (
        "A small aux model tags file reads the task does not need; they are replaced by a "
        "one-line stub, recallable.",
        "hiding reads the task no longer needs",
    ),
    "dedup": (
        "A file read again unchanged is replaced by a pointer to the earlier, identical result.",
        "pointing unchanged re-reads back",
    ),
    "writes": (
        "A file the agent wrote is kept in the context as one line saying what it holds; an "
        "edit that was applied keeps its new text, not the old text it replaced.",
        "keeping written files as one line and leaving edits' old text out",
    ),
    "masking": (
        "Old tool results the agent has moved on from are replaced by recallable stubs: when "
        "the provider's cache has expired anyway, or when the rewrite pays back over the calls "
        "still to come.",
        "masking old results",
    ),
    "skills": (
        "Skill descriptions are loaded when needed instead of sitting in every request.",
        "loading skills on demand",
    ),
    "tools": (
        "Tool specs loaded when needed; negative when ctxwrap's own recall tool costs more "
        "than it spared.",
        "loading tool specs on demand",
    ),
    "thinking": (
        "Earlier turns' thinking is left out of later requests by the provider's own context "
        "edit, where the cache rewrite that causes pays back; the agent's messages are not "
        "touched.",
        "leaving earlier turns' thinking out",
    ),
}

# Intervention kinds (one row of the interventions table each): (user words, name).
KIND_WORDS: dict[str, tuple[str, str]] = {
    "digest": ("output summarised", "bash digest"),
    "strip": ("written file kept as one line", "write fact"),
    "strip_write": ("written file kept as one line", "write fact"),
    "strip_edit": ("an applied edit's old text left out", "edit strip"),
    "mask": ("old result masked", "history masking"),
    "pointer": ("unchanged re-read pointed back", "re-read dedup"),
    "tombstone": ("read hidden: the task no longer needs it", "tagger"),
}

COST_UNITS = "cost units"
COST_UNITS_EXPLAIN = (
    "No price is known for this model: a cost unit is one fresh input token (a token read "
    "from the provider's cache counts 0.1, one written to it 1.25)."
)


def words(mechanism: str) -> Words:
    user = MECHANISM_WORDS.get(mechanism, (mechanism, mechanism))[0]
    name = MECHANISM_NAMES.get(mechanism, mechanism)
    if mechanism == "amnesia":
        name = "tagger · " + name
    explain, doing = _EXPLAIN.get(mechanism, ("", user))
    return Words(user, name, explain, doing)


def kind_words(kind: str) -> tuple[str, str]:
    return KIND_WORDS.get(kind, (kind, kind))
