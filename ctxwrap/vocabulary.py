"""The words people read, in one place: the CLI, the report, the README and the man pages say
the same thing for the same figure. User words first, the mechanism's name second.

Import-light (no click, no rich): the report and the daemon import it too.
"""

from __future__ import annotations

# Agent ids as the store records them → the product's own name, in every figure ("plain Claude
# Code would have sent …", never "plain pi" for a Claude session).
AGENT_NAMES: dict[str, str] = {"pi": "pi", "claude": "Claude Code", "codex": "Codex"}

# Mechanism ids (stats, replay, report) → (what it does, in a person's words; short label for a
# narrow table column). The mechanism's own name goes second, in brackets.
MECHANISM_WORDS: dict[str, tuple[str, str]] = {
    "bash": ("big outputs summarised", "outputs summarised"),
    "amnesia": ("reads the task no longer needs hidden", "reads hidden"),
    "writes": ("writes and edits kept short", "writes, edits short"),
    "masking": ("old results masked", "old results masked"),
    "skills": ("skills list loaded on demand", "skills on demand"),
    "tools": ("tool specs loaded on demand", "tools on demand"),
    "dedup": ("unchanged re-reads pointed back", "re-reads pointed"),
    "thinking": ("earlier turns' thinking left out", "old thinking out"),
    # replay: history the agent's own compaction dropped from plain's context, which ctxwrap's
    # smaller context, compacting later, still carries (negative) less the summary it lacks
    "compaction": ("history carried past plain's compaction", "compacting later"),
}

# How the mechanisms are called in the code, the docs and `--json`.
MECHANISM_NAMES: dict[str, str] = {
    "bash": "bash digest",
    "amnesia": "read amnesia",
    "writes": "write facts, edit strip",
    "masking": "history masking",
    "skills": "lazy skills",
    "tools": "lazy tools",
    "dedup": "re-read dedup",
    "thinking": "old thinking",
    "compaction": "compaction timing",
}

# The aux model's RETAIN/DROP decisions on reads.
TAGGER_WORDS = "the aux model deciding which reads to hide (tagger)"


def agent_name(agent: str | None) -> str:
    """`claude` → `Claude Code`; an unknown or mixed set of agents → `the agent`."""
    if not agent:
        return "the agent"
    return AGENT_NAMES.get(agent, agent)


def plain_agent(agents: set[str] | frozenset[str] | list[str] | tuple[str, ...]) -> str:
    """How to name the counterfactual: `plain pi`, `plain Claude Code`, or — for figures over
    sessions of several agents — `without ctxwrap`."""
    kinds = {a or "pi" for a in agents}
    if len(kinds) == 1:
        return "plain " + agent_name(next(iter(kinds)))
    return "without ctxwrap"


def mechanism_words(mechanism: str) -> str:
    """`big outputs summarised (bash digest)`: user words first, the mechanism's name second."""
    words = MECHANISM_WORDS.get(mechanism)
    if words is None:
        return mechanism
    return f"{words[0]} ({MECHANISM_NAMES.get(mechanism, mechanism)})"


def mechanism_label(mechanism: str) -> str:
    """The short label for a table column or row: `outputs summarised`."""
    words = MECHANISM_WORDS.get(mechanism)
    return words[1] if words else mechanism


def plural(n: int, one: str, many: str | None = None) -> str:
    """`1 session`, `2 sessions`, `1,204 calls`."""
    word = one if n == 1 else (many if many is not None else one + "s")
    return f"{n:,} {word}"
