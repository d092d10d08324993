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
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ctxwrap.agents._proxy import (
    DaemonLink,
    FrozenEdits,
    cache_state,
    load_cache_states,
    save_cache_states,
)
from ctxwrap.agents._proxy.tag_wait import TagWait
from ctxwrap.agents.codex import auto_compact, commands
from ctxwrap.agents.codex import responses_wire as wire
from ctxwrap.engine.edits import (
    Edit,
    MaskEdit,
    StripWriteEdit,
    TombstoneEdit,
    describe_tail,
    tail_ids,
    u16len,
    utf8len,
)
from ctxwrap.engine.facts import line_count
from ctxwrap.engine.masking import call_paths

JsonDict = dict[str, Any]
# a request's blocks as sent and as the agent sent it (`_call_blocks`)
_Blocks = tuple[list[tuple[str, int]], list[tuple[str, int]]]
AuxRunner = Callable[[JsonDict, float], JsonDict]

DIGEST_DEADLINE_S = 15.0  # like the bridge's bash call: a digest is worth a short wait
TAG_DEADLINE_S = 5.0  # a tag needs an aux answer now: the output reached us with this request
WRITE_CONTENT_MAX = 64 * 1024
TAG_BATCH_MAX = 16


class CodexSession:
    def __init__(
        self,
        session_id: str,
        *,
        daemon: DaemonLink,
        state_file: Path | None,
        aux: AuxRunner | None,
        start_info: JsonDict,
        provider: str = "openai",
        compact_config: Mapping[str, Any] | None = None,
    ) -> None:
        self.session_id = session_id
        self.daemon = daemon
        self.aux = aux
        self.provider = provider
        # the user's config keys that say where plain Codex compacts (auto_compact.py)
        self.compact_config: Mapping[str, Any] = compact_config or {}
        model = start_info.get("model")
        self.noted_model: str | None = None
        if isinstance(model, dict) and isinstance(model.get("id"), str):
            self.noted_model = model["id"]
            start_info = {**start_info, **self._model_note(model["id"])}
        self.start_info = start_info
        self.cfg: JsonDict = {}
        self.registered = False
        daemon.on_unknown_session = self._register_again
        self.frozen = FrozenEdits(state_file)
        self.frozen.load()
        self.facts: dict[str, str] = {}
        self.tag_wait = TagWait()
        self.seen: set[str] = set()
        self.first_request = True
        self.last_prompt: str | None = None
        self.call_index = 0
        # each conversation's latest call (llm_call prefixes)
        self.prefix_chain = cache_state.PrefixChain()
        self.turn_index = 0
        self.lock = threading.RLock()
        self.state_file = state_file
        self.conversations = load_cache_states(self.cache_file)

    # -- daemon session -----------------------------------------------------------------------

    def _register_again(self) -> bool:
        self.registered = False
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
        """A model switched mid-thread (`/model`): the daemon prices and compacts by it."""
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

    def _cfg_int(self, key: str, default: int) -> int:
        v = self.cfg.get(key, default)
        return v if isinstance(v, int) and not isinstance(v, bool) else default

    def _timeout(self) -> float:
        return self._cfg_int("bridge_timeout_ms", 1500) / 1000

    # -- the request path -----------------------------------------------------------------------

    def prepare(self, body: JsonDict) -> list[Edit]:
        """Decide edits for the unseen tail, freeze them, apply every frozen edit to `body`."""
        items = body.get("input")
        if not isinstance(items, list):
            return []
        conv = wire.to_neutral(items)
        self.ensure_registered()
        with self.lock:
            if self.first_request:
                # History in the first request (`codex resume`, a fork) was seen by the model.
                self.seen |= wire.all_call_ids(items)
                self.first_request = False
            tail = describe_tail(conv.messages, self.seen)
            ids = tail_ids(tail)
            seen_before = set(self.seen)
            cold, gap_s = self._cache_boundary(body, items)
            # A digest may still be masked later (as under pi and Claude Code, where the digest
            # is the agent's own output); any other replacement is final.
            edited = self.frozen.result_edited() - set(self.frozen.digests)
        self._note_prompt(conv)
        fresh: list[Edit] = []
        if not self.cfg.get("off") and self.registered:
            fresh += self._tool_work(conv, tail.start)
        if (tail.messages or cold is not None) and self.registered:
            mask = self._mask_request(items, cold, gap_s, edited) if cold else None
            request: JsonDict = {
                "session_id": self.session_id,
                "call_index": self.call_index,
                "message_count": len(conv.messages),
                "tail": tail.to_json(),
            }
            if mask is not None:
                request["mask"] = mask
            reply = self.daemon.call("/v1/context", request, timeout=self._timeout())
            answered = [e for e in _edits((reply or {}).get("edits")) if e is not None]
            masks_ok = (
                acceptable_masks(
                    conv,
                    [e.toolCallId for e in answered if isinstance(e, MaskEdit)],
                    seen_before,
                    edited,
                )
                if mask is not None
                else set()
            )
            digested = {e.toolCallId for e in fresh}
            for edit in answered:
                if isinstance(edit, MaskEdit):
                    if edit.toolCallId in masks_ok:
                        masks_ok.discard(edit.toolCallId)
                        fresh.append(self._with_header(edit, conv))
                    continue
                if edit.toolCallId not in ids or edit.toolCallId in digested:
                    continue  # only the unseen tail is ever edited (invariant 3)
                if isinstance(edit, TombstoneEdit):
                    fresh.append(self._with_header(edit, conv))
                elif isinstance(edit, StripWriteEdit):
                    fresh.append(self._strip_with_fact(edit, conv))
        with self.lock:
            new = [e for e in fresh if self.frozen.freeze(e)]
            self.frozen.persist(new)
            self.seen |= ids
            return wire.apply_edits(body, self.frozen.edits)

    def _note_prompt(self, conv: wire.Conversation) -> None:
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

    def replay(self, body: JsonDict) -> list[Edit]:
        """Frozen edits only, no decisions (remote compaction, or our side is failing)."""
        with self.lock:
            return wire.apply_edits(body, self.frozen.edits)

    def _with_header(self, edit: TombstoneEdit | MaskEdit, conv: wire.Conversation) -> Edit:
        """Codex's own header (exit status, wall time) stays above a tombstone of a command."""
        info = conv.calls.get(edit.toolCallId)
        header = ""
        if info is not None and info.kind in ("bash", "read", "grep", "find"):
            header = commands.split_exec_output(conv.outputs.get(edit.toolCallId, "")).header
        if not header:
            return edit
        return edit.model_copy(
            update={"text": header + edit.text, "savedChars": edit.savedChars - u16len(header)}
        )

    def _strip_with_fact(self, edit: StripWriteEdit, conv: wire.Conversation) -> Edit:
        fact = self.facts.get(edit.toolCallId)
        text = f"{edit.text} {fact}" if fact else edit.text
        # the edit replaces the added file's `+` lines (content plus one "+" per line)
        info = conv.calls.get(edit.toolCallId)
        plain = (info.added.end - info.added.start) if info and info.added else 0
        return edit.model_copy(update={"text": text, "savedChars": plain - u16len(text) - 1})

    # -- tool work: digests, tags, facts for the tail's outputs ---------------------------------

    def _tool_work(self, conv: wire.Conversation, start: int) -> list[Edit]:
        digests: list[tuple[str, wire.CallInfo, str]] = []
        tags: list[JsonDict] = []
        writes: list[wire.CallInfo] = []
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
            elif info.kind in ("read", "grep", "find") and not m.get("isError"):
                tags.append(
                    {
                        "tool_call_id": cid,
                        "tool_name": info.kind,
                        "input": {"command": info.command},
                        "text": parsed.body,
                    }
                )
            elif info.kind == "write":
                writes.append(info)
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

    def _digest(self, cid: str, info: wire.CallInfo, text: str) -> Edit | None:
        """A long command output → Codex's header + the daemon's digest of what Codex kept."""
        deadline = time.monotonic() + DIGEST_DEADLINE_S
        parsed = commands.split_exec_output(text)
        reply = self.daemon.call(
            "/v1/tool_result",
            {
                "session_id": self.session_id,
                "tool_call_id": cid,
                "tool_name": "bash",
                "input": {"command": info.command or ""},
                "text": parsed.body,
                "is_error": bool(parsed.exit_code),
                "exit_code": parsed.exit_code,
            },
            timeout=DIGEST_DEADLINE_S,
        )
        if not reply or reply.get("action") != "replace" or not isinstance(reply.get("text"), str):
            return None
        digest: str = reply["text"]
        aux = reply.get("aux")
        if isinstance(aux, dict):
            better = self._run_aux(aux, deadline)
            if better:
                digest = better
        new = parsed.header + digest
        plain = u16len(text)
        with self.lock:
            self.frozen.digests[cid] = (plain, u16len(new))
        return TombstoneEdit(toolCallId=cid, text=new, savedChars=plain - u16len(new))

    def _tag(self, items: list[JsonDict], tagged: threading.Event) -> None:
        """One tag batch for the round's read-like outputs, off the request path."""
        started = time.monotonic()
        deadline = started + min(TAG_DEADLINE_S, self._cfg_int("aux_timeout_ms", 20000) / 1000)
        try:  # a thread of ours: nothing of it may reach the user's terminal
            for i in range(0, len(items), TAG_BATCH_MAX):
                reply = self.daemon.call(
                    "/v1/tag_batch",
                    {"session_id": self.session_id, "results": items[i : i + TAG_BATCH_MAX]},
                    timeout=self._timeout(),
                )
                aux = (reply or {}).get("aux")
                if isinstance(aux, dict):
                    pace = self.tag_wait.begin()  # the tagger's pace
                    try:
                        self._run_aux(aux, deadline)
                    finally:
                        self.tag_wait.end(pace)
        except Exception:
            pass
        finally:
            tagged.set()

    def _write_fact(self, info: wire.CallInfo) -> str | None:
        if info.added is None:
            return None
        content = info.added.content
        reply = self.daemon.call(
            "/v1/tool_result",
            {
                "session_id": self.session_id,
                "tool_call_id": info.call_id,
                "tool_name": "write",
                "input": {"path": info.added.path, "content": content[:WRITE_CONTENT_MAX]},
                "text": "",
                "content_bytes": utf8len(content),
                "content_lines": line_count(content),
            },
            timeout=self._timeout(),
        )
        if not reply:
            return None
        fact = reply.get("text") if isinstance(reply.get("text"), str) else None
        aux = reply.get("aux")
        if not isinstance(aux, dict) or self.aux is None:
            return fact
        # The aux model's better fact beside the request, waited for only while it answers
        # within tag_wait_ms (issue 43); else the daemon's own fact goes into the stub.
        better: list[str | None] = []
        done = threading.Event()

        def run() -> None:
            pace = self.tag_wait.begin()
            try:
                deadline = time.monotonic() + min(
                    TAG_DEADLINE_S, self._cfg_int("aux_timeout_ms", 20000) / 1000
                )
                better.append(self._run_aux(aux, deadline))
            except Exception:
                pass  # a thread of ours: nothing of it may reach the user's terminal
            finally:
                self.tag_wait.end(pace)
                done.set()

        allowance = self.tag_wait.allowance(self._cfg_int("tag_wait_ms", 400) / 1000)
        threading.Thread(target=run, name="ctxwrap-codex-fact", daemon=True).start()
        done.wait(allowance)
        return (better[0] if better else None) or fact

    def _run_aux(self, aux: JsonDict, deadline: float) -> str | None:
        """Run a daemon-built aux request on the session's upstream; the daemon judges it."""
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

    # -- cold boundaries and history masks ------------------------------------------------------

    @property
    def cache_file(self) -> Path | None:
        return self.state_file.with_suffix(".cache.json") if self.state_file else None

    def _cache_boundary(
        self, body: JsonDict, items: list[Any]
    ) -> tuple[cache_state.MaskTrigger | None, float | None]:
        """Record this request in its prefix's cache state; say if the cache is cold anyway."""
        key = cache_state.head_key(items)
        if key is None:
            return None, None
        model = body.get("model")
        now = cache_state.CacheState(
            time.time(),
            model if isinstance(model, str) else None,
            cache_state.tools_key(body.get("tools"), body.get("instructions")),
        )
        ttl = self.cfg.get("cache_ttl_s", 300.0)
        ttl_s = float(ttl) if isinstance(ttl, int | float) and not isinstance(ttl, bool) else 300.0
        reason = cache_state.cold_reason(self.conversations, key, now, ttl_s=ttl_s)
        prev = self.conversations.get(cache_state.variant_key(key, now))
        gap = now.at - prev.at if prev is not None else None
        self.conversations[cache_state.variant_key(key, now)] = now
        self._persist_cache_states()
        if self.cfg.get("mask") is False or self.cfg.get("off"):
            return None, gap
        if reason is None and prev is not None and self.cfg.get("mask_warm") is True:
            return "warm", gap
        return reason, gap

    def _persist_cache_states(self) -> None:
        save_cache_states(self.cache_file, self.conversations)

    def _mask_request(
        self,
        items: list[Any],
        reason: cache_state.MaskTrigger,
        gap_s: float | None,
        edited: set[str],
    ) -> JsonDict:
        # The history as the model has it: with the frozen edits (a digest's size, not the
        # raw output's, is what a mask of it saves).
        seen_items = json.loads(json.dumps(items))
        with self.lock:
            wire.apply_edits({"input": seen_items}, self.frozen.edits)
        neutral = wire.to_neutral(seen_items, notes_role="custom").messages
        return {
            "reason": reason,
            "gap_s": round(gap_s, 3) if gap_s is not None else None,
            "history": describe_tail(neutral, ()).to_json(),
            "paths": call_paths(neutral),
            "edited": sorted(edited),
            "calls": self.call_index,
        }

    # -- stats ------------------------------------------------------------------------------------

    def _call_blocks(self, body: JsonDict, applied: list[Edit], original: bytes | None) -> _Blocks:
        """The request's blocks as sent, and as Codex sent it (`original` where ctxwrap edited
        it; [] when it does not parse). Outside the lock: a request can be megabytes."""
        blocks = wire.prefix_blocks(body)
        if not applied:
            return blocks, blocks
        mine = cache_state.parsed_original(original)
        return blocks, (wire.prefix_blocks(mine) if mine else [])

    def _prefixes(
        self, call: _Blocks, conversation: str | None, index: int
    ) -> tuple[int | None, int | None, int | None]:
        """What this call shares (chars) with the previous call of its conversation, as sent
        and as Codex sent it (which plain Codex sent), and that call's index where it is not
        the one before (`PrefixChain`): a mask's rewrite, Codex's own compaction are priced as
        what they write. Unknown on a proxy's first call (a resumed thread's too): an
        append-only list is assumed. Under the lock, with the call's index."""
        blocks, plain_blocks = call
        ref, sent, shared = self.prefix_chain.measure(conversation, index, blocks, plain_blocks)
        plain = shared[0] if shared is not None else None
        return sent, plain, (ref if ref is not None and ref != index - 1 else None)

    def record_call(
        self,
        body: JsonDict,
        applied: list[Edit],
        usage: wire.Usage | None,
        original: bytes | None = None,
    ) -> None:
        size = wire.measure(body)
        present = wire.all_call_ids(body.get("input") or [])
        blocks = self._call_blocks(body, applied, original)
        with self.lock:
            digests = self.frozen.digests
            bash = sum(p - d for c, (p, d) in digests.items() if c in present)
            amnesia = sum(
                e.savedChars
                for e in applied
                if (isinstance(e, TombstoneEdit) and e.toolCallId not in digests)
                or isinstance(e, MaskEdit)
            )
            writes = sum(e.savedChars for e in applied if isinstance(e, StripWriteEdit))
            index, self.call_index = self.call_index, self.call_index + 1
            shared, plain_shared, prefix_of = self._prefixes(
                blocks, cache_state.head_key(body.get("input") or []), index
            )
        model = body.get("model") if isinstance(body.get("model"), str) else None
        self._note_model(model)
        self.daemon.call(
            "/v1/llm_call",
            {
                "session_id": self.session_id,
                "call_index": index,
                "message_count": len(body.get("input") or []),
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
                    "writes": writes,
                    "skills": 0,
                    "tools": 0,
                },
                "model": f"{self.provider}/{model}" if model else None,
            },
            timeout=3.0,
        )
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
                    "cache_write_tokens": 0,
                    "model": f"{self.provider}/{usage.model or model}"
                    if (usage.model or model)
                    else None,
                    "call_index": index,
                },
                timeout=3.0,
            )

    def record_compaction(self, usage: wire.Usage, trigger: str = "auto") -> None:
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

    def shutdown(self) -> None:
        if self.registered:
            with contextlib.suppress(Exception):
                self.daemon.call(
                    "/v1/sessions/shutdown",
                    {"session_id": self.session_id, "reason": "quit"},
                    timeout=0.5,
                )


