"""Mechanism 5, statistics: per-call sizes of what was sent and what each mechanism kept out,
the provider's own usage per turn, and the session totals the status line shows.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from ctxwrap import protocol as P
from ctxwrap.state.session import chars_to_tokens

if TYPE_CHECKING:
    from ctxwrap.state.store import Store


def record_failed_try(store: Store, req: P.FailedTry) -> None:
    """A try that got an error or no answer: no LLM call, no cost; `ctxwrap stats` counts it."""
    store.insert(
        "failed_tries",
        {"session_id": req.session_id, "ts": time.time(), "status": req.status},
    )


def record_llm_call(store: Store, req: P.LlmCall) -> bool:
    """Whether the call was recorded now (False: its record_id was recorded before)."""
    s, v = req.sent_chars, req.saved_chars
    return store.insert(
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
            "saved_masking": v.masking,
            "saved_writes": v.writes,
            "saved_skills": v.skills,
            "saved_tools": v.tools,
            "saved_thinking": v.thinking,
            "head_changed": int(req.head_changed),
            "message_count": req.message_count,
            "record_id": req.record_id,
        },
        ignore=True,
    )


def record_turn(store: Store, req: P.TurnEnd) -> bool:
    """Whether the turn was recorded now (False: its record_id was recorded before). Its usage
    is linked to the call it is of: the latest recorded with that index (a resumed session
    numbers its calls from 0 again)."""
    call_id = None
    if req.call_index is not None:
        rows = store.query(
            "SELECT MAX(id) id FROM llm_calls WHERE session_id=? AND call_index=?",
            (req.session_id, req.call_index),
        )
        call_id = rows[0]["id"] if rows else None
    return store.insert(
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
            "record_id": req.record_id,
            "llm_call_id": call_id,
        },
        ignore=True,
    )


def session_totals(store: Store, session_id: str) -> P.SessionTotals:
    row = store.query(
        """SELECT COUNT(*) n, COALESCE(SUM(sent_system+sent_messages+sent_tools),0) sent,
                  COALESCE(SUM(saved_bash+saved_amnesia+saved_masking+saved_writes+saved_skills+saved_tools+saved_thinking),0) saved
           FROM llm_calls WHERE session_id=?""",
        (session_id,),
    )[0]
    aux = store.query(
        "SELECT COALESCE(SUM(input_tokens+output_tokens),0) t FROM aux_calls WHERE session_id=?",
        (session_id,),
    )[0]["t"]
    sent, saved = chars_to_tokens(row["sent"]), chars_to_tokens(row["saved"])
    return P.SessionTotals(
        llm_calls=row["n"],
        sent_tokens=sent,
        plain_tokens=sent + saved,
        saved_tokens=saved,
        aux_tokens=aux,
        net_tokens=saved - aux,
    )
