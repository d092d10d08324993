"""The daemon's behaviour: one `Daemon` serves every pi session of the user.

Handlers are async methods taking and returning protocol models; `app.py` only does HTTP.
Per-session state that must survive a daemon restart lives in SQLite or in the pi session
itself (the bridge persists the frozen edit set); what is here in memory can be lost safely:
a lost tag means RETAIN, a lost pending aux call means the extractive digest or heuristic fact.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ctxwrap import __version__
from ctxwrap import protocol as P
from ctxwrap.aux import prompts
from ctxwrap.config import LoadedConfig, Settings, bridge_view
from ctxwrap.daemon.eventlog import EventLog
from ctxwrap.daemon.pidfile import pid_alive
from ctxwrap.daemon.rawstore import RawStore
from ctxwrap.daemon.store import Store
from ctxwrap.engine.bashout import open_trusted_spill, scrub_temp_paths, split_bash_text
from ctxwrap.engine.edits import TailToolCall, decide_edits, dropped_signatures, edit_to_json
from ctxwrap.engine.facts import aux_fact, heuristic_fact, line_count

if TYPE_CHECKING:  # imported where used: keeps httpx and the digester out of start-up
    from ctxwrap.aux.http import HttpAuxBackend
    from ctxwrap.digest import StreamingDigester

log = logging.getLogger("ctxwrap.daemon")

AMNESIA_TOOLS = frozenset({"read", "grep", "find", "ls", "find_capability"})
MECHANISM_OF_TASK = {"digest": "bash", "tag": "amnesia", "fact": "writes"}


def _chars_to_tokens(chars: int) -> int:
    return (chars + 3) // 4


@dataclass
class PendingAux:
    task: str
    tool_call_id: str
    # what the daemon needs to finish the job when the answer comes back
    context: dict[str, Any] = field(default_factory=dict)


@dataclass
class SessionRuntime:
    session_id: str
    pid: int
    user_prompt: str = ""
    tags: dict[str, str] = field(default_factory=dict)  # toolCallId → DROP | RETAIN | PENDING
    handles: dict[str, str] = field(default_factory=dict)  # toolCallId → raw-output handle
    sizes: dict[str, int] = field(default_factory=dict)  # toolCallId → result chars
    call_args: dict[str, str] = field(default_factory=dict)  # toolCallId → short "tool args" label
    dropped_sigs: set[str] = field(default_factory=set)
    pending: dict[str, PendingAux] = field(default_factory=dict)
    tasks: dict[str, asyncio.Task[None]] = field(default_factory=dict)  # http backend tag tasks


class Daemon:
    def __init__(
        self, loaded: LoadedConfig, *, socket: Path, state_dir: Path, systemd: bool = False
    ) -> None:
        self.loaded = loaded
        self.config_error: str | None = None
        self.config_generation = 0
        self.socket = socket
        self.systemd = systemd
        self.started = time.time()
        self.store = Store(state_dir / "ctxwrap.db")
        self.raw = RawStore(
            state_dir / "raw",
            self.store,
            max_bytes=loaded.settings.raw_store_max_mb * 1024 * 1024,
            retention_days=loaded.settings.raw_retention_days,
        )
        self.events = EventLog(
            loaded.settings.log_file or state_dir / "events.jsonl",
            max_bytes=loaded.settings.event_log_max_mb << 20,
        )
        self.sessions: dict[str, SessionRuntime] = {}
        self._http_aux: HttpAuxBackend | None = None
        self._catalog: Any = None  # CapabilityCatalog, created on first use (keeps start-up light)
        self._skill_watcher: Any = None
        self._watched_dirs: set[str] = set()
        self.last_activity = time.monotonic()

    # -- config -----------------------------------------------------------------------------

    @property
    def cfg(self) -> Settings:
        return self.loaded.settings

    def apply_config(self, loaded: LoadedConfig) -> None:
        self.loaded = loaded
        self.config_error = None
        self.config_generation += 1
        old, self._http_aux = self._http_aux, None  # rebuilt from the new settings on next use
        if old is not None:
            asyncio.get_running_loop().create_task(old.aclose())
        self.events.write("config_reloaded", file=str(loaded.file))

    def report_config_error(self, message: str) -> None:
        self.config_error = message
        self.events.write("config_invalid", error=message)

    def http_aux(self) -> HttpAuxBackend | None:
        if self.cfg.aux_backend != "http" or not self.cfg.aux_base_url:
            return None
        if self._http_aux is None:
            from ctxwrap.aux.http import HttpAuxBackend

            self._http_aux = HttpAuxBackend(
                base_url=self.cfg.aux_base_url,
                api=self.cfg.aux_api,
                model=self.cfg.aux_model,
                api_key_env=self.cfg.aux_api_key_env,
            )
        return self._http_aux

    # -- health and sessions ----------------------------------------------------------------

    def health(self) -> P.Health:
        return P.Health(
            version=__version__,
            protocol=P.PROTOCOL_VERSION,
            pid=os.getpid(),
            uptime_s=round(time.time() - self.started, 3),
            sessions=len(self.live_sessions()),
            socket=str(self.socket),
            config_error=self.config_error,
            systemd=self.systemd,
        )

    def live_sessions(self) -> list[SessionRuntime]:
        return list(self.sessions.values())

    def reap_dead_sessions(self) -> None:
        """End sessions whose pi process is gone (killed, crashed, closed terminal)."""
        for sid, rt in list(self.sessions.items()):
            # pid 0: a session recreated after a daemon restart without a record; keep it.
            if rt.pid > 0 and not pid_alive(rt.pid):
                self._end(sid, "process-gone")

    def _end(self, session_id: str, reason: str) -> None:
        rt = self.sessions.pop(session_id, None)
        if rt:
            for task in rt.tasks.values():
                task.cancel()
        self.store.end_session(session_id, reason)
        if self._catalog is not None:
            self._catalog.drop(session_id)
        self.events.write("session_end", session=session_id, reason=reason)
        if not self.sessions:
            self._prompt_segment(None)  # no live session left: the prompt shows nothing

    def _rt(self, session_id: str) -> SessionRuntime:
        rt = self.sessions.get(session_id)
        if rt is None:
            # A daemon restarted mid-session: recreate the runtime; tags in flight are lost (RETAIN).
            row = self.store.query("SELECT pid FROM sessions WHERE session_id=?", (session_id,))
            rt = SessionRuntime(session_id, int(row[0]["pid"]) if row else 0)
            self.sessions[session_id] = rt
        self.last_activity = time.monotonic()
        return rt

    def session_start(self, req: P.SessionStart) -> P.SessionStartReply:
        model = f"{req.model.provider}/{req.model.id}" if req.model else None
        self.store.upsert_session(
            {
                "session_id": req.session_id,
                "session_file": req.session_file,
                "cwd": req.cwd,
                "pid": req.pid,
                "pi_version": req.pi_version,
                "pi_package": req.pi_package,
                "model": model,
                "started_at": time.time(),
            }
        )
        self.sessions[req.session_id] = SessionRuntime(req.session_id, req.pid)
        self.last_activity = time.monotonic()
        if req.tools or req.skills:
            self._update_catalog(req)
        self.events.write(
            "session_start",
            session=req.session_id,
            reason=req.reason,
            pi=req.pi_version,
            pid=req.pid,
        )
        return P.SessionStartReply(
            config=bridge_view(self.cfg), totals=self.session_totals(req.session_id)
        )

    def _update_catalog(self, req: P.SessionStart | P.CatalogUpdate) -> None:
        try:
            from ctxwrap.capabilities import CapabilityCatalog, SkillInfo, ToolInfo

            if self._catalog is None:
                self._catalog = CapabilityCatalog()
            self._catalog.replace(
                req.session_id,
                [ToolInfo(t.name, t.description, list(t.parameters)) for t in req.tools],
                [
                    SkillInfo(
                        s.name, s.description, s.file_path, s.base_dir, s.disable_model_invocation
                    )
                    for s in req.skills
                ],
            )
            self._watch_skill_dirs({str(Path(s.file_path).parent.parent) for s in req.skills})
        except Exception as exc:  # a broken catalog must not break the session
            log.warning("catalog update failed: %s", exc)

    def _watch_skill_dirs(self, dirs: set[str]) -> None:
        """Re-read a SKILL.md when it changes on disk, for every session that lists it."""
        if not dirs or dirs <= self._watched_dirs:
            return
        from ctxwrap.capabilities import SkillDirWatcher

        self._watched_dirs |= dirs
        if self._skill_watcher is not None:
            self._skill_watcher.stop()
        catalog = self._catalog
        self._skill_watcher = SkillDirWatcher(sorted(self._watched_dirs), catalog.refresh_skill)
        self._skill_watcher.start()

    def catalog_update(self, req: P.CatalogUpdate) -> P.Ack:
        self._rt(req.session_id)
        self._update_catalog(req)
        return self._ack()

    def session_shutdown(self, req: P.SessionShutdown) -> P.Ack:
        self._end(req.session_id, req.reason)
        return P.Ack()

    def model_select(self, req: P.ModelSelect) -> P.Ack:
        self.store.conn.execute(
            "UPDATE sessions SET model=? WHERE session_id=?",
            (f"{req.model.provider}/{req.model.id}", req.session_id),
        )
        return P.Ack()

    def session_totals(self, session_id: str) -> P.SessionTotals:
        row = self.store.query(
            """SELECT COUNT(*) n, COALESCE(SUM(sent_system+sent_messages+sent_tools),0) sent,
                      COALESCE(SUM(saved_bash+saved_amnesia+saved_writes+saved_skills+saved_tools),0) saved
               FROM llm_calls WHERE session_id=?""",
            (session_id,),
        )[0]
        aux = self.store.query(
            "SELECT COALESCE(SUM(input_tokens+output_tokens),0) t FROM aux_calls WHERE session_id=?",
            (session_id,),
        )[0]["t"]
        sent, saved = _chars_to_tokens(row["sent"]), _chars_to_tokens(row["saved"])
        return P.SessionTotals(
            llm_calls=row["n"],
            sent_tokens=sent,
            plain_tokens=sent + saved,
            saved_tokens=saved,
            aux_tokens=aux,
            net_tokens=saved - aux,
        )

    def prompt_start(self, req: P.PromptStart) -> P.Ack:
        rt = self._rt(req.session_id)
        rt.user_prompt = req.prompt
        return self._ack()

    def _config_view(self) -> dict[str, Any] | None:
        """After a reload every reply carries the new bridge config (idempotent on the bridge)."""
        return bridge_view(self.cfg) if self.config_generation else None

    def _ack(self) -> P.Ack:
        return P.Ack(config=self._config_view())

    # -- aux plumbing -----------------------------------------------------------------------

    def _aux_request(
        self,
        rt: SessionRuntime,
        task: str,
        tool_call_id: str,
        system: str,
        prompt: str,
        max_tokens: int,
        ctx: dict[str, Any],
    ) -> P.AuxRequest:
        aux_id = f"{task}-{secrets.token_hex(4)}"
        rt.pending[aux_id] = PendingAux(task, tool_call_id, ctx)
        return P.AuxRequest(
            aux_id=aux_id,
            task=task,
            system=system,
            prompt=prompt,
            max_tokens=max_tokens,
            timeout_ms=self.cfg.aux_timeout_ms,
        )

    def _record_aux(
        self,
        session_id: str,
        task: str,
        backend: str,
        tin: int,
        tout: int,
        ok: bool,
        elapsed_ms: float,
        error: str | None,
    ) -> None:
        self.store.insert(
            "aux_calls",
            {
                "session_id": session_id,
                "ts": time.time(),
                "task": task,
                "mechanism": MECHANISM_OF_TASK.get(task, task),
                "backend": backend,
                "input_tokens": tin,
                "output_tokens": tout,
                "ok": int(ok),
                "elapsed_ms": elapsed_ms,
                "error": error[:300] if error else None,
            },
        )

    async def _http_complete(
        self, rt: SessionRuntime, task: str, system: str, prompt: str, max_tokens: int
    ) -> str | None:
        """Run one aux call on the http backend and record its cost; None when there is none."""
        backend = self.http_aux()
        if backend is None:
            return None
        ans = await backend.complete(
            system=system, prompt=prompt, max_tokens=max_tokens, timeout_ms=self.cfg.aux_timeout_ms
        )
        self._record_aux(
            rt.session_id,
            task,
            "http",
            ans.input_tokens,
            ans.output_tokens,
            ans.error is None,
            ans.elapsed_ms,
            ans.error,
        )
        return ans.text

    def aux_result(self, req: P.AuxResult) -> P.AuxResultReply:
        rt = self._rt(req.session_id)
        pending = rt.pending.pop(req.aux_id, None)
        if pending is None:
            return P.AuxResultReply()
        ok = req.error is None and req.text is not None
        self._record_aux(
            req.session_id,
            pending.task,
            "pi",
            req.input_tokens,
            req.output_tokens,
            ok,
            req.elapsed_ms,
            req.error,
        )
        text = self._finish_aux(rt, pending, req.text if ok else None)
        return P.AuxResultReply(text=text, accepted=text is not None)

    def _finish_aux(
        self, rt: SessionRuntime, pending: PendingAux, answer: str | None
    ) -> str | None:
        if pending.task == "tag":
            decision = prompts.parse_tag(answer)
            if rt.tags.get(pending.tool_call_id) == "PENDING":
                rt.tags[pending.tool_call_id] = decision
            self.store.insert(
                "tags",
                {
                    "session_id": rt.session_id,
                    "tool_call_id": pending.tool_call_id,
                    "tool_name": pending.context.get("tool", ""),
                    "decision": decision,
                    "chars": rt.sizes.get(pending.tool_call_id, 0),
                    "ts": time.time(),
                },
                replace=True,
            )
            return None
        if pending.task == "digest":
            return self._accept_digest(rt, pending, answer)
        if pending.task == "fact":
            summary = prompts.clean_fact(
                answer, max_chars=self.cfg.write_fact_max_tokens * 6, path=pending.context["path"]
            )
            if summary is None:
                return None
            fact = aux_fact(pending.context["path"], summary, pending.context["lines"])
            self._store_fact(
                rt.session_id, pending.tool_call_id, pending.context["path"], fact, "aux"
            )
            return fact
        return None

    def _accept_digest(
        self, rt: SessionRuntime, pending: PendingAux, answer: str | None
    ) -> str | None:
        extract: str = pending.context["extract"]
        if not answer or not answer.strip():
            return None
        answer = scrub_temp_paths(answer.strip())
        cap = self.cfg.bash_max_summary_tokens * 4
        # An answer longer than what it condenses (or than the cap) is worse than the extract.
        if len(answer) >= len(extract) or len(answer) > cap:
            return None
        text: str = pending.context["header"] + "\n" + answer
        self.store.conn.execute(
            "UPDATE digests SET digest_chars=?, source='aux' WHERE session_id=? AND tool_call_id=?",
            (len(text), rt.session_id, pending.tool_call_id),
        )
        return text

    # -- tool results -----------------------------------------------------------------------

    async def tool_result(self, req: P.ToolResult) -> P.ToolResultReply:
        rt = self._rt(req.session_id)
        cfg = self.cfg
        if cfg.off:
            return P.ToolResultReply()
        if req.tool_name == "bash" and cfg.bash:
            return await self._bash_result(rt, req)
        if req.tool_name in AMNESIA_TOOLS and cfg.amnesia:
            return self._amnesia_result(rt, req)
        if req.tool_name == "write" and cfg.write:
            return await self._write_result(rt, req)
        return P.ToolResultReply()

    async def _bash_result(self, rt: SessionRuntime, req: P.ToolResult) -> P.ToolResultReply:
        cfg = self.cfg
        if _chars_to_tokens(len(req.text)) < cfg.bash_min_tokens:
            return P.ToolResultReply()
        parsed = split_bash_text(req.text)
        exit_code = req.exit_code if req.exit_code is not None else parsed.exit_code
        if exit_code is None and not req.is_error:
            exit_code = 0
        command = str(req.input.get("command", ""))
        meta: dict[str, str | None] = {
            "session_id": rt.session_id,
            "tool_call_id": req.tool_call_id,
            "tool_name": "bash",
            "command": command,
        }
        from ctxwrap.digest import StreamingDigester

        digester = StreamingDigester(
            command=command,
            exit_code=exit_code,
            max_chars=min(cfg.bash_max_summary_tokens * 4 * 2, 16000),
        )
        # Only pi's own report names a spill file, and only a checked one is read (invariant 7).
        with open_trusted_spill(
            req.full_output_path,
            parsed.full_output_path,
            pi_tmpdir=req.pi_tmpdir,
            call_started_ms=req.call_started_ms,
        ) as spill:
            if spill.refused:
                self.events.write(
                    "spill_refused",
                    session=rt.session_id,
                    call=req.tool_call_id,
                    reason=spill.refused,
                )
            if spill.source is not None:
                stored = await asyncio.to_thread(
                    self._store_and_digest_file, spill.source, digester, meta
                )
            else:
                digester.feed(parsed.body)
                stored = self.raw.put_text(parsed.body, **meta)
        digest = digester.finish()
        status = (
            "timed out"
            if (req.timed_out or parsed.timed_out)
            else "aborted"
            if parsed.aborted
            else f"exit code {exit_code}"
            if exit_code is not None
            else "exit status unknown"
        )
        header = (
            f"[ctxwrap digest of bash output — {digest.original_lines:,} lines, {digest.original_chars:,} chars; "
            f"{status}; the raw output is not in context. "
            f'Search it with ctx_recall(handle="{stored.handle}", pattern=...)]'
        )
        extract = scrub_temp_paths(digest.text)
        text = header + "\n$ " + command[:300] + "\n" + extract
        if status.startswith("exit code") and exit_code not in (None, 0):
            text += f"\n\nCommand exited with code {exit_code}"
        self.store.insert(
            "digests",
            {
                "session_id": rt.session_id,
                "tool_call_id": req.tool_call_id,
                "original_chars": len(req.text),
                "digest_chars": len(text),
                "source": "extractive",
                "ts": time.time(),
            },
            replace=True,
        )
        rt.handles[req.tool_call_id] = stored.handle
        self.events.write(
            "bash_digest",
            session=rt.session_id,
            call=req.tool_call_id,
            original=len(req.text),
            digest=len(text),
            family=digest.family,
        )
        ctx = {"extract": extract, "header": header + "\n$ " + command[:300]}
        aux_prompt = prompts.digest_prompt(
            command=command, exit_code=exit_code, user_prompt=rt.user_prompt, extract=extract
        )
        if len(extract) < cfg.bash_aux_min_chars:
            return P.ToolResultReply(action="replace", text=text, handle=stored.handle)
        if self.cfg.aux_backend == "pi":
            aux = self._aux_request(
                rt,
                "digest",
                req.tool_call_id,
                prompts.DIGEST_SYSTEM,
                aux_prompt,
                cfg.bash_max_summary_tokens,
                ctx,
            )
            return P.ToolResultReply(action="replace", text=text, handle=stored.handle, aux=aux)
        if self.http_aux() is not None:
            answer = await self._http_complete(
                rt, "digest", prompts.DIGEST_SYSTEM, aux_prompt, cfg.bash_max_summary_tokens
            )
            better = self._accept_digest(rt, PendingAux("digest", req.tool_call_id, ctx), answer)
            if better is not None:
                text = better
        return P.ToolResultReply(action="replace", text=text, handle=stored.handle)

    def _store_and_digest_file(
        self, source: Path, digester: StreamingDigester, meta: dict[str, str | None]
    ) -> Any:
        # One pass over pi's spill file feeds both the digester and the redacted store.
        def lines() -> Any:
            from ctxwrap.daemon.rawstore import _lines_of_file

            for line in _lines_of_file(source, 1 << 40):
                digester.feed(line + "\n")
                yield line

        return self.raw.put_lines(lines(), **meta)  # type: ignore[arg-type]

    def _amnesia_result(self, rt: SessionRuntime, req: P.ToolResult) -> P.ToolResultReply:
        cfg = self.cfg
        rt.sizes[req.tool_call_id] = len(req.text)
        if req.is_error or _chars_to_tokens(len(req.text)) < cfg.amnesia_min_tokens:
            return P.ToolResultReply()
        stored = self.raw.put_text(
            req.text,
            session_id=rt.session_id,
            tool_call_id=req.tool_call_id,
            tool_name=req.tool_name,
            command=_label(req.tool_name, req.input),
        )
        rt.handles[req.tool_call_id] = stored.handle
        rt.call_args[req.tool_call_id] = _label(req.tool_name, req.input)
        rt.tags[req.tool_call_id] = "PENDING"
        prompt = prompts.tag_prompt(
            tool=req.tool_name,
            args=req.input,
            result=req.text,
            user_prompt=rt.user_prompt,
            max_chars=cfg.amnesia_max_chars,
        )
        ctx = {"tool": req.tool_name}
        if cfg.aux_backend == "pi":
            aux = self._aux_request(
                rt, "tag", req.tool_call_id, prompts.TAG_SYSTEM, prompt, cfg.tag_max_tokens, ctx
            )
            return P.ToolResultReply(handle=stored.handle, aux=aux)
        if self.http_aux() is None:
            rt.tags[req.tool_call_id] = "RETAIN"
            return P.ToolResultReply(handle=stored.handle)
        pending = PendingAux("tag", req.tool_call_id, ctx)

        async def run_tag() -> None:
            answer = await self._http_complete(
                rt, "tag", prompts.TAG_SYSTEM, prompt, cfg.tag_max_tokens
            )
            self._finish_aux(rt, pending, answer)

        rt.tasks[req.tool_call_id] = asyncio.create_task(run_tag())
        return P.ToolResultReply(handle=stored.handle)

    async def _write_result(self, rt: SessionRuntime, req: P.ToolResult) -> P.ToolResultReply:
        cfg = self.cfg
        content = req.input.get("content")
        path = str(req.input.get("path", req.input.get("file_path", "?")))
        if req.is_error or not isinstance(content, str):
            return P.ToolResultReply()
        size = (
            req.content_bytes
            if req.content_bytes is not None
            else len(content.encode("utf-8", "replace"))
        )
        if size < cfg.write_min_bytes:
            return P.ToolResultReply()
        fact = heuristic_fact(path, content, total_bytes=size, total_lines=req.content_lines)
        self._store_fact(rt.session_id, req.tool_call_id, path, fact, "heuristic")
        lines = req.content_lines if req.content_lines is not None else line_count(content)
        ctx = {"path": path, "lines": lines}
        prompt = prompts.fact_prompt(
            path=path, content=content, max_chars=cfg.write_max_content_chars
        )
        if cfg.aux_backend == "pi":
            aux = self._aux_request(
                rt,
                "fact",
                req.tool_call_id,
                prompts.FACT_SYSTEM,
                prompt,
                cfg.write_fact_max_tokens,
                ctx,
            )
            return P.ToolResultReply(text=fact, aux=aux)
        if self.http_aux() is not None:
            answer = await self._http_complete(
                rt, "fact", prompts.FACT_SYSTEM, prompt, cfg.write_fact_max_tokens
            )
            better = self._finish_aux(rt, PendingAux("fact", req.tool_call_id, ctx), answer)
            fact = better or fact
        return P.ToolResultReply(text=fact)

    def _store_fact(
        self, session_id: str, tool_call_id: str, path: str, text: str, source: str
    ) -> None:
        self.store.insert(
            "facts",
            {
                "session_id": session_id,
                "tool_call_id": tool_call_id,
                "path": path,
                "text": text,
                "source": source,
                "created_at": time.time(),
            },
            replace=True,
        )

    # -- context: accounting and edit decisions ---------------------------------------------

    def llm_call(self, req: P.LlmCall) -> P.Ack:
        self._rt(req.session_id)
        s, v = req.sent_chars, req.saved_chars
        self.store.insert(
            "llm_calls",
            {
                "session_id": req.session_id,
                "call_index": req.call_index,
                "ts": time.time(),
                "sent_system": s.system,
                "sent_messages": s.messages,
                "sent_tools": s.tools,
                "saved_bash": v.bash,
                "saved_amnesia": v.amnesia,
                "saved_writes": v.writes,
                "saved_skills": v.skills,
                "saved_tools": v.tools,
                "head_changed": int(req.head_changed),
                "message_count": req.message_count,
            },
        )
        return self._ack()

    async def context(self, req: P.ContextRequest) -> P.ContextReply:
        rt = self._rt(req.session_id)
        cfg = self.cfg
        await self._wait_for_tail_tags(rt, req)
        if cfg.off:
            return P.ContextReply()
        tags = {k: v for k, v in rt.tags.items() if v == "DROP"} if cfg.amnesia else {}
        edits = decide_edits(
            req.tail,
            tags,
            mode=cfg.amnesia_mode,
            dropped_sigs=rt.dropped_sigs,
            write_min_bytes=cfg.write_min_bytes if cfg.write else 1 << 62,
            tombstone_for=lambda result, call: self._tombstone(
                rt, result.toolCallId or call.id, result.chars or 0
            ),
            strip_marker_for=_strip_marker,
        )
        rt.dropped_sigs |= dropped_signatures(req.tail, edits)
        out = [P.Edit.model_validate(edit_to_json(e)) for e in edits]
        for edit in out:
            self.store.insert(
                "edits",
                {
                    "session_id": req.session_id,
                    "tool_call_id": edit.toolCallId,
                    "kind": edit.kind,
                    "saved_chars": edit.savedChars,
                    "ts": time.time(),
                },
                replace=True,
            )
        if out:
            self.events.write(
                "edits",
                session=req.session_id,
                edits=[(e.kind, e.toolCallId, e.savedChars) for e in out],
            )
        return P.ContextReply(edits=out)

    async def _wait_for_tail_tags(self, rt: SessionRuntime, req: P.ContextRequest) -> None:
        """http backend: give tags of the tail a short grace; whatever is still pending → RETAIN."""
        tail_ids = {m.toolCallId for m in req.tail.messages if m.toolCallId}
        tasks = [t for cid, t in rt.tasks.items() if cid in tail_ids and not t.done()]
        if tasks:
            await asyncio.wait(tasks, timeout=self.cfg.tag_wait_ms / 1000)
        for cid in tail_ids:
            if rt.tags.get(cid) == "PENDING":
                rt.tags[cid] = "RETAIN"  # too late: the model sees it now, so it stays forever
            rt.tasks.pop(cid, None)

    def _tombstone(self, rt: SessionRuntime, call_id: str, chars: int) -> str:
        label = rt.call_args.get(call_id, "tool result")
        handle = rt.handles.get(call_id)
        recall = f'; recall with ctx_recall(handle="{handle}", pattern=...)' if handle else ""
        return f"[ctxwrap: {label} ({chars:,} chars) was judged not needed for the current task and hidden{recall}]"

    def turn_end(self, req: P.TurnEnd) -> P.TurnEndReply:
        self._rt(req.session_id)
        self.store.insert(
            "turns",
            {
                "session_id": req.session_id,
                "ts": time.time(),
                "turn_index": req.turn_index,
                "input_tokens": req.input_tokens,
                "output_tokens": req.output_tokens,
                "cache_read_tokens": req.cache_read_tokens,
                "cache_write_tokens": req.cache_write_tokens,
                "model": req.model,
            },
        )
        totals = self.session_totals(req.session_id)
        self._prompt_segment(totals)
        return P.TurnEndReply(totals=totals, config=self._config_view())

    def _prompt_segment(self, totals: P.SessionTotals | None) -> None:
        """The shell prompt's savings line (`ctxwrap_prompt_segment` reads it): one small write."""
        from ctxwrap.shell import write_prompt_segment

        try:
            write_prompt_segment(prompt_segment_text(totals) if totals else "")
        except OSError as exc:  # a prompt nicety must never fail a turn
            log.debug("prompt segment not written: %s", exc)

    # -- recall, capabilities, facts --------------------------------------------------------

    def recall(self, req: P.RecallRequest) -> P.RecallReply | None:
        res = self.raw.recall(
            req.handle,
            pattern=req.pattern,
            start_line=req.start_line,
            end_line=req.end_line,
            context_lines=req.context_lines,
            max_chars=self.cfg.recall_max_tokens * 4,
        )
        if res is None:
            return None
        return P.RecallReply(
            text=res.text,
            total_lines=res.total_lines,
            matched_lines=res.matched_lines,
            truncated=res.truncated,
        )

    def capabilities(self, req: P.CapabilitySearch) -> P.CapabilityReply:
        if self._catalog is None:
            return P.CapabilityReply(matches=[])
        from ctxwrap.capabilities import read_skill_body

        found = self._catalog.search(req.session_id, req.query, limit=4)
        matches = [
            P.CapabilityMatchOut(
                kind=m.kind, name=m.name, score=round(m.score, 3), description=m.description[:300]
            )
            for m in found
        ]
        reply = P.CapabilityReply(matches=matches)
        if found:
            best = found[0]
            if best.kind == "skill" and best.file_path:
                reply.skill_body = read_skill_body(best.file_path, self.cfg.skill_max_chars)
                reply.skill_path = best.file_path
            elif best.kind == "tool":
                reply.activate_tool = best.name
        return reply

    def facts(self, session_id: str | None) -> P.FactList:
        if session_id:
            rows = self.store.query(
                "SELECT * FROM facts WHERE session_id=? ORDER BY created_at", (session_id,)
            )
        else:
            rows = self.store.query("SELECT * FROM facts ORDER BY created_at")
        return P.FactList(facts=[P.Fact(**dict(r)) for r in rows])

    async def aclose(self) -> None:
        for rt in self.sessions.values():
            for task in rt.tasks.values():
                task.cancel()
        if self._http_aux is not None:
            await self._http_aux.aclose()
        if self._skill_watcher is not None:
            self._skill_watcher.stop()
        self.store.close()


def prompt_segment_text(totals: P.SessionTotals) -> str:
    """`ctxwrap ↓12.3k`: tokens kept out net of aux cost; `↑` when ctxwrap cost more."""
    if totals.llm_calls == 0:
        return ""
    net = totals.net_tokens
    n = abs(net)
    amount = f"{n / 1e6:.1f}M" if n >= 999_950 else f"{n / 1e3:.1f}k" if n >= 1000 else str(n)
    return f"ctxwrap {'↓' if net >= 0 else '↑'}{amount}"


def _strip_marker(call: TailToolCall) -> str:
    size = call.writeContentBytes if call.writeContentBytes is not None else call.writeContentChars
    return (
        f"[content stripped by ctxwrap: {size or 0:,} bytes, {call.writeContentLines or 0:,} lines "
        f"of {call.writePath or 'the file'}; the file on disk is complete]"
    )


def _label(tool: str, args: dict[str, Any]) -> str:
    for key in ("path", "pattern", "query", "command"):
        if key in args:
            return f"{tool} {str(args[key])[:120]}"
    return tool
