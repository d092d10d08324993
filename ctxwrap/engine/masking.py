"""Cache-aware observation masking: which older tool results become tombstones (pure policy).

Tail edits (`edits.py`) only touch what the model has not seen. Masking rewrites older history,
so it breaks the prompt cache from the first masked message on. It is therefore decided only
at a *cold boundary* — a request whose cache prefix is gone anyway (idle past the cache TTL,
compaction, model switch, a changed tool set) — or, while the cache is warm, when
`warm_rewrite_pays` says the rewrite earns back its extra cache write. Once decided, a mask is a
frozen edit like any other: the adapter persists it and replays it on every later request, so
between two boundaries each request extends the previous one byte for byte.

What may be masked (each with a reason, recorded by the daemon):

- `superseded`: a `read` of a file that was later read again with the same arguments, or
  written or edited since (its content in the context is stale);
- `dropped`: a result the tagger judged DROP after its round had already gone to the model
  (too late for a tail edit);
- `earlier_task`: a result of an earlier user task. The current task's results stay whole;
- `older` (`MaskPolicy.older_after_rounds`): a result other than a read, seen at least that many
  rounds ago (bash output, a listing, a search: read once, acted on);
- `untouched` (`MaskPolicy.read_idle_rounds`): a read whose file no call has read, written or
  edited for that many rounds (what the agent works on stays; issue 21's activity awareness),
  unless the history reads that file `MaskPolicy.reference_reads` times or more: a file the
  agent keeps coming back to (a large source read in parts, the docs it works from) is read
  again after a quiet spell more often than not, so its reads leave only when superseded.

A read is a `read` call, or any call the caller names in `reads`: a file's content printed
through the shell (`cat f`, `sed -n …p f`), as a `read` of its file; one that printed several
files has no file, and its own age counts for `untouched`.

Measured on real sessions (docs/accounting.md, "Policies on real sessions"): a read made stale
by an edit is often needed again (the agent edits the new content, but copies lines it saw in
the old read), so `stale_reads` can be turned off to mask only reads read again.

Never: an error result, a result whose call is not in the list (unpaired) or whose id occurs
twice, a result that
already has an edit, a result of the current task's last `keep_rounds` rounds, a result of
the unseen tail, and a result whose call repeats one ctxwrap hid before (the model asked for
it again: invariant 5). A tombstone keeps the message and its call in place, so pairing is
untouched.

`call_paths` has a TypeScript twin in ctxwrap/_bridge/masking.ts (golden cases in
tests/fixtures/masking/).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ctxwrap.engine.cost import UNCACHED_MIN_CALLS as UNCACHED_MIN_CALLS
from ctxwrap.engine.cost import RecordedHits
from ctxwrap.engine.edits import TailMessage, TailToolCall

MaskReason = Literal["superseded", "dropped", "earlier_task", "older", "untouched"]
ColdReason = Literal["idle", "compaction", "model", "tools", "warm"]

# Tools whose call changes a file's content; a `read` of the same path before it is stale.
_WRITERS = frozenset({"write", "edit", "Write", "Edit", "MultiEdit"})
_READERS = frozenset({"read", "Read"})
_PATH_TOOLS = _READERS | _WRITERS


def call_paths(messages: Sequence[Any]) -> dict[str, str]:
    """toolCallId → the file path of every read/write/edit call (`path` or `file_path`).

    Mirror of callPaths in masking.ts: only what the policy needs to see supersession.
    """
    out: dict[str, str] = {}
    for msg in messages:
        if not isinstance(msg, dict) or msg.get("role") != "assistant":
            continue
        content = msg.get("content")
        if not isinstance(content, list):
            continue
        for block in content:
            if not isinstance(block, dict) or block.get("type") != "toolCall":
                continue
            cid, name, args = block.get("id"), block.get("name"), block.get("arguments")
            if not isinstance(cid, str) or name not in _PATH_TOOLS or not isinstance(args, dict):
                continue
            path = args.get("path", args.get("file_path"))
            if isinstance(path, str) and cid not in out:
                out[cid] = path
    return out


@dataclass(frozen=True)
class MaskPolicy:
    keep_rounds: int = 2  # the current task's last rounds stay whole (at least its latest)
    min_chars: int = 2000  # a smaller result is not worth a tombstone
    earlier_tasks: bool = True
    stale_reads: bool = True  # a read of a file written or edited since is `superseded`
    older_after_rounds: int = 0  # > 0: a non-read result this many rounds old is `older`
    read_idle_rounds: int = 0  # > 0: a read of a file untouched this many rounds is `untouched`
    reference_reads: int = 0  # > 0: a file read this many times is never `untouched`


@dataclass(frozen=True)
class MaskCandidate:
    toolCallId: str
    reason: MaskReason
    chars: int
    index: int  # position in the history (for the cost of the rewrite)
    call: TailToolCall


def plan_masks(
    history: Sequence[TailMessage],
    *,
    paths: Mapping[str, str],
    protected: Collection[str] = frozenset(),
    edited: Collection[str] = frozenset(),
    hidden_sigs: Collection[str] = frozenset(),
    late_drops: Collection[str] = frozenset(),
    maskable: Callable[[TailToolCall], bool] = lambda call: True,
    policy: MaskPolicy = MaskPolicy(),
    reads: Collection[str] = frozenset(),
) -> list[MaskCandidate]:
    """The results to mask at this boundary, in history order.

    `history` describes the whole message list (`describe_tail(messages, ())`), `edited` holds
    every id that already has an edit (its first edit wins forever), `protected` the ids the
    caller must not touch (the unseen tail), `hidden_sigs` the argsSig of every call whose
    result ctxwrap hid earlier (a repeat of one is the model asking again: kept whole), `reads`
    the ids of calls that read files through another tool (pi's and Claude Code's `bash cat`):
    they are masked by the read rules, as a `read` of their file (in `paths`) would be.
    """

    def reader(call: TailToolCall) -> bool:
        return call.name in _READERS or call.id in reads

    owner: dict[str, tuple[int, TailToolCall]] = {}
    round_of: dict[str, int] = {}
    rounds: list[int] = []  # history index of each assistant message with calls
    last_user = -1
    for i, m in enumerate(history):
        if m.role == "user":
            last_user = i
        if m.role == "assistant" and m.toolCalls:
            rounds.append(i)
            for c in m.toolCalls:
                if c.id not in owner:
                    owner[c.id] = (i, c)
                    round_of[c.id] = len(rounds) - 1
    current_rounds = [r for r, i in enumerate(rounds) if i > last_user]
    kept_rounds = set(current_rounds[-max(policy.keep_rounds, 1) :]) if current_rounds else set()

    # Later content-changing or identical-reading calls per path, with a result that is no error.
    ok_result = {
        m.toolCallId
        for m in history
        if m.role == "toolResult" and m.toolCallId is not None and m.isError is False
    }
    touches: dict[str, list[tuple[int, TailToolCall]]] = {}
    for cid, (i, c) in owner.items():
        path = paths.get(cid)
        if path is not None and cid in ok_result and (c.name in _PATH_TOOLS or cid in reads):
            touches.setdefault(path, []).append((i, c))

    reads_of = {p: sum(1 for _, c in ts if reader(c)) for p, ts in touches.items()}

    def reference(path: str) -> bool:
        return 0 < policy.reference_reads <= reads_of.get(path, 0)

    def superseded(i: int, call: TailToolCall) -> bool:
        if not reader(call):
            return False
        path = paths.get(call.id)
        if path is None:
            return False
        return any(
            j > i
            and ((policy.stale_reads and later.name in _WRITERS) or later.argsSig == call.argsSig)
            for j, later in touches.get(path, ())
        )

    # The round of each path's latest touch (read, write, edit: any call naming the file).
    last_touch: dict[str, int] = {}
    for cid, path in paths.items():
        r = round_of.get(cid)
        if r is not None and r > last_touch.get(path, -1):
            last_touch[path] = r
    newest = len(rounds) - 1

    # An id that occurs on two results is ambiguous (some providers reuse ids): edits apply to
    # the first occurrence only, so neither is masked.
    result_ids = [m.toolCallId for m in history if m.role == "toolResult" and m.toolCallId]
    twice = (
        {cid for cid in result_ids if result_ids.count(cid) > 1}
        if len(set(result_ids)) != len(result_ids)
        else set()
    )
    out: list[MaskCandidate] = []
    for idx, m in enumerate(history):
        if m.role != "toolResult" or m.toolCallId is None or m.isError is not False:
            continue
        cid = m.toolCallId
        found = owner.get(cid)
        if found is None or found[0] > idx:  # unpaired, or a result before its call
            continue
        i, call = found
        if cid in edited or cid in protected or cid in twice or round_of[cid] in kept_rounds:
            continue
        if (m.chars or 0) < policy.min_chars or call.argsSig in hidden_sigs:
            continue
        if not maskable(call):
            continue
        reason: MaskReason | None = None
        if superseded(i, call):
            reason = "superseded"
        elif cid in late_drops:
            reason = "dropped"
        elif policy.earlier_tasks and i < last_user:
            reason = "earlier_task"
        elif reader(call):
            # a read of several files (`find … -exec cat`) has no path: its own age counts
            path = paths.get(cid)
            if (
                policy.read_idle_rounds > 0
                and (path is not None or cid in reads)
                and newest - (last_touch.get(path, round_of[cid]) if path else round_of[cid])
                >= policy.read_idle_rounds
                and not (path and reference(path))
            ):
                reason = "untouched"
        elif policy.older_after_rounds > 0 and newest - round_of[cid] >= policy.older_after_rounds:
            reason = "older"
        if reason is not None:
            out.append(MaskCandidate(cid, reason, m.chars or 0, idx, call))
    return out


# -- the cost of a rewrite while the cache is warm ----------------------------------------
# Weights of the cost interface (tasks/cost-interface.md, DEFAULT_WEIGHTS): input-equivalent
# tokens of a cache read and a cache write, relative to fresh input.
READ_WEIGHT = 0.1
WRITE_WEIGHT = 1.25
# A write to the 1-hour cache (Claude Code under a subscription login, pi with
# PI_CACHE_RETENTION=long) is billed at 2x input, not 1.25x.
ONE_HOUR_WRITE_WEIGHT = 2.0


def write_weight(cache_ttl_s: float | None) -> float:
    """What a cache write costs, relative to fresh input, for a cache of this lifetime."""
    return (
        ONE_HOUR_WRITE_WEIGHT if cache_ttl_s is not None and cache_ttl_s >= 3600 else WRITE_WEIGHT
    )


def rewrite_cost_tokens(
    suffix_tokens: int, *, warm: bool, write_weight: float = WRITE_WEIGHT
) -> float:
    """Extra input-equivalent tokens the rewrite costs on the next request.

    Cold: nothing — that request writes the whole prefix anyway. Warm: everything from the
    first masked message on is written instead of read.
    """
    return suffix_tokens * (write_weight - READ_WEIGHT) if warm else 0.0


@dataclass
class CacheEntries:
    """Where the provider's cache still holds the conversation as it is now, so that a warm
    rewrite is judged on what the provider will write anew (`rewrite_start`), not on the part
    from the first changed message alone.

    A prefix cache keeps an entry where each request ended (`add`: its call index and how many
    messages it held). A rewrite from message `p` changes every entry that ends after `p`
    (`rewritten`); a request that read nothing, or the system prompt and tools alone
    (`engine.cost.RecordedHits`: "none", "head"), shows the entries before it are gone
    (`usage`); past the cache's lifetime all are (`cold`). What a rewrite from `p` writes anew
    starts at the latest entry left that ends at or before `p` (0: none left). On the corpus,
    rewrites judged from `p` alone were rewrites of the whole conversation where the provider
    had just missed, or inside a part rewritten a few requests before: up to four of ~100,000
    tokens in ten requests (docs/accounting.md, "Where a rewrite starts").

    The daemon keeps one per session (`mechanisms/masking.py`), replay one per simulated
    session, fed the same way."""

    entries: list[tuple[int, int]] = field(default_factory=list)  # (call index, messages)
    hits: RecordedHits = field(default_factory=lambda: RecordedHits())
    counted: int = 0  # requests whose input the provider counted
    cached: int = 0  # of them, those that read or wrote its cache

    @property
    def uncached(self) -> bool:
        return self.counted >= UNCACHED_MIN_CALLS and self.cached == 0

    def cold(self) -> None:
        self.entries.clear()

    def usage(self, call: int | None, fresh: int, read: int, write: int) -> None:
        """A request's recorded usage: input tokens counted fresh, read from the cache and
        written to it. All zero (a request cut off before it was counted) says nothing."""
        if fresh + read + write <= 0:
            return
        self.counted += 1
        if read or write:
            self.cached += 1
        how = self.hits.add(read, read + write if write else None)
        if how in ("none", "head") and call is not None:
            self.entries = [(r, end) for r, end in self.entries if r >= call]

    def rewritten(self, start: int) -> None:
        self.entries = [(r, end) for r, end in self.entries if end <= start]

    def add(self, call: int, messages: int) -> None:
        """A request of `messages` messages goes out (after any rewrite it carries); a
        conversation shorter than an entry (a compaction, a branch) has lost that entry."""
        self.entries = [(r, end) for r, end in self.entries if end <= messages]
        self.entries.append((call, messages))

    def rewrite_start(self, start: int) -> int:
        """Where a rewrite whose first change is message `start` begins to write anew."""
        return max((end for _, end in self.entries if end <= start), default=0)


# A session's conversations whose cache entries the daemon keeps (a proxy's sub-agents; the
# oldest is forgotten first: judged from nothing left, its rewrites err toward waiting)
CONVERSATIONS_KEPT = 16


@dataclass
class SessionCaches:
    """A session's `CacheEntries`, one per conversation (`ContextRequest.conversation`): a
    sub-agent's requests do not touch the main conversation's entries. Usage is recorded by
    call index; each call belongs to the conversation whose context request it was."""

    by_conversation: dict[str | None, CacheEntries] = field(default_factory=dict)
    of_call: dict[int, str | None] = field(default_factory=dict)

    def of(self, conversation: str | None, call: int | None = None) -> CacheEntries:
        """The conversation's entries (made on first use), noting that `call` is one of its."""
        got = self.by_conversation.pop(conversation, None) or CacheEntries()
        self.by_conversation[conversation] = got  # the most recent last
        while len(self.by_conversation) > CONVERSATIONS_KEPT:
            del self.by_conversation[next(iter(self.by_conversation))]
        if call is not None:
            self.of_call[call] = conversation
            if len(self.of_call) > 4 * CONVERSATIONS_KEPT:
                del self.of_call[next(iter(self.of_call))]
        return got

    def usage(self, call: int, fresh: int, read: int, write: int) -> None:
        """A call's recorded usage, to its conversation's entries (a call that asked for no
        context: the conversation of the latest that did)."""
        if call in self.of_call:
            self.of(self.of_call[call]).usage(call, fresh, read, write)
        elif self.by_conversation:
            next(reversed(self.by_conversation.values())).usage(call, fresh, read, write)


