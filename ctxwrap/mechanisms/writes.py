"""Mechanism 4, writes → facts: the body of a large write leaves later requests (a marker stays
in the model's own call, frozen like any tail edit) and a one-line fact follows the tool round.

The heuristic fact is there at once; an aux fact replaces it when it comes in time and passes
validation. The file on disk is never touched.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from ctxwrap import protocol as P
from ctxwrap.aux import prompts
from ctxwrap.engine.edits import TailToolCall, edit_strip_floor
from ctxwrap.engine.facts import aux_fact, heuristic_fact, line_count
from ctxwrap.mechanisms.base import EditSettings, Mechanism, WriteSettings
from ctxwrap.state.session import PendingAux, SessionRuntime

if TYPE_CHECKING:
    from ctxwrap.mechanisms.ports import AuxView
    from ctxwrap.protocol import AgentProfile


async def write_result(
    d: AuxView, rt: SessionRuntime, req: P.ToolResult, mech: WriteStrip | None = None
) -> P.ToolResultReply:
    cfg = d.cfg
    content = req.input.get("content")
    path = str(req.input.get("path", req.input.get("file_path", "?")))
    if req.is_error or not isinstance(content, str):
        return P.ToolResultReply()
    size = (
        req.content_bytes
        if req.content_bytes is not None
        else len(content.encode("utf-8", "replace"))
    )
    if not (mech or WriteStrip()).strips(cfg, size, rt.profile):
        return P.ToolResultReply()
    fact = heuristic_fact(path, content, total_bytes=size, total_lines=req.content_lines)
    store_fact(d, rt.session_id, req.tool_call_id, path, fact, "heuristic")
    lines = req.content_lines if req.content_lines is not None else line_count(content)
    ctx = {"path": path, "lines": lines}
    prompt = prompts.fact_prompt(path=path, content=content, max_chars=cfg.write_max_content_chars)
    if d.aux.delegated():
        aux = d.aux.request(
            rt,
            "fact",
            req.tool_call_id,
            prompts.FACT_SYSTEM,
            prompt,
            cfg.write_fact_max_tokens,
            ctx,
        )
        return P.ToolResultReply(text=fact, aux=aux)
    if d.aux.http_backend() is not None:
        answer = await d.aux.http_complete(
            rt, "fact", prompts.FACT_SYSTEM, prompt, cfg.write_fact_max_tokens
        )
        better = finish_fact(d, rt, PendingAux("fact", req.tool_call_id, ctx), answer)
        fact = better or fact
    return P.ToolResultReply(text=fact)


def finish_fact(
    d: AuxView, rt: SessionRuntime, pending: PendingAux, answer: str | None
) -> str | None:
    """An aux fact that passes validation replaces the heuristic one; None keeps it."""
    summary = prompts.clean_fact(
        answer, max_chars=d.cfg.write_fact_max_tokens * 6, path=pending.context["path"]
    )
    if summary is None:
        return None
    fact = aux_fact(pending.context["path"], summary, pending.context["lines"])
    store_fact(d, rt.session_id, pending.tool_call_id, pending.context["path"], fact, "aux")
    return fact


def store_fact(
    d: AuxView, session_id: str, tool_call_id: str, path: str, text: str, source: str
) -> None:
    d.store.insert(
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


def strip_marker(call: TailToolCall) -> str:
    size = call.writeContentBytes if call.writeContentBytes is not None else call.writeContentChars
    return (
        f"[content stripped by ctxwrap: {size or 0:,} bytes, {call.writeContentLines or 0:,} lines "
        f"of {call.writePath or 'the file'}; the file on disk is complete]"
    )


class WriteStrip(Mechanism):
    """A large write's body leaves later requests (a marker stays in the call, frozen like any
    tail edit); a one-line fact follows the tool round."""

    name = "writes"
    switch = "write"
    settings = ("write", "write_min_bytes", "write_max_content_chars", "write_fact_max_tokens")

    def on(self, s: WriteSettings, profile: AgentProfile) -> bool:
        """`write = true` / `false`, or `auto`: the agent's default (`AgentProfile.write_strip`,
        measured on its real sessions)."""
        return s.write is True or (s.write == "auto" and profile.write_strip)

    def enabled(self, s: object) -> bool:
        # without a profile: whether it may strip under any agent (true or auto)
        return getattr(s, self.switch) is not False

    def strips(self, s: WriteSettings, size_bytes: int, profile: AgentProfile) -> bool:
        return self.on(s, profile) and size_bytes >= s.write_min_bytes

    def min_bytes(self, s: WriteSettings, profile: AgentProfile) -> int:
        """The tail decision's threshold (`engine.edits.decide_edits`): none when off."""
        return s.write_min_bytes if self.on(s, profile) else 1 << 62

    def marker(self, call: TailToolCall) -> str:
        return strip_marker(call)

    async def tool_result(
        self, d: AuxView, rt: SessionRuntime, req: P.ToolResult
    ) -> P.ToolResultReply:
        return await write_result(d, rt, req, self)

    def aux_result(
        self, d: AuxView, rt: SessionRuntime, pending: PendingAux, answer: str | None
    ) -> str | None:
        return finish_fact(d, rt, pending, answer)


class EditStrip(Mechanism):
    """An applied edit's replaced text leaves its call from the next request on."""

    name = "edits"
    switch = "edit_strip"
    settings = ("edit_strip", "edit_min_chars")

    def min_chars(self, s: EditSettings) -> int:
        """The tail decision's threshold (`engine.edits.decide_edits`): 0 is off."""
        return s.edit_min_chars if s.edit_strip else 0

    def floor(self, s: EditSettings) -> int:
        """The shortest old text worth a marker, at `edit_min_chars`."""
        return edit_strip_floor(s.edit_min_chars)
