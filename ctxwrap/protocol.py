"""Every message between the bridge or the CLI and the daemon (HTTP/1.1 + JSON, paths /v1/...).

Requests forbid unknown fields: a bridge and daemon that disagree on the schema should fail
loudly in tests, and PROTOCOL_VERSION makes a stale daemon restart instead of misreading.
docs/protocol.md describes each route; tests/fixtures/frames/ holds golden frames that both
the Python tests and the bridge's node test decode.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ctxwrap import PROTOCOL_VERSION
from ctxwrap.engine.edits import Tail, TailMessage, TailToolCall

MAX_BODY_BYTES = 64 * 1024 * 1024  # a tool_result may carry pi's 50 KB text; 64 MB bounds abuse

AuxTask = Literal["digest", "tag", "fact"]

# Every integer a request carries fits a JavaScript number exactly and an SQLite INTEGER (an
# int of 2**63 or more would raise OverflowError at the insert); floats are finite (NaN in a
# NOT NULL REAL column is an IntegrityError). Out of range → 422, never a 500.
MAX_INT = 2**53 - 1
Int = Annotated[int, Field(ge=-MAX_INT, le=MAX_INT)]
Count = Annotated[int, Field(ge=0, le=MAX_INT)]
Float = Annotated[float, Field(allow_inf_nan=False, ge=-1e15, le=1e15)]
# JSON nested deeper than this is refused before validation (a recursion bomb, not a request).
MAX_JSON_DEPTH = 64


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
    # From pi's model registry, for the cost model (docs/accounting.md); all optional.
    api: str | None = None  # pi's API family: decides explicit vs automatic caching
    cost: dict[str, Float] | None = None  # USD per million: input, output, cacheRead, cacheWrite
    context_window: Int | None = None


class CompactionSettings(BaseModel):
    """pi's compaction settings as pi would resolve them for the session's model."""

    model_config = ConfigDict(extra="ignore")
    enabled: bool = True
    reserve_tokens: Int = Field(16384, ge=0)
    keep_recent_tokens: Int = Field(20000, ge=0)


class ToolSpec(BaseModel):
    model_config = ConfigDict(extra="ignore")
    name: str
    description: str = ""
    parameters: list[str] = Field(default_factory=list)
    chars: Count = 0  # size of the full spec as the provider would receive it


class SkillSpec(BaseModel):
    model_config = ConfigDict(extra="ignore")
    name: str
    description: str = ""
    file_path: str
    base_dir: str = ""
    disable_model_invocation: bool = False


Agent = Literal["pi", "claude", "codex"]


class AgentProfile(BaseModel):
    """What a mechanism may know of the agent that runs a session: traits, never its name.

    An adapter declares its profile at session start (`SessionStart.profile`); one that sends
    none gets its agent's entry of :data:`PROFILES`, the traits of the agents this protocol
    version knows. A fourth agent adds an entry (or sends its own) and no mechanism changes.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    # how the model gets a stored raw output back: a tool of ctxwrap's in the agent (pi's
    # bridge keeps ctx_recall only where pi has no bash: SessionStart.recall_tool), else the
    # `ctxwrap recall` shell command
    recall_tool: bool = False
    # that shell command names this install by its absolute path: the agent's shell may not
    # find `ctxwrap` by name (Codex runs commands in a snapshot of the user's login shell, whose
    # start-up may reset PATH, as Debian's /etc/profile does)
    recall_by_path: bool = False
    # the agent carries ctxwrap's find_capability tool while lazy skills/tools are on (pi)
    capability_tool: bool = False
    # where the agent saves a long bash output and names it: a log in its temp dir named in the
    # result's text and details (pi's spill file), a tool-results file named in the structured
    # response only (Claude Code's), or none
    spill: Literal["temp-log", "tool-results", "none"] = "none"
    # the adapter reports a change of the context's head (a compaction) on every context step,
    # so a pointer to an earlier identical result never outlives that result (re-read dedup)
    reports_head_changes: bool = False
    # the tail decision runs before the request is sent (pi's context hook), so it may wait a
    # moment for the tail's tags; a proxy's request is already on the wire and never waits
    tail_waits_for_tags: bool = False
    # who runs the aux calls the daemon asks for: the agent's own providers, or its upstream
    aux_runner: Literal["pi", "upstream"] = "upstream"
    # the agent shows ctxwrap's status line (Claude Code's statusLine command reads a file)
    status_line: bool = False
    # the agent's compaction is a summarisation request of its own, one of the session's
    # calls, that reads the cached conversation and keeps no recent tail (Claude Code, Codex);
    # else a summary made aside that keeps the recent tail (pi)
    compaction_is_call: bool = False
    # when the agent checks its compaction threshold: after each turn, or only at a prompt
    # (pi 0.73)
    compaction_check: Literal["turn", "prompt"] = "turn"
    # the agent's session file is a tree: a message whose parent is an earlier message starts
    # a branch (pi); else the file's order is the context's order
    session_tree: bool = False
    # the agent asks the API to keep earlier turns' thinking with the provider's own edit
    # (Claude Code 2.1: clear_thinking_20251015, keep "all"), whose keep ctxwrap can raise
    thinking_edit: bool = False
    # the write strip's default (`write = "auto"`): on where, on the agent's real sessions, at
    # most one stripped body in ten is needed again (issue 41's rule); that is no agent today:
    # 42 of 72 under Claude Code, 12 of 23 under pi, 4 of 6 under Codex (docs/accounting.md,
    # the write strip per agent). `write = true` turns it on anyway.
    write_strip: bool = False


