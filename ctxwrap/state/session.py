"""What the daemon keeps in memory per live agent session.

Everything here can be lost safely (a daemon restart): a lost tag means RETAIN, a lost pending
aux call means the extractive digest or the heuristic fact. What must survive lives in SQLite or
in the agent's own session (the adapter persists the frozen edit set).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from ctxwrap.protocol import AgentProfile, profile_of


def chars_to_tokens(chars: int) -> int:
    """The token estimate pi itself uses: chars/4, rounded up."""
    return (chars + 3) // 4


@dataclass
class PendingAux:
    task: str
    tool_call_id: str
    # what the mechanism needs to finish the job when the answer comes back
    context: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ReadSeen:
    tool_call_id: str
    digest: str  # of the result text


@dataclass
class SessionRuntime:
    session_id: str
    pid: int
    agent: str = "pi"
    # the adapter's traits: what a mechanism reads instead of the agent's name
    profile: AgentProfile = field(default_factory=lambda: profile_of("pi"))
    user_prompt: str = ""
    tags: dict[str, str] = field(default_factory=dict)  # toolCallId → DROP | RETAIN | PENDING
    handles: dict[str, str] = field(default_factory=dict)  # toolCallId → raw-output handle
    sizes: dict[str, int] = field(default_factory=dict)  # toolCallId → result chars
    call_args: dict[str, str] = field(default_factory=dict)  # toolCallId → short "tool args" label
    dropped_sigs: set[str] = field(default_factory=set)
    # needed again (mechanisms/needed_again.py): hidden call signature → its result id, and
    # file → ids of its hidden reads
    hidden_by_sig: dict[str, str] = field(default_factory=dict)
    hidden_reads: dict[str, list[str]] = field(default_factory=dict)
    late_tags: set[str] = field(default_factory=set)  # RETAIN only because the tag came late
    late_drops: set[str] = field(default_factory=set)  # ... and then said DROP: mask candidates
    past_tail: set[str] = field(default_factory=set)  # results the model has seen (tail passed)
    pending: dict[str, PendingAux] = field(default_factory=dict)
    tasks: dict[str, asyncio.Task[None]] = field(default_factory=dict)  # http backend tag tasks
    # http backend: when this tool round's aux budget runs out (monotonic; 0 = no round yet).
    aux_round_deadline: float = 0.0
    # Re-reads (mechanisms/dedup.py): the latest whole result of each read signature, and the
    # results that repeat one (toolCallId → the earlier result they point at).
    reads: dict[str, ReadSeen] = field(default_factory=dict)
    dedups: dict[str, ReadSeen] = field(default_factory=dict)


def call_label(tool: str, args: dict[str, Any]) -> str:
    """`read src/x.py`: what a tombstone or a stored output says the call was."""
    for key in ("path", "file_path", "pattern", "query", "command"):
        if key in args:
            return f"{tool} {str(args[key])[:120]}"
    return tool


def recall_call(profile: AgentProfile, handle: str) -> str:
    """How the model gets at a stored raw output: our tool where the agent has it, else the CLI."""
    if profile.recall_tool:
        return f'ctx_recall(handle="{handle}", pattern=...)'
    return f"the shell command `ctxwrap recall {handle} PATTERN`"
