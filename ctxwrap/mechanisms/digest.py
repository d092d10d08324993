"""Mechanism 1, bash digest: output over the threshold is replaced by a digest before it ever
becomes a message.

Two stages: the extractive digester (deterministic, streaming) over the complete output — pi's
spill file when pi reports one — then, when the extract is still long, an aux-model summary
that is accepted only if it is better than the extract. The raw output is stored redacted so
the model can recall parts of it.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ctxwrap import protocol as P
from ctxwrap.aux import prompts
from ctxwrap.daemon.session import PendingAux, SessionRuntime, chars_to_tokens, recall_call
from ctxwrap.digest.redact import redact_secrets
from ctxwrap.engine.bashout import open_trusted_spill, scrub_temp_paths, split_bash_text

if TYPE_CHECKING:
    from ctxwrap.daemon.service import Daemon
    from ctxwrap.digest import StreamingDigester


async def bash_result(d: Daemon, rt: SessionRuntime, req: P.ToolResult) -> P.ToolResultReply:
    cfg = d.cfg
    if chars_to_tokens(len(req.text)) < cfg.bash_min_tokens:
        return P.ToolResultReply()
    parsed = split_bash_text(req.text)
    exit_code = req.exit_code if req.exit_code is not None else parsed.exit_code
    if exit_code is None and not req.is_error:
        exit_code = 0
    command = str(req.input.get("command", ""))
    meta: dict[str, str | None] = {
        "session_id": rt.session_id,
        "tool_call_id": req.tool_call_id,
        "tool_name": req.tool_name,
        "command": command,
    }
    from ctxwrap.digest import StreamingDigester

    digester = StreamingDigester(
        command=command,
        exit_code=exit_code,
        max_chars=min(cfg.bash_max_summary_tokens * 4 * 2, 16000),
    )
    # Only the agent's own report names a spill file, and only a checked one is read (invariant 7).
    with open_trusted_spill(
        req.full_output_path,
        parsed.full_output_path if rt.agent == "pi" else None,
        pi_tmpdir=req.pi_tmpdir,
        call_started_ms=req.call_started_ms,
        agent=rt.agent,
    ) as spill:
        if spill.refused:
            d.events.write(
                "spill_refused", session=rt.session_id, call=req.tool_call_id, reason=spill.refused
            )
        if spill.source is not None:
            stored = await asyncio.to_thread(
                _store_and_digest_file, d, spill.source, digester, meta
            )
        else:
            digester.feed(parsed.body)
            stored = d.raw.try_put_text(parsed.body, **meta)
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
    # None: the state disk is full. The digest still replaces the flood; it just has no handle.
    handle = stored.handle if stored is not None else None
    recall = (
        f"Search it with {recall_call(rt.agent, handle)}"
        if handle
        else "It could not be kept (ctxwrap's state disk is full): no recall"
    )
    header = (
        f"[ctxwrap digest of bash output — {digest.original_lines:,} lines, {digest.original_chars:,} chars; "
        f"{status}; the raw output is not in context. "
        f"{recall}]"
    )
    extract = scrub_temp_paths(digest.text)
    text = header + "\n$ " + command[:300] + "\n" + extract
    if status.startswith("exit code") and exit_code not in (None, 0):
        text += f"\n\nCommand exited with code {exit_code}"
    d.store.insert(
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
    if handle:
        rt.handles[req.tool_call_id] = handle
    d.events.write(
        "bash_digest",
        session=rt.session_id,
        call=req.tool_call_id,
        original=len(req.text),
        digest=len(text),
        family=digest.family,
    )
    ctx = {"extract": extract, "header": header + "\n$ " + command[:300]}
    if len(extract) < cfg.bash_aux_min_chars:
        return P.ToolResultReply(action="replace", text=text, handle=handle)
    aux_prompt = prompts.digest_prompt(
        command=command, exit_code=exit_code, user_prompt=rt.user_prompt, extract=extract
    )
    if d.aux.delegated():
        aux = d.aux.request(
            rt,
            "digest",
            req.tool_call_id,
            prompts.DIGEST_SYSTEM,
            aux_prompt,
            cfg.bash_max_summary_tokens,
            ctx,
        )
        return P.ToolResultReply(action="replace", text=text, handle=handle, aux=aux)
    if d.aux.http_backend() is not None:
        answer = await d.aux.http_complete(
            rt, "digest", prompts.DIGEST_SYSTEM, aux_prompt, cfg.bash_max_summary_tokens
        )
        better = accept_digest(d, rt, PendingAux("digest", req.tool_call_id, ctx), answer)
        if better is not None:
            text = better
    return P.ToolResultReply(action="replace", text=text, handle=handle)


def accept_digest(
    d: Daemon, rt: SessionRuntime, pending: PendingAux, answer: str | None
) -> str | None:
    """The aux digest replaces the extract only when it is better; None keeps the extract."""
    extract: str = pending.context["extract"]
    if not answer or not answer.strip():
        return None
    answer = redact_secrets(scrub_temp_paths(answer.strip()))
    cap = d.cfg.bash_max_summary_tokens * 4
    # An answer longer than what it condenses (or than the cap) is worse than the extract.
    if len(answer) >= len(extract) or len(answer) > cap:
        return None
    text: str = pending.context["header"] + "\n" + answer
    d.store.conn.execute(
        "UPDATE digests SET digest_chars=?, source='aux' WHERE session_id=? AND tool_call_id=?",
        (len(text), rt.session_id, pending.tool_call_id),
    )
    return text


def _store_and_digest_file(
    d: Daemon, source: Path, digester: StreamingDigester, meta: dict[str, str | None]
) -> Any:
    # One pass over the spill file feeds both the digester and the redacted store.
    def lines() -> Any:
        from ctxwrap.daemon.rawstore import _lines_of_file

        for line in _lines_of_file(source, 1 << 40):
            digester.feed(line + "\n")
            yield line

    return d.raw.try_put_lines(lines(), **meta)  # type: ignore[arg-type]
