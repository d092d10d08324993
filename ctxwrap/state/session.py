"""What the daemon keeps in memory per live agent session.

Everything here can be lost safely (a daemon restart): a lost tag means RETAIN, a lost pending
aux call means the extractive digest or the heuristic fact. What must survive lives in SQLite or
in the agent's own session (the adapter persists the frozen edit set).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

from ctxwrap import paths
from ctxwrap.protocol import AgentProfile, profile_of

T = TypeVar("T")


def chars_to_tokens(chars: int) -> int:
    """The token estimate pi itself uses: chars/4, rounded up."""
    return (chars + 3) // 4


@dataclass
class PendingAux:
    task: str
    tool_call_id: str
    # what the mechanism needs to finish the job when the answer comes back
    context: dict[str, Any] = field(default_factory=dict)


@dataclass
class SessionRuntime:
    session_id: str
    pid: int
    agent: str = "pi"
    # the adapter's traits: what a mechanism reads instead of the agent's name
    profile: AgentProfile = field(default_factory=lambda: profile_of("pi"))
    user_prompt: str = ""
    handles: dict[str, str] = field(default_factory=dict)  # toolCallId → raw-output handle
    sizes: dict[str, int] = field(default_factory=dict)  # toolCallId → result chars
    call_args: dict[str, str] = field(default_factory=dict)  # toolCallId → short "tool args" label
    # calls whose result ctxwrap hid: a repeat of one is kept whole (invariant 5)
    dropped_sigs: set[str] = field(default_factory=set)
    pending: dict[str, PendingAux] = field(default_factory=dict)  # aux calls in flight
    # http backend: when this tool round's aux budget runs out (monotonic; 0 = no round yet).
    aux_round_deadline: float = 0.0
    # Each mechanism's own per-session state, keyed by its class, which the mechanism defines
    # (amnesia.TagState, dedup.ReadState, needed_again.HiddenState): `rt.part(TagState)`.
    parts: dict[type, Any] = field(default_factory=dict)

    def part(self, kind: type[T]) -> T:
        """This session's state of one mechanism (made empty on first use)."""
        got = self.parts.get(kind)
        if got is None:
            got = self.parts[kind] = kind()
        return cast(T, got)


def call_label(tool: str, args: dict[str, Any]) -> str:
    """`read src/x.py`: what a tombstone or a stored output says the call was. A command
    first: a Codex read names its file too, but the command says which lines it printed."""
    for key in ("command", "path", "file_path", "pattern", "query"):
        if key in args:
            return f"{tool} {str(args[key])[:120]}"
    if isinstance(args.get("tool"), str):  # a lookup (Codex: an MCP or web tool): `TOOL(ARGS`
        name, asked = str(args["tool"]), str(args.get("input", ""))
        at = asked.find(name + "(")
        asked = asked[at + len(name) + 1 :] if at >= 0 else asked
        return " ".join(f"{name}({asked}"[:120].split())
    return tool


def recall_call(profile: AgentProfile, handle: str) -> str:
    """How the model gets at a stored raw output: our tool where the agent has it, else the CLI."""
    if profile.recall_tool:
        return f'ctx_recall(handle="{handle}", pattern=...)'
    program = (paths.ctxwrap_program() or "ctxwrap") if profile.recall_by_path else "ctxwrap"
    return f"the shell command `{program} recall {handle} PATTERN`"
