"""Every message between the bridge or the CLI and the daemon (HTTP/1.1 + JSON, paths /v1/...).

Requests forbid unknown fields: a bridge and daemon that disagree on the schema should fail
loudly in tests, and PROTOCOL_VERSION makes a stale daemon restart instead of misreading.
docs/protocol.md describes each route; tests/fixtures/frames/ holds golden frames that both
the Python tests and the bridge's node test decode.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ctxwrap import PROTOCOL_VERSION
from ctxwrap.engine.edits import Tail, TailMessage, TailToolCall

MAX_BODY_BYTES = 64 * 1024 * 1024  # a tool_result may carry pi's 50 KB text; 64 MB bounds abuse

AuxTask = Literal["digest", "tag", "fact"]


class Request(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Reply(BaseModel):
    model_config = ConfigDict(extra="ignore")


# -- health ---------------------------------------------------------------------------------


class Health(Reply):
    status: Literal["ok"] = "ok"
    version: str
    protocol: int
    pid: int
    uptime_s: float
    sessions: int
    socket: str
    config_error: str | None = None
    systemd: bool = False
    # Set while state writes fail (disk full, I/O error): the daemon still answers and digests,
    # but stats, facts and raw outputs (recall) are being lost. Says what fails and why.
    degraded: str | None = None


class ErrorReply(Reply):
    error: str
    detail: str | None = None


# -- sessions -------------------------------------------------------------------------------


class ModelRef(BaseModel):
    model_config = ConfigDict(extra="ignore")
    provider: str
    id: str


class ToolSpec(BaseModel):
    model_config = ConfigDict(extra="ignore")
    name: str
    description: str = ""
    parameters: list[str] = Field(default_factory=list)
    chars: int = 0  # size of the full spec as the provider would receive it


class SkillSpec(BaseModel):
    model_config = ConfigDict(extra="ignore")
    name: str
    description: str = ""
    file_path: str
    base_dir: str = ""
    disable_model_invocation: bool = False


class SessionStart(Request):
    session_id: str = Field(min_length=1, max_length=200)
    session_file: str | None = None
    cwd: str
    pid: int
    reason: str = "startup"
    previous_session_file: str | None = None
    pi_version: str | None = None
    pi_package: str | None = None
    model: ModelRef | None = None
    tools: list[ToolSpec] = Field(default_factory=list)
    skills: list[SkillSpec] = Field(default_factory=list)
    active_tools: list[str] = Field(default_factory=list)


class CatalogUpdate(Request):
    """The tools and skills pi knows (skills are only visible at before_agent_start)."""

    session_id: str
    tools: list[ToolSpec] = Field(default_factory=list)
    skills: list[SkillSpec] = Field(default_factory=list)


class SessionTotals(Reply):
    llm_calls: int = 0
    sent_tokens: int = 0
    plain_tokens: int = 0
    saved_tokens: int = 0
    aux_tokens: int = 0
    net_tokens: int = 0


class StatsText(Reply):
    text: str
    totals: SessionTotals | None = None


class TurnEndReply(Reply):
    totals: SessionTotals
    config: dict[str, Any] | None = None  # set once config.toml has been reloaded


class SessionStartReply(Reply):
    config: dict[str, Any]
    totals: SessionTotals


class SessionShutdown(Request):
    session_id: str
    reason: str = "quit"


class ModelSelect(Request):
    session_id: str
    model: ModelRef


class SessionInfo(Reply):
    session_id: str
    session_file: str | None
    cwd: str
    pid: int
    pi_version: str | None
    model: str | None
    started_at: float
    ended_at: float | None
    live: bool


class SessionList(Reply):
    sessions: list[SessionInfo]


# -- prompt (before_agent_start) -------------------------------------------------------------


class PromptStart(Request):
    session_id: str
    prompt: str
    system_prompt_chars: int = 0
    skills_block_chars: int = 0  # what stripping the skills catalog removed (0 if kept)


class Ack(Reply):
    ok: bool = True
    config: dict[str, Any] | None = None  # set once config.toml has been reloaded


# -- aux calls carried by the bridge (aux_backend = "pi") ----------------------------------


class AuxRequest(Reply):
    """A completion the daemon wants run with pi's own provider code."""

    aux_id: str
    task: AuxTask
    system: str
    prompt: str
    max_tokens: int
    timeout_ms: int


class AuxResult(Request):
    session_id: str
    aux_id: str
    text: str | None = None
    error: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    model: str | None = None
    elapsed_ms: float = 0.0


# -- tool results ---------------------------------------------------------------------------


