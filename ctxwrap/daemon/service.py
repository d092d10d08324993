"""The daemon's behaviour: one `Daemon` serves every agent session of the user.

Handlers are async methods taking and returning protocol models; `app.py` only does HTTP.
This class owns the shared services (store, raw store, event log, aux plumbing, capability
catalog) and the per-session runtimes, and routes each request to its mechanism in
`ctxwrap.mechanisms` — the mechanisms hold the behaviour, the same for every agent.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import logging
import os
import time
from pathlib import Path

from ctxwrap import __version__
from ctxwrap import protocol as P
from ctxwrap.config import LoadedConfig, Settings, bridge_view
from ctxwrap.digest.redact import load_patterns, redact_secrets
from ctxwrap.mechanisms import (
    accounting,
    cost_accounting,
    keeps_result_of,
    masking,
    needed_again,
    tail_edits,
    tool_kind,
)
from ctxwrap.mechanisms.amnesia import TagState
from ctxwrap.mechanisms.aux import AuxCalls
from ctxwrap.mechanisms.budget import on_totals
from ctxwrap.mechanisms.chain import Mechanisms, default_mechanisms
from ctxwrap.mechanisms.lazy import Capabilities
from ctxwrap.state.eventlog import EventLog
from ctxwrap.state.pidfile import pid_alive
from ctxwrap.state.rawstore import InvalidPattern, RawStore, compile_pattern, scan
from ctxwrap.state.session import PendingAux, SessionRuntime
from ctxwrap.state.store import Store

__all__ = ["Daemon", "RequestRefused"]

log = logging.getLogger("ctxwrap.daemon")

UNKNOWN_SESSION = "unknown session"
# The tagger's pace sent at registration (`SessionStartReply.tag_pace_ms`): its latest rounds
# (agents/_proxy/tag_wait.py keeps as many), found among the latest aux calls.
TAG_PACE_ROUNDS = 3
TAG_PACE_SCAN = 2000


class RequestRefused(Exception):
    """A request the daemon understood and will not serve: a 4xx with a reason, never a 500."""

    def __init__(self, status: int, error: str, detail: str | None = None) -> None:
        super().__init__(error)
        self.status, self.error, self.detail = status, error, detail


def bound_heap_growth() -> None:
    """Large buffers (request bodies of up to 64 MB, their JSON strings) go to mmap and back to
    the OS when freed. glibc's default raises its mmap threshold after each large free (up to
    32 MB), so later bodies land on the heap and RSS stayed at its high-water mark: 46 -> 114 MB
    under a fuzz of large requests. Fixed thresholds keep it near the working set. Best effort:
    not glibc (musl, macOS) → nothing to do."""
    name = ctypes.util.find_library("c")
    if not name:
        return
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return
    m_trim_threshold, m_mmap_threshold = -1, -3
    mallopt(m_mmap_threshold, 256 * 1024)
    mallopt(m_trim_threshold, 1024 * 1024)


class Daemon:
    def __init__(
        self,
        loaded: LoadedConfig,
        *,
        socket: Path,
        state_dir: Path,
        systemd: bool = False,
        mechanisms: Mechanisms | None = None,
    ) -> None:
        self.loaded = loaded
        self.mechanisms = mechanisms or default_mechanisms()
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
        load_patterns()  # detect-secrets costs ~0.3 s to import: pay it at start, not mid-call
        self.aux = AuxCalls(self.store, loaded.settings)
        self.capabilities_catalog = Capabilities()
        self.sessions: dict[str, SessionRuntime] = {}
        self.last_activity = time.monotonic()
        bound_heap_growth()

    # -- config -----------------------------------------------------------------------------

    @property
    def cfg(self) -> Settings:
        return self.loaded.settings

    def apply_config(self, loaded: LoadedConfig) -> None:
        self.loaded = loaded
        self.config_error = None
        self.config_generation += 1
        self.aux.reconfigure(loaded.settings)
        self.events.write("config_reloaded", file=str(loaded.file))

    def report_config_error(self, message: str) -> None:
        self.config_error = message
        self.events.write("config_invalid", error=redact_secrets(message))

    def _config_view(self) -> dict[str, object] | None:
        """After a reload every reply carries the new bridge config (idempotent on the bridge)."""
        return self._bridge_config(P.profile_of("pi")) if self.config_generation else None

    def _bridge_config(self, profile: P.AgentProfile) -> dict[str, object]:
        """The bridge's view, its switches as they apply to the session's agent (the bridge
        is pi's adapter; `write = "auto"` resolves to the agent's default)."""
        return {**bridge_view(self.cfg), "write": self.mechanisms.writes.on(self.cfg, profile)}

    def _ack(self) -> P.Ack:
        return P.Ack(config=self._config_view())

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
            degraded=self.store.degraded,
        )

    def live_sessions(self) -> list[SessionRuntime]:
        return list(self.sessions.values())

    def reap_dead_sessions(self) -> None:
        """End sessions whose agent process is gone (killed, crashed, closed terminal)."""
        for sid, rt in list(self.sessions.items()):
            # pid 0: a session recreated after a daemon restart without a record; keep it.
            if rt.pid > 0 and not pid_alive(rt.pid):
                self._end(sid, "process-gone")

    def _end(self, session_id: str, reason: str, undelivered: int = 0) -> None:
        rt = self.sessions.pop(session_id, None)
        if rt:
            for task in rt.part(TagState).tasks.values():
                task.cancel()
        self.store.end_session(session_id, reason, undelivered=undelivered)
        # priced once more with whatever came after its last turn: `ctxwrap stats` reads it
        cost_accounting.refresh_cost_cache(self.store.conn, session_id, self.cfg)
        self.capabilities_catalog.forget(session_id)
        self.events.write("session_end", session=session_id, reason=reason)
        self._status_line(session_id, None)  # even one this daemon did not see live
        if not self.sessions:
            self._prompt_segment(None)  # no live session left: the prompt shows nothing

    def _rt(self, session_id: str) -> SessionRuntime:
        rt = self.sessions.get(session_id)
        if rt is None:
            # Only a session this daemon's database knows comes back to life (a daemon restarted
            # mid-session; tags in flight are lost, i.e. RETAIN). An id never registered stays
            # unknown: made live, it would count as a session forever and block idle exit. The
            # 409 tells the bridge to send session_start and try again.
            row = self.store.query(
                "SELECT pid, agent, pi_version, ended_at FROM sessions WHERE session_id=?",
                (session_id,),
            )
            if not row:
                raise RequestRefused(409, UNKNOWN_SESSION, "register with /v1/sessions/start")
            rt = SessionRuntime(session_id, int(row[0]["pid"]))
            rt.dropped_sigs = self._hidden_signatures(session_id)
            if row[0]["agent"]:
                rt.agent = str(row[0]["agent"])
                rt.profile = P.profile_of(rt.agent, row[0]["pi_version"])
            if row[0]["ended_at"] is not None:
                # Ended (shut down, or reaped while the daemon could not see it): serve this
                # request, but do not count the session as live again until it registers.
                return rt
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
                "agent": req.agent,
                "started_at": time.time(),
            }
        )
        cost_accounting.record_session_model(self.store, req.session_id, req.model, req.compaction)
        profile = req.profile or P.profile_of(req.agent, req.pi_version)
        if req.recall_tool is not None and req.recall_tool != profile.recall_tool:
            profile = profile.model_copy(update={"recall_tool": req.recall_tool})
        rt = SessionRuntime(req.session_id, req.pid, agent=req.agent, profile=profile)
        rt.dropped_sigs = self._hidden_signatures(req.session_id)  # a resume keeps its guard
        self.sessions[req.session_id] = rt
        self.last_activity = time.monotonic()
        if req.tools or req.skills:
            self.capabilities_catalog.update(req)
        self.events.write(
            "session_start",
            session=req.session_id,
            reason=req.reason,
            agent=req.agent,
            pi=req.pi_version,
            pid=req.pid,
        )
        totals = self.session_totals(req.session_id)
        if rt.profile.status_line:
            self._status_line(req.session_id, totals)  # a resumed session shows its figures
        return P.SessionStartReply(
            config=self._bridge_config(rt.profile),
            totals=totals,
            tag_pace_ms=self._tag_pace_ms(rt),
        )

    def _tag_pace_ms(self, rt: SessionRuntime) -> list[float]:
        """How long the tagger took in its latest rounds (ms, oldest first): the aux runner
        this session's tags will use (the agent's own when it runs them, else the daemon's http
        backend), over the last TAG_PACE_SCAN aux calls (bounded: a registration is on the
        agent's path)."""
        if self.cfg.off:
            return []
        delegated = self.aux.delegated()
        rows = self.store.query(
            """SELECT a.elapsed_ms FROM aux_calls a JOIN sessions s USING (session_id)
               WHERE a.id > (SELECT COALESCE(MAX(id), 0) FROM aux_calls) - ?
                 AND a.task = 'tag' AND a.elapsed_ms > 0 AND a.backend = ?
                 AND (? OR s.agent = ?)
               ORDER BY a.id DESC LIMIT ?""",
            (
                TAG_PACE_SCAN,
                rt.profile.aux_runner if delegated else "http",
                not delegated,
                rt.agent,
                TAG_PACE_ROUNDS,
            ),
        )
        return [float(r[0]) for r in reversed(rows)]

    def _hidden_signatures(self, session_id: str) -> set[str]:
        rows = self.store.query(
            "SELECT args_sig FROM hidden_sigs WHERE session_id=?", (session_id,)
        )
        return {str(r["args_sig"]) for r in rows}

    def hide_signatures(self, rt: SessionRuntime, sigs: set[str]) -> None:
        """Calls whose result ctxwrap hid: a repeat of one is kept whole (invariant 5). Kept in
        SQLite too, so the guard survives a daemon restart and a resume."""
        for sig in sigs - rt.dropped_sigs:
            self.store.insert(
                "hidden_sigs", {"session_id": rt.session_id, "args_sig": sig}, replace=True
            )
        rt.dropped_sigs |= sigs

    def catalog_update(self, req: P.CatalogUpdate) -> P.Ack:
        self._rt(req.session_id)
        self.capabilities_catalog.update(req)
        return self._ack()

    def session_shutdown(self, req: P.SessionShutdown) -> P.Ack:
        self._end(req.session_id, req.reason, req.undelivered)
        return P.Ack()

    def model_select(self, req: P.ModelSelect) -> P.Ack:
        self.store.conn.execute(
            "UPDATE sessions SET model=? WHERE session_id=?",
            (f"{req.model.provider}/{req.model.id}", req.session_id),
        )
        cost_accounting.record_session_model(self.store, req.session_id, req.model, req.compaction)
        return P.Ack()

    def prompt_start(self, req: P.PromptStart) -> P.Ack:
        rt = self._rt(req.session_id)
        rt.user_prompt = req.prompt
        return self._ack()

    # -- tool results: routed by tool kind to their mechanism -------------------------------

    async def tool_result(self, req: P.ToolResult) -> P.ToolResultReply:
        rt = self._rt(req.session_id)
        cfg = self.cfg
        if cfg.off:
            return P.ToolResultReply()
        kind = tool_kind(req.tool_name)
        m = self.mechanisms
        if kind == "bash":
            command = str(req.input.get("command", ""))
            needed_again.on_first_arrival(self, rt, req)  # a repeat, or a re-read (`cat f`)?
            if m.digest.enabled(cfg) and m.digest.wants(cfg, req.text, command):
                return await m.digest.tool_result(self, rt, req)
            # too short to digest: kept whole, and stored so masking may take it once old
            m.masking.keep_for_recall(self, rt, req)
            return P.ToolResultReply()
        if kind == "amnesia" and m.amnesia.enabled(cfg):
            if m.rereads.tool_result(self, rt, req):
                return P.ToolResultReply()  # a repeat of a result the model has: no tag needed
            return m.amnesia.tool_result(self, rt, req)
        if kind == "write" and m.writes.on(cfg, rt.profile):
            return await m.writes.tool_result(self, rt, req)
        if keeps_result_of(req.tool_name):
            m.masking.keep_for_recall(self, rt, req)  # masking may take it once old
        return P.ToolResultReply()

    def tag_batch(self, req: P.TagBatch) -> P.TagBatchReply:
        rt = self._rt(req.session_id)
        m = self.mechanisms
        if self.cfg.off or not m.amnesia.enabled(self.cfg):
            return P.TagBatchReply()
        # A repeat of a result the model has becomes a pointer (dedup): no tag for it.
        fresh = [
            item
            for item in req.results
            if not m.rereads.tool_result(self, rt, item.as_result(req.session_id))
        ]
        return m.amnesia.tag_batch(self, rt, req.model_copy(update={"results": fresh}))

    def aux_result(self, req: P.AuxResult) -> P.AuxResultReply:
        """An aux answer the adapter ran for us: record its cost, hand it to its mechanism."""
        rt = self._rt(req.session_id)
        pending = rt.pending.pop(req.aux_id, None)
        if pending is None:
            return P.AuxResultReply()
        ok = req.error is None and req.text is not None
        self.aux.record(
            req.session_id,
            pending.task,
            # the adapter ran it: pi's own providers, or Claude Code's upstream
            rt.profile.aux_runner,
            req.input_tokens,
            req.output_tokens,
            ok,
            req.elapsed_ms,
            req.error,
        )
        cost_accounting.record_aux_model(self.store, req.session_id, req.model)
        text = self._finish_aux(rt, pending, req.text if ok else None)
        return P.AuxResultReply(text=text, accepted=text is not None)

    def _finish_aux(
        self, rt: SessionRuntime, pending: PendingAux, answer: str | None
    ) -> str | None:
        mech = self.mechanisms.aux_task(pending.task)
        return mech.aux_result(self, rt, pending, answer) if mech is not None else None

    # -- context: accounting and edit decisions ---------------------------------------------

    def llm_call(self, req: P.LlmCall) -> P.Ack:
        self._rt(req.session_id)
        if accounting.record_llm_call(self.store, req):  # else a repeat: counted already
            cost_accounting.record_call_costs(self.store, req)
        return self._ack()

    def failed_try(self, req: P.FailedTry) -> P.Ack:
        self._rt(req.session_id)
        accounting.record_failed_try(self.store, req)
        return P.Ack()

    def compaction(self, req: P.Compaction) -> P.Ack:
        self._rt(req.session_id)
        cost_accounting.record_compaction(self.store, req)
        return P.Ack()

    async def context(self, req: P.ContextRequest) -> P.ContextReply:
        rt = self._rt(req.session_id)
        rt.aux_round_deadline = 0.0  # an LLM call ends the tool round: a fresh aux budget
        return await tail_edits.decide(self, rt, req, self.mechanisms)

    def session_totals(self, session_id: str) -> P.SessionTotals:
        # views: the figures and headline of `ctxwrap stats --session` (stats.session_totals)
        from ctxwrap.mechanisms.cost_accounting import settings_overrides
        from ctxwrap.stats.compute import session_totals

        return session_totals(
            self.store.conn,
            session_id,
            ttl_s=self.cfg.cache_ttl_s,
            prices=settings_overrides(self.cfg.prices),
        )

    def turn_end(self, req: P.TurnEnd) -> P.TurnEndReply:
        rt = self._rt(req.session_id)
        accounting.record_turn(self.store, req)
        masking.on_usage(rt, req)  # where the provider missed its cache
        totals = self.session_totals(req.session_id)
        # the savings account starts again from them (mechanisms/budget.py)
        on_totals(rt, totals, req.call_index)
        self._prompt_segment(totals)
        if rt.profile.status_line:
            self._status_line(req.session_id, totals)
        return P.TurnEndReply(totals=totals, config=self._config_view())

    def _prompt_segment(self, totals: P.SessionTotals | None) -> None:
        """The shell prompt's savings line (`ctxwrap_prompt_segment` reads it): one small write."""
        from ctxwrap.statusline import prompt_segment_text, write_prompt_segment

        try:
            write_prompt_segment(prompt_segment_text(totals) if totals else "")
        except OSError as exc:  # a prompt nicety must never fail a turn
            log.debug("prompt segment not written: %s", exc)

    # -- Claude Code's status line (ctxwrap/statusline.py reads the file) ---------------------

    def _status_line(self, session_id: str, totals: P.SessionTotals | None) -> None:
        """One small file per live Claude Code session; None removes it (the session ended)."""
        from ctxwrap.statusline import clear_status, status_text, write_status

        try:
            if totals is None:
                clear_status(session_id)
            else:
                write_status(session_id, status_text(totals))
        except OSError as exc:  # a status nicety must never fail a turn
            log.debug("status line not written: %s", exc)

    # -- recall, capabilities, facts --------------------------------------------------------

    async def recall(self, req: P.RecallRequest) -> P.RecallReply | None:
        try:
            regex = compile_pattern(req.pattern) if req.pattern else None
        except InvalidPattern as exc:
            raise RequestRefused(422, "invalid pattern", str(exc)) from exc
        path = self.raw.path_of(req.handle)
        if path is None:
            return None
        needed_again.on_recall(self, req.handle)  # the hidden result was needed again
        # Off the event loop: a recall over a huge stored output must not stall health or
        # other sessions' calls while it reads the file.
        res = await asyncio.to_thread(
            scan,
            path,
            regex,
            start_line=req.start_line,
            end_line=req.end_line,
            context_lines=req.context_lines,
            max_chars=self.cfg.recall_max_tokens * 4,
        )
        return P.RecallReply(
            text=res.text,
            total_lines=res.total_lines,
            matched_lines=res.matched_lines,
            truncated=res.truncated,
        )

    def capabilities(self, req: P.CapabilitySearch) -> P.CapabilityReply:
        self._rt(req.session_id)  # 409 for a session not registered yet: the bridge registers it
        return self.capabilities_catalog.search(req, self.cfg.skill_max_chars)

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
            for task in rt.part(TagState).tasks.values():
                task.cancel()
        await self.aux.aclose()
        self.capabilities_catalog.stop()
        self.store.close()
