"""One home per mechanism, called by every agent adapter (pi's bridge, Claude Code's hook/proxy).

The daemon routes protocol requests here; agents never branch inside a mechanism. A tool is
routed by its *kind*, so an agent's own tool names map onto the same mechanism:

- `digest`: bash-like output over the threshold → extractive digest (+ aux) — `digest.py`
- `amnesia`: read-like results tagged RETAIN/DROP out of band → tombstones — `amnesia.py`
- `writes`: large write bodies stripped at the tail, one-line fact — `writes.py`
- `tail_edits.py`: the frozen tail edit decision shared by amnesia and writes
- `lazy.py`: capability catalog and `find_capability`
- `accounting.py`: per-call sizes, provider usage, session totals
- `aux.py`: aux-model plumbing every mechanism shares (pending calls, http backend, cost rows)
"""

from __future__ import annotations

from typing import Literal

ToolKind = Literal["bash", "amnesia", "write"]

# pi's tool names, then Claude Code's.
TOOL_KINDS: dict[str, ToolKind] = {
    "bash": "bash",
    "read": "amnesia",
    "grep": "amnesia",
    "find": "amnesia",
    "ls": "amnesia",
    "find_capability": "amnesia",
    # a lookup tool's answer (Codex: an MCP tool, the web tool), read like a file
    "fetch": "amnesia",
    "write": "write",
    "Bash": "bash",
    "Read": "amnesia",
    "Grep": "amnesia",
    "Glob": "amnesia",
    "Write": "write",
}


def tool_kind(tool_name: str) -> ToolKind | None:
    return TOOL_KINDS.get(tool_name)


# Tools another mechanism takes, any case; ctxwrap's own (a recall's answer is the lines the
# model asked back, never hidden again); and those that answer with the user's own words (Claude
# Code's AskUserQuestion, Codex's request_user_input), which no rule of age may take from the
# model. The pi bridge has the same list (TAKEN_TOOLS).
_TAKEN_TOOLS = frozenset(
    {name.lower() for name in TOOL_KINDS} | {"ctx_recall", "askuserquestion", "request_user_input"}
)


def keeps_result_of(tool_name: str) -> bool:
    """Whether a result of this tool is given to the daemon only to be kept for masking: a tool
    no other mechanism takes (an edit's snippet of the file, a sub-agent's report, a plan, a
    custom or MCP tool that is not a lookup). Stored whole behind a recall handle as a
    command's output is (`Masking.keeps_for_recall` decides by its size), masking may take it
    once it is old. Replayed on the corpus, Claude Code's Edit answers and sub-agent reports
    were most of what masking could not take: 53 masks, none needed again (docs/accounting.md,
    "Every result has a recall path")."""
    return bool(tool_name) and tool_name.lower() not in _TAKEN_TOOLS