PROFILES: dict[str, AgentProfile] = {
    "pi": AgentProfile(
        capability_tool=True,
        spill="temp-log",
        reports_head_changes=True,
        tail_waits_for_tags=True,
        aux_runner="pi",
        session_tree=True,
    ),
    "claude": AgentProfile(
        spill="tool-results", status_line=True, compaction_is_call=True, thinking_edit=True
    ),
    "codex": AgentProfile(compaction_is_call=True, recall_by_path=True),
}
# an agent's major version whose traits differ from its entry above
PROFILES["pi@0"] = PROFILES["pi"].model_copy(update={"compaction_check": "prompt"})


def profile_of(agent: str, version: str | None = None) -> AgentProfile:
    """The profile of an agent that declared none (an unknown one gets the most careful)."""
    major = (version or "").split(".", 1)[0]
    return PROFILES.get(f"{agent}@{major}") or PROFILES.get(agent) or AgentProfile()


class SessionStart(Request):
    session_id: str = Field(min_length=1, max_length=200)
    session_file: str | None = None
    cwd: str
    pid: Count
    reason: str = "startup"
    previous_session_file: str | None = None
    pi_version: str | None = None
    pi_package: str | None = None
    model: ModelRef | None = None
    tools: list[ToolSpec] = Field(default_factory=list)
    skills: list[SkillSpec] = Field(default_factory=list)
    active_tools: list[str] = Field(default_factory=list)
    # Which agent runs the session (stored in sessions.agent; `ctxwrap stats --by agent`).
    # For "claude" / "codex", pi_version / pi_package name the agent's version and npm package.
    agent: Agent = "pi"
    compaction: CompactionSettings | None = None
    # the adapter's traits (AgentProfile); None: its agent's entry of PROFILES
    profile: AgentProfile | None = None
    # how this session's model recalls, where the adapter decides it per session (pi's bridge:
    # ctx_recall, or `ctxwrap recall` through bash); None: as the profile says
    recall_tool: bool | None = None


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
    # cache-priced (docs/accounting.md): input-equivalent tokens, and money where priced
    cost_weighted: float = 0.0
    plain_cost_weighted: float = 0.0
    cost_saved_pct: float | None = None
    cost_usd: float | None = None
    saved_usd: float | None = None
    compactions: int = 0
    plain_compactions: int = 0
    # views: the one headline every view shows (`ctxwrap.headline`), e.g. "cost −60% · $0.12
    # saved" ("" before anything was priced), and its percentage as shown (60 for −60%)
    headline: str = ""
    headline_pct: int | None = None


class StatsText(Reply):
    text: str
    totals: SessionTotals | None = None


class TurnEndReply(Reply):
    totals: SessionTotals
    config: dict[str, Any] | None = None  # set once config.toml has been reloaded


class SessionStartReply(Reply):
    config: dict[str, Any]
    totals: SessionTotals
    # The tagger's latest rounds in earlier sessions (ms, oldest first, at most 3) with the
    # same aux runner: the adapter's tag wait starts from them instead of a blind first wait
    # (agents/_proxy/tag_wait.py, the bridge's TagPace). Empty: none known (an older daemon
    # sends no such field).
    tag_pace_ms: list[Float] = Field(default_factory=list)


class SessionShutdown(Request):
    session_id: str
    reason: str = "quit"
    # Statistics records (llm_call, turn_end) the adapter could not deliver and gave up on.
    undelivered: Count = 0


class ModelSelect(Request):
    session_id: str
    model: ModelRef
    compaction: CompactionSettings | None = None


