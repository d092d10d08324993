"""One Claude Code session as the proxy sees it: frozen edits, hook work, daemon calls.

Everything here is wire-neutral: requests arrive already converted by ``anthropic_wire``.
Every daemon call has a deadline and fails open (no edit, no digest, original output); the
frozen edit set lives here and in a per-session file (``agents/_proxy/frozen.py``), so
already-frozen edits keep being replayed when the daemon is gone, and ``claude --continue``
gets the same view.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ctxwrap.agents._proxy.cache_state import (
    CacheState,
    MaskTrigger,
    PrefixChain,
    acceptable_masks,
    cold_reason,
    head_key,
    marked_ttl_s,
    parsed_original,
    tools_key,
    variant_key,
)
from ctxwrap.agents._proxy.daemon_link import DaemonLink
from ctxwrap.agents._proxy.frozen import FrozenEdits, load_cache_states, save_cache_states
from ctxwrap.agents._proxy.tag_wait import TagWait
from ctxwrap.agents.claude import anthropic_wire as wire
from ctxwrap.agents.claude import auto_compact
from ctxwrap.engine.edits import (
    Edit,
    MaskEdit,
    StripEditEdit,
    StripWriteEdit,
    TombstoneEdit,
    describe_tail,
    edit_from_json,
    tail_ids,
    u16len,
    utf8len,
)
from ctxwrap.engine.facts import line_count
from ctxwrap.engine.masking import call_paths
from ctxwrap.engine.thinking import checks_thinking_prefix

JsonDict = dict[str, Any]
# a request's blocks as sent, the agent's own request and its blocks (`_call_blocks`)
_Blocks = tuple[list[tuple[str, int]], dict[str, Any] | None, list[tuple[str, int]]]
AuxRunner = Callable[
    [JsonDict, float], JsonDict
]  # (aux request, deadline seconds) → AuxResult fields

AMNESIA_HOOK_TOOLS = {"Read": "read", "Grep": "grep", "Glob": "find"}
BASH_DEADLINE_S = 15.0  # like the bridge's bash call: the digest is worth a short wait
WRITE_CONTENT_MAX = 64 * 1024
TAG_BATCH_MAX = 16  # results per /v1/tag_batch (the bridge's chunk size)
# A tombstone, a mask or a removal replaces a result: the first one stays (a stub does not).
RESULT_EDITS = ("tombstone", "mask", "remove")
_RECALL_HINT_RE = re.compile(r'ctx_recall\(handle="([A-Za-z0-9_-]+)", pattern=\.\.\.\)')


def recall_hint(text: str) -> str:
    """Point the model at the command it can run (Claude Code has no ctx_recall tool)."""
    return _RECALL_HINT_RE.sub(lambda m: f"`ctxwrap recall {m.group(1)} PATTERN`", text)


@dataclass
class TagRound:
    """The read-like calls of one assistant message and the results collected for them.

    One `/v1/tag_batch` (one aux call) tags them all when the message has ended and every
    call of it has its hook — or, at the latest, when the next request sends their results.
    """

    waiting: set[str] = field(default_factory=set)  # calls without their hook yet
    items: list[JsonDict] = field(default_factory=list)  # TagItem fields
    done: threading.Event = field(default_factory=threading.Event)  # the batch's tags settled
    ended: bool = False  # the message has ended: no call joins any more
    flushed: bool = False


class ClaudeSession:
    def __init__(
        self,
        session_id: str,
        *,
        daemon: DaemonLink,
        state_file: Path | None,
        aux: AuxRunner | None,
        start_info: JsonDict,
        compact_config: auto_compact.UserConfig | None = None,
    ) -> None:
        self.session_id = session_id
        self.compact_config = compact_config or auto_compact.UserConfig()
        self.daemon = daemon
        self.state_file = state_file
        self.aux = aux
        self.start_info = start_info  # SessionStart fields other than the id
        self.cfg: JsonDict = {}
        self.registered = False
        daemon.on_unknown_session = self._register_again
        # Frozen edits by tool_use id, and per digested result what plain Claude Code would
        # have sent and the digest's size (chars).
        self.frozen = FrozenEdits(state_file)
        self.frozen.load()
        self.digests = self.frozen.digests
        self.pending_digests: dict[str, tuple[str, int]] = {}  # failure path: text, plain chars
        self.pending_tags: dict[str, threading.Event] = {}
        self.tag_wait = TagWait()
        self.rounds: dict[str, TagRound] = {}  # read-like tool_use id → its unsent round
        self.seen: set[str] = set()
        self.first_request = True
        self.call_index = 0
        self.prefix_chain = PrefixChain()  # each conversation's latest call (llm_call prefixes)
        self.turn_index = 0
        self.lock = threading.RLock()
        self.facts: dict[str, str] = {}  # Write tool_use_id → its one-line fact
        # Prompt-cache state per conversation (cache_state.py), kept across `--continue`.
        self.conversations: dict[str, CacheState] = load_cache_states(self.cache_file)
        self.betas = ""  # the last main request's anthropic-beta header
        self.noted_model: tuple[str, int] | None = None  # (model, window) the daemon has
        # plain Claude Code's auto-compact threshold for that model (None: reactive or off)
        self.compact_threshold: int | None = None
        self.pending_compaction: JsonDict | None = None  # note_compaction's, not yet sent

    # -- persistence --------------------------------------------------------------------------

    @property
    def cache_file(self) -> Path | None:
        return self.state_file.with_suffix(".cache.json") if self.state_file else None

    def _persist_cache_states(self) -> None:
        save_cache_states(self.cache_file, self.conversations)

    # -- daemon session -----------------------------------------------------------------------

    def _register_again(self) -> bool:
        self.registered = False
        self.noted_model = None  # a daemon that did not know the session: tell it the model too
        self.ensure_registered()
        return self.registered

    def ensure_registered(self) -> None:
        if self.registered:
            return
        reply = self.daemon.call(
            "/v1/sessions/start",
            {"session_id": self.session_id, **self.start_info},
            timeout=1.5,
        )
        if reply is not None:
            self.registered = True
            if isinstance(reply.get("config"), dict):
                self.cfg = reply["config"]

    def _note_model(self, body: JsonDict) -> None:
        """Tell the daemon the model, its window and plain Claude Code's auto-compaction
        threshold (auto_compact.py) when they change: the cost model's plain session compacts
        there."""
        model = body.get("model")
        if not isinstance(model, str) or not model:
            return
        window = auto_compact.context_window(model, self.betas)
        if self.noted_model == (model, window):
            return
        compaction = auto_compact.compaction_settings(
            window, os.environ, model, self.compact_config
        )
        reserve = compaction["reserve_tokens"]
        # ahead of the limit only: a reactive compaction is the provider's refusal, not usage
        self.compact_threshold = window - reserve if compaction["enabled"] and reserve else None
        reply = self.daemon.call(
            "/v1/sessions/model",
            {
                "session_id": self.session_id,
                "model": {
                    "provider": "anthropic",
                    "id": model,
                    "api": "anthropic-messages",
                    "context_window": window,
                },
                "compaction": compaction,
            },
            timeout=1.5,
        )
        if reply is not None:  # else sent again with the next request
            self.noted_model = (model, window)

    def in_step_threshold(self) -> int | None:
        """Plain Claude Code's auto-compact threshold for the session's model, where the
        proxy is to keep the session's compactions in step with plain's (agents/_proxy/
        in_step.py); None: off, or Claude Code compacts only when the provider refuses."""
        if self.cfg.get("compact_in_step", True) is False:
            return None
        return self.compact_threshold

    def _cfg_int(self, key: str, default: int) -> int:
        v = self.cfg.get(key, default)
        return v if isinstance(v, int) else default

    # -- the request path -----------------------------------------------------------------------

    def prepare(self, body: JsonDict) -> list[Edit]:
        """Decide edits for the unseen tail, freeze them, apply every frozen edit to `body`."""
        messages = body.get("messages")
        if not isinstance(messages, list):
            return []
        if not body.get("tools"):
            # A side request (the interactive session's title) is another conversation: it
            # must neither mark the history as seen nor get edits decided.
            return self.replay(body)
        self.ensure_registered()  # the cache TTL is the daemon's setting
        self._note_model(body)
        if wire.is_compaction_request(messages):
            # Claude Code's summarisation request: the summariser is shown what the agent was
            # (frozen edits); a mask decided here would hide history from the summary and pay
            # a rewrite of a prefix dropped right after. Priced as a call (record_call).
            return self.replay(body)
        neutral = wire.to_neutral(messages)
        with self.lock:
            if self.first_request:
                # History in the first request (--continue, --resume) was seen by the model.
                self.seen |= wire.all_tool_ids(messages)
                self.first_request = False
            tail = describe_tail(neutral, self.seen)
            ids = tail_ids(tail)
            seen_before = set(self.seen)
            cold, gap_s = self._cache_boundary(body, messages)
            fresh: list[Edit] = []
            for m in tail.messages:
                cid = m.toolCallId
                if m.role == "toolResult" and cid in self.pending_digests:
                    text, plain = self.pending_digests.pop(cid)
                    fresh.append(
                        TombstoneEdit(toolCallId=cid, text=text, savedChars=plain - u16len(text))
                    )
                    self.digests[cid] = (plain, u16len(text))
            # Results the next request carries: their round's batch is due now, whatever of
            # it is still missing (a denied call never gets a hook).
            due = {id(r): r for i in ids if (r := self.rounds.get(i)) is not None}
            for r in due.values():
                self._take_round(r)
            waits = [self.pending_tags[i] for i in ids if i in self.pending_tags]
        for r in due.values():
            self._send_round(r)
        if tail.messages or cold is not None:
            # A request waits for its tags only while the tagger answers within tag_wait_ms
            # (agents/_proxy/tag_wait.py): one still pending is RETAIN (invariant 4), and a
            # late DROP becomes a history mask where hiding is paid for anyway (issue 43).
            budget = self.tag_wait.allowance(self._cfg_int("tag_wait_ms", 400) / 1000)
            deadline = time.monotonic() + budget
            for ev in waits:
                ev.wait(max(0.0, deadline - time.monotonic()))
            with self.lock:
                edited = self.frozen.result_edited(RESULT_EDITS)
            # what a later thinking block has in its prefix stays as sent on a model that
            # checks it: an edit there gets the request refused (400) or the model's reasoning
            # dropped. The daemon is told; its answer is checked, not trusted.
            keep = (
                wire.bound_by_thinking(messages)
                if checks_thinking_prefix(body.get("model"))
                else set()
            )
            mask = self._mask_request(messages, cold, gap_s, edited) if cold else None
            request: JsonDict = {
                "session_id": self.session_id,
                "call_index": self.call_index,
                "message_count": len(neutral),
                "tail": tail.to_json(),
            }
            if keep:
                request["keep"] = sorted(keep)
            if mask is not None:
                request["mask"] = mask
            reply = self.daemon.call(
                "/v1/context", request, timeout=self._cfg_int("bridge_timeout_ms", 1500) / 1000
            )
            answered = [
                e
                for e in map(edit_from_json, (reply or {}).get("edits") or [])
                if e and e.toolCallId not in keep
            ]
            # Masks rewrite seen history: only on a request we sent `mask` with (cold, or warm
            # with mask_warm on), and only results we check ourselves (seen, paired, no error,
            # no edit yet).
            masks_ok = (
                acceptable_masks(
                    messages,
                    [e.toolCallId for e in answered if isinstance(e, MaskEdit)],
                    seen_before,
                    edited,
                )
                if mask is not None
                else set()
            )
            for edit in answered:
                if isinstance(edit, MaskEdit):
                    if edit.toolCallId not in masks_ok:
                        continue
                    masks_ok.discard(edit.toolCallId)
                    fresh.append(edit.model_copy(update={"text": recall_hint(edit.text)}))
                    continue
                # Tail edits: only the unseen tail may ever be edited (invariant 3).
                if edit.toolCallId not in ids:
                    continue
                if isinstance(edit, TombstoneEdit):
                    edit = edit.model_copy(update={"text": recall_hint(edit.text)})
                elif isinstance(edit, StripWriteEdit) and edit.toolCallId in self.facts:
                    # The fact travels inside the frozen stub: Claude Code drops hook context
                    # on --continue, a frozen edit is replayed by us.
                    text = f"{edit.text} {self.facts[edit.toolCallId]}"
                    saved = edit.savedChars - (u16len(text) - u16len(edit.text))
                    edit = edit.model_copy(update={"text": text, "savedChars": saved})
                fresh.append(edit)
        with self.lock:
            new = [e for e in fresh if self.frozen.freeze(e)]
            self.frozen.persist(new)
            self.seen |= ids
            for i in ids:
                self.pending_tags.pop(i, None)
            return wire.apply_edits(body, self.frozen.edits)

    def _cache_boundary(
        self, body: JsonDict, messages: list[Any]
    ) -> tuple[MaskTrigger | None, float | None]:
        """Record this main request in its conversation's cache state; say if it is cold.

        With `mask_warm` on, a warm request of a known prefix says "warm": the daemon then
        masks only if the rewrite pays back (as the bridge does; off by default).

        Called under the lock, once per main request (never for count_tokens or a side
        request without tools: those do not use the conversation's cache prefix).
        """
        key = head_key(messages)
        if key is None:
            return None, None
        model = body.get("model")
        now = CacheState(
            time.time(),
            model if isinstance(model, str) else None,
            tools_key(body.get("tools"), body.get("system")),
        )
        ttl = self.cfg.get("cache_ttl_s", 300.0)
        ttl_s = float(ttl) if isinstance(ttl, int | float) and not isinstance(ttl, bool) else 300.0
        # a request that asks for the 1-hour cache (Claude Code with a subscription login)
        # stays warm across a pause the 5-minute one (cache_ttl_s's default) would not
        marked = marked_ttl_s(body)
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
        self, messages: list[Any], reason: MaskTrigger, gap_s: float | None, edited: set[str]
    ) -> JsonDict:
        """The whole history described (no bodies), sent once per cold boundary."""
        # Reminders riding along with tool results are no new task (cache_state.py).
        neutral = wire.to_neutral(messages, notes_role="custom")
        return {
            "reason": reason,
            "gap_s": round(gap_s, 3) if gap_s is not None else None,
            "history": describe_tail(neutral, ()).to_json(),
            "paths": call_paths(neutral),
            "edited": sorted(edited),
            "calls": self.call_index,
        }

    def replay(self, body: JsonDict) -> list[Edit]:
        """Frozen edits only, no decisions (count_tokens, or our side is failing)."""
        with self.lock:
            return wire.apply_edits(body, self.frozen.edits)

    def record_call(
        self,
        body: JsonDict,
        applied: list[Edit],
        usage: wire.Usage | None,
        original: bytes | None = None,
    ) -> None:
        """Stats of one forwarded request: what it carried and what each mechanism kept out
        (`original`: the agent's own bytes, where ctxwrap edited the request).

        A side request (no `tools`: the interactive session's title, …) is no call of the
        agent's conversation: no `/v1/llm_call`, so the session's LLM calls are the agent's
        own; its provider usage still goes to `/v1/turn_end` — it is paid for, under plain
        Claude Code just the same.
        """
        index = self._record_agent_call(body, applied, original) if body.get("tools") else None
        if usage is not None and usage.seen:
            with self.lock:
                turn, self.turn_index = self.turn_index, self.turn_index + 1
            self.daemon.call(
                "/v1/turn_end",
                {
                    "session_id": self.session_id,
                    "turn_index": turn,
                    "input_tokens": usage.input_tokens,
                    "output_tokens": usage.output_tokens,
                    "cache_read_tokens": usage.cache_read_tokens,
                    "cache_write_tokens": usage.cache_write_tokens,
                    "model": f"anthropic/{usage.model}" if usage.model else None,
                    "call_index": index,
                },
                timeout=3.0,
            )

    def note_compaction(self, event: JsonDict) -> None:
        """Claude Code compacted (its PostCompact hook, after the summary came back).

        Sent with the next call's record, just before it: the cost model places a compaction
        between the calls around it, and the summarisation call's own record may still be on
        its way now. Its cost is that call's (`priced_as_call`).
        """
        trigger = event.get("trigger")
        summary = event.get("compact_summary")
        with self.lock:
            self.pending_compaction = {
                "session_id": self.session_id,
                "reason": "manual" if trigger == "manual" else "auto",
                "summary_chars": len(summary) if isinstance(summary, str) else 0,
                "priced_as_call": True,
            }

    def _send_compaction(self) -> None:
        with self.lock:
            pending, self.pending_compaction = self.pending_compaction, None
        if pending is not None:
            self.daemon.call("/v1/compaction", pending, timeout=1.0)

    def _call_blocks(self, body: JsonDict, applied: list[Edit], original: bytes | None) -> _Blocks:
        """The request's blocks as sent, and the agent's own request with its blocks (`original`
        where ctxwrap edited it; None: it does not parse). Outside the lock: a request can be
        megabytes."""
        blocks = wire.prefix_blocks(body)
        mine = body if not applied else parsed_original(original)
        return blocks, mine, (blocks if not applied else wire.prefix_blocks(mine) if mine else [])

    def _prefixes(
        self, call: _Blocks, conversation: str | None, index: int
    ) -> tuple[int | None, int | None, int | None]:
        """What this call shares (chars) with the previous call of its conversation, as sent
        and as plain Claude Code sent it, and that call's index where it is not the one before
        (`PrefixChain`): a mask's rewrite, a compaction are priced as what they write. Plain's
        request is the agent's own with the bash outputs the hook digested whole. Unknown on a
        proxy's first call (a resumed session's too): an append-only list is assumed. Under
        the lock, with the call's index."""
        blocks, mine, plain_blocks = call
        ref, sent, shared = self.prefix_chain.measure(conversation, index, blocks, plain_blocks)
        plain: int | None = None
        if mine is not None and shared is not None:
            chars, count = shared
            # blocks: tools, system, then one per message
            ids = wire.all_tool_ids((mine.get("messages") or [])[: max(count - 2, 0)])
            plain = chars + sum(p - d for c, (p, d) in self.digests.items() if c in ids)
        return sent, plain, (ref if ref is not None and ref != index - 1 else None)

    def _record_agent_call(
        self, body: JsonDict, applied: list[Edit], original: bytes | None = None
    ) -> int:
        """Send the call's record; returns its call_index (its usage names it)."""
        self._send_compaction()
        size = wire.measure(body)
        present = wire.all_tool_ids(body.get("messages") or [])
        blocks = self._call_blocks(body, applied, original)
        with self.lock:
            bash = sum(p - d for c, (p, d) in self.digests.items() if c in present)
            # A mask counts here like in the pi bridge; on a digested result it removes the
            # digest (its savedChars are measured against the digest, not the raw output).
            amnesia = sum(
                e.savedChars
                for e in applied
                if (isinstance(e, TombstoneEdit) and e.toolCallId not in self.digests)
                or isinstance(e, MaskEdit)
            )
            writes = sum(
                e.savedChars for e in applied if isinstance(e, StripWriteEdit | StripEditEdit)
            )
            index, self.call_index = self.call_index, self.call_index + 1
            shared, plain_shared, prefix_of = self._prefixes(
                blocks, head_key(body.get("messages") or []), index
            )
        marked = marked_ttl_s(body)
        self.daemon.call(
            "/v1/llm_call",
            {
                "session_id": self.session_id,
                "call_index": index,
                "message_count": len(body.get("messages") or []),
                "sent_prefix_chars": shared,
                "plain_prefix_chars": plain_shared,
                "prefix_of": prefix_of,
                # the 1-hour cache (subscription logins): priced with its lifetime and rate
                "cache_ttl_s": marked if marked is not None and marked > 300.0 else None,
                "sent_chars": {
                    "system": size.system,
                    "messages": size.messages,
                    "tools": size.tools,
                },
                "saved_chars": {
                    "bash": bash,
                    "amnesia": amnesia,
                    "writes": writes,
                    "skills": 0,
                    "tools": 0,
                },
            },
            timeout=3.0,
        )
        return index

    # -- the hook path --------------------------------------------------------------------------

    def handle_hook(self, event: JsonDict) -> JsonDict:
        """What `ctxwrap hook claude` prints for one PostToolUse / PostToolUseFailure event."""
        name = event.get("hook_event_name")
        tool = event.get("tool_name")
        cid = event.get("tool_use_id")
        if not isinstance(cid, str) or not isinstance(tool, str):
            return {}
        self.ensure_registered()
        if self.cfg.get("off"):
            return {}
        if tool == "Bash" and name == "PostToolUse":
            return self._bash_success(cid, event)
        if tool == "Bash" and name == "PostToolUseFailure":
            self._bash_failure(cid, event)
            return {}
        if tool in AMNESIA_HOOK_TOOLS and name == "PostToolUse":
            self._add_tag(cid, AMNESIA_HOOK_TOOLS[tool], event)
            return {}
        if tool in AMNESIA_HOOK_TOOLS and name == "PostToolUseFailure":
            self._round_call_ended(cid)  # nothing to tag; the rest of the round need not wait
            return {}
        if tool == "Write" and name == "PostToolUse":
            # The fact joins the stub that replaces the write's content in the next request
            # (hook additionalContext would be lost on --continue: the view must not change).
            # The daemon's own fact at once; the aux model's better one beside the turn, used
            # if it is in before the stub is frozen (issue 43: no turn waits for it).
            self._write_fact(cid, event)
        return {}

    def _digest(
        self, cid: str, command: str, text: str, exit_code: int | None, full_path: str | None
    ) -> str | None:
        deadline = time.monotonic() + BASH_DEADLINE_S
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
            timeout=BASH_DEADLINE_S,
        )
        if not reply or reply.get("action") != "replace" or not isinstance(reply.get("text"), str):
            return None
        digest: str = reply["text"]
        aux = reply.get("aux")
        if isinstance(aux, dict):
            better = self._run_aux(aux, deadline)
            if better:
                digest = better
        return recall_hint(digest)

    def _bash_success(self, cid: str, event: JsonDict) -> JsonDict:
        """PostToolUse: a command that succeeded (in Claude Code's judgement): digest or leave it.

        The command ran exactly as the model asked and Claude Code's permission rules saw it
        (ctxwrap never rewrites it). Over `bash_min_tokens`, or above Claude Code's own cap
        (the full output then is in its saved file), the model gets the daemon's digest;
        otherwise, and on any failure of ours, Claude Code's own output.
        """
        resp = event.get("tool_response")
        if not isinstance(resp, dict) or resp.get("isImage") or resp.get("backgroundTaskId"):
            return {}
        stdout = str(resp.get("stdout") or "")
        stderr = str(resp.get("stderr") or "")
        persisted = _persisted_path(resp.get("persistedOutputPath"))
        text = stdout + ("\n" + stderr if stderr else "")
        threshold = self._cfg_int("bash_min_tokens", 2000)
        if persisted is None and (len(text) + 3) // 4 < threshold:
            return {}
        # Claude Code reports no exit status for a command it did not call failed (`grep`
        # finding nothing exits 1): the daemon reads None as success.
        digest = self._digest(cid, _command_of(event), text, None, persisted)
        if digest is None:
            return {}
        size = int(resp.get("persistedOutputSize") or 0) if persisted else u16len(text)
        plain = _persisted_preview_chars(persisted, size) if persisted else u16len(text)
        with self.lock:
            self.frozen.note_digest(cid, plain, u16len(digest))
        out = {
            k: v for k, v in resp.items() if k not in ("persistedOutputPath", "persistedOutputSize")
        }
        out.update(stdout=digest, stderr="")
        return {"hookSpecificOutput": {"hookEventName": "PostToolUse", "updatedToolOutput": out}}

    def _bash_failure(self, cid: str, event: JsonDict) -> None:
        """PostToolUseFailure of a failing command: digest what Claude Code kept of it.

        The hook cannot replace the output (docs/research/claude-code-notes.md): the digest
        becomes a frozen tail edit of the `tool_result` in the next request, whose `is_error`
        stays Claude Code's own. `error` is exactly that result's text: "Exit code N" and the
        first 10,000 chars of the output (Claude Code 2.1 keeps no more of a failing command).
        """
        error = event.get("error")
        if not isinstance(error, str):
            return
        m = re.match(r"Exit code (\d+)\n?", error)
        exit_code = int(m.group(1)) if m else 1
        body = error[m.end() :] if m else error
        persisted = _persisted_path(_persisted_in_text(body))
        if persisted is None and (len(error) + 3) // 4 < self._cfg_int("bash_min_tokens", 2000):
            return
        digest = self._digest(cid, _command_of(event), body, exit_code, persisted)
        if digest is not None:
            with self.lock:
                self.pending_digests[cid] = (digest, u16len(error))

    # -- batched tags: one /v1/tag_batch and one aux call per tool round -------------------------

    def open_round(self) -> TagRound:
        """A response is starting; its read-like calls will form one round."""
        return TagRound()

    def round_tool_use(self, round_: TagRound, cid: str, tool: str) -> None:
        """The response carries this call (seen before Claude Code can run it)."""
        if tool not in AMNESIA_HOOK_TOOLS:
            return
        with self.lock:
            if round_.ended or round_.flushed:
                return
            round_.waiting.add(cid)
            self.rounds[cid] = round_

    def round_ended(self, round_: TagRound) -> None:
        """The message is complete (or its stream broke): no call joins any more."""
        with self.lock:
            if round_.ended:
                return
            round_.ended = True
            due = self._due(round_)
        if due:
            self._send_round(round_)

    def _due(self, round_: TagRound) -> bool:
        """With the lock held: the batch is complete, so take it (True: send it)."""
        if round_.flushed or not round_.ended or round_.waiting:
            return False
        self._take_round(round_)
        return True

    def _take_round(self, round_: TagRound) -> None:
        """With the lock held: the round is over; its ids no longer collect anything."""
        round_.flushed = True
        round_.ended = True
        round_.waiting.clear()
        for cid in [c for c, r in self.rounds.items() if r is round_]:
            del self.rounds[cid]

    def _round_call_ended(self, cid: str) -> None:
        with self.lock:
            round_ = self.rounds.get(cid)
            if round_ is None:
                return
            round_.waiting.discard(cid)
            due = self._due(round_)
        if due:
            self._send_round(round_)

    def _add_tag(self, cid: str, tool: str, event: JsonDict) -> None:
        """A Read/Grep/Glob result joins its round's batch; the hook returns at once."""
        resp = event.get("tool_response")
        tool_input = event.get("tool_input") if isinstance(event.get("tool_input"), dict) else {}
        if tool == "read" and isinstance(resp, dict) and isinstance(resp.get("file"), dict):
            text = str(resp["file"].get("content") or "")
        else:
            text = json.dumps(resp, ensure_ascii=False) if resp is not None else ""
        args = dict(tool_input or {})
        if "file_path" in args:
            args = {"path": args.pop("file_path"), **args}
        item = {"tool_call_id": cid, "tool_name": tool, "input": args, "text": text}
        with self.lock:
            round_ = self.rounds.get(cid)
            if round_ is None:
                # A call of no known round (a response we could not read): a batch of its
                # own, at once, as before batching.
                round_ = TagRound(ended=True)
            round_.items.append(item)
            round_.waiting.discard(cid)
            self.pending_tags[cid] = round_.done
            due = self._due(round_)
        if due:
            self._send_round(round_)

    def _send_round(self, round_: TagRound) -> None:
        """Tag a taken round's results out of band; `done` is set when their tags settled."""
        items = list(round_.items)
        if not items:
            round_.done.set()
            return

        def run() -> None:
            started = time.monotonic()
            try:
                deadline = started + self._cfg_int("aux_timeout_ms", 20000) / 1000
                for i in range(0, len(items), TAG_BATCH_MAX):
                    reply = self.daemon.call(
                        "/v1/tag_batch",
                        {"session_id": self.session_id, "results": items[i : i + TAG_BATCH_MAX]},
                        timeout=self._cfg_int("bridge_timeout_ms", 1500) / 1000,
                    )
                    aux = (reply or {}).get("aux")
                    if isinstance(aux, dict) and self.aux is not None:
                        pace = self.tag_wait.begin()  # the tagger's pace
                        try:
                            self._run_aux(aux, deadline)
                        finally:
                            self.tag_wait.end(pace)
            finally:
                round_.done.set()

        threading.Thread(target=run, name="ctxwrap-tag-round", daemon=True).start()

    def _set_fact(self, cid: str, fact: str | None) -> None:
        if fact:
            with self.lock:
                if cid not in self.frozen.edits:  # a frozen stub keeps the fact it has
                    self.facts[cid] = " ".join(fact.split())

    def _write_fact(self, cid: str, event: JsonDict) -> None:
        tool_input = event.get("tool_input")
        if not isinstance(tool_input, dict) or not isinstance(tool_input.get("content"), str):
            return
        content: str = tool_input["content"]
        reply = self.daemon.call(
            "/v1/tool_result",
            {
                "session_id": self.session_id,
                "tool_call_id": cid,
                "tool_name": "write",
                "input": {
                    "path": str(tool_input.get("file_path", "?")),
                    "content": content[:WRITE_CONTENT_MAX],
                },
                "text": "",
                "content_bytes": utf8len(content),
                "content_lines": line_count(content),
            },
            timeout=self._cfg_int("bridge_timeout_ms", 1500) / 1000,
        )
        if not reply:
            return
        self._set_fact(cid, reply.get("text") if isinstance(reply.get("text"), str) else None)
        aux = reply.get("aux")
        if not isinstance(aux, dict) or self.aux is None:
            return
        done = threading.Event()
        with self.lock:
            self.pending_tags[cid] = done  # the next request may wait for it as for a tag

        def run() -> None:
            pace = self.tag_wait.begin()  # the aux model's pace, as for tags
            try:
                deadline = time.monotonic() + self._cfg_int("aux_timeout_ms", 20000) / 1000
                self._set_fact(cid, self._run_aux(aux, deadline))
            except Exception:
                pass  # a thread of ours: nothing of it may reach the user's terminal
            finally:
                self.tag_wait.end(pace)
                done.set()

        threading.Thread(target=run, name="ctxwrap-write-fact", daemon=True).start()

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
            timeout=self._cfg_int("bridge_timeout_ms", 1500) / 1000,
        )
        if reply and reply.get("accepted") and isinstance(reply.get("text"), str):
            return str(reply["text"])
        return None

    def shutdown(self) -> None:
        if self.registered:
            with contextlib.suppress(Exception):  # a compaction the session ended with
                self._send_compaction()
            with contextlib.suppress(Exception):
                self.daemon.call(
                    "/v1/sessions/shutdown",
                    {"session_id": self.session_id, "reason": "quit"},
                    timeout=0.5,
                )


