"""Aux-model plumbing shared by every mechanism.

Two ways an aux call runs: the agent adapter runs it (pi's own provider code, or Claude Code's
upstream) — the daemon hands out an `AuxRequest` and gets the answer back at /v1/aux/result —
or the daemon runs it itself on the `http` backend. Either way each call is one row in
`aux_calls`, so its cost counts against the savings.

Time: the calls the agent waits for (a digest, a fact) share one budget per tool round (the
tool calls between two LLM calls), never a sum of timeouts; after a call runs out of time the
next ones are skipped for a while, so a slow aux model costs a session one budget.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from typing import TYPE_CHECKING, Any

from ctxwrap import protocol as P
from ctxwrap.config import AUX_BY_AGENT
from ctxwrap.digest.redact import redact_secrets
from ctxwrap.state.session import PendingAux, SessionRuntime

if TYPE_CHECKING:
    from ctxwrap.aux.http import HttpAuxBackend
    from ctxwrap.config import Settings
    from ctxwrap.state.store import Store

MECHANISM_OF_TASK = {"digest": "bash", "tag": "amnesia", "fact": "writes"}
# After an aux call ran out of time, calls the agent would wait for are skipped this long.
SLOW_SUSPEND_S = 60.0


class AuxCalls:
    def __init__(self, store: Store, settings: Settings) -> None:
        self.store = store
        self.cfg = settings
        self._http: HttpAuxBackend | None = None
        self.slow_until = 0.0  # monotonic; see SLOW_SUSPEND_S

    def reconfigure(self, settings: Settings) -> None:
        """New settings: the http backend is rebuilt on next use."""
        self.cfg = settings
        old, self._http = self._http, None
        if old is not None:
            asyncio.get_running_loop().create_task(old.aclose())

    def http_backend(self) -> HttpAuxBackend | None:
        if self.cfg.aux_backend != "http" or not self.cfg.aux_base_url:
            return None
        if self._http is None:
            from ctxwrap.aux.http import HttpAuxBackend

            self._http = HttpAuxBackend(
                base_url=self.cfg.aux_base_url,
                api=self.cfg.aux_api,
                model=self.cfg.aux_model,
                api_key_env=self.cfg.aux_api_key_env,
            )
        return self._http

    def delegated(self) -> bool:
        """The agent adapter runs aux calls (pi's providers, Claude Code's upstream)."""
        return self.cfg.aux_backend == AUX_BY_AGENT

    def request(
        self,
        rt: SessionRuntime,
        task: str,
        tool_call_id: str,
        system: str,
        prompt: str,
        max_tokens: int,
        ctx: dict[str, Any],
    ) -> P.AuxRequest:
        """An aux call for the adapter to run; its answer comes back through `take_pending`."""
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

    def record(
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
                "error": redact_secrets(error)[:300] if error else None,
            },
        )

    def round_budget_ms(self, rt: SessionRuntime) -> int:
        """What is left of this tool round's aux budget; 0 while the aux model is known slow."""
        now = time.monotonic()
        if now < self.slow_until:
            return 0
        if not rt.aux_round_deadline:
            rt.aux_round_deadline = now + self.cfg.aux_timeout_ms / 1000
        return max(0, int((rt.aux_round_deadline - now) * 1000))

    async def http_complete(
        self,
        rt: SessionRuntime,
        task: str,
        system: str,
        prompt: str,
        max_tokens: int,
        *,
        waited_for: bool = True,
    ) -> str | None:
        """Run one aux call on the http backend and record its cost; None when there is none.

        `waited_for`: the agent waits for the answer (digest, fact), so the call gets what is
        left of the round's budget; a tag runs beside the round with its own timeout.
        """
        backend = self.http_backend()
        if backend is None:
            return None
        timeout_ms = self.round_budget_ms(rt) if waited_for else self.cfg.aux_timeout_ms
        if timeout_ms <= 0:
            return None  # no time left this round: the extract or heuristic stands
        start = time.monotonic()
        ans = await backend.complete(
            system=system, prompt=prompt, max_tokens=max_tokens, timeout_ms=timeout_ms
        )
        if ans.text is None and time.monotonic() - start >= timeout_ms / 1000 * 0.95:
            self.slow_until = time.monotonic() + SLOW_SUSPEND_S
        self.record(
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

    async def aclose(self) -> None:
        if self._http is not None:
            await self._http.aclose()
