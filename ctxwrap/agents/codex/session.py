"""One Codex thread as the proxy sees it: every decision is made on the request path.

Codex's hooks cannot replace a tool's output, so there is no hook work: when a request first
carries a tool output (the unseen tail), the proxy asks the daemon for what the pi bridge would
have got — a digest of a long command output, a RETAIN/DROP tag for a read-like command, a fact
for a large added file — and then ``/v1/context`` for the tail's edits. The edits are frozen
(keyed by ``call_id``), written to ``$XDG_STATE_HOME/ctxwrap/codex/<thread>.jsonl`` and replayed
on every later request, so ``codex resume`` gets the same view. Every daemon call has a
deadline and fails open (the output goes as Codex wrote it).
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Unpack

from ctxwrap.agents._proxy.session import Decision, ProxySession, SessionArgs
from ctxwrap.agents._proxy.wire import Usage, Wire
from ctxwrap.agents.codex import auto_compact, commands, responses_wire
from ctxwrap.agents.codex import responses_wire as wire
from ctxwrap.engine.edits import Edit, MaskEdit, StripWriteEdit, TombstoneEdit, u16len
from ctxwrap.mechanisms import keeps_result_of

JsonDict = dict[str, Any]
WIRE: Wire = wire  # responses_wire implements the proxies' wire contract (checked by mypy)

DIGEST_DEADLINE_S = 15.0  # like the bridge's bash call: a digest is worth a short wait
TAG_DEADLINE_S = 5.0  # a tag needs an aux answer now: the output reached us with this request


class CodexSession(ProxySession):
    wire = WIRE
    # No `/v1/context` without the daemon's session: its tool work needs it first.
    decide_unregistered = False

    def __init__(
        self,
        session_id: str,
        *,
        provider: str = "openai",
        compact_config: Mapping[str, Any] | None = None,
        **args: Unpack[SessionArgs],
    ) -> None:
        self.provider = provider
        # the user's config keys that say where plain Codex compacts (auto_compact.py)
        self.compact_config: Mapping[str, Any] = compact_config or {}
        model = args["start_info"].get("model")
        noted: str | None = None
        if isinstance(model, dict) and isinstance(model.get("id"), str):
            noted = model["id"]
            args["start_info"] = {**args["start_info"], **self._model_note(model["id"])}
        super().__init__(session_id, **args)
        self.noted_model: str | None = noted
        self.last_prompt: str | None = None

    # -- the daemon session ---------------------------------------------------------------------

    def _model_note(self, model: str) -> JsonDict:
        """The model as the daemon's cost model takes it: its window and where plain Codex
        would compact (auto_compact.py), where the window is known."""
        ref: JsonDict = {"provider": self.provider, "id": model}
        window = auto_compact.context_window(model, self.compact_config)
        if window is None:
            return {"model": ref}
        return {
            "model": {**ref, "context_window": window},
            "compaction": auto_compact.compaction_settings(window, self.compact_config),
        }

    def _note_model(self, model: str | None) -> None:
        """A model switched mid-thread (`/model`), or a daemon that registered the session
        again (it has the start's model): the daemon prices and compacts by this one."""
        if not model or model == self.noted_model or not self.registered:
            return
        reply = self.daemon.call(
            "/v1/sessions/model",
            {"session_id": self.session_id, **self._model_note(model)},
            timeout=1.5,
        )
        if reply is not None:  # else told again with the next call
            self.noted_model = model

    def in_step_threshold(self, model: object) -> int | None:
        """Where plain Codex compacts on this model (auto_compact.py), for the proxy to keep
        the session's compactions in step with plain's (agents/_proxy/in_step.py); None: off,
        or a model whose window is unknown."""
        if self.cfg.get("compact_in_step", True) is False:
            return None
        name = model if isinstance(model, str) and model else self.noted_model
        window = auto_compact.context_window(name, self.compact_config) if name else None
        return (
            None if window is None else auto_compact.compaction_limit(window, self.compact_config)
        )

    # -- the request path: the shared skeleton's hooks ------------------------------------------

    def _edited(self) -> set[str]:
        # A digest may still be masked later (as under pi and Claude Code, where the digest is
        # the agent's own output); any other replacement is final.
        return self.frozen.result_edited() - set(self.frozen.digests)

    def _tool_work(self, d: Decision) -> None:
        """Codex's hooks cannot replace an output: the tail's digests, tags and facts are
        asked for here, on the request path."""
        assert isinstance(d.neutral, responses_wire.Conversation)
        self._note_prompt(d.neutral)
        if not self.cfg.get("off") and self.registered:
            d.fresh += self._work(d.neutral, d.tail.start)

    def _worded(self, edit: TombstoneEdit | MaskEdit, d: Decision) -> Edit:
        assert isinstance(d.neutral, responses_wire.Conversation)
        return self._with_header(edit, d.neutral)

    def _tail_edit(self, edit: Edit, d: Decision) -> Edit | None:
        assert isinstance(d.neutral, responses_wire.Conversation)
        if isinstance(edit, TombstoneEdit):
            return self._with_header(edit, d.neutral)
        if isinstance(edit, StripWriteEdit):
            return self._strip_with_fact(edit, d.neutral)
        return None

    def _mask_history(self, items: list[Any]) -> list[JsonDict]:
        # The history as the model has it: with the frozen edits (a digest's size, not the
        # raw output's, is what a mask of it saves).
        seen_items = json.loads(json.dumps(items))
        with self.lock:
            wire.apply_edits({"input": seen_items}, self.frozen.edits)
        return wire.to_neutral(seen_items, notes_role="custom").messages

    def _note_prompt(self, conv: responses_wire.Conversation) -> None:
        """The user's latest prompt, for the tagger's relevance judgement (pi's prompt_start)."""
        prompt = next(
            (
                m["content"]
                for m in reversed(conv.messages)
                if m.get("role") == "user" and isinstance(m.get("content"), str)
            ),
            None,
        )
        if prompt is None or prompt == self.last_prompt or not self.registered:
            return
        self.last_prompt = prompt
        self.daemon.call(
            "/v1/prompt", {"session_id": self.session_id, "prompt": prompt}, timeout=self._timeout()
        )

    def _with_header(
        self, edit: TombstoneEdit | MaskEdit, conv: responses_wire.Conversation
    ) -> Edit:
        """Codex's own header (exit status, wall time) stays above a tombstone of a command."""
        info = conv.calls.get(edit.toolCallId)
        header = ""
        if info is not None and info.kind in ("bash", "read", "grep", "find", "fetch"):
            header = commands.split_exec_output(conv.outputs.get(edit.toolCallId, "")).header
        if not header:
            return edit
        return edit.model_copy(
            update={"text": header + edit.text, "savedChars": edit.savedChars - u16len(header)}
        )

    def _strip_with_fact(self, edit: StripWriteEdit, conv: responses_wire.Conversation) -> Edit:
        fact = self.facts.get(edit.toolCallId)
        text = f"{edit.text} {fact}" if fact else edit.text
        # the edit replaces the added file's `+` lines (content plus one "+" per line)
        info = conv.calls.get(edit.toolCallId)
        plain = (info.added.end - info.added.start) if info and info.added else 0
        return edit.model_copy(update={"text": text, "savedChars": plain - u16len(text) - 1})

    # -- tool work: digests, tags, facts for the tail's outputs ---------------------------------

    def _work(self, conv: responses_wire.Conversation, start: int) -> list[Edit]:
        digests: list[tuple[str, responses_wire.CallInfo, str]] = []
        tags: list[JsonDict] = []
        writes: list[responses_wire.CallInfo] = []
        threshold = self._cfg_int("bash_min_tokens", 2000)
        for m in conv.messages[start:]:
            cid = m.get("toolCallId")
            if m.get("role") != "toolResult" or not isinstance(cid, str):
                continue
            info = conv.calls.get(cid)
            if info is None or cid in self.frozen.edits:
                continue
            text = conv.outputs.get(cid, "")
            parsed = commands.split_exec_output(text)
            if info.kind == "bash" and self.cfg.get("bash", True):
                if (len(parsed.body) + 3) // 4 >= threshold:
                    digests.append((cid, info, text))
                elif not m.get("isError"):
                    self._keep_for_recall(cid, info.command or "", parsed.body)
            elif info.kind in ("read", "grep", "find", "fetch") and not m.get("isError"):
                # a lookup's answer (an MCP tool's, the web tool's) is read like a file: stored
                # behind a recall handle and tagged, so masking may take it once it is old
                tags.append(
                    {
                        "tool_call_id": cid,
                        "tool_name": info.kind,
                        "input": responses_wire.fetch_input(info)
                        if info.kind == "fetch"
                        else responses_wire.shell_input(info),
                        "text": commands.lookup_text(parsed.body)
                        if info.kind == "fetch"
                        else parsed.body,
                    }
                )
            elif info.kind == "write":
                writes.append(info)
            elif info.kind == "other" and not m.get("isError"):
                # a tool no other mechanism takes: kept so that masking may take it once old,
                # judged by the name masking knows the call by (a failed patch is a "write")
                name = responses_wire.call_name(info)
                if keeps_result_of(name):
                    self._keep_for_recall(cid, "", parsed.body, tool_name=name)
        if not (digests or tags or writes):
            return []
        out: list[Edit] = []
        tagged = threading.Event()
        if tags:
            # Out of band (issue 43): the request waits for its tags only while the tagger
            # answers within tag_wait_ms (agents/_proxy/tag_wait.py); later they are RETAIN
            # now, and a late DROP becomes a history mask where hiding is paid for anyway.
            threading.Thread(
                target=self._tag, args=(tags, tagged), name="ctxwrap-codex-tag", daemon=True
            ).start()
        with ThreadPoolExecutor(max_workers=4, thread_name_prefix="ctxwrap-codex") as pool:
            write_jobs = [pool.submit(self._write_fact, w) for w in writes]
            digest_jobs = [pool.submit(self._digest, *d) for d in digests]
            for digest_job in digest_jobs:
                with contextlib.suppress(Exception):
                    edit = digest_job.result()
                    if edit is not None:
                        out.append(edit)
            for info, write_job in zip(writes, write_jobs, strict=True):
                with contextlib.suppress(Exception):
                    fact = write_job.result()
                    if fact:
                        with self.lock:
                            self.facts[info.call_id] = " ".join(fact.split())
        if tags:
            tagged.wait(self.tag_wait.allowance(self._cfg_int("tag_wait_ms", 400) / 1000))
        return out

    def _digest(self, cid: str, info: responses_wire.CallInfo, text: str) -> Edit | None:
        """A long command output → Codex's header + the daemon's digest of what Codex kept."""
        parsed = commands.split_exec_output(text)
        digest = self._ask_digest(
            cid, info.command or "", parsed.body, parsed.exit_code, DIGEST_DEADLINE_S
        )
        if digest is None:
            return None
        new = parsed.header + digest
        plain = u16len(text)
        with self.lock:
            self.frozen.digests[cid] = (plain, u16len(new))
        return TombstoneEdit(toolCallId=cid, text=new, savedChars=plain - u16len(new))

    def _aux_limit_s(self) -> float:
        return min(TAG_DEADLINE_S, self._cfg_int("aux_timeout_ms", 20000) / 1000)

    def _tag(self, items: list[JsonDict], tagged: threading.Event) -> None:
        """One tag batch for the round's read-like outputs, off the request path."""
        try:
            self._tag_batches(items, time.monotonic() + self._aux_limit_s())
        finally:
            tagged.set()

    def _write_fact(self, info: responses_wire.CallInfo) -> str | None:
        if info.added is None:
            return None
        reply = self._ask_write_fact(info.call_id, info.added.path, info.added.content)
        if not reply:
            return None
        fact = reply.get("text") if isinstance(reply.get("text"), str) else None
        aux = reply.get("aux")
        if not isinstance(aux, dict) or self.aux is None:
            return fact
        # The aux model's better fact beside the request, waited for only while it answers
        # within tag_wait_ms (issue 43); else the daemon's own fact goes into the stub.
        better: list[str | None] = []
        allowance = self.tag_wait.allowance(self._cfg_int("tag_wait_ms", 400) / 1000)
        done = self._aux_beside(aux, self._aux_limit_s(), better.append, "ctxwrap-codex-fact")
        done.wait(allowance)
        return (better[0] if better else None) or fact

    # -- stats ------------------------------------------------------------------------------------

    def _before_llm_call(self, body: JsonDict) -> None:
        model = body.get("model") if isinstance(body.get("model"), str) else None
        self._note_model(model)

    def _llm_call_fields(self, body: JsonDict) -> JsonDict:
        model = body.get("model") if isinstance(body.get("model"), str) else None
        return {"model": f"{self.provider}/{model}" if model else None}

    def _usage_model(self, usage: Usage, body: JsonDict) -> str | None:
        model = usage.model or (body.get("model") if isinstance(body.get("model"), str) else None)
        return f"{self.provider}/{model}" if model else None

    def record_compaction(self, usage: Usage, trigger: str = "auto") -> None:
        """Codex compacted: its summarisation request (just recorded as a call) came back.

        After the call's own record, so the compaction falls between it and the next call.
        The summary's size is its output (the reply's tokens × 4; a remote compaction's is
        encrypted). `trigger`: "auto", or "manual" for the user's `/compact`, which the plain
        session runs too; at an automatic one plain compacts with it unless its own threshold
        (auto_compact.py) made it compact as often already (docs/accounting.md).
        """
        if not self.registered:
            return
        self.daemon.call(
            "/v1/compaction",
            {
                "session_id": self.session_id,
                "reason": trigger,
                "summary_chars": usage.output_tokens * 4,
                "priced_as_call": True,
            },
            timeout=1.0,
        )
