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