def _command_of(event: JsonDict) -> str:
    tool_input = event.get("tool_input")
    cmd = tool_input.get("command") if isinstance(tool_input, dict) else None
    return cmd if isinstance(cmd, str) else ""


_PERSISTED_RE = re.compile(r"Full output saved to: (\S+)")


def _persisted_in_text(text: str) -> str | None:
    if not text.startswith("<persisted-output>"):
        return None
    m = _PERSISTED_RE.search(text[:2000])
    return m.group(1) if m else None


def _persisted_path(raw: object) -> str | None:
    """Claude Code's saved full output, only if it is a regular file in its tool-results dir.

    The daemon reads this path; a path from anywhere else is not ours to read.
    """
    if not isinstance(raw, str) or not raw:
        return None
    path = Path(raw)
    try:
        real = path.resolve(strict=True)
    except OSError:
        return None
    if real.parent.name != "tool-results" or not real.is_file():
        return None
    if real.stat().st_uid != os.getuid():
        return None
    return str(real)


def _persisted_preview_chars(path: str, size: int) -> int:
    # What plain Claude Code sends instead of the output: a header with the path, a 2 KB
    # preview and a footer (measured: 2,237 chars for a 106 KB output).
    human = f"{size / 1024:.1f}KB" if size < 1 << 20 else f"{size / (1 << 20):.1f}MB"
    head = (
        f"<persisted-output>\nOutput too large ({human}). Full output saved to: {path}\n\n"
        "Preview (first 2KB):\n"
    )
    return len(head) + 2000 + len("\n...\n</persisted-output>")
