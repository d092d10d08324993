"""One agent session as a loopback proxy sees it, for every wire format.

What both proxies do the same way is written here once: the daemon session (registration, its
config view, the model noted again after the daemon forgot the session), the cache boundary of
each request, the history-mask request and its check, aux runs, the stats of a call and the
shutdown — and the request path's skeleton, "decide at the tail":

    describe the unseen tail → ``/v1/context`` → check the answer → freeze → apply

An adapter's session (``agents/claude/session.py``, ``agents/codex/session.py``) says which
wire it speaks (``wire``: a :class:`~ctxwrap.agents._proxy.wire.Wire`) and overrides the few
hooks that differ: whether a request is decided at all, the tool work of its tail (a hook's
digests, Codex's in-request digests and tags), the tombstone's and the write strip's wording,
and what the plain session would have sent. Everything is wire-neutral; every daemon call has
a deadline and fails open (no edit, no digest, original output).
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, ClassVar, TypedDict, Unpack

from ctxwrap.agents._proxy.cache_state import (
    CacheState,
    MaskTrigger,
    PrefixChain,
    acceptable_masks,
    cold_reason,
    head_key,
    parsed_original,
    tools_key,
    variant_key,
)
from ctxwrap.agents._proxy.daemon_link import DaemonLink
from ctxwrap.agents._proxy.frozen import FrozenEdits, load_cache_states, save_cache_states
from ctxwrap.agents._proxy.tag_wait import TagWait
from ctxwrap.agents._proxy.wire import Blocks, Neutral, Usage, Wire
from ctxwrap.engine.edits import (
    Edit,
    MaskEdit,
    StripEditEdit,
    StripWriteEdit,
    Tail,
    TombstoneEdit,
    describe_tail,
    edit_from_json,
    tail_ids,
    utf8len,
)
from ctxwrap.engine.facts import line_count
from ctxwrap.engine.masking import call_paths
from ctxwrap.mechanisms.budget import Savings, take_totals

JsonDict = dict[str, Any]
AuxRunner = Callable[[JsonDict, float], JsonDict]  # (aux request, seconds left) → AuxResult
# A request's blocks as sent, the agent's own request (None: it does not parse) and its blocks.
CallBlocks = tuple[Blocks, JsonDict | None, Blocks]

WRITE_CONTENT_MAX = 64 * 1024  # of an added file's content, sent for its fact
TAG_BATCH_MAX = 16  # results per /v1/tag_batch (the bridge's chunk size)


class SessionArgs(TypedDict):
    """What every proxy session is made with, besides its id."""

    daemon: DaemonLink
    state_file: Path | None  # the frozen-edit file (None: memory only)
    aux: AuxRunner | None  # the aux backend (the agent's own upstream)
    start_info: JsonDict  # sessions/start fields other than the id


@dataclass
class Decision:
    """One request on its way through `prepare`: what the skeleton and the hooks share."""

    body: JsonDict
    items: list[Any]
    tail: Tail
    message_count: int  # of the neutral view
    ids: set[str]  # the unseen tail's call ids
    seen_before: set[str]
    cold: MaskTrigger | None
    gap_s: float | None
    view: Callable[[], Neutral]  # the whole neutral view, built where it is needed
    fresh: list[Edit] = field(default_factory=list)  # decided for this request, to freeze
    extra: Any = None  # the adapter's own, between its hooks

    @cached_property
    def neutral(self) -> Neutral:
        """The whole conversation, neutral (a request's path reads only its tail)."""
        return self.view()


class ProxySession:
    """The wire-neutral session; an adapter subclasses it and sets `wire`."""

    wire: ClassVar[Wire]
    provider = "anthropic"  # the model's provider, as the daemon names it
    # Decide a tail while the daemon has not registered the session (a call may revive it).
    decide_unregistered: ClassVar[bool] = True

    def __init__(self, session_id: str, **args: Unpack[SessionArgs]) -> None:
        self.session_id = session_id
        self.daemon = daemon = args["daemon"]
        self.state_file = state_file = args["state_file"]
        self.aux = args["aux"]
        self.start_info = args["start_info"]
        self.cfg: JsonDict = {}  # the daemon's config view (sessions/start)
        self.registered = False
        daemon.on_unknown_session = self._register_again
        # Frozen edits by call id, and per digested result what plain would have sent and the
        # digest's size (chars); replayed from the file on `--continue` / `codex resume`.
        self.frozen = FrozenEdits(state_file)
        self.frozen.load()
        self.facts: dict[str, str] = {}  # a write's call id → its one-line fact
        self.tag_wait = TagWait()
        self.seen: set[str] = set()
        self.first_request = True
        self.call_index = 0
        self.prefix_chain = PrefixChain()  # each conversation's latest call (llm_call prefixes)
        self.turn_index = 0
        self.lock = threading.RLock()
        # Prompt-cache state per conversation (cache_state.py), kept across `--continue`.
        self.conversations: dict[str, CacheState] = load_cache_states(self.cache_file)
        self.noted_model: Any = None  # what the daemon has been told of the model
        # The session's account (mechanisms/budget.py), from each turn_end's totals: what a
        # rewrite the proxy decides itself (old thinking) may spend
        self.savings = Savings()

    # -- persistence --------------------------------------------------------------------------

    @property
    def digests(self) -> dict[str, tuple[int, int]]:
        return self.frozen.digests

    @property
    def cache_file(self) -> Path | None:
        return self.state_file.with_suffix(".cache.json") if self.state_file else None

    def _persist_cache_states(self) -> None:
        save_cache_states(self.cache_file, self.conversations)

    # -- the daemon session -------------------------------------------------------------------

    def _register_again(self) -> bool:
        """The daemon did not know the session (it restarted): register it again, and tell it
        the model again with the next call (it has only the one of the start)."""
        self.registered = False
        self.noted_model = None
        self.ensure_registered()
        return self.registered

    def ensure_registered(self) -> None:
        if self.registered:
            return
        reply = self.daemon.call(
            "/v1/sessions/start", {"session_id": self.session_id, **self.start_info}, timeout=1.5
        )
        if reply is not None:
            self.registered = True
            if isinstance(reply.get("config"), dict):
                self.cfg = reply["config"]
            self.tag_wait.known(reply.get("tag_pace_ms"))  # the tagger's pace so far

    def _cfg_int(self, key: str, default: int) -> int:
        """An integer setting of the daemon's; anything else (a bool too) is the default."""
        v = self.cfg.get(key, default)
        return v if isinstance(v, int) and not isinstance(v, bool) else default

    def _timeout(self) -> float:
        return self._cfg_int("bridge_timeout_ms", 1500) / 1000

    # -- the request path: decide at the tail ---------------------------------------------------

    def prepare(self, body: JsonDict) -> list[Edit]:
        """Decide edits for the unseen tail, freeze them, apply every frozen edit to `body`."""
        items = self.wire.items(body)
        if items is None:
            return []
        if not self._decides(body, items):
            return self.replay(body)
        with self.lock:
            if self.first_request:
                # History in the first request (--continue, resume, a fork) was seen by the model.
                self.seen |= self.wire.all_call_ids(items)
                self.first_request = False
            tail, count, built = self.wire.tail_of(items, self.seen)
            cold, gap_s = self._cache_boundary(body, items)
            d = Decision(
                body,
                items,
                tail,
                count,
                tail_ids(tail),
                set(self.seen),
                cold,
                gap_s,
                view=(lambda: built) if built is not None else lambda: self.wire.to_neutral(items),
            )
            self._take_tail(d)
        self._tool_work(d)
        if (d.tail.messages or d.cold is not None) and (
            self.registered or self.decide_unregistered
        ):
            self._ask_context(d)
        with self.lock:
            new = [e for e in d.fresh if self.frozen.freeze(e)]
            self.frozen.persist(new)
            self.seen |= d.ids
            self._tail_frozen(d)
            return self.wire.apply_edits(body, self.frozen.edits)

    def _ask_context(self, d: Decision) -> None:
        """`/v1/context` for the tail (and the history at a cold boundary); its answer checked."""
        self._await_tags(d)
        with self.lock:
            edited = self._edited()
        # What a later thinking block has in its prefix stays as sent on a model that checks
        # it: the daemon is told; its answer is checked, not trusted.
        keep = self._keep(d)
        mask = self._mask_request(d.items, d.cold, d.gap_s, edited) if d.cold else None
        request: JsonDict = {
            "session_id": self.session_id,
            "call_index": self.call_index,
            "message_count": d.message_count,
            "tail": d.tail.to_json(),
            # sub-agents share the session: the daemon keeps each conversation's cache apart
            "conversation": head_key(d.items),
        }
        if keep:
            request["keep"] = sorted(keep)
        if mask is not None:
            request["mask"] = mask
        reply = self.daemon.call("/v1/context", request, timeout=self._timeout())
        raw = (reply or {}).get("edits")
        answered = [
            e
            for e in map(edit_from_json, raw if isinstance(raw, list) else [])
            if e and e.toolCallId not in keep
        ]
        # Masks rewrite seen history: only on a request we sent `mask` with (cold, or warm with
        # mask_warm on), and only results we check ourselves (seen, paired, no error, no edit).
        masks_ok = (
            acceptable_masks(
                d.neutral.messages,
                [e.toolCallId for e in answered if isinstance(e, MaskEdit)],
                d.seen_before,
                edited,
            )
            if mask is not None
            else set()
        )
        decided = {e.toolCallId for e in d.fresh}  # digested by this request already
        for edit in answered:
            if isinstance(edit, MaskEdit):
                if edit.toolCallId in masks_ok:
                    masks_ok.discard(edit.toolCallId)
                    d.fresh.append(self._worded(edit, d))
                continue
            # Tail edits: only the unseen tail may ever be edited (invariant 3).
            if edit.toolCallId not in d.ids or edit.toolCallId in decided:
                continue
            worded = self._tail_edit(edit, d)
            if worded is not None:
                d.fresh.append(worded)

    # hooks of the request path (the base does nothing of its own)

    def _decides(self, body: JsonDict, items: list[Any]) -> bool:
        """Whether this request gets edits decided (False: frozen edits replayed only)."""
        self.ensure_registered()
        return True

    def exit_notes(self) -> list[str]:
        """What the agent's exit line adds for this session (the adapter's own; none here)."""
        return []

    def _take_tail(self, d: Decision) -> None:
        """Under the lock, as the tail is described: what is already decided for it."""

    def _tool_work(self, d: Decision) -> None:
        """Outside the lock: the tail's tool work before `/v1/context` (into `d.fresh`)."""

    def _await_tags(self, d: Decision) -> None:
        """Before `/v1/context`: wait (a bounded time) for the tail's tags."""

    def _edited(self) -> set[str]:
        """Under the lock: the results whose replacement is final (no mask goes over them)."""
        return self.frozen.result_edited()

    def _keep(self, d: Decision) -> set[str]:
        """Call ids that must stay as sent (the daemon is told)."""
        return set()

    def _worded(self, edit: TombstoneEdit | MaskEdit, d: Decision) -> Edit:
        """A tombstone's or a mask's text as this agent words it."""
        return edit

    def _tail_edit(self, edit: Edit, d: Decision) -> Edit | None:
        """A tail edit as frozen (None: this agent does not take it)."""
        if isinstance(edit, TombstoneEdit):
            return self._worded(edit, d)
        return edit

    def _tail_frozen(self, d: Decision) -> None:
        """Under the lock, once the request's edits are frozen."""

    def _mask_history(self, items: list[Any]) -> list[JsonDict]:
        """The history a mask request describes, neutral (reminders are no new task)."""
        return self.wire.to_neutral(items, notes_role="custom").messages

    def replay(self, body: JsonDict) -> list[Edit]:
        """Frozen edits only, no decisions (a side request, a compaction, or our side failing)."""
        with self.lock:
            return self.wire.apply_edits(body, self.frozen.edits)

    # -- cold boundaries and history masks ------------------------------------------------------

    def _cache_boundary(
        self, body: JsonDict, items: list[Any]
    ) -> tuple[MaskTrigger | None, float | None]:
        """Record this main request in its conversation's cache state; say if it is cold.

        With `mask_warm` on, a warm request of a known prefix says "warm": the daemon then
        masks only if the rewrite pays back (as the bridge does; off by default). Under the
        lock, once per decided request.
        """
        key = head_key(items)
        if key is None:
            return None, None
        model = body.get("model")
        now = CacheState(
            time.time(), model if isinstance(model, str) else None, tools_key(*self.wire.head(body))
        )
        ttl = self.cfg.get("cache_ttl_s", 300.0)
        ttl_s = float(ttl) if isinstance(ttl, int | float) and not isinstance(ttl, bool) else 300.0
        # a request that asks for a longer cache (Claude Code with a subscription login asks
        # for 1 hour) stays warm across a pause the 5-minute one would not
        marked = self.wire.marked_ttl_s(body)
        if marked is not None and marked > 300.0:
            ttl_s = max(ttl_s, marked)
        reason = cold_reason(self.conversations, key, now, ttl_s=ttl_s)
        prev = self.conversations.get(variant_key(key, now))
        gap = now.at - prev.at if prev is not None else None
        self.conversations[variant_key(key, now)] = now
        self._persist_cache_states()
        if self.cfg.get("mask") is False or self.cfg.get("off"):
            return None, gap
        if reason is None and prev is not None and self.cfg.get("mask_warm") is True:
            return "warm", gap
        return reason, gap

    def _mask_request(
        self, items: list[Any], reason: MaskTrigger, gap_s: float | None, edited: set[str]
    ) -> JsonDict:
        """The whole history described (no bodies), sent once per cold boundary."""
        neutral = self._mask_history(items)
        return {
            "reason": reason,
            "gap_s": round(gap_s, 3) if gap_s is not None else None,
            "history": describe_tail(neutral, ()).to_json(),
            "paths": call_paths(neutral),
            "edited": sorted(edited),
            "calls": self.call_index,
        }

    # -- the daemon's tool work -----------------------------------------------------------------

    def _keep_for_recall(self, cid: str, command: str, text: str, tool_name: str = "bash") -> None:
        """A command's output too short to digest, or a result of a tool no other mechanism
        takes (`mechanisms.keeps_result_of`), long enough for masking to take once it is old
        (`Masking.keeps_for_recall`): stored by the daemon behind a recall handle, off the
        path the agent waits on (the daemon decides; nothing comes back)."""
        if self.cfg.get("mask", True) is False or self.cfg.get("off"):
            return
        if len(text) < self._cfg_int("mask_min_chars", 500):
            return
        body = {
            "session_id": self.session_id,
            "tool_call_id": cid,
            "tool_name": tool_name,
            "input": {"command": command} if command else {},
            "text": text,
            "is_error": False,
        }
        threading.Thread(
            target=lambda: self.daemon.call("/v1/tool_result", body, timeout=self._timeout()),
            name="ctxwrap-keep",
            daemon=True,
        ).start()

    def _ask_digest(
        self,
        cid: str,
        command: str,
        text: str,
        exit_code: int | None,
        deadline_s: float,
        full_path: str | None = None,
    ) -> str | None:
        """The daemon's digest of a long command output (improved by the aux model where it
        asks and answers in time), or None: the output stays as the agent wrote it."""
        deadline = time.monotonic() + deadline_s
        reply = self.daemon.call(
            "/v1/tool_result",
            {
                "session_id": self.session_id,
                "tool_call_id": cid,
                "tool_name": "bash",
                "input": {"command": command},
                "text": text,
                "is_error": exit_code not in (None, 0),
                "full_output_path": full_path,
                "exit_code": exit_code,
            },
            timeout=deadline_s,
        )
        if not reply or reply.get("action") != "replace" or not isinstance(reply.get("text"), str):
            return None
        digest: str = reply["text"]
        aux = reply.get("aux")
        if isinstance(aux, dict):
            better = self._run_aux(aux, deadline)
            if better:
                digest = better
        return digest

    def _ask_write_fact(self, cid: str, path: str, content: str) -> JsonDict | None:
        """The daemon's one-line fact for a file the agent wrote (its reply: `text`, `aux`)."""
        return self.daemon.call(
            "/v1/tool_result",
            {
                "session_id": self.session_id,
                "tool_call_id": cid,
                "tool_name": "write",
                "input": {"path": path, "content": content[:WRITE_CONTENT_MAX]},
                "text": "",
                "content_bytes": utf8len(content),
                "content_lines": line_count(content),
            },
            timeout=self._timeout(),
        )

    def _tag_batches(self, items: list[JsonDict], deadline: float) -> None:
        """Tag read-like results, TAG_BATCH_MAX a `/v1/tag_batch`, each aux run at the
        tagger's pace (agents/_proxy/tag_wait.py). Runs on a thread of ours: nothing of it may
        reach the user's terminal."""
        with contextlib.suppress(Exception):
            for i in range(0, len(items), TAG_BATCH_MAX):
                reply = self.daemon.call(
                    "/v1/tag_batch",
                    {"session_id": self.session_id, "results": items[i : i + TAG_BATCH_MAX]},
                    timeout=self._timeout(),
                )
                aux = (reply or {}).get("aux")
                if isinstance(aux, dict) and self.aux is not None:
                    pace = self.tag_wait.begin()  # the tagger's pace
                    try:
                        self._run_aux(aux, deadline)
                    finally:
                        self.tag_wait.end(pace)

    def _aux_beside(
        self,
        aux: JsonDict,
        limit_s: float,
        then: Callable[[str | None], None],
        name: str,
    ) -> threading.Event:
        """Run an aux request on a thread at the tagger's pace; `then` gets its accepted text.
        The event is set when it is over (whatever happened)."""
        done = threading.Event()

        def run() -> None:
            pace = self.tag_wait.begin()
            try:
                then(self._run_aux(aux, time.monotonic() + limit_s))
            except Exception:
                pass  # a thread of ours: nothing of it may reach the user's terminal
            finally:
                self.tag_wait.end(pace)
                done.set()

        threading.Thread(target=run, name=name, daemon=True).start()
        return done

    def _run_aux(self, aux: JsonDict, deadline: float) -> str | None:
        """Run a daemon-built aux request on the upstream backend; the daemon judges the answer."""
        if self.aux is None or not isinstance(aux.get("aux_id"), str):
            return None
        left = deadline - time.monotonic()
        if left <= 0.05:
            return None
        result = self.aux(aux, left)
        reply = self.daemon.call(
            "/v1/aux/result",
            {"session_id": self.session_id, "aux_id": aux["aux_id"], **result},
            timeout=self._timeout(),
        )
        if reply and reply.get("accepted") and isinstance(reply.get("text"), str):
            return str(reply["text"])
        return None

    # -- stats ------------------------------------------------------------------------------------

    def record_call(
        self,
        body: JsonDict,
        applied: list[Edit],
        usage: Usage | None,
        original: bytes | None = None,
        billed: JsonDict | None = None,
    ) -> None:
        """Stats of one forwarded request: what it carried and what each mechanism kept out
        (`original`: the agent's own bytes, where ctxwrap edited the request; `billed`: the
        request as the provider counts it, where an edit it applies itself leaves part of it
        out), then the provider's usage of its answer."""
        index: int | None = None
        if self._is_call(body):
            index, chars = self._record_agent_call(body, applied, original, billed)
            self._took_usage(chars, usage)
        if usage is not None and usage.seen:
            with self.lock:
                turn, self.turn_index = self.turn_index, self.turn_index + 1
            reply = self.daemon.call(
                "/v1/turn_end",
                {
                    "session_id": self.session_id,
                    "turn_index": turn,
                    "input_tokens": usage.input_tokens,
                    "output_tokens": usage.output_tokens,
                    "cache_read_tokens": usage.cache_read_tokens,
                    "cache_write_tokens": usage.cache_write_tokens,
                    "model": self._usage_model(usage, body),
                    "call_index": index,
                },
                timeout=3.0,
            )
            self._took_totals(reply, self._request_key() if index is not None else None)

    def _request_key(self) -> object:
        """The key this thread's request charged its rewrites under (None: none)."""
        return None

    def _took_totals(self, reply: JsonDict | None, recorded: object = None) -> None:
        """The daemon's totals after a turn_end: the account starts again from them, the
        rewrite of the request they were recorded with (`recorded`) held by them. Without
        them (no daemon, an old one) the account stays as it was: a bet it does not cover
        waits."""
        totals = reply.get("totals") if isinstance(reply, dict) else None
        if not isinstance(totals, dict):
            return
        plain, ours = totals.get("plain_cost_weighted"), totals.get("cost_weighted")
        if not isinstance(plain, (int, float)) or not isinstance(ours, (int, float)):
            return
        if math.isfinite(plain) and math.isfinite(ours):
            with self.lock:
                if recorded is not None:
                    self.savings.recorded(recorded)
                take_totals(self.savings, float(plain), float(ours))

    def _is_call(self, body: JsonDict) -> bool:
        """Whether the request is a call of the agent's conversation (`/v1/llm_call`)."""
        return True

    def _took_usage(self, chars: int, usage: Usage | None) -> None:
        """The provider's usage of an agent call of `chars` as it counted them (an adapter
        learns from it)."""

    def _usage_model(self, usage: Usage, body: JsonDict) -> str | None:
        return f"{self.provider}/{usage.model}" if usage.model else None

    def _llm_call_fields(self, body: JsonDict) -> JsonDict:
        """The adapter's own fields of `/v1/llm_call`."""
        return {}

    def _before_llm_call(self, body: JsonDict) -> None:
        """Daemon calls due before this call's record (outside the lock)."""

    def _call_blocks(
        self, body: JsonDict, applied: list[Edit], original: bytes | None, billed: JsonDict
    ) -> CallBlocks:
        """The request's blocks as billed, and the agent's own request with its blocks
        (`original` where ctxwrap edited it; None: it does not parse). Outside the lock: a
        request can be megabytes."""
        blocks = self.wire.prefix_blocks(billed)
        if not applied:
            return blocks, body, (blocks if billed is body else self.wire.prefix_blocks(body))
        mine = parsed_original(original)
        return blocks, mine, (self.wire.prefix_blocks(mine) if mine else [])

    def _plain_prefix(self, mine: JsonDict | None, shared: tuple[int, int]) -> int | None:
        """Chars the plain session's call shares with its previous call, from what the agent's
        own requests share (`shared`: chars, blocks)."""
        return shared[0]

    def _prefixes(
        self, call: CallBlocks, conversation: str | None, index: int
    ) -> tuple[int | None, int | None, int | None]:
        """What this call shares (chars) with the previous call of its conversation, as sent
        and as the plain session sent it, and that call's index where it is not the one before
        (`PrefixChain`): a mask's rewrite, a compaction are priced as what they write. Unknown
        on a proxy's first call (a resumed session's too): an append-only list is assumed.
        Under the lock, with the call's index."""
        blocks, mine, plain_blocks = call
        ref, sent, shared = self.prefix_chain.measure(conversation, index, blocks, plain_blocks)
        plain = self._plain_prefix(mine, shared) if shared is not None else None
        return sent, plain, (ref if ref is not None and ref != index - 1 else None)

    def _record_agent_call(
        self,
        body: JsonDict,
        applied: list[Edit],
        original: bytes | None = None,
        billed: JsonDict | None = None,
    ) -> tuple[int, int]:
        """Send the call's record; returns its call_index (its usage names it) and its chars as
        the provider counts them. A part the
        provider leaves out itself (`billed`) is neither sent nor plain's saving of another
        mechanism: it is the thinking the provider's edit cleared, plain carries it."""
        size = self.wire.measure(billed if billed is not None else body)
        thinking = self.wire.measure(body).messages - size.messages if billed is not None else 0
        items = self.wire.items(body) or []
        present = self.wire.all_call_ids(items)
        blocks = self._call_blocks(body, applied, original, billed if billed is not None else body)
        with self.lock:
            digests = self.frozen.digests
            bash = sum(p - d for c, (p, d) in digests.items() if c in present)
            amnesia = sum(
                e.savedChars
                for e in applied
                if isinstance(e, TombstoneEdit) and e.toolCallId not in digests
            )
            # A history mask counts apart, as in the pi bridge; on a digested result it
            # removes the digest (its savedChars are measured against the digest).
            masking = sum(e.savedChars for e in applied if isinstance(e, MaskEdit))
            writes = sum(
                e.savedChars for e in applied if isinstance(e, StripWriteEdit | StripEditEdit)
            )
            index, self.call_index = self.call_index, self.call_index + 1
            shared, plain_shared, prefix_of = self._prefixes(blocks, head_key(items), index)
        self._before_llm_call(body)
        self.daemon.call(
            "/v1/llm_call",
            {
                "session_id": self.session_id,
                "call_index": index,
                "message_count": len(items),
                "sent_prefix_chars": shared,
                "plain_prefix_chars": plain_shared,
                "prefix_of": prefix_of,
                "sent_chars": {
                    "system": size.system,
                    "messages": size.messages,
                    "tools": size.tools,
                },
                "saved_chars": {
                    "bash": bash,
                    "amnesia": amnesia,
                    "masking": masking,
                    "writes": writes,
                    "skills": 0,
                    "tools": 0,
                    "thinking": max(0, thinking),
                },
                **self._llm_call_fields(body),
            },
            timeout=3.0,
        )
        return index, size.system + size.messages + size.tools

    # -- the end ----------------------------------------------------------------------------------

    def _on_shutdown(self) -> None:
        """Daemon calls due before the session ends (failures are ignored)."""

    def shutdown(self) -> None:
        if self.registered:
            with contextlib.suppress(Exception):
                self._on_shutdown()
            with contextlib.suppress(Exception):
                self.daemon.call(
                    "/v1/sessions/shutdown",
                    {"session_id": self.session_id, "reason": "quit"},
                    timeout=0.5,
                )