def warm_rewrite_pays(
    removed_tokens: int,
    suffix_tokens: int,
    expected_remaining_calls: float,
    *,
    write_weight: float = WRITE_WEIGHT,
) -> bool:
    """Whether a warm-cache rewrite earns back its extra cache write.

    Each later call reads `removed_tokens` fewer cached tokens; the rewrite costs the suffix
    once as a write instead of a read (the masked part is written smaller, counted here in
    full: a conservative estimate), at the write price of the cache in use (`write_weight`:
    a 1-hour cache's writes cost 2x input; on real Claude Code sessions, rewrites judged at
    1.25x were what made masking cost more than it saved).
    """
    gain = removed_tokens * READ_WEIGHT * max(expected_remaining_calls, 0.0)
    return gain > rewrite_cost_tokens(suffix_tokens, warm=True, write_weight=write_weight)


def suffix_tokens_estimate(
    described_suffix: int, described_total: int, sent_messages: int | None
) -> int:
    """What a rewrite from the first masked message really writes again.

    The described history counts results and call arguments only; assistant text and thinking
    (a large share of a real Claude Code session) are not described. Scaled by what the
    previous request really carried over what the description of the same history counts.
    """
    if sent_messages and described_total > 0 and sent_messages > described_total:
        return described_suffix * sent_messages // described_total
    return described_suffix


def suffix_tokens(suffix_chars: int, tokens_per_char: float | None) -> int:
    """The suffix's characters in the provider's tokens: at the rate the provider counted for
    the previous request (its input tokens over the characters sent), which carries what the
    characters do not show — thinking kept as a signature, the agent's attachments, dense
    code. chars/4 where nothing was counted; never below it. On real Claude Code sessions the
    rate is 0.4-0.9: judged at chars/4 a warm rewrite looked to pay back and cost more than
    it saved (docs/accounting.md, "Warm masking")."""
    # to the nearest 0.05: the adapters and replay measure characters a little differently,
    # and that noise must not decide a rewrite
    rate = 0.25 if tokens_per_char is None else max(0.25, min(tokens_per_char, 2.0))
    return round(suffix_chars * round(rate * 20) / 20)


def expected_remaining_calls(calls_so_far: int) -> float:
    """A session that made n calls is expected to make about n more (nothing better known)."""
    return float(max(calls_so_far, 0))