def _edits(raw: Any) -> list[Edit | None]:
    from ctxwrap.engine.edits import edit_from_json

    return [edit_from_json(e) for e in raw] if isinstance(raw, list) else []


def acceptable_masks(
    conv: wire.Conversation, candidates: list[str], seen: set[str], edited: set[str]
) -> set[str]:
    """The masks the proxy accepts (the daemon's answer is checked, not trusted): an existing
    output whose call came before it, that the model has seen, is no error, has no edit yet
    and occurs once. Twin of acceptableMasks in the pi bridge, on the neutral shape."""
    wanted = set(candidates)
    calls: set[str] = set()
    ok: set[str] = set()
    found: set[str] = set()
    twice: set[str] = set()
    for m in conv.messages:
        if m.get("role") == "assistant":
            for b in m.get("content") or []:
                if isinstance(b, dict) and b.get("type") == "toolCall":
                    calls.add(str(b.get("id")))
        elif m.get("role") == "toolResult" and isinstance(m.get("toolCallId"), str):
            cid = m["toolCallId"]
            if cid in found:
                twice.add(cid)
            found.add(cid)
            if (
                cid in wanted
                and cid in calls
                and cid in seen
                and cid not in edited
                and m.get("isError") is not True
            ):
                ok.add(cid)
    return ok - twice