class Compaction(Request):
    """The agent compacted the session (pi's `session_compact` event, Claude Code's
    PostCompact hook)."""

    session_id: str
    reason: str = "threshold"  # pi: manual | threshold | overflow; Claude Code: manual | auto
    tokens_before: Int = Field(0, ge=0)  # pi's context estimate before compacting
    summary_chars: Int = Field(0, ge=0)
    # what pi's summarisation request carried (tool results cut as pi cuts them); None: unknown
    summarized_chars: Int | None = Field(None, ge=0)
    # not the user's: an extension supplied the summary, or ctxwrap asked pi for the compaction
    # (compact_like_plain); a user's own /compact (reason manual) happens under plain too
    from_extension: bool = False
    # the summarisation request passed the proxy as an ordinary call (Claude Code): it is
    # priced with the calls, so the compaction adds no cost of its own
    priced_as_call: bool = False


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
    system_prompt_chars: Count = 0
    skills_block_chars: Count = 0  # what stripping the skills catalog removed (0 if kept)


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
    input_tokens: Count = 0
    output_tokens: Count = 0
    model: str | None = None
    elapsed_ms: Float = 0.0


# -- tool results ---------------------------------------------------------------------------


class ToolResult(Request):
    session_id: str
    tool_call_id: str
    tool_name: str
    input: dict[str, Any] = Field(default_factory=dict)
    text: str  # the text content pi produced (images are not sent)
    is_error: bool = False
    full_output_path: str | None = None  # bash: details.fullOutputPath, pi's spill file
    # bash: what the daemon needs to tell pi's spill file from a path named in the output:
    # pi's os.tmpdir() and when the tool call started (epoch ms, taken at tool_call).
    pi_tmpdir: str | None = None
    call_started_ms: Float | None = None
    exit_code: Int | None = None
    timed_out: bool = False
    # write: the bridge sends at most 64 KB of `input.content` (enough for a fact) and the
    # true size here, so a 50 MB write costs the socket nothing.
    content_bytes: Int | None = None
    content_lines: Int | None = None


class ToolResultReply(Reply):
    action: Literal["pass", "replace"] = "pass"
    text: str | None = None  # replacement content when action == "replace"
    handle: str | None = None  # raw-output handle for ctx_recall
    aux: AuxRequest | None = None  # bridge: run it, POST /v1/aux/result, use its `text` if given


class TagItem(BaseModel):
    """One read/grep/find/ls/find_capability result of a tool round, for a batched tag."""

    model_config = ConfigDict(extra="forbid")
    tool_call_id: str
    tool_name: str
    input: dict[str, Any] = Field(default_factory=dict)
    text: str

    def as_result(self, session_id: str) -> ToolResult:
        """The same result as `/v1/tool_result` would carry it (what the mechanisms take)."""
        return ToolResult(
            session_id=session_id,
            tool_call_id=self.tool_call_id,
            tool_name=self.tool_name,
            input=self.input,
            text=self.text,
        )


class TagBatch(Request):
    """The taggable results of one assistant message's tool calls: one aux call tags them all."""

    session_id: str
    results: list[TagItem] = Field(max_length=64)


class TagBatchReply(Reply):
    # results kept for recall: tool_call_id → raw-output handle
    handles: dict[str, str] = Field(default_factory=dict)
    aux: AuxRequest | None = None  # bridge: run it, POST /v1/aux/result (answers accepted: false)


class AuxResultReply(Reply):
    text: str | None = None  # final replacement text (digest), or a fact for a write
    accepted: bool = False


# -- context (before each LLM call) -----------------------------------------------------------


class SizeBreakdown(BaseModel):
    model_config = ConfigDict(extra="forbid")
    system: Count = 0
    messages: Count = 0
    tools: Count = 0


class SavedBreakdown(BaseModel):
    """Chars a mechanism kept out of this request compared with plain pi."""

    model_config = ConfigDict(extra="forbid")
    bash: Int = 0
    amnesia: Int = 0
    # history masks: results tombstoned after the model saw them (an older bridge sends none:
    # its masks are in `amnesia`)
    masking: Int = 0
    writes: Int = 0
    skills: Int = 0
    tools: Int = 0
    # earlier turns' thinking the provider's edit left out at ctxwrap's asking (Claude Code)
    thinking: Int = 0


class MaskRequest(Request):
    """Sent with a context request only at a cold cache boundary (or, opt-in, while warm)."""

    reason: Literal["idle", "compaction", "model", "tools", "warm"]
    gap_s: Float | None = None  # seconds since the previous request, when known
    history: Tail  # the whole message list described (start 0), no bodies
    paths: dict[str, str] = Field(default_factory=dict)  # call id → file of read/write/edit
    edited: list[str] = Field(default_factory=list)  # result ids that already have an edit
    calls: Int = 0  # LLM calls of this session so far (expected remaining calls)