class ToolResult(Request):
    session_id: str
    tool_call_id: str
    tool_name: str
    input: dict[str, Any] = Field(default_factory=dict)
    text: str  # the text content pi produced (images are not sent)
    is_error: bool = False
    full_output_path: str | None = None  # bash: pi's spill file with the complete raw output
    exit_code: int | None = None
    timed_out: bool = False
    # write: the bridge sends at most 64 KB of `input.content` (enough for a fact) and the
    # true size here, so a 50 MB write costs the socket nothing.
    content_bytes: int | None = None
    content_lines: int | None = None


class ToolResultReply(Reply):
    action: Literal["pass", "replace"] = "pass"
    text: str | None = None  # replacement content when action == "replace"
    handle: str | None = None  # raw-output handle for ctx_recall
    aux: AuxRequest | None = None  # bridge: run it, POST /v1/aux/result, use its `text` if given


class AuxResultReply(Reply):
    text: str | None = None  # final replacement text (digest), or a fact for a write
    accepted: bool = False


# -- context (before each LLM call) -----------------------------------------------------------


class SizeBreakdown(BaseModel):
    model_config = ConfigDict(extra="forbid")
    system: int = 0
    messages: int = 0
    tools: int = 0


class SavedBreakdown(BaseModel):
    """Chars a mechanism kept out of this request compared with plain pi."""

    model_config = ConfigDict(extra="forbid")
    bash: int = 0
    amnesia: int = 0
    writes: int = 0
    skills: int = 0
    tools: int = 0


class ContextRequest(Request):
    session_id: str
    call_index: int  # per session, counts LLM calls the bridge has seen
    message_count: int
    head_changed: bool = False  # the first message differs from last call's (compaction, resume)
    tail: Tail


class LlmCall(Request):
    """What one LLM request carried, measured by the bridge after edits (fire-and-forget)."""

    session_id: str
    call_index: int
    message_count: int
    head_changed: bool = False
    sent_chars: SizeBreakdown
    saved_chars: SavedBreakdown


class Edit(BaseModel):
    model_config = ConfigDict(extra="allow")
    kind: Literal["tombstone", "remove", "strip_write"]
    toolCallId: str
    text: str | None = None
    savedChars: int = 0


class ContextReply(Reply):
    edits: list[Edit] = Field(default_factory=list)


# -- turn end: provider-reported usage ------------------------------------------------------


class TurnEnd(Request):
    session_id: str
    turn_index: int
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    model: str | None = None


# -- recall, capabilities, facts ------------------------------------------------------------


class RecallRequest(Request):
    handle: str = Field(min_length=1, max_length=64)
    pattern: str | None = Field(None, max_length=500)
    start_line: int | None = Field(None, ge=1)
    end_line: int | None = Field(None, ge=1)
    context_lines: int = Field(0, ge=0, le=20)
    session_id: str | None = None


class RecallReply(Reply):
    text: str
    total_lines: int
    matched_lines: int
    truncated: bool


class CapabilitySearch(Request):
    session_id: str
    query: str = Field(min_length=1, max_length=2000)


class CapabilityMatchOut(Reply):
    kind: Literal["tool", "skill"]
    name: str
    score: float
    description: str


class CapabilityReply(Reply):
    matches: list[CapabilityMatchOut]
    skill_body: str | None = None
    skill_path: str | None = None
    activate_tool: str | None = None


class Fact(Reply):
    session_id: str
    tool_call_id: str
    path: str
    text: str
    source: Literal["aux", "heuristic"]
    created_at: float


class FactList(Reply):
    facts: list[Fact]


__all__ = [
    "MAX_BODY_BYTES",
    "PROTOCOL_VERSION",
    "Ack",
    "AuxRequest",
    "AuxResult",
    "AuxResultReply",
    "CapabilityMatchOut",
    "CapabilityReply",
    "CapabilitySearch",
    "CatalogUpdate",
    "ContextReply",
    "ContextRequest",
    "Edit",
    "ErrorReply",
    "Fact",
    "FactList",
    "Health",
    "LlmCall",
    "ModelRef",
    "ModelSelect",
    "PromptStart",
    "RecallReply",
    "RecallRequest",
    "SavedBreakdown",
    "SessionInfo",
    "SessionList",
    "SessionShutdown",
    "SessionStart",
    "SessionStartReply",
    "SessionTotals",
    "SizeBreakdown",
    "SkillSpec",
    "StatsText",
    "Tail",
    "TailMessage",
    "TailToolCall",
    "ToolResult",
    "ToolResultReply",
    "ToolSpec",
    "TurnEnd",
    "TurnEndReply",
]
