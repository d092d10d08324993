"""One Claude Code session as the proxy sees it: frozen edits, hook work, daemon calls.

The request path, the daemon session, masks, aux runs and the stats are the shared proxy
session's (``agents/_proxy/session.py``); this module adds what is Claude Code's own: its
hooks (a command's digest replaces the output in PostToolUse, a failing one's becomes a tail
edit; Read/Grep/Glob results are tagged one batch per assistant message; a Write's fact joins
the stub of its content), its side and compaction requests (replayed, never decided), thinking
blocks' bound prefixes, and a recall hint worded for a command. Requests arrive already
converted by ``anthropic_wire``; already-frozen edits keep being replayed when the daemon is
gone, and ``claude --continue`` gets the same view.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Unpack

from ctxwrap.agents._proxy.cache_state import head_key
from ctxwrap.agents._proxy.session import Decision, ProxySession, SessionArgs
from ctxwrap.agents._proxy.wire import Usage, Wire
from ctxwrap.agents.claude import anthropic_wire as wire
from ctxwrap.agents.claude import auto_compact
from ctxwrap.engine import thinking as th
from ctxwrap.engine.edits import Edit, MaskEdit, StripWriteEdit, TombstoneEdit, u16len
from ctxwrap.engine.shellread import shell_words
from ctxwrap.engine.thinking import checks_thinking_prefix
from ctxwrap.mechanisms import keeps_result_of
from ctxwrap.mechanisms.thinking import ClearingState, OldThinking, plan

JsonDict = dict[str, Any]
WIRE: Wire = wire  # anthropic_wire implements the proxies' wire contract (checked by mypy)

AMNESIA_HOOK_TOOLS = {"Read": "read", "Grep": "grep", "Glob": "find"}
BASH_DEADLINE_S = 15.0  # like the bridge's bash call: the digest is worth a short wait
# A tombstone, a mask or a removal replaces a result: the first one stays (a stub does not).
RESULT_EDITS = ("tombstone", "mask", "remove")
# Tokens per character of a Claude Code request (its JSON) until a response says: the corpus's
# requests count 0.25-0.35; the session's own figure replaces it at the first usage.
TOKENS_PER_CHAR = 0.3
# The rule that lets the model run `ctxwrap recall` without asking (`ctxwrap doctor` checks for
# one), and what Claude Code 2.1 answers a command no rule allows under `claude -p`
RECALL_RULE = "Bash(ctxwrap recall:*)"
_REFUSED = "This command requires approval"
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


class ClaudeSession(ProxySession):
    wire = WIRE
    provider = "anthropic"

    def __init__(
        self,
        session_id: str,
        *,
        compact_config: auto_compact.UserConfig | None = None,
        **args: Unpack[SessionArgs],
    ) -> None:
        super().__init__(session_id, **args)
        self.compact_config = compact_config or auto_compact.UserConfig()
        self.pending_digests: dict[str, tuple[str, int]] = {}  # failure path: text, plain chars
        self.pending_tags: dict[str, threading.Event] = {}
        self.rounds: dict[str, TagRound] = {}  # read-like tool_use id → its unsent round
        self.betas = ""  # the last main request's anthropic-beta header
        self.refused_recalls = 0  # the model's `ctxwrap recall`s Claude Code refused
        self.noted_model: tuple[str, int] | None = None  # (model, window) the daemon has
        # plain Claude Code's auto-compact threshold for that model (None: reactive or off)
        self.compact_threshold: int | None = None
        self.pending_compaction: JsonDict | None = None  # note_compaction's, not yet sent
        # old thinking (mechanisms/thinking.py): each conversation's clearing point, kept
        # across --continue so a resumed session leaves out the same turns (no rewrite)
        self.old_thinking = OldThinking()
        self.clearings: dict[str, ClearingState] = _load_clearings(self._clearing_file)
        self.tokens_per_char = TOKENS_PER_CHAR
        self._request = threading.local()  # this thread's request: the keep it was sent with
        # the provider cleared other turns than the proxy's keep meant: off for the session
        self.thinking_mismatch: str | None = None

    # -- the daemon session ---------------------------------------------------------------------

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

    # -- old thinking: the provider's own edit, its keep raised where it pays back ----------------

    @property
    def _clearing_file(self) -> Path | None:
        return self.state_file.with_suffix(".thinking.json") if self.state_file else None

    def prepare(self, body: JsonDict) -> list[Edit]:
        self._request.keep = None
        self._request.key = object()  # what a clearing's rewrite is charged under
        return super().prepare(body)

    def _request_key(self) -> object:
        return getattr(self._request, "key", None)

    def thinking_keep(self) -> th.Keep | None:
        """The `keep` this thread's last `prepare` sent in place of the agent's "all" (None:
        the agent's edit went as it was)."""
        keep: th.Keep | None = getattr(self._request, "keep", None)
        return keep

    def _clear_old_thinking(self, d: Decision) -> None:
        """Under the lock: send the `keep` that leaves out the turns before the conversation's
        clearing point, moving the point where the payback rule says (mechanisms/thinking.py).

        Only where Claude Code itself asked to keep "all" under the context-management beta:
        the edit is the API's, applied after its thinking checks; `messages` stay as sent."""
        body = d.body
        if self.cfg.get("clear_old_thinking", True) is False or self.cfg.get("off"):
            return
        if self.thinking_mismatch is not None:
            return  # the agent's own edit again: one rewrite, not one at every request
        try:
            asked = th.clear_thinking_keep(body)
        except ValueError:
            return  # the provider answers the agent's own malformed edit
        messages = body.get("messages")
        if (
            asked != "all"
            or th.CONTEXT_MANAGEMENT_BETA not in self.betas
            or not th.accepts_context_editing(body.get("model"))
            or not isinstance(messages, list)
        ):
            return
        key = head_key(d.items)
        if key is None:
            return
        state = self.clearings.setdefault(key, ClearingState())
        point = state.point
        ttl = wire.marked_ttl_s(body)
        keep = plan(
            self.old_thinking,
            state,
            messages,
            cold=d.cold not in (None, "warm"),  # "warm": a warm request mask_warm may mask
            tokens_per_char=self.tokens_per_char,
            threshold=self.compact_threshold,
            one_hour=ttl is not None and ttl > 300.0,
            savings=None if self.cfg.get("rewrite_within_savings", True) is False else self.savings,
            request=self._request_key(),
        )
        if state.point != point:
            _save_clearings(self._clearing_file, self.clearings)
        if keep is None:
            return
        body["context_management"] = th.with_clear_thinking(body, keep)["context_management"]
        self._request.keep = keep

    def billed(self, body: JsonDict, keep: th.Keep) -> JsonDict:
        return billed_body(body, keep)

    def check_cleared(self, body: JsonDict, keep: th.Keep, reported: int | None) -> None:
        """The response says how many thinking turns its edit cleared. Where that is not what
        `keep` meant here, the API counts turns otherwise than this proxy, and a held keep
        would clear a different part at each request (a cache rewrite every time): stop
        clearing for the session (docs/accounting.md, "Old thinking")."""
        if reported is None or self.thinking_mismatch is not None:
            return
        messages = body.get("messages")
        if not isinstance(messages, list):
            return
        meant = len({b.turn for b in th.cleared_by_keep(messages, keep, body.get("model"))})
        if reported != meant:
            self.thinking_mismatch = f"the provider cleared {reported} thinking turns, not {meant}"

    def _took_usage(self, chars: int, usage: Usage | None) -> None:
        # the session's own tokens per character: the next clearing's estimate of its rewrite
        if usage is None or not usage.seen:
            return
        counted = usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens
        if counted > 0 and chars > 0:
            self.tokens_per_char = min(1.0, max(0.1, counted / chars))

    # -- the request path: the shared skeleton's hooks ------------------------------------------

    def _decides(self, body: JsonDict, items: list[Any]) -> bool:
        if not body.get("tools"):
            # A side request (the interactive session's title) is another conversation: it
            # must neither mark the history as seen nor get edits decided.
            return False
        self.ensure_registered()  # the cache TTL is the daemon's setting
        self._note_model(body)
        # Claude Code's summarisation request: the summariser is shown what the agent was
        # (frozen edits); a mask decided here would hide history from the summary and pay a
        # rewrite of a prefix dropped right after. Priced as a call (record_call).
        return not wire.is_compaction_request(items)

    def _take_tail(self, d: Decision) -> None:
        self._clear_old_thinking(d)
        for m in d.tail.messages:
            cid = m.toolCallId
            if m.role == "toolResult" and cid in self.pending_digests:
                text, plain = self.pending_digests.pop(cid)
                d.fresh.append(
                    TombstoneEdit(toolCallId=cid, text=text, savedChars=plain - u16len(text))
                )
                self.digests[cid] = (plain, u16len(text))
        # Results the next request carries: their round's batch is due now, whatever of it
        # is still missing (a denied call never gets a hook).
        due = {id(r): r for i in d.ids if (r := self.rounds.get(i)) is not None}
        for r in due.values():
            self._take_round(r)
        waits = [self.pending_tags[i] for i in d.ids if i in self.pending_tags]
        d.extra = (list(due.values()), waits)

    def _tool_work(self, d: Decision) -> None:
        for r in d.extra[0]:
            self._send_round(r)
        self._keep_results(d)
        self._count_refused_recalls(d)

    def _count_refused_recalls(self, d: Decision) -> None:
        """The model's `ctxwrap recall` that Claude Code refused (no rule allows it, and
        `claude -p` does not ask; or a deny rule): counted for the exit line, which says how to
        allow it. ctxwrap never adds the rule itself (what the model may run is the user's)."""
        failed = {
            m.toolCallId
            for m in d.tail.messages
            if m.role == "toolResult" and m.isError and m.toolName == "bash" and m.toolCallId
        }
        if not failed:
            return
        inputs = wire.tool_inputs(d.items, failed)
        for cid, text in wire.result_texts(d.items, failed).items():
            refused = text.startswith(_REFUSED) or (
                text.startswith("Permission to use Bash") and "has been denied" in text
            )
            command = (inputs.get(cid) or {}).get("command") if refused else None
            words = shell_words(command) if isinstance(command, str) else None
            if words and len(words) > 1 and words[0].rsplit("/", 1)[-1] == "ctxwrap":
                self.refused_recalls += words[1] == "recall"

    def exit_notes(self) -> list[str]:
        if not self.refused_recalls:
            return []
        times = "once" if self.refused_recalls == 1 else f"{self.refused_recalls} times"
        return [
            f"Claude Code refused the model's `ctxwrap recall` {times}: to let it get back what "
            f'ctxwrap hid, add "{RECALL_RULE}" to permissions.allow in ~/.claude/settings.json '
            "(ctxwrap doctor)"
        ]

    def _keep_results(self, d: Decision) -> None:
        """The tail's results of tools no other mechanism takes (an Edit's snippet, a Task's
        report): kept by the daemon so that masking may take them once old. No hook gives
        their text as the model sees it; the request does."""
        if self.cfg.get("mask", True) is False or self.cfg.get("off"):
            return
        least = self._cfg_int("mask_min_chars", 500)
        names = {
            m.toolCallId: m.toolName
            for m in d.tail.messages
            if m.role == "toolResult"
            and m.toolCallId
            and m.toolName
            and not m.isError
            and (m.chars or 0) >= least
            and keeps_result_of(m.toolName)
        }
        for cid, text in wire.result_texts(d.items, names).items():
            self._keep_for_recall(cid, "", text, tool_name=str(names[cid]))

    def _await_tags(self, d: Decision) -> None:
        # A request waits for its tags only while the tagger answers within tag_wait_ms
        # (agents/_proxy/tag_wait.py): one still pending is RETAIN (invariant 4), and a late
        # DROP becomes a history mask where hiding is paid for anyway (issue 43).
        budget = self.tag_wait.allowance(self._cfg_int("tag_wait_ms", 400) / 1000)
        deadline = time.monotonic() + budget
        for ev in d.extra[1]:
            ev.wait(max(0.0, deadline - time.monotonic()))

    def _edited(self) -> set[str]:
        return self.frozen.result_edited(RESULT_EDITS)

    def _keep(self, d: Decision) -> set[str]:
        # an edit there gets the request refused (400) or the model's reasoning dropped
        if not checks_thinking_prefix(d.body.get("model")):
            return set()
        return wire.bound_by_thinking(d.items)

    def _worded(self, edit: TombstoneEdit | MaskEdit, d: Decision) -> Edit:
        return edit.model_copy(update={"text": recall_hint(edit.text)})

    def _tail_edit(self, edit: Edit, d: Decision) -> Edit | None:
        if isinstance(edit, TombstoneEdit):
            return self._worded(edit, d)
        if isinstance(edit, StripWriteEdit) and edit.toolCallId in self.facts:
            # The fact travels inside the frozen stub: Claude Code drops hook context on
            # --continue, a frozen edit is replayed by us.
            text = f"{edit.text} {self.facts[edit.toolCallId]}"
            saved = edit.savedChars - (u16len(text) - u16len(edit.text))
            return edit.model_copy(update={"text": text, "savedChars": saved})
        return edit

    def _tail_frozen(self, d: Decision) -> None:
        for i in d.ids:
            self.pending_tags.pop(i, None)

    # -- stats ------------------------------------------------------------------------------------

    def _is_call(self, body: JsonDict) -> bool:
        """A side request (no `tools`: the interactive session's title, …) is no call of the
        agent's conversation: no `/v1/llm_call`, so the session's LLM calls are the agent's
        own; its provider usage still goes to `/v1/turn_end` — it is paid for, under plain
        Claude Code just the same."""
        return bool(body.get("tools"))

    def _llm_call_fields(self, body: JsonDict) -> JsonDict:
        # the 1-hour cache (subscription logins): priced with its lifetime and rate
        marked = wire.marked_ttl_s(body)
        return {"cache_ttl_s": marked if marked is not None and marked > 300.0 else None}

    def _before_llm_call(self, body: JsonDict) -> None:
        self._send_compaction()

    def _plain_prefix(self, mine: JsonDict | None, shared: tuple[int, int]) -> int | None:
        """Plain's request is the agent's own with the bash outputs the hook digested whole."""
        if mine is None:
            return None
        chars, count = shared
        # blocks: tools, system, then one per message
        ids = wire.all_tool_ids((mine.get("messages") or [])[: max(count - 2, 0)])
        return chars + sum(p - d for c, (p, d) in self.digests.items() if c in ids)

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

    def _on_shutdown(self) -> None:
        self._send_compaction()  # a compaction the session ended with

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
        if wire.is_lookup(tool) and name == "PostToolUse":
            self._add_lookup(cid, tool, event)
            return {}
        if (tool in AMNESIA_HOOK_TOOLS or wire.is_lookup(tool)) and name == "PostToolUseFailure":
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
        digest = self._ask_digest(cid, command, text, exit_code, BASH_DEADLINE_S, full_path)
        return recall_hint(digest) if digest is not None else None

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
            self._keep_for_recall(cid, _command_of(event), text)
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
        if tool not in AMNESIA_HOOK_TOOLS and not wire.is_lookup(tool):
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
        self._join_round(cid, {"tool_call_id": cid, "tool_name": tool, "input": args, "text": text})

    def _add_lookup(self, cid: str, tool: str, event: JsonDict) -> None:
        """A web or MCP tool's answer joins its round's batch as a lookup: stored behind a
        recall handle and tagged like a read. An answer with anything but text (an image) is
        left alone, since what the store keeps could not give it back; its round need not
        wait for it."""
        text = lookup_response_text(tool, event.get("tool_response"))
        if text is None:
            self._round_call_ended(cid)
            return
        args = wire.lookup_input(tool, event.get("tool_input"))
        self._join_round(
            cid, {"tool_call_id": cid, "tool_name": "fetch", "input": args, "text": text}
        )

    def _join_round(self, cid: str, item: JsonDict) -> None:
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
            try:
                self._tag_batches(
                    items, time.monotonic() + self._cfg_int("aux_timeout_ms", 20000) / 1000
                )
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
        reply = self._ask_write_fact(cid, str(tool_input.get("file_path", "?")), content)
        if not reply:
            return
        self._set_fact(cid, reply.get("text") if isinstance(reply.get("text"), str) else None)
        aux = reply.get("aux")
        if not isinstance(aux, dict) or self.aux is None:
            return
        # the next request may wait for it as for a tag
        limit = self._cfg_int("aux_timeout_ms", 20000) / 1000
        with self.lock:
            done = self._aux_beside(
                aux, limit, lambda fact: self._set_fact(cid, fact), "ctxwrap-write-fact"
            )
            self.pending_tags[cid] = done


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


def billed_body(body: JsonDict, keep: th.Keep) -> JsonDict:
    """`body` as the provider counts it once its edit with `keep` applied: the thinking blocks
    it leaves out removed (for the stats only; never sent)."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        return body
    gone: dict[int, set[int]] = {}
    for b in th.cleared_by_keep(messages, keep, body.get("model")):
        gone.setdefault(b.message, set()).add(b.block)
    if not gone:
        return body
    out = list(messages)
    for i, blocks in gone.items():
        m = messages[i]
        out[i] = {**m, "content": [b for j, b in enumerate(m["content"]) if j not in blocks]}
    return {**body, "messages": out}


def _load_clearings(path: Path | None) -> dict[str, ClearingState]:
    """The clearing points a resumed session had (a missing or damaged file: none)."""
    if path is None:
        return {}
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(raw, dict):
        return {}
    return {
        k: ClearingState(point=v)
        for k, v in raw.items()
        if isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool)
    }


def _save_clearings(path: Path | None, clearings: dict[str, ClearingState]) -> None:
    if path is None:
        return
    points = {k: s.point for k, s in clearings.items() if s.point is not None}
    try:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(points))
        os.replace(tmp, path)
    except OSError:
        pass  # the next request of a resumed session decides again


def lookup_response_text(tool: str, resp: Any) -> str | None:
    """The text of a lookup's answer as Claude Code's PostToolUse reports it, or None when it
    holds more than text: an MCP tool's content blocks (`[{"type": "text", "text": …}]`),
    WebFetch's `result`, WebSearch's commentary and hits (title and URL, one a line)."""
    if isinstance(resp, str):
        return resp
    if tool == "WebFetch" and isinstance(resp, dict):
        return str(resp.get("result") or "")
    if tool == "WebSearch" and isinstance(resp, dict):
        lines: list[str] = []
        for r in resp.get("results") or ():
            if isinstance(r, str):
                lines.append(r)
            elif isinstance(r, dict):
                for hit in r.get("content") or ():
                    if isinstance(hit, dict):
                        lines.append(f"{hit.get('title', '')} {hit.get('url', '')}".strip())
        return "\n".join(lines)
    blocks = resp.get("content") if isinstance(resp, dict) else resp
    if isinstance(blocks, list):
        if not all(isinstance(b, dict) and b.get("type") == "text" for b in blocks):
            return None
        return "\n".join(str(b.get("text", "")) for b in blocks)
    return None