class ContextRequest(Request):
    session_id: str
    call_index: Int  # per session, counts LLM calls the bridge has seen
    message_count: Count
    head_changed: bool = False  # the first message differs from last call's (compaction, resume)
    tail: Tail
    mask: MaskRequest | None = None
    # call ids whose call and result the adapter keeps as sent: a later thinking block has them
    # in its prefix on a model that checks it (Claude Fable 5.1, the 5.5 models); no edit
    keep: list[str] = Field(default_factory=list)
    # the conversation of the session this request belongs to, where it has several (a proxy's
    # key of its first message: Claude Code's sub-agents share the session); None: the one
    conversation: str | None = Field(None, max_length=128)


class FailedTry(Request):
    """A proxied try the upstream answered with an error status, or not at all (fire-and-forget):
    counted apart from the LLM calls, priced at nothing."""

    session_id: str
    status: Annotated[int, Field(ge=100, le=599)] | None = None  # None: the connection failed


class LlmCall(Request):
    """What one LLM request carried, measured by the bridge after edits (fire-and-forget)."""

    session_id: str
    call_index: Count
    message_count: Count
    head_changed: bool = False
    sent_chars: SizeBreakdown
    saved_chars: SavedBreakdown
    # For the cost model: chars at the start of this request identical to the previous
    # request's (tools, system, then whole messages), as sent and as plain pi would have
    # sent it. None from an older bridge: the daemon then assumes an append-only list.
    sent_prefix_chars: Int | None = Field(None, ge=0)
    plain_prefix_chars: Int | None = Field(None, ge=0)
    # the call_index of the call both prefixes were measured against, where not the previous
    # call: the previous call of this one's conversation (a proxy; a sub-agent's calls between)
    prefix_of: Int | None = Field(None, ge=0)
    # plain pi's messages as its summariser would see them (tool results cut to 2000 chars)
    plain_summary_chars: Int | None = Field(None, ge=0)
    prompt_index: Int | None = Field(None, ge=0)  # user prompts so far in this process
    model: str | None = None  # provider/id the request goes to
    # the prompt-cache lifetime the request asked for where it is longer than the default
    # (Claude Code's 1-hour cache, seconds); None = the daemon's cache_ttl_s
    cache_ttl_s: float | None = Field(None, gt=0, le=86_400)
    # the sender's id of this record: one sent again (its answer was lost with a killed
    # daemon) is recorded once; None = not deduplicated
    record_id: str | None = Field(None, min_length=1, max_length=128)


class Edit(BaseModel):
    model_config = ConfigDict(extra="allow")
    kind: Literal["tombstone", "remove", "strip_write", "strip_edit", "mask"]
    toolCallId: str
    text: str | None = None
    savedChars: Int = 0
    # a mask also carries `reason`, an edit strip `minChars` (kept by extra="allow")


class ContextReply(Reply):
    edits: list[Edit] = Field(default_factory=list)


# -- turn end: provider-reported usage ------------------------------------------------------


class TurnEnd(Request):
    session_id: str
    turn_index: Count
    input_tokens: Count = 0
    output_tokens: Count = 0
    cache_read_tokens: Count = 0
    cache_write_tokens: Count = 0
    model: str | None = None
    record_id: str | None = Field(None, min_length=1, max_length=128)  # as LlmCall's
    # the llm_call (its call_index) this usage is of, so the cost model prices that request on
    # the cache entry the provider says it read; None: a side request, or an older adapter
    call_index: Int | None = Field(None, ge=0)


# -- recall, capabilities, facts ------------------------------------------------------------


class RecallRequest(Request):
    handle: str = Field(min_length=1, max_length=64)
    pattern: str | None = Field(None, max_length=500)
    start_line: Int | None = Field(None, ge=1)
    end_line: Int | None = Field(None, ge=1)
    context_lines: Count = Field(0, ge=0, le=20)
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
    # False: the daemon has no catalog for this session yet (it never arrived, or the daemon
    # restarted); the bridge sends it and asks again, and never reports "nothing matched".
    catalog_ready: bool = True


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
    "Compaction",
    "CompactionSettings",
    "ContextReply",
    "ContextRequest",
    "Edit",
    "ErrorReply",
    "Fact",
    "FactList",
    "FailedTry",
    "Health",
    "LlmCall",
    "MaskRequest",
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
    "TagBatch",
    "TagBatchReply",
    "TagItem",
    "Tail",
    "TailMessage",
    "TailToolCall",
    "ToolResult",
    "ToolResultReply",
    "ToolSpec",
    "TurnEnd",
    "TurnEndReply",
]
