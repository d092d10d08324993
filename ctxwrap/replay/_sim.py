"""The counterfactual: what ctxwrap would have kept out of each request of a recorded session.

Events from one session file (`_read.py`) are folded into the context the agent sent on each
LLM call: one call per provider response. Each message in context carries its plain size and,
per mechanism, how much ctxwrap would have kept out of it; running totals make a call O(1).

Mechanisms, as replay models them (no model call):

- bash: a result over `bash_min_tokens` → the real extractive digest of the text the agent
  received, with the daemon's header line (a placeholder recall handle of the same length);
- writes: a write body of at least `write_min_bytes` → the strip marker, plus the heuristic
  fact message ctxwrap would have added (counted against);
- masking: the daemon's own policy (`engine/masking.plan_masks` over the history described as
  the adapters describe it, `mechanisms/masking.tombstone_text`): at a cold boundary (an idle
  gap past the cache TTL, a compaction) and, with `mask_warm`, on a warm request when
  `warm_rewrite_pays` over the calls so far; only results with a recall path (read-like
  results, digested bash), no tagger (no late drops);
- skills: the skills block of pi 1.x's recorded system prompt;
- tools: ctxwrap's own tool specs, which plain pi never sends (pi only; counted against);
- tagger bound (not in the totals): every read/grep/find/ls result the tagger could drop,
  as a tombstone: an upper bound, since a real tagger retains what the task needs.

"Needed again" (DESIGN.md invariant 8): every digest, strip and mask keeps the lines it hid;
a later Edit old_string / Write body / apply_patch line that, at that moment, exists only in
hidden lines marks the intervention that showed it `copied` (`_copied_from`; so does the
model's own text quoting 40 chars or more of one hidden result: `_quoted`), a later read of
the same file that returns the hidden lines, most of them in no message still in view,
`reread`, a ctx_recall or `ctxwrap recall` `recalled` (a lower bound: the agent's reasoning is
not seen).

The aux model's tokens are estimated from the real prompt builders (tags, facts, and digests
whose extract is long enough to be condensed) and counted against the mechanism.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import posixpath
import re
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import astuple, dataclass, field
from typing import Any

from ctxwrap.aux import prompts
from ctxwrap.engine.bashout import BashText, scrub_temp_paths, split_bash_text
from ctxwrap.engine.cost import DEFAULT_SUMMARY_TOKENS, SUMMARY_PROMPT_TOKENS
from ctxwrap.engine.edits import (
    EDIT_STRIP_MARKER,
    EDIT_TOOLS,
    TailMessage,
    TailToolCall,
    args_sig,
    edit_old_texts,
    u16len,
)
from ctxwrap.engine.facts import heuristic_fact, line_count
from ctxwrap.engine.masking import (
    UNCACHED_MIN_CALLS,
    CacheEntries,
    rewrite_cost_tokens,
    suffix_tokens,
    suffix_tokens_estimate,
    write_weight,
)
from ctxwrap.engine.rereads import result_digest
from ctxwrap.engine.shellcmd import shell_read
from ctxwrap.engine.tagview import tag_view
from ctxwrap.engine.thinking import accepts_context_editing, checks_thinking_prefix
from ctxwrap.mechanisms import keeps_result_of
from ctxwrap.mechanisms.budget import Savings
from ctxwrap.mechanisms.chain import Mechanisms, default_mechanisms
from ctxwrap.mechanisms.digest import digest_header, digest_status
from ctxwrap.mechanisms.needed_again import REREAD_OVERLAP, asks_again, distinctive_lines
from ctxwrap.mechanisms.thinking import ClearingState, clearing_choice, rewrite_start
from ctxwrap.protocol import AgentProfile, profile_of
from ctxwrap.replay._calibrate import Calibration
from ctxwrap.replay._events import (
    ClearedResults,
    Compaction,
    Event,
    Header,
    Message,
    SystemPrompt,
    ToolCall,
)
from ctxwrap.state.session import call_label, chars_to_tokens, recall_call

Tagger = Callable[
    [str, dict[str, Any], str, str], Any
]  # (tool, args, result, request) → TagOutcome

# "compaction": what ctxwrap's later compaction changes (`Thresholds.compaction_timing`):
# negative while it carries history the agent's own compaction dropped from plain's context.
MECHANISMS = ("bash", "amnesia", "writes", "masking", "compaction", "skills", "tools", "thinking")
# read-like: tagged, stored behind a recall handle (a "fetch" is a lookup tool's answer: Codex's
# MCP and web tools)
META_TOOLS = frozenset({"read", "grep", "find", "ls", "glob", "fetch"})
# Name + description + JSON parameters of ctx_recall and find_capability as the bridge
# registers them (pi): what each adds to every request that carries it. Measured from
# `ctxwrap stats` (saved_tools per call); the agreement test against a real `ctxwrap pi` run
# fails if they drift.
RECALL_TOOL_CHARS = 691
CAPABILITY_TOOL_CHARS = 315
PLACEHOLDER_HANDLE = "r00000000"
# Output tokens an aux answer typically takes (caps: tag 24, fact 60, digest 1024).
AUX_OUTPUT_ESTIMATE = {"tag": 8, "fact": 30, "digest": 200}
# A request's own rate (tokens per character it added) is measured when it added at least this
TAIL_RATE_MIN_CHARS = 2000


def own_tools_chars(profile: AgentProfile, th: Thresholds, skills_stripped: bool) -> int:
    """What ctxwrap's own tools add to each request of a session of this agent: find_capability
    only where the skills strip took something to find (the pi bridge's rule)."""
    finds = profile.capability_tool and th.lazy_tools and th.lazy_skills and skills_stripped
    return (RECALL_TOOL_CHARS if profile.recall_tool else 0) + (
        CAPABILITY_TOOL_CHARS if finds else 0
    )


def tokens(chars: int) -> int:
    sign = -1 if chars < 0 else 1
    return sign * ((abs(chars) + 3) // 4)


@dataclass(frozen=True)
class Thresholds:
    bash_min_tokens: int = 500
    bash_max_summary_tokens: int = 1024
    bash_aux_min_chars: int = 2000
    amnesia_min_tokens: int = 250
    amnesia_max_chars: int = 6000
    write_min_bytes: int = 400
    write_max_content_chars: int = 6000
    lazy_skills: bool = True
    lazy_tools: bool = True  # `lazy`: pi's find_capability, where skills left the prompt
    ttl_s: float = 300.0
    dedup: bool = True
    mask: bool = True
    mask_warm: bool = True
    mask_keep_rounds: int = 2
    mask_min_chars: int = 500
    mask_stale_reads: bool = False
    mask_older_rounds: int = 1
    mask_read_idle_rounds: int = 10
    mask_reference_reads: int = 5
    mask_earlier_tasks: bool = False
    mask_kinds: str = "recall"  # recall: what has a recall path (read-like, digested bash); all
    # a warm rewrite judged from the latest cache entry left before its first change, and free
    # on a provider that does not cache (engine/masking.CacheEntries); False: from the first
    # changed message, as before (replay only, a study)
    cache_entries: bool = True
    write: bool | str = "auto"  # true, false, or the agent's default (AgentProfile.write_strip)
    bash: bool = True
    # An automatic compaction happens when the context crosses the agent's threshold: under
    # ctxwrap the context is smaller, so it comes later (or never). True: model that (ctxwrap
    # compacts once its context reaches what plain's was there); False: both sides compact
    # where the agent did. A manual compaction (Claude Code records the trigger) is where it was.
    compaction_timing: bool = True
    # pi: when the agent's own compaction would have run (plain's context crossed its
    # threshold) but ctxwrap's context is under it, the bridge asks pi to compact when the run
    # ends (before the next prompt), so the agent compacts about when it would without ctxwrap.
    compact_like_plain: bool = True
    # True (replay only, a study): ctxwrap's side compacts at the very request where plain's
    # did, on every agent. Under Claude Code a proxy could get that only by refusing the
    # request as too long (its reactive compaction, which keeps the last turn): not built.
    compact_with_plain: bool = False
    # Claude Code and Codex: the proxy reports plain's size in the usage of the response at
    # which plain would have compacted, and the agent compacts there (agents/_proxy/
    # in_step.py): at the request where plain did, as `compact_with_plain` models it
    compact_in_step: bool = True
    # > 0 (replay only, a study): strip a write body not in the round after the write but once
    # its file has been untouched this many rounds, at a masking pass (cold, or warm when the
    # rewrite pays back): what the agent edits right after writing it stays in view
    write_idle_rounds: int = 0
    # (replay only, a study) where plain compacts and ctxwrap's smaller context does not yet,
    # tombstone what ctxwrap carries of what plain dropped: "recall", the results with a
    # recall path (read-like, digested bash); "all", every tool result; "" (default): nothing.
    # Not built: it delays the agent's own compaction (docs/accounting.md, compaction timing)
    mask_at_plain_compaction: str = ""
    edit_strip: bool = True
    edit_min_chars: int = 300
    # Claude Code 2.1: earlier turns' thinking left out by the provider's edit where the
    # payback rule says (mechanisms/thinking.py)
    clear_old_thinking: bool = True
    # the tagger spends only what the session is ahead of plain by (mechanisms/budget.py
    # `aux_within`; `_run.gate_tags` applies it to the priced calls)
    tag_within_savings: bool = True
    # a warm rewrite (masking, old thinking) only within the savings so far or as a bounded
    # bet (mechanisms/budget.py `rewrite_within`; the priced calls so far are the account)
    rewrite_within_savings: bool = True
    tag_max_tokens: int = 24
    tag_view_chars: int = 1500

    @classmethod
    def from_settings(cls, s: Any) -> Thresholds:
        return cls(
            bash_min_tokens=s.bash_min_tokens,
            bash_max_summary_tokens=s.bash_max_summary_tokens,
            bash_aux_min_chars=s.bash_aux_min_chars,
            amnesia_min_tokens=s.amnesia_min_tokens,
            amnesia_max_chars=s.amnesia_max_chars,
            write_min_bytes=s.write_min_bytes,
            write_max_content_chars=s.write_max_content_chars,
            lazy_skills=s.lazy_skills and s.lazy,
            lazy_tools=s.lazy,
            dedup=s.dedup,
            ttl_s=s.cache_ttl_s,
            mask=s.mask,
            mask_warm=s.mask_warm,
            mask_keep_rounds=s.mask_keep_rounds,
            mask_min_chars=s.mask_min_chars,
            mask_stale_reads=s.mask_stale_reads,
            mask_older_rounds=s.mask_older_rounds,
            mask_read_idle_rounds=s.mask_read_idle_rounds,
            mask_reference_reads=s.mask_reference_reads,
            mask_earlier_tasks=s.mask_earlier_tasks,
            write=s.write,
            edit_strip=s.edit_strip,
            edit_min_chars=s.edit_min_chars,
            bash=s.bash,
            compact_like_plain=s.compact_like_plain,
            compact_in_step=s.compact_in_step,
            clear_old_thinking=s.clear_old_thinking,
            tag_within_savings=s.tag_within_savings,
            rewrite_within_savings=s.rewrite_within_savings,
            tag_max_tokens=s.tag_max_tokens,
            tag_view_chars=s.tag_view_chars,
        )


@dataclass
class Intervention:
    kind: str  # digest | strip | strip_edit | mask | pointer | tombstone-bound
    call_index: int  # first call that would not carry it
    tool: str
    label: str
    original_chars: int
    replacement_chars: int
    reason: str = ""
    handle: str | None = None
    needed_again: str | None = None  # copied | reread | recalled
    needed_at: int | None = None  # the call that needed it
    path: str | None = None

    @property
    def saved_chars(self) -> int:
        return self.original_chars - self.replacement_chars


@dataclass
class CallFigures:
    index: int
    ts: float
    system_chars: int
    tools_chars: int
    messages_chars: int  # plain
    saved: dict[str, int]  # chars kept out, per mechanism
    tagger_bound_chars: int
    output_tokens: int
    compaction: bool = False  # plain's context was compacted before this call
    masked: bool = False  # a masking pass rewrote history before this call
    idle_gap_s: float = 0.0
    rewrite_from: int | None = None  # the first call whose new messages the masking changed
    # the first call whose new messages hold thinking the provider's edit newly left out
    thinking_rewrite_from: int | None = None
    # ctxwrap's context was compacted before this call: with the plain's, or later (its own,
    # `Thresholds.compaction_timing`)
    ours_compaction: bool = False
    # What the provider recorded of the cache for this request (None: not recorded): tokens
    # read from it, and the end of the entry the request wrote (explicit caching: read +
    # written), so a later request's read shows which entry it hit (`_run.recorded_hits`).
    cache_read_recorded: int | None = None
    cache_entry_recorded: int | None = None
    # The provider's own counts of this request's input, where the transcript records them:
    # (uncached, cache read, cache write of either TTL, of which 1-hour writes). Plain's side is
    # priced from these (docs/accounting.md, "Plain from the record").
    usage: tuple[int, int, int, int] | None = None
    # tokens ctxwrap keeps out of this request's messages, at the session's rate; negative
    # while it carries history plain's compaction dropped (at that history's density)
    kept_out_tokens: float = 0.0
    rate: float = 0.25  # the session's tokens per character (replay/_calibrate.py)
    carried_tokens: int = 0  # of history plain's compaction dropped, ctxwrap still carries
    # An unrecorded request's estimate grows from the last recorded one since plain's last
    # compaction: (its counted input, its messages' chars). None: no such request.
    estimate_from: tuple[int, int] | None = None
    # the request's input tokens on each side, as priced (`_run.price_session`)
    tokens_plain: int = 0
    tokens_sent: int = 0

    @property
    def recorded_tokens(self) -> int | None:
        """What the provider counted as this request's input (None: not recorded)."""
        return None if self.usage is None else self.usage[0] + self.usage[1] + self.usage[2]

    @property
    def plain_chars(self) -> int:
        return self.system_chars + self.tools_chars + self.messages_chars

    @property
    def saved_chars(self) -> int:
        return sum(self.saved.values())

    @property
    def sent_chars(self) -> int:
        return self.plain_chars - self.saved_chars


@dataclass
class _Item:
    entry_id: str
    role: str
    chars: int
    saved: dict[str, int]
    task: int
    tool: str | None = None
    label: str = ""
    read_key: str | None = None
    masked: bool = False
    is_error: bool = False
    pinned: bool = False  # a later pointer refers to it: never masked (its signature is hidden)
    kept_for_recall: bool = False  # a command's output stored whole for masking's recall
    call_id: str | None = None
    request_key: str | None = None
    seg: int = 0  # the call that first carried it
    desc: TailMessage | None = None  # as the adapters describe it to the daemon
    lines: list[str] = field(default_factory=list)  # visible lines (needed-again bookkeeping)
    hid: list[int] = field(default_factory=list)  # interventions that hid part of it
    # tokens per character of what this item holds: set by the request that first carries it
    # (`SessionSimulator._rate_tail`); None until then
    rate: float | None = None


@dataclass
class SessionReplay:
    path: str
    fmt: str
    session_id: str
    cwd: str | None = None
    started_at: float | None = None
    model: str | None = None
    system_estimated: bool = False
    calls: list[CallFigures] = field(default_factory=list)
    interventions: list[Intervention] = field(default_factory=list)
    aux: dict[str, dict[str, int]] = field(default_factory=dict)  # mechanism → calls/in/out
    # each aux call: (the index of the request it precedes, mechanism, task, input tokens,
    # output tokens), so `_run.gate_tags` can leave out the tags the budget would not allow
    aux_events: list[tuple[int, str, str, int, int]] = field(default_factory=list)
    compactions: int = 0
    cache_ttl_s: float | None = None  # 3600 where the recorded usage shows 1-hour cache writes
    # calls whose recorded usage splits cached from fresh input, and of those the calls that
    # read or wrote the cache: a provider that never did (`uncached`) bills all input fresh
    usage_split_calls: int = 0
    usage_cached_calls: int = 0

    @property
    def uncached(self) -> bool:
        """The recorded usage shows a provider without prompt caching: many calls, none of
        them with a cache read or write (a prefix that grows is read from cache by every
        provider that caches)."""
        return self.usage_split_calls >= UNCACHED_MIN_CALLS and self.usage_cached_calls == 0

    # each real compaction: (plain, ctxwrap) tokens of the last request before it — where
    # ctxwrap's is well under the agent's threshold, the agent would have compacted later
    # under ctxwrap (not modelled: both sides compact where the agent did)
    compaction_points: list[tuple[int, int]] = field(default_factory=list)
    compactions_deferred: int = 0  # of `compactions`: not yet under ctxwrap (smaller context)
    compactions_own: int = 0  # ctxwrap's own, later compactions
    # each compaction's summarisation request: (the call it precedes, "plain" | "ctxwrap",
    # fresh input tokens, output tokens, input tokens read from the cache) — priced with the
    # call it precedes (replay/_run.py)
    summarisations: list[tuple[int, str, int, int, int]] = field(default_factory=list)
    agent_version: str | None = None  # the agent's version as the transcript records it
    aux_real: bool = False  # --tag: the amnesia aux figures are the backend's, not estimates
    # tokens per character of what ctxwrap keeps out (replay/_calibrate.py): fitted on the
    # session's own usage ("fitted") or its provider family's ("family")
    rate: float = 0.25
    rate_source: str = "family"
    rate_pairs: int = 0
    # the fixed prefix (system prompt, tools, the agent's first attachments) in tokens: the
    # first recorded request less its messages (None until a call records usage)
    head_tokens: int | None = None

    def to_tokens(self, chars: float) -> int:
        """Characters of tool output → tokens at the session's own rate."""
        return round(chars * self.rate)

    def plain_tokens(self, c: CallFigures) -> float:
        """Plain's request: as the provider counted it, else estimated at the session's rate
        (the fixed prefix as the first recorded request showed it, where one did)."""
        if c.recorded_tokens is not None:
            return c.recorded_tokens
        if c.estimate_from is not None and c.messages_chars >= c.estimate_from[1]:
            # what the provider counted last, plus what came since at the session's rate: the
            # whole context at the rate can come out below the last count (encrypted reasoning,
            # images), and a request smaller than the one before reads as a compaction
            tokens, chars = c.estimate_from
            return tokens + self.rate * (c.messages_chars - chars)
        if self.head_tokens is None:
            return self.rate * c.plain_chars
        return self.head_tokens + self.rate * c.messages_chars

    @property
    def recorded_calls(self) -> int:
        return sum(1 for c in self.calls if c.usage is not None)

    def add_aux(self, mechanism: str, task: str, prompt_chars: int) -> None:
        a = self.aux.setdefault(mechanism, {"calls": 0, "input_tokens": 0, "output_tokens": 0})
        a["calls"] += 1
        a["input_tokens"] += tokens(prompt_chars)
        a["output_tokens"] += AUX_OUTPUT_ESTIMATE[task]
        self.aux_events.append(
            (len(self.calls), mechanism, task, tokens(prompt_chars), AUX_OUTPUT_ESTIMATE[task])
        )


def _digest_text(
    text: str,
    command: str,
    max_chars: int,
    keeps: Callable[[int, int], bool],
    profile: AgentProfile,
) -> tuple[str | None, str]:
    """The daemon's replacement for a bash result (mechanisms/digest.py's shape; None where
    the daemon keeps the original: a digest not clearly smaller), and the bare extract."""
    from ctxwrap.digest import StreamingDigester

    # pi's truncation note and status line are at the end: parse only the tail (the pattern
    # search over a whole 50 KB output costs more than the digest of it)
    cut = max(0, len(text) - 2000)
    parsed = split_bash_text(text[cut:])
    if cut:
        parsed = BashText(text[:cut] + parsed.body, *astuple(parsed)[1:])
    exit_code = parsed.exit_code if parsed.exit_code is not None else 0
    digester = StreamingDigester(command=command, exit_code=exit_code, max_chars=max_chars)
    with contextlib.suppress(Exception):
        digester.feed(parsed.body)
    digest = digester.finish()
    status = digest_status(parsed.timed_out, parsed.aborted, exit_code)
    # the daemon's own header (mechanisms/digest.py), with the agent's recall form
    header = digest_header(
        command=command,
        status=status,
        lines=digest.original_lines,
        chars=digest.original_chars,
        handle=PLACEHOLDER_HANDLE,
        recall=recall_call(profile, PLACEHOLDER_HANDLE),
    )
    extract = scrub_temp_paths(digest.text)
    out = header + "\n" + extract
    if status.startswith("exit code") and exit_code != 0:
        out += f"\n\nCommand exited with code {exit_code}"
    return (out if keeps(len(out), len(text)) else None), extract


def _tombstone(label: str, chars: int) -> str:
    # daemon/service.py `_tombstone`, without a recall handle (replay stores nothing)
    return f"[ctxwrap: {label} ({chars:,} chars) was judged not needed for the current task and hidden]"


def _strip_marker(path: str, size: int, lines: int) -> str:
    # daemon/service.py `_strip_marker`
    return (
        f"[content stripped by ctxwrap: {size:,} bytes, {lines:,} lines "
        f"of {path}; the file on disk is complete]"
    )


def replacement_fact(path: str, content: str) -> str:
    """The heuristic fact ctxwrap adds for a stripped write."""
    size = len(content.encode("utf-8", "replace"))
    return heuristic_fact(path, content[:20000], total_bytes=size, total_lines=line_count(content))


def _strip_text(c: ToolCall) -> tuple[str, str, int, int]:
    """A write call's strip: its path, its content, the replacement's size (marker + fact) and
    what the strip keeps out (chars)."""
    path = str(c.args.get("path", c.args.get("file_path", "?")))
    content = str(c.args.get("content", ""))
    size = len(content.encode("utf-8", "replace"))
    marker = _strip_marker(path, size, line_count(content))
    replacement = _json_str_len(marker) + len(replacement_fact(path, content))
    return path, content, replacement, _json_str_len(content) - replacement


def _json_str_len(text: str) -> int:
    import json

    return len(json.dumps(text, ensure_ascii=False)) - 2


# pi compacts on its own at its model's context window less a reserve (16,384 tokens by
# default); it records no trigger. Below this share of the window it was the user's /compact.
AUTO_COMPACTION_SHARE = 0.85
SUMMARY_RESULT_MAX_CHARS = 2000


def _automatic(ev: Compaction, model: str | None) -> bool:
    """Whether a compaction was the agent's own (context size), not the user's request."""
    if ev.trigger is not None:
        return ev.trigger == "auto"
    if ev.tokens_before is None:
        return True  # nothing recorded (Codex): taken as the agent's own
    window = 272_000 if (model or "").startswith("gpt-") else 200_000
    return ev.tokens_before >= AUTO_COMPACTION_SHARE * window


def _version(text: str | None) -> tuple[int, ...]:
    """ "2.1.197" → (2, 1, 197); anything else → ()."""
    parts: list[int] = []
    for piece in (text or "").split("."):
        digits = "".join(itertools.takewhile(str.isdigit, piece))
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


_label = call_label  # what the daemon's stored output and tombstones say the call was


_OLD_KEYS = frozenset({"old_string", "oldText", "old_str", "old"})
_NEW_KEYS = frozenset({"new_string", "newText", "new_str", "new"})
_EDIT_NAMES = frozenset(t.lower() for t in EDIT_TOOLS)  # replay lower-cases tool names
_PATH_NAMES = {"read": "read", "write": "write", "edit": "edit", "multiedit": "MultiEdit"}
_lines = distinctive_lines
_MESSAGE_SAVINGS = ("bash", "amnesia", "writes", "masking", "compaction")


def _strings(value: Any, keys: frozenset[str] | None = None, key: str = "") -> Iterable[str]:
    if isinstance(value, str):
        if keys is None or key in keys:
            yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _strings(v, keys, str(k))
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v, keys, key)


# distinct hidden lines a write's body must repeat to count as copied from them
WRITE_COPY_MIN_LINES = 2
# chars of one hidden result's lines the model's own text must repeat to count as copied
PROSE_COPY_MIN_CHARS = 40


def _patch_old_lines(text: str) -> list[str]:
    """The removed and context lines of a patch's hunks: what the file held."""
    return _lines(
        "\n".join(ln[1:] for ln in text.splitlines() if ln[:1] in ("-", " ") and ln[:3] != "---")
    )


def _copied_lines(call: ToolCall) -> list[str]:
    """Lines a call takes from what the agent saw: an edit's old text, a write's body, the
    removed and context lines of a patch (whole, or one file's hunks: `_read_codex`'s split)."""
    if call.name == "write":
        content = call.args.get("content")
        return _lines(content) if isinstance(content, str) else []
    if call.name == "apply_patch" or (
        call.name in ("shell", "bash") and "apply_patch" in str(call.args)[:200]
    ):
        return [ln for text in _strings(call.args) for ln in _patch_old_lines(text)]
    hunks = call.args.get("patch")
    if call.name == "edit" and isinstance(hunks, str):
        return _patch_old_lines(hunks)
    return [ln for text in _strings(call.args, _OLD_KEYS) for ln in _lines(text)]


def _same_file(a: str, b: str) -> bool:
    """Whether two paths the agent wrote name one file: as written, or one relative to the
    directory the other is absolute in (`src/a.py` and `/repo/src/a.py`)."""
    a, b = posixpath.normpath(a.replace("\\", "/")), posixpath.normpath(b.replace("\\", "/"))
    if a == b:
        return True
    if posixpath.isabs(a) == posixpath.isabs(b):
        return False
    rel, full = (a, b) if posixpath.isabs(b) else (b, a)
    return full.endswith("/" + rel)


def _call_path(call: ToolCall) -> str | None:
    return _call_path_of(call.args)


def _call_path_of(args: dict[str, Any]) -> str | None:
    path = args.get("path", args.get("file_path"))
    return path if isinstance(path, str) and path else None


def _describe_call(call: ToolCall) -> TailToolCall:
    name = _PATH_NAMES.get(call.name, call.name)
    return TailToolCall(
        id=call.call_id,
        name=name,
        argsSig=args_sig(call.name, call.args),
        argsChars=max(call.chars - len(call.name), 0),
    )


class SessionSimulator:
    """Fold one session's events; `finish()` returns its SessionReplay."""

    def __init__(
        self,
        path: str,
        th: Thresholds,
        tagger: Tagger | None = None,
        calibration: Calibration | None = None,
        mechanisms: Mechanisms | None = None,
    ) -> None:
        self.th = th
        # the daemon's own mechanism objects: every decision below that a mechanism makes
        # live is taken by the same object here (mechanisms/chain.py)
        self.mech = mechanisms or default_mechanisms()
        self.tagger = tagger
        # The session's account as the daemon keeps it (mechanisms/budget.py): (plain's cost,
        # ctxwrap's) of the requests so far, priced (`_run.Account`); None: no account,
        # a warm rewrite is judged by its payback alone
        self.account: Callable[[SessionReplay], tuple[float, float]] | None = None
        self._savings_at: tuple[int, Savings] | None = None
        self.r = SessionReplay(path=path, fmt="?", session_id=path)
        self.profile = profile_of("?")  # the adapter's traits, once the header names the agent
        if calibration is not None:
            self.r.rate = calibration.rate
            self.r.rate_source = calibration.source
            self.r.rate_pairs = calibration.pairs
        self.items: list[_Item] = []
        self.index: dict[str, int] = {}
        self.msg_chars = 0
        self.saved = dict.fromkeys(MECHANISMS, 0)
        self.bound = 0
        self.bound_by_id: dict[str, int] = {}
        self.calls: dict[str, tuple[ToolCall, int]] = {}  # call id → (call, its message task)
        # calls and results a later thinking block has in its prefix (what the adapters send
        # the daemon as `keep` on a model that checks it), and those none follows yet
        self.thinking_bound: set[str] = set()
        self.thinking_unbound: set[str] = set()
        # on such a model, the writes of the response being read: a later entry of it (Claude
        # Code records each block as one) may still bring a thinking block that binds them
        self.response_writes: list[tuple[str, ToolCall]] = []
        self.task = 0
        self.user_prompt = ""
        self.system = SystemPrompt(0.0, 0, 0, 0)
        self.have_system = False
        self.last_response_ts: float | None = None
        self.last_message_ts: float | None = None
        self.last_request: str | None = None
        self.pending_compaction = False
        # the last recorded request since plain's last compaction (`CallFigures.estimate_from`)
        self.estimate_from: tuple[int, int] | None = None
        self.pending_mask = False
        self.latest_read: dict[str, int] = {}  # read key → position of its newest result
        # Re-reads (mechanisms/dedup.py): read signature → (entry id, digest) of the latest
        # whole result, forgotten at a head change; signatures already answered by a pointer.
        self.read_seen: dict[str, tuple[str, str]] = {}
        self.pointed: set[str] = set()
        # Masking as the daemon decides it (engine/masking.py).
        self.paths: dict[str, str] = {}  # call id → file of read/write/edit
        self.shell_reads: set[str] = set()  # ids of `bash` calls that read (`cat f`)
        self.hidden_sigs: set[str] = set()
        self.tail_start = 0  # items from here on are the unseen tail of the next call
        self.round_item: int | None = None  # the item holding this request's calls
        # Needed again: lines visible now, and which interventions hid which lines.
        self.vis: Counter[str] = Counter()
        self.hidden_lines: dict[int, list[str]] = {}
        self.hidden_by_line: dict[str, set[int]] = {}
        self.hidden_paths: dict[str, set[int]] = {}
        self.pending_rereads: dict[str, tuple[int, list[int]]] = {}  # read call → (at, hidden)
        # where the provider's cache holds the conversation as ctxwrap sends it, as the daemon
        # keeps it (engine/masking.CacheEntries): fed each earlier call's recorded usage
        self.cache = CacheEntries()
        self.cache_fed = 0
        # write_idle_rounds: writes not stripped yet (item entry id, call), the last call that
        # named each path
        self.pending_writes: list[tuple[str, ToolCall]] = []
        self.last_touch: dict[str, int] = {}
        self.call_item: dict[str, str] = {}
        # Compaction timing: the context size (estimated chars of the whole request) at which
        # the agent compacted, while ctxwrap's deferred compaction is still to come.
        # In tokens: what plain's context was when the agent compacted (its recorded
        # `preTokens`, else the last request's recorded input, else an estimate).
        self.deferred_at: float | None = None
        self.pending_own_compaction = False  # this call is cold for ctxwrap only
        self.carried = 0  # chars of history ctxwrap carries that plain's compaction dropped
        self.carried_tokens = 0  # the same in tokens, at the density of the context it was in
        self.carried_summarised = 0  # tokens of it ctxwrap's own summarisation will read
        self.last_summary_tokens = DEFAULT_SUMMARY_TOKENS
        self.deferred_now = False  # plain compacted before the next call, ctxwrap did not
        # Old thinking (mechanisms/thinking.py), per context: each turn's estimated thinking
        # tokens and the call whose new messages first held it; the clearing point; the
        # response being read (its visible chars, whether it thought, its turn)
        self.turn_thinking: dict[int, float] = {}
        self.turn_entry: dict[int, int] = {}
        self.clearing = ClearingState()  # its view_* count calls here, not messages
        self.thinking_out = 0.0  # tokens of it the edit leaves out of the next request
        self.resp_visible = 0
        self.resp_thought = False
        self.resp_turn = 0
        self.call_cached = False  # the latest request's usage shows a cache read or write
        self.request_calls: dict[str, int] = {}  # request key → its call's index
        # tokens kept out per mechanism, each item at its own rate; the unrated tail's
        # characters wait for the request that first carries them
        self.saved_tok: dict[str, float] = dict.fromkeys(MECHANISMS, 0.0)
        self.unrated: list[_Item] = []
        self.cleared_since_call = False  # the agent replaced results since the last request

    # -- context bookkeeping --------------------------------------------------------------

    def _add(self, item: _Item) -> None:
        item.seg = len(self.r.calls)
        self.index[item.entry_id] = len(self.items)
        self.items.append(item)
        self.msg_chars += item.chars
        for k, v in item.saved.items():
            self.saved[k] += v
        self.unrated.append(item)
        self.vis.update(item.lines)

    def _credit(self, it: _Item, mech: str, chars: int) -> None:
        """`chars` more of `it` kept out by `mech` (negative: less)."""
        it.saved[mech] = it.saved.get(mech, 0) + chars
        self.saved[mech] += chars
        if it.rate is not None:
            self.saved_tok[mech] += chars * it.rate

    def _uncredit_all(self, it: _Item) -> None:
        """`it` leaves the context: what it kept out is gone from the totals."""
        for k, v in it.saved.items():
            self.saved[k] -= v
            if it.rate is not None:
                self.saved_tok[k] -= v * it.rate
        if it.rate is None:  # gone before a request carried it: never to be rated
            self.unrated = [u for u in self.unrated if u is not it]

    def _rate_tail(self, m: Message) -> None:
        """The request `m` first carries the unrated tail: its rate is the growth the
        provider counted over the characters added, where both requests record usage and
        nothing else changed the context — never above the session's rate, so that content
        the agent cut before sending (an output it truncated) is not counted as kept out
        whole (docs/accounting.md, "Plain from the record")."""
        rate = self.r.rate
        prev = self.r.calls[-1] if self.r.calls else None
        if (
            prev is not None
            and prev.usage is not None
            and m.usage_prompt_tokens is not None
            and not self.pending_compaction
            and not self.cleared_since_call
        ):
            added = self.msg_chars - prev.messages_chars
            grown = m.usage_prompt_tokens - sum(prev.usage[:3])
            if added >= TAIL_RATE_MIN_CHARS and grown >= 0:
                rate = min(rate, grown / added)
        for it in self.unrated:
            it.rate = rate
            for k, v in it.saved.items():
                self.saved_tok[k] += v * rate
        self.unrated = []
        self.cleared_since_call = False

    def _forget(self, it: _Item) -> None:
        """An item leaves the context (compaction, branch): what it hid is gone on both sides."""
        self.vis.subtract(it.lines)
        for idx in it.hid:
            self._unhide(idx)

    def _hide(self, idx: int, lines: list[str], path: str | None = None) -> None:
        self.hidden_lines[idx] = lines
        for line in lines:
            self.hidden_by_line.setdefault(line, set()).add(idx)
        if path:
            self.hidden_paths.setdefault(path, set()).add(idx)
            self.r.interventions[idx].path = path

    def _unhide(self, idx: int) -> None:
        for line in self.hidden_lines.pop(idx, ()):
            ids = self.hidden_by_line.get(line)
            if ids is not None:
                ids.discard(idx)
                if not ids:
                    del self.hidden_by_line[line]
        path = self.r.interventions[idx].path
        if path and path in self.hidden_paths:
            self.hidden_paths[path].discard(idx)

    def _needed(self, calls: list[ToolCall], at: int) -> None:
        """Mark what this request's calls needed of what ctxwrap hid (before their own lines
        become visible)."""
        for c in calls:
            copied: dict[int, set[str]] = {}
            target = _call_path(c)
            for line in _copied_lines(c):
                if self.vis.get(line, 0) > 0:
                    continue
                for idx in self._copied_from(line, c.name, target):
                    copied.setdefault(idx, set()).add(line)
            if c.name in _EDIT_NAMES:
                # new text writing back what left the file with a stripped edit: a revert
                for line in (ln for t in _strings(c.args, _NEW_KEYS) for ln in _lines(t)):
                    if self.vis.get(line, 0) > 0:
                        continue
                    for idx in self.hidden_by_line.get(line, ()):
                        if self.r.interventions[idx].kind == "strip_edit":
                            copied.setdefault(idx, set()).add(line)
            for idx, lines in copied.items():
                # an edit's old text must match the file: one line is evidence; a new file's
                # body may share one common line by chance (an import, `return result;`)
                if c.name != "write" or len(lines) >= WRITE_COPY_MIN_LINES:
                    self._mark(idx, "copied", at)
            path = _call_path(c)
            is_read = c.name == "read"
            if c.name == "bash":  # `cat f` through the shell reads f too
                is_read, path = shell_read(str(c.args.get("command", "")))
            if is_read and path and self.hidden_paths.get(path):
                # judged when its result arrives: did it return what was hidden?
                self.pending_rereads[c.call_id] = (at, list(self.hidden_paths[path]))
            if c.name == "ctx_recall" or (
                c.name == "bash" and "ctxwrap recall" in str(c.args.get("command", ""))
            ):
                for idx in self.hidden_lines:  # which one is not known here: all handles
                    if self.r.interventions[idx].handle and str(
                        self.r.interventions[idx].handle
                    ) in str(c.args):
                        self._mark(idx, "recalled", at)

    def _quoted(self, text: str, at: int) -> None:
        """Mark what the model's own text quotes of what ctxwrap hid: lines of one hidden result,
        in no visible message, of at least PROSE_COPY_MIN_CHARS together (one line such as
        `return false;` is the idiom of any file, not evidence). An answer written from a
        masked read or a digest's dropped lines needed them as much as an edit does."""
        quoted: dict[int, set[str]] = {}
        for line in _lines(text):
            if self.vis.get(line, 0) > 0:
                continue
            ids = self.hidden_by_line.get(line, ())
            if len(ids) == 1:  # a line several results hold is no one result's
                for idx in ids:
                    quoted.setdefault(idx, set()).add(line)
        for idx, lines in quoted.items():
            if sum(len(line) for line in lines) >= PROSE_COPY_MIN_CHARS:
                self._mark(idx, "copied", at)

    def _asks_for_hidden(self, hidden: list[str], new: list[str]) -> bool:
        """Whether a re-read asked for what ctxwrap hid: it returned the hidden result
        (`asks_again`), and most of the hidden lines it brought back were nowhere else in the
        context (as a copy counts only lines no visible message holds). A re-read of a file
        whose hidden read another, later read of the same lines still shows did not need the
        hidden one: plain had it twice and read it again."""
        if not asks_again(hidden, new):
            return False
        if not hidden or not new:
            return True
        back = set(new).intersection(hidden)
        missing = sum(1 for line in back if self.vis.get(line, 0) <= 0)
        return missing >= REREAD_OVERLAP * len(back)

    def _copied_from(self, line: str, tool: str, target: str | None) -> Iterable[int]:
        """The hidden results a line a call takes (`_copied_lines`) counts as copied from.
        Several can hold one line; the line is evidence for the one that showed the file the
        call works on. Otherwise an edit's old text is its own file's, so it came from a
        command's output (a grep, a diff), never another file's read or write; and a new
        body sharing a line with several results shares the project's idiom (`if (error) {`,
        `type="submit"`), not one result's text."""
        ids = self.hidden_by_line.get(line, ())
        if len(ids) <= 1 and (tool == "write" or target is None):
            return ids
        paths = {idx: self.r.interventions[idx].path for idx in ids}
        if target is not None:
            same = [idx for idx, p in paths.items() if p is not None and _same_file(p, target)]
            if same:
                return same
        if tool == "write":
            return ids if len(ids) == 1 else ()
        return [idx for idx, p in paths.items() if p is None] if target is not None else ids

    def _mark(self, idx: int, how: str, at: int) -> None:
        iv = self.r.interventions[idx]
        if iv.needed_again is None:
            iv.needed_again, iv.needed_at = how, at

    def _reset(self, keep_from: int) -> None:
        self._reset_thinking()
        dropped, self.items = self.items[:keep_from], self.items[keep_from:]
        self.tail_start = max(0, self.tail_start - keep_from)
        self.round_item = None
        for it in dropped:
            self._forget(it)
            self.msg_chars -= it.chars
            self._uncredit_all(it)
            self.bound -= self.bound_by_id.pop(it.entry_id, 0)
        self.index = {it.entry_id: i for i, it in enumerate(self.items)}
        self.latest_read = {
            it.read_key: i for i, it in enumerate(self.items) if it.read_key is not None
        }

    def _branch(self, parent: str | None) -> None:
        """pi sessions are trees: a message whose parent is an earlier message starts a branch."""
        if (
            not self.profile.session_tree
            or parent is None
            or not self.items
            or self.items[-1].entry_id == parent
        ):
            # Claude Code chains parallel tool results to their own tool_use entry, not to the
            # previous entry, and forks into new files: its file order is the context order.
            return
        pos = self.index.get(parent)
        if pos is None:
            return
        tail = self.items[pos + 1 :]
        self.items = self.items[: pos + 1]
        self.tail_start = min(self.tail_start, len(self.items))
        self.round_item = None
        for it in tail:
            self._forget(it)
            self.msg_chars -= it.chars
            self._uncredit_all(it)
            self.bound -= self.bound_by_id.pop(it.entry_id, 0)
            self.index.pop(it.entry_id, None)
        self.latest_read = {
            it.read_key: i for i, it in enumerate(self.items) if it.read_key is not None
        }
        self.pending_compaction = True  # the head of the cached prefix changed
        self.read_seen.clear()

    # -- events ---------------------------------------------------------------------------

    def feed(self, events: Iterable[Event]) -> None:
        for ev in events:
            if self.response_writes and not (
                isinstance(ev, Message)
                and ev.role == "assistant"
                and ev.request_key == self.last_request
            ):
                self._settle_response_writes()  # the response is whole
            if isinstance(ev, Message):
                self._message(ev)
            elif isinstance(ev, SystemPrompt):
                self.system = ev
                self.have_system = True
            elif isinstance(ev, Compaction):
                self._compaction(ev)
            elif isinstance(ev, ClearedResults):
                self._cleared(ev)
            elif isinstance(ev, Header):
                self.r.fmt = ev.fmt
                self.profile = profile_of(ev.fmt)
                self.r.session_id = ev.session_id
                self.r.cwd = ev.cwd
                self.r.started_at = ev.ts
                self.r.agent_version = ev.version

    def _compaction(self, ev: Compaction) -> None:
        last = self.r.calls[-1] if self.r.calls else None
        if last is not None:
            self.r.compaction_points.append(
                (round(self._plain_tokens(last)), round(self._ours_tokens(last)))
            )
        keep = (
            self.index.get(ev.first_kept_id, len(self.items))
            if ev.first_kept_id
            else len(self.items)
        )
        carried = 0
        summarised = self._summarised(self.items[:keep])
        if ev.summary_chars:
            self.last_summary_tokens = tokens(ev.summary_chars)
        warm = self.last_response_ts is None or ev.ts - self.last_response_ts <= self.ttl_s
        self._summarisation(
            "plain", summarised, round(self._plain_tokens(last)) if last is not None else 0, warm
        )
        defer = (
            self.th.compaction_timing
            and _automatic(ev, self.r.model)
            and last is not None
            and last.sent_chars < last.plain_chars
            and not self.th.compact_with_plain
            # the proxies' agents (their compaction is a call of their own) compact in step
            and not (self.th.compact_in_step and self.profile.compaction_is_call)
        )
        if defer:
            assert last is not None
            # ctxwrap's context is under the size that triggered this compaction: the agent
            # would not compact yet. ctxwrap keeps what plain drops (as it was sent) and has no
            # summary; earlier carried history stays carried.
            carried = sum(
                it.chars - sum(it.saved.get(m, 0) for m in _MESSAGE_SAVINGS)
                for it in self.items[:keep]
            ) - self._tombstone_carried(self.items[:keep])
            # plain's threshold: the size the agent recorded when it compacted, else its last
            # request's; what ctxwrap carries is at that context's density
            # (a recorded preTokens stands beside recorded usage; with none, both estimated)
            self.deferred_at = (
                ev.tokens_before
                if ev.tokens_before and last.usage is not None
                else self._plain_tokens(last)
            )
            msgs = max(last.messages_chars, 1)
            head = self.r.head_tokens or 0
            density = min(max((self._plain_tokens(last) - head) / msgs, self.r.rate), 1.0)
            self.carried_tokens += round(carried * density)
            self.carried_summarised += summarised
            self.r.compactions_deferred += 1
            self.deferred_now = True
        elif self.carried:
            # ctxwrap, still carrying history, compacts with plain now
            self._own_compaction(summarised, round(self._ours_tokens(last)) if last else 0, warm)
        else:
            self._summarisation(
                "ctxwrap", summarised, round(self._ours_tokens(last)) if last else 0, warm
            )
        self._reset(keep)
        self.r.compactions += 1
        self.pending_compaction = True
        self.read_seen.clear()  # as the daemon: a head change forgets what was read
        if ev.summary_chars:
            self._add(
                _Item(
                    f"compaction-{self.r.compactions}",
                    "custom",
                    ev.summary_chars,
                    {"compaction": ev.summary_chars} if defer else {},
                    self.task,
                    desc=TailMessage(role="custom"),
                )
            )
        if defer:
            self.saved["compaction"] -= carried
            self.carried += carried

    def _tombstone_carried(self, items: list[_Item]) -> int:
        """`mask_at_plain_compaction` (a study): what tombstoning the results ctxwrap carries
        past plain's compaction keeps out (chars). The next request rewrites its whole context
        (its messages shrink: a new cache epoch)."""
        kinds = self.th.mask_at_plain_compaction
        if not kinds:
            return 0
        out = 0
        for it in items:
            if it.role != "tool_result" or it.masked or it.chars < self.th.mask_min_chars:
                continue
            if kinds == "recall" and not self._recallable(it):
                continue
            left = it.chars - sum(it.saved.get(m, 0) for m in _MESSAGE_SAVINGS)
            out += max(0, left - len(_tombstone(it.label, it.chars)))
        return out

    def _recallable(self, it: _Item) -> bool:
        """What the daemon can give back behind a recall handle: read-like results the
        adapter tags, digested bash output, and what masking keeps for recall
        (`Masking.keeps_for_recall`): bash output too short to digest, a result of a tool no
        other mechanism takes (`mechanisms.keeps_result_of`)."""
        if it.kept_for_recall:
            return True
        if it.tool == "bash":
            return it.saved.get("bash", 0) > 0
        return it.tool in META_TOOLS and tokens(it.chars) >= self.th.amnesia_min_tokens

    def _summarised(self, items: list[_Item]) -> int:
        """Tokens a compaction's summarisation request reads of these items: pi's serializer
        cuts each tool result to 2,000 chars (compaction/utils TOOL_RESULT_MAX_CHARS)."""
        cut = SUMMARY_RESULT_MAX_CHARS if not self.profile.compaction_is_call else None
        return tokens(
            sum(
                min(it.chars, cut) if cut is not None and it.role == "tool_result" else it.chars
                for it in items
            )
        )

    @property
    def summarise_cached(self) -> bool:
        """The agent sends its summarisation on the conversation's own prefix, which it reads
        from the cache (seen on Claude Code 2.1.197 and Codex 0.171; earlier versions are
        priced as pi's, all fresh: not verified)."""
        floor = {"claude": (2, 1, 197), "codex": (0, 171, 0)}.get(self.r.fmt)
        return floor is not None and _version(self.r.agent_version) >= floor

    def _summarisation(self, side: str, summarised: int, context: int, warm: bool) -> None:
        """One compaction's summarisation request: `summarised` tokens of messages (what pi
        sends, all fresh), or — where the agent sends it on its prefix while the cache is
        warm — the side's whole `context` read from the cache, the instruction fresh."""
        if self.summarise_cached and warm and context > 0:
            fresh, read = SUMMARY_PROMPT_TOKENS, context
        else:
            fresh, read = summarised + SUMMARY_PROMPT_TOKENS, 0
        self.r.summarisations.append(
            (len(self.r.calls), side, fresh, self.last_summary_tokens, read)
        )

    def _own_compaction(
        self, summarised: int | None = None, context: int = 0, warm: bool = False
    ) -> None:
        """ctxwrap's context reached the size at which the agent compacted: it compacts now.
        What it carried is gone; from here on it is modelled as plain's context is (summary
        and what followed), less the other mechanisms' savings — an upper bound of its size,
        since a compaction this late would keep less."""
        if summarised is None:
            summarised = self._summarised(self.items)  # what followed plain's compaction
        self._summarisation("ctxwrap", self.carried_summarised + summarised, context, warm)
        self.carried_summarised = 0
        self.saved["compaction"] += self.carried
        for it in self.items:
            v = it.saved.pop("compaction", 0)
            self.saved["compaction"] -= v
            if it.rate is not None:
                self.saved_tok["compaction"] -= v * it.rate
        self.carried = 0
        self.carried_tokens = 0
        self.deferred_at = None
        self.pending_own_compaction = True
        self.r.compactions_own += 1

    def _cleared(self, ev: ClearedResults) -> None:
        """The agent replaced results itself (Claude Code's microcompact or its per-message
        budget, pi's context_edit): both sides carry the agent's replacement from here on; what
        ctxwrap kept out of them is gone. A head change only where a call carried the result
        already (Claude Code replaces over-budget results before their first request)."""
        size = dict(zip(ev.tool_call_ids, ev.sizes, strict=False)) if ev.sizes else {}
        ids, entries = set(ev.tool_call_ids), set(ev.entry_ids)
        sent = False
        for it in self.items:
            if it.role == "tool_result" and it.call_id in ids:
                chars = size.get(it.call_id or "", ev.replacement_chars)
            elif it.entry_id in entries:
                chars = ev.replacement_chars
            else:
                continue
            sent = sent or it.seg < len(self.r.calls)
            self._forget(it)
            it.lines, it.hid = [], []
            self._uncredit_all(it)
            it.saved = {}
            self.cleared_since_call = True
            self.msg_chars -= it.chars - chars
            it.chars = chars
            it.masked = True  # never masked again (it has the agent's own edit)
            if it.desc is not None:
                it.desc = it.desc.model_copy(update={"chars": chars})
        if sent:
            self.pending_compaction = True

    @property
    def ttl_s(self) -> float:
        return self.r.cache_ttl_s or self.th.ttl_s

    def _message(self, m: Message) -> None:
        if m.role != "assistant" or m.request_key != self.last_request:
            self._branch(m.parent_id)
        if m.role == "assistant":
            if m.usage_cache_write_1h_tokens:
                self.r.cache_ttl_s = 3600.0
            # a response whose blocks were written apart, another response's between them
            # (parallel sub-agents of one id): one request, billed once
            again = m.request_key in self.request_calls and m.request_key != self.last_request
            if (
                m.usage_cache_read_tokens is not None
                and m.request_key != self.last_request
                and not again
            ):
                self.r.usage_split_calls += 1
                if m.usage_cache_read_tokens or m.usage_cache_write_tokens:
                    self.r.usage_cached_calls += 1
            if again:
                later = _usage_of(m)
                if later is not None and m.request_key is not None:
                    self.r.calls[self.request_calls[m.request_key]].usage = later
            elif m.request_key != self.last_request:
                self._call(m)
                self.last_request = m.request_key
                if m.request_key is not None:
                    self.request_calls[m.request_key] = len(self.r.calls) - 1
                self.call_cached = bool(m.usage_cache_read_tokens or m.usage_cache_write_tokens)
            else:
                self._later_usage(m)
            self.resp_visible += max(0, m.chars - m.thinking_chars)
            self.resp_thought = self.resp_thought or m.thinking
            self._add(self._assistant_item(m))
            if m.thinking:
                self.thinking_bound |= self.thinking_unbound | set(m.calls_before_thinking)
                self.thinking_unbound = set()
                self.response_writes = []  # bound: their bodies stay as sent
            self.thinking_unbound |= {c.call_id for c in m.calls} - set(m.calls_before_thinking)
            self.last_response_ts = m.ts
        elif m.role == "tool_result":
            if m.tool_call_id:
                self.thinking_unbound.add(m.tool_call_id)
            self._add(self._result_item(m))
        else:
            if m.role == "user":
                if (
                    self.deferred_at is not None
                    and self.th.compact_like_plain
                    and not self.profile.compaction_is_call  # pi's bridge asks pi to compact
                ):
                    self._own_compaction()
                self.task += 1
                self.user_prompt = m.text  # the aux prompts quote it (≤ 2000 chars)
            self._add(
                _Item(m.entry_id, m.role, m.chars, {}, self.task, desc=TailMessage(role=m.role))
            )
        self.last_message_ts = m.ts

    def _later_usage(self, m: Message) -> None:
        """A later entry of the request just made: Claude Code writes each block of a response
        with the usage as it had streamed so far, so the last entry holds the request's final
        output tokens (the first, a thinking or text block, a few) and — where a proxy's stream
        began with a placeholder — its cache split. The request takes the latest counts."""
        if m.usage_cache_read_tokens is None or not self.r.calls:
            return
        c = self.r.calls[-1]
        c.output_tokens = max(c.output_tokens, m.output_tokens)
        read, write = m.usage_cache_read_tokens, m.usage_cache_write_tokens or 0
        c.cache_read_recorded = read
        c.cache_entry_recorded = read + write if write else None
        if (read or write) and not self.call_cached:
            self.r.usage_cached_calls += 1
            self.call_cached = True
        if m.usage_cache_write_1h_tokens:
            self.r.cache_ttl_s = 3600.0
        later = _usage_of(m)
        if later is not None:
            c.usage = later  # the request's final counts
        if len(self.r.calls) == 1 and self.r.system_estimated and m.usage_prompt_tokens:
            # the system prompt and tools were estimated from this request's first counts
            est = max(0, m.usage_prompt_tokens * 4 - c.messages_chars)
            self.system = SystemPrompt(self.system.ts, est, 0, 0)
            c.system_chars = est

    def _assistant_item(self, m: Message) -> _Item:
        self._needed(m.calls, len(self.r.calls) - 1)
        self._quoted(m.text, len(self.r.calls) - 1)
        saved: dict[str, int] = {}
        label = ""
        visible: list[str] = []
        strips: list[int] = []
        for c in m.calls:
            self.calls[c.call_id] = (c, self.task)
            self.call_item[c.call_id] = m.entry_id
            path = _call_path(c)
            if c.name == "bash":
                # a file's content read through the shell is a read for masking (its file)
                reads, path = shell_read(str(c.args.get("command", "")))
                if reads:
                    self.shell_reads.add(c.call_id)
                if path and c.call_id not in self.paths:
                    self.paths[c.call_id] = path
            if path and c.name in _PATH_NAMES and c.call_id not in self.paths:
                self.paths[c.call_id] = path
            if path:  # named in the response to the latest call
                self.last_touch[path] = len(self.r.calls) - 1
            content = c.args.get("content")
            if (
                c.name != "write"
                or not isinstance(content, str)
                or not self.mech.writes.enabled(self.th)
                or (c.call_id in m.calls_before_thinking and self._thinking_checked())
            ):
                visible += [ln for text in _strings(c.args) for ln in _lines(text)]
                continue
            size = len(content.encode("utf-8", "replace"))
            if not self.mech.writes.strips(self.th, size, self.profile):
                visible += _lines(content)
                continue
            if self._thinking_checked():
                # the proxy decides on the whole response: wait for its last entry
                visible += _lines(content)
                self.response_writes.append((m.entry_id, c))
                continue
            if self.th.write_idle_rounds > 0:
                visible += _lines(content)
                self.pending_writes.append((m.entry_id, c))
                continue
            path, gain = self._strip(c, len(self.r.calls))
            saved["writes"] = saved.get("writes", 0) + gain
            label = f"write {path}"
            strips.append(len(self.r.interventions) - 1)
            self._hide(strips[-1], _lines(content), path)
        visible += _lines(m.text)  # what the model wrote itself stays in its view
        item = _Item(
            m.entry_id,
            "assistant",
            m.chars,
            saved,
            self.task,
            label=label,
            request_key=m.request_key,
            lines=visible,
            hid=strips,
        )
        described = [_describe_call(c) for c in m.calls]
        holder = self.items[self.round_item] if self.round_item is not None else None
        if holder is not None and holder.request_key == m.request_key and holder.desc:
            # Claude Code records one response as one entry per block: one message on the wire
            holder.desc = holder.desc.model_copy(
                update={"toolCalls": [*(holder.desc.toolCalls or []), *described] or None}
            )
            item.desc = TailMessage(role="assistant", hasText=True)
        else:
            item.desc = TailMessage(role="assistant", toolCalls=described or None, hasText=True)
            self.round_item = len(self.items)
        return item

    def _result_item(self, m: Message) -> _Item:
        call, _task = self.calls.get(m.tool_call_id or "", (None, self.task))
        tool = m.tool_name or (call.name if call else "")
        args = call.args if call else {}
        label = _label(tool, args)
        item = _Item(
            m.entry_id,
            "tool_result",
            m.chars,
            {},
            self.task,
            tool,
            label,
            is_error=m.is_error,
            call_id=m.tool_call_id,
        )
        replacement: str | None = None
        extract = command = ""
        digest = self.mech.digest
        if (
            tool == "bash"
            and digest.enabled(self.th)
            and digest.wants(self.th, m.text, str(args.get("command", "")))
        ):
            command = str(args.get("command", ""))
            replacement, extract = _digest_text(
                m.text, command, digest.max_chars(self.th), digest.keeps, self.profile
            )
        if tool == "bash" and replacement is None:
            item.kept_for_recall = self.mech.masking.keeps_for_recall(
                self.th, m.chars, is_error=m.is_error
            )
        elif tool not in META_TOOLS and keeps_result_of(tool):
            # a tool no other mechanism takes: its text stored as the adapters give it (an
            # image is no text to recall)
            item.kept_for_recall = self.mech.masking.keeps_for_recall(
                self.th, len(m.text), is_error=m.is_error
            )
        if replacement is not None:
            item.saved["bash"] = m.chars - len(replacement)
            self.r.interventions.append(
                Intervention(
                    "digest",
                    len(self.r.calls),
                    "bash",
                    label,
                    m.chars,
                    len(replacement),
                    handle=PLACEHOLDER_HANDLE,
                )
            )
            item.lines = _lines(replacement)
            kept = set(item.lines)
            item.hid.append(len(self.r.interventions) - 1)
            self._hide(item.hid[-1], [ln for ln in _lines(m.text) if ln not in kept])
            if digest.wants_aux(self.th, extract):
                p = prompts.digest_prompt(
                    command=command, exit_code=None, user_prompt=self.user_prompt, extract=extract
                )
                self.r.add_aux("bash", "digest", len(prompts.DIGEST_SYSTEM) + len(p))
        elif tool in META_TOOLS and not m.is_error:
            if tool == "read":
                key = str(args.get("path", args.get("file_path", "")))
                if args.get("offset") is None and args.get("limit") is None and key:
                    item.read_key = key
            if self._reread(item, m, args, label):
                pass  # a pointer to the earlier identical result: no tag
            elif self.mech.amnesia.wants(self.th, m.chars) and self.tagger is not None:
                self._tag_for_real(item, m, tool, args, label)
            elif self.mech.amnesia.wants(self.th, m.chars):
                tomb = _tombstone(label, m.chars)
                bound = m.chars - len(tomb)
                self.bound += bound
                self.bound_by_id[m.entry_id] = bound
                self.r.interventions.append(
                    Intervention(
                        "tombstone-bound",
                        len(self.r.calls),
                        tool,
                        label,
                        m.chars,
                        len(tomb),
                        "the tagger could drop it (upper bound)",
                    )
                )
                # what the daemon shows the tagger (`amnesia._view`), so the estimate is its cost
                shown = tag_view(m.text, min(self.th.tag_view_chars, self.th.amnesia_max_chars))
                p = prompts.tag_prompt(
                    tool=tool,
                    args=args,
                    result=shown,
                    user_prompt=self.user_prompt,
                    max_chars=self.th.amnesia_max_chars,
                )
                self.r.add_aux("amnesia", "tag", len(prompts.TAG_SYSTEM) + len(p))
        if (
            self.mech.edits.enabled(self.th)
            and call is not None
            and tool in _EDIT_NAMES
            and not m.is_error
        ):
            self._edit_strip(call)
        if item.read_key is not None:
            self.latest_read[item.read_key] = len(self.items)
        pending = self.pending_rereads.pop(m.tool_call_id or "", None)
        if pending is not None and not m.is_error:
            new = _lines(m.text)
            for idx in pending[1]:
                hidden = self.hidden_lines.get(idx)
                if hidden is not None and self._asks_for_hidden(hidden, new):
                    self._mark(idx, "reread", pending[0])
        if not item.lines and not item.saved.get("amnesia"):
            item.lines = _lines(m.text)
        item.desc = TailMessage(
            role="toolResult",
            toolCallId=m.tool_call_id or None,
            toolName=tool,
            chars=max(m.chars - item.saved.get("bash", 0), 0),
            isError=m.is_error,
        )
        return item

    def _edit_strip(self, call: ToolCall) -> None:
        """An applied edit's replaced text leaves its call from the next request on, as
        `engine.edits.decide_edits` decides it (the result is in the same tail): the lines it
        hid are the old text's lines the new text does not repeat (what left the file)."""
        if call.call_id in self.thinking_bound and self._thinking_checked():
            return  # a thinking block after it in the same response has it in its prefix
        least = self.mech.edits.floor(self.th)
        olds = [t for t in edit_old_texts(call.args) if u16len(t) >= least]
        pos = self.index.get(self.call_item.get(call.call_id, ""))
        if not olds or pos is None:
            return
        holder = self.items[pos]
        marker = _json_str_len(EDIT_STRIP_MARKER)
        original = sum(_json_str_len(t) for t in olds)
        gain = original - marker * len(olds)
        self._credit(holder, "writes", gain)
        path = _call_path(call)
        self.r.interventions.append(
            Intervention(
                "strip_edit",
                len(self.r.calls),
                call.name,
                f"edit {path or '?'}",
                original,
                marker * len(olds),
            )
        )
        idx = len(self.r.interventions) - 1
        kept = {ln for t in _strings(call.args, _NEW_KEYS) for ln in _lines(t)}
        gone = {ln for t in olds for ln in _lines(t)} - kept
        removed = [ln for ln in holder.lines if ln in gone]
        holder.lines = [ln for ln in holder.lines if ln not in gone]
        self.vis.subtract(removed)
        holder.hid.append(idx)
        # a later read returns these lines only where the file got them back (a revert)
        self._hide(idx, sorted(gone), path if gone else None)

    def _reread(self, item: _Item, m: Message, args: dict[str, Any], label: str) -> bool:
        """An unchanged re-read becomes a pointer, as mechanisms/dedup.py decides it (pi only,
        results the bridge sends: at least amnesia_min_tokens; the earlier result still whole)."""
        if not self.mech.rereads.applies(
            self.th, self.profile, m.tool_name or "", m.is_error
        ) or not self.mech.amnesia.wants(self.th, m.chars):  # the bridge sends no smaller
            return False
        sig = args_sig("read", args)
        digest = result_digest(m.text)
        earlier = self.read_seen.get(sig)
        if earlier is not None and earlier[1] == digest and sig not in self.pointed:
            pos = self.index.get(earlier[0])
            if (
                pos is not None
                and not self.items[pos].saved.get("amnesia")
                and not (self.items[pos].saved.get("masking"))
            ):
                text = self.mech.rereads.pointer(label, m.chars)
                item.saved["amnesia"] = m.chars - len(text)
                self.pointed.add(sig)
                self.hidden_sigs.add(sig)
                self.items[pos].pinned = True
                self.r.interventions.append(
                    Intervention(
                        "pointer",
                        len(self.r.calls),
                        "read",
                        label,
                        m.chars,
                        len(text),
                        "the same content as an earlier read",
                    )
                )
                return True
        self.read_seen[sig] = (m.entry_id, digest)
        return False

    def _tag_for_real(
        self, item: _Item, m: Message, tool: str, args: dict[str, Any], label: str
    ) -> None:
        """--tag: the aux model decides; a DROP tombstones the result before the model sees it."""
        assert self.tagger is not None
        out = self.tagger(tool, args, m.text, self.user_prompt)
        a = self.r.aux.setdefault("amnesia", {"calls": 0, "input_tokens": 0, "output_tokens": 0})
        a["calls"] += 1
        a["input_tokens"] += out.input_tokens
        a["output_tokens"] += out.output_tokens
        self.r.aux_real = True
        if out.decision != "DROP":
            return
        tomb = _tombstone(label, m.chars)
        item.saved["amnesia"] = m.chars - len(tomb)
        self.r.interventions.append(
            Intervention(
                "tombstone", len(self.r.calls), tool, label, m.chars, len(tomb), "tagged DROP"
            )
        )
        item.hid.append(len(self.r.interventions) - 1)
        self._hide(item.hid[-1], _lines(m.text), _call_path_of(args) if tool == "read" else None)

    def _savings(self, call_index: int) -> Savings | None:
        """The account at this request, as the daemon's totals after the requests before it
        would give it, less what this request's decisions have charged (None: no account kept,
        or `rewrite_within_savings` off)."""
        if self.account is None or not self.th.rewrite_within_savings:
            return None
        if self._savings_at is None or self._savings_at[0] != call_index:
            plain, ours = self.account(self.r)
            self._savings_at = (call_index, Savings(ahead=plain - ours, plain=plain))
        return self._savings_at[1]

    def _thinking_checked(self) -> bool:
        """The session's model checks its thinking blocks' prefix (Claude Fable 5.1, the 5.5
        models): nothing a later thinking block has in its prefix is edited."""
        return checks_thinking_prefix(self.r.model)

    def _mask(self, call_index: int, cold: bool) -> int | None:
        """The daemon's masking decision for this request (mechanisms/masking.decide): the
        plan of `engine.masking.plan_masks` over the history as described, applied at a cold
        boundary, or while warm when the rewrite pays back. Returns the first call whose
        messages it changed (None: nothing masked)."""
        th = self.th
        masking = self.mech.masking
        if call_index == 0 or not masking.active(th, warm=not cold):
            return None
        history: list[TailMessage] = []
        for it in self.items:
            if it.desc is not None:
                history.append(it.desc)
        tail = self.items[self.tail_start :]
        protected = {it.call_id for it in tail if it.call_id} | {
            c.id for it in tail if it.desc is not None for c in it.desc.toolCalls or ()
        }
        if self._thinking_checked():
            protected |= self.thinking_bound
        by_call: dict[str, _Item] = {}
        edited: set[str] = set()
        for it in self.items:
            if it.role == "tool_result" and it.call_id and it.call_id not in by_call:
                by_call[it.call_id] = it
                if it.masked or it.saved.get("amnesia"):
                    edited.add(it.call_id)

        def maskable(call: TailToolCall) -> bool:
            # Only what the model can get back: the daemon stores read-like results the
            # adapter tags and digested bash output, behind a recall handle.
            it = by_call.get(call.id)
            if it is None:
                return False
            if th.mask_kinds == "all":
                return True
            if th.mask_kinds.startswith("+") and it.tool in th.mask_kinds[1:].split(","):
                return True
            return self._recallable(it)

        # a shell read is a read of its file where the daemon knows it: by the command its
        # output was stored with (`masking.decide`); one it did not store names no file
        reads = {c for c in self.shell_reads if c in by_call and by_call[c].kept_for_recall}
        paths = {c: p for c, p in self.paths.items() if c not in self.shell_reads or c in reads}
        due = self._due_writes(call_index)
        plan = masking.plan(
            th,
            history,
            paths=paths,
            reads=reads,
            protected=protected,
            edited=edited,
            hidden_sigs=self.hidden_sigs,
            maskable=maskable,
        )
        if not plan and not due:
            return None
        recall = recall_call(self.profile, PLACEHOLDER_HANDLE)
        texts = [
            masking.tombstone(by_call[c.toolCallId].label, c.chars, c.reason, recall) for c in plan
        ]
        removed = chars_to_tokens(
            sum(max(c.chars - len(t), 0) for c, t in zip(plan, texts, strict=True))
            + sum(gain for _, _, gain in due)
        )
        hist_pos = {it.entry_id: n for n, it in enumerate(i for i in self.items if i.desc)}
        starts = [c.index for c in plan[:1]] + [hist_pos.get(eid, 0) for eid, _, _ in due]
        start = min(starts)
        described = [(m.chars or 0) + sum(c.argsChars for c in m.toolCalls or ()) for m in history]
        # what the provider writes anew: from the latest entry left before the first change
        written_from = self.cache.rewrite_start(start) if th.cache_entries else start
        prev = self.r.calls[-1] if self.r.calls else None
        sent = (
            prev.messages_chars - sum(prev.saved.get(k, 0) for k in _MESSAGE_SAVINGS)
            if prev is not None and not cold
            else None
        )
        # as the daemon measures it: the previous request's counted input over its characters
        counted = (
            self._ours_tokens(prev) / prev.sent_chars
            if prev is not None and prev.usage is not None and prev.sent_chars > 0
            else None
        )
        suffix = suffix_tokens(
            suffix_tokens_estimate(sum(described[written_from:]), sum(described), sent), counted
        )
        if not cold and not masking.pays(removed, suffix, call_index, self.r.cache_ttl_s):
            return None
        savings = None if cold else self._savings(call_index)
        if savings is not None:
            cost = rewrite_cost_tokens(
                suffix, warm=True, write_weight=write_weight(self.r.cache_ttl_s)
            )
            if not masking.within(th, cost, removed, free=savings.free, plain=savings.plain):
                return None
            savings.spend(cost)
        self.cache.rewritten(start)
        first: int | None = None
        for eid, call, _gain in due:
            seg = self._strip_late(eid, call, call_index)
            if seg is not None:
                first = seg if first is None else min(first, seg)
        for c, text in zip(plan, texts, strict=True):
            it = by_call[c.toolCallId]
            gain = c.chars - len(text)
            self._credit(it, "masking", gain)
            it.masked = True
            self.hidden_sigs.add(c.call.argsSig)
            first = it.seg if first is None else min(first, it.seg)
            self.r.interventions.append(
                Intervention(
                    "mask", call_index, it.tool or "", it.label, c.chars, len(text), c.reason
                )
            )
            idx = len(self.r.interventions) - 1
            self.vis.subtract(it.lines)
            self._hide(
                idx,
                it.lines,
                self.paths.get(c.toolCallId)
                if it.tool == "read" or c.toolCallId in self.shell_reads
                else None,
            )
            it.lines = []
            it.hid.append(idx)
        return first

    def _feed_cache(self, cold: bool) -> None:
        """The cache entries as the daemon knows them at this request: each earlier call's
        recorded usage (its turn_end), and a cold boundary. The old-thinking clearing is the
        Claude Code proxy's: the daemon does not see its rewrites, nor does this."""
        for c in self.r.calls[self.cache_fed :]:
            if c.usage is not None:
                fresh, read, write, _ = c.usage
                self.cache.usage(c.index, fresh, read, write)
        self.cache_fed = len(self.r.calls)
        if cold:
            self.cache.cold()

    def _due_writes(self, call_index: int) -> list[tuple[str, ToolCall, int]]:
        """write_idle_rounds: the pending writes whose file no call has named for that many
        rounds, with what stripping each keeps out (chars)."""
        n = self.th.write_idle_rounds
        if n <= 0 or not self.pending_writes:
            return []
        out = []
        for eid, c in self.pending_writes:
            if eid not in self.index:
                continue
            path = str(c.args.get("path", c.args.get("file_path", "?")))
            if call_index - self.last_touch.get(path, 0) < n:
                continue
            gain = _strip_text(c)[3]
            out.append((eid, c, gain))
        return out

    def _strip(self, c: ToolCall, call_index: int) -> tuple[str, int]:
        """Record the strip of write call `c` (its intervention and the aux fact's prompt);
        its path and what it keeps out (chars, net of the fact)."""
        path, content, replacement, gain = _strip_text(c)
        self.r.interventions.append(
            Intervention(
                "strip",
                call_index,
                "write",
                f"write {path}",
                _json_str_len(content),
                replacement,
                replacement_fact(path, content),
            )
        )
        self.r.add_aux(
            "writes",
            "fact",
            len(prompts.FACT_SYSTEM)
            + len(
                prompts.fact_prompt(
                    path=path,
                    content=content[: self.th.write_max_content_chars + 1],
                    max_chars=self.th.write_max_content_chars,
                )
            ),
        )
        return path, gain

    def _settle_response_writes(self) -> None:
        """The writes of a whole response no thinking block followed: stripped from the next
        request on, as at their own entry on a model that does not check (or left to
        write_idle_rounds)."""
        writes, self.response_writes = self.response_writes, []
        for eid, c in writes:
            if self.th.write_idle_rounds > 0:
                self.pending_writes.append((eid, c))
            else:
                self._strip_late(eid, c, len(self.r.calls))

    def _strip_late(self, eid: str, c: ToolCall, call_index: int) -> int | None:
        """Strip a write's body now, after its entry (write_idle_rounds, or its response
        settled on a thinking-bound model); returns its item's first call."""
        self.pending_writes = [(e, x) for e, x in self.pending_writes if x is not c]
        pos = self.index.get(eid)
        if pos is None:
            return None
        it = self.items[pos]
        path, gain = self._strip(c, call_index)
        self._credit(it, "writes", gain)
        idx = len(self.r.interventions) - 1
        hidden = _lines(str(c.args.get("content", "")))
        left = Counter(it.lines)
        left.subtract(hidden)
        it.lines = list(left.elements())
        self.vis.subtract(hidden)
        self._hide(idx, hidden, path)
        it.hid.append(idx)
        return it.seg

    # -- old thinking (mechanisms/thinking.py): what the Claude Code proxy sends -----------------

    def _thinks_on(self) -> bool:
        """Whether the proxy would raise the edit's keep here: only where the agent sends the
        edit itself (Claude Code 2.1.197 does, checked; the other 2.1 releases are taken to;
        2.0 did not: its sessions on the models that drop earlier thinking carried none), on a
        model that takes context edits."""
        if not (self.th.clear_old_thinking and self.profile.thinking_edit):
            return False
        version = tuple(int(x) for x in re.findall(r"\d+", self.r.agent_version or "")[:2])
        return version >= (2, 1) and accepts_context_editing(self.r.model)

    def _settle_response(self, index: int) -> None:
        """The response before this call is complete: its thinking, estimated as its output
        less its visible part at the session's rate (bench/thinking_share.py), joins its turn;
        this call's new messages are where that thinking first is."""
        if self.resp_thought and self.r.calls:
            prev = self.r.calls[-1]
            tokens = max(0.0, prev.output_tokens - self.r.rate * self.resp_visible)
            t = self.resp_turn
            self.turn_thinking[t] = self.turn_thinking.get(t, 0.0) + tokens
            self.turn_entry.setdefault(t, index)
        self.resp_visible = 0
        self.resp_thought = False
        self.resp_turn = self.task

    def _reset_thinking(self) -> None:
        """A compaction: the context's earlier thinking is gone with what it summarised."""
        self.turn_thinking, self.turn_entry = {}, {}
        self.clearing = ClearingState()
        self.thinking_out = 0.0

    def _clear_thinking(
        self, m: Message, index: int, cold: bool, mask_from: int | None
    ) -> int | None:
        """The proxy's clearing decision at this request (the rule's, as live): moves the point
        where it pays back; sets what the edit leaves out from here on; returns the first call
        whose messages a new clearing rewrites (None: no new clearing, or cold anyway)."""
        self._settle_response(index)
        if not self._thinks_on():
            return None
        plain_now = (
            m.usage_prompt_tokens
            if m.usage_prompt_tokens is not None
            else self.r.rate * (self.system.chars + self.system.tools_chars + self.msg_chars)
        )
        state = self.clearing
        state.requests += 1
        if state.first_tokens is None:
            state.first_tokens = round(plain_now)
        if cold:
            state.view_from, state.view_rewritten = index, 0
        elif mask_from is not None:
            state.view_from, state.view_rewritten = index, mask_from
        thought = sorted(t for t in self.turn_entry if t <= self.task)
        new_from: int | None = None
        if thought:
            latest = thought[-1]
            start = state.point if state.point is not None else -1
            pending = [t for t in thought if start <= t < latest]
            if pending:
                gone = sum(self.turn_thinking[t] for t in pending)
                first = min(self.turn_entry[t] for t in pending)
                free = cold or (mask_from is not None and mask_from <= first)
                start = rewrite_start(first, state.view_from + 1, state.view_rewritten)
                # what the provider writes anew: the conversation as it is now from `start` on
                # (the proxy measures the messages it sends; a size recorded at an earlier
                # request would miss what a mask has since taken out of it)
                rate = self.r.rate or 0.0
                written = sum(
                    max(0, it.chars - sum(it.saved.get(k, 0) for k in _MESSAGE_SAVINGS))
                    * (it.rate or rate)
                    for it in self.items
                    if it.seg >= start
                )
                # ... and the thinking that stays, which the items do not hold (a transcript
                # keeps a signature only): the latest turn's, written again after `start` too
                # (all of it where the turn began before `start`: the bet is judged on no less
                # than it costs)
                written += sum(self.turn_thinking[t] for t in thought if t >= latest)
                # Claude Code compacts at its window less 33,000 tokens (agents/claude/
                # auto_compact.py); a context past 200,000 had the 1M window
                window = 1_000_000 if plain_now > 200_000 else 200_000
                choice = clearing_choice(
                    state,
                    gone=gone,
                    span=written,
                    cold=free,
                    prompt=plain_now,
                    threshold=window - 33_000,
                    one_hour=(self.r.cache_ttl_s or 0) >= 3600,
                )
                if self.mech.thinking.pays(choice) and self.mech.thinking.within(
                    choice, self._savings(index)
                ):
                    state.point = latest
                    new_from = None if free else first
                    if not free:
                        state.view_from, state.view_rewritten = index, start
        if state.point is not None:
            out = sum(v for t, v in self.turn_thinking.items() if t < state.point)
            self.thinking_out = out
            self.saved["thinking"] = round(out / self.r.rate) if self.r.rate else 0
        return new_from

    def _call(self, m: Message) -> None:
        self._rate_tail(m)
        index = len(self.r.calls)
        request_ts = self.last_message_ts if self.last_message_ts is not None else m.ts
        # the cache's age, as the adapters measure it: from the previous request, when the
        # provider wrote or last read its entry (a response that took minutes ages it too)
        gap = 0.0
        if self.last_response_ts is not None and self.r.calls:
            gap = max(0.0, request_ts - self.r.calls[-1].ts)
        if self.deferred_at is not None:
            plain_now = (
                m.usage_prompt_tokens
                if m.usage_prompt_tokens is not None
                else self.r.rate * (self.system.chars + self.system.tools_chars + self.msg_chars)
            )
            sent = plain_now - self._kept_out_tokens(self.saved, self.carried, self.carried_tokens)
            if sent >= self.deferred_at:
                # what the previous request had is what its summarisation reads from the
                # cache, as on the plain side
                prev = round(self._ours_tokens(self.r.calls[-1])) if self.r.calls else 0
                self._own_compaction(None, prev, gap <= self.ttl_s)
        ours_cold = self.pending_own_compaction or (
            self.pending_compaction and not self.deferred_now
        )
        cold = gap > self.ttl_s or ours_cold
        self._feed_cache(cold)
        # a provider that does not cache: a rewrite costs nothing, warm or not (the daemon's
        # `masking.decide`)
        rewrite_from = self._mask(index, cold or (self.th.cache_entries and self.cache.uncached))
        masked = rewrite_from is not None
        thinking_from = self._clear_thinking(m, index, cold, rewrite_from)
        self.cache.add(index, sum(1 for it in self.items if it.desc is not None))
        self.tail_start = len(self.items)
        self.round_item = None
        if m.model:
            self.r.model = m.model
        sys_chars, tools_chars = self.system.chars, self.system.tools_chars
        if not self.have_system and m.usage_prompt_tokens:
            # pi 0.73 and Claude Code do not record the system prompt or tools: estimate them
            # once from the provider's prompt size of the first call.
            est = max(0, m.usage_prompt_tokens * 4 - self.msg_chars)
            self.system = SystemPrompt(m.ts, est, 0, 0)
            self.have_system = True
            self.r.system_estimated = True
            sys_chars = est
        usage = _usage_of(m)
        if self.pending_compaction:
            self.estimate_from = None
        estimate_from = self.estimate_from
        if usage is not None:
            self.estimate_from = (sum(usage[:3]), self.msg_chars)
            # the fixed prefix: what the provider counted beyond the messages' own tokens on
            # the first request — but never more than any request of the session counted (a
            # resumed session's first request also carries history its file does not hold)
            head = max(0, sum(usage[:3]) - self.r.to_tokens(self.msg_chars))
            if self.r.head_tokens is None or sum(usage[:3]) < self.r.head_tokens:
                self.r.head_tokens = (
                    head if self.r.head_tokens is None else min(self.r.head_tokens, sum(usage[:3]))
                )
        saved = dict(self.saved)
        if self.th.lazy_skills:
            saved["skills"] = self.system.skills_chars
        saved["tools"] = -own_tools_chars(self.profile, self.th, self.system.skills_chars > 0)
        self.r.calls.append(
            CallFigures(
                index=index,
                ts=request_ts,
                system_chars=sys_chars,
                tools_chars=tools_chars,
                messages_chars=self.msg_chars,
                saved=saved,
                tagger_bound_chars=self.bound,
                output_tokens=m.output_tokens,
                compaction=self.pending_compaction,
                ours_compaction=ours_cold,
                masked=masked,
                idle_gap_s=gap,
                rewrite_from=rewrite_from,
                thinking_rewrite_from=thinking_from,
                cache_read_recorded=m.usage_cache_read_tokens,
                cache_entry_recorded=(
                    m.usage_cache_read_tokens + m.usage_cache_write_tokens
                    if m.usage_cache_read_tokens is not None and m.usage_cache_write_tokens
                    else None
                ),
                usage=usage,
                rate=self.r.rate,
                carried_tokens=self.carried_tokens,
                estimate_from=estimate_from,
                kept_out_tokens=self._kept_out_tokens(
                    self.saved, self.carried, self.carried_tokens
                ),
            )
        )
        self.pending_compaction = False
        self.pending_own_compaction = False
        self.deferred_now = False

    def finish(self) -> SessionReplay:
        self._settle_response_writes()
        return self.r

    # -- tokens, at the session's own rate (replay/_calibrate.py) ------------------------

    def _kept_out_tokens(self, saved: dict[str, int], carried: int, carried_tokens: int) -> float:
        # (`saved` for the compaction figure; the other mechanisms at each item's own rate)
        """Tokens ctxwrap keeps out of the messages: the other mechanisms' characters at the
        session's rate, less the history it carries past plain's compaction at the density
        that history had (`saved["compaction"]` is minus the carried characters, plus the
        summary plain carries and ctxwrap does not)."""
        items = sum(self.saved_tok.get(k, 0.0) for k in _MESSAGE_SAVINGS if k != "compaction")
        summary = saved.get("compaction", 0) + carried  # the summary plain has, ctxwrap not
        # and the earlier thinking the provider's edit leaves out (in tokens: estimated so)
        return items + self.r.rate * summary - carried_tokens + self.thinking_out

    def _plain_tokens(self, c: CallFigures) -> float:
        return self.r.plain_tokens(c)

    def _ours_tokens(self, c: CallFigures) -> float:
        return self._plain_tokens(c) - c.kept_out_tokens


def _usage_of(m: Message) -> tuple[int, int, int, int] | None:
    """(uncached, cache read, cache write, of which 1-hour) as recorded; None: not recorded."""
    if m.usage_prompt_tokens is None:
        return None
    read = m.usage_cache_read_tokens or 0
    write = m.usage_cache_write_tokens or 0
    uncached = (
        m.usage_input_tokens
        if m.usage_input_tokens is not None
        else max(0, m.usage_prompt_tokens - read - write)
    )
    return (uncached, read, write, min(m.usage_cache_write_1h_tokens or 0, write))


def fingerprint(*parts: object) -> str:
    return hashlib.blake2b(repr(parts).encode(), digest_size=8).hexdigest()
