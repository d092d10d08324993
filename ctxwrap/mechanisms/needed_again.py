""" "Needed again" live (DESIGN.md invariant 8): a hidden result the agent asked for again.

Every intervention that hides part of a result — a digest (bash), a tombstone or pointer
(amnesia), a write strip (writes), a history mask (masking) — is recorded where it happens
(`raw_outputs` for digests, `edits` for the rest). This module records when the agent then
asked for what was hidden: it recalled the stored output by its handle (`recalled`), or issued
the hidden call again (`reread`: a repeat of a hidden signature, or a read of a file whose read
was masked or tombstoned). Copies from hidden text (an edit quoting a line only the hidden
result held) are seen by `ctxwrap replay` only: the daemon never sees the agent's edits whole.

`summary` gives per mechanism the interventions and how many were needed again; `ctxwrap stats`
shows it next to the savings.
"""

from __future__ import annotations

import sqlite3
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ctxwrap.daemon.session import SessionRuntime
    from ctxwrap.mechanisms.ports import StoreView

# edits.kind → mechanism (a digest is a raw output of a bash-kind tool)
KIND_MECHANISM = {
    "tombstone": "amnesia",
    "remove": "amnesia",
    "pointer": "amnesia",
    "strip_write": "writes",
    "mask": "masking",
}


def record(d: StoreView, session_id: str, tool_call_id: str, how: str) -> None:
    d.store.insert(
        "needed_again",
        {"session_id": session_id, "tool_call_id": tool_call_id, "how": how, "ts": time.time()},
        replace=True,
    )


def on_recall(d: StoreView, handle: str) -> None:
    """A recall of a stored output: the result behind the handle was needed again."""
    rows = d.store.query(
        "SELECT session_id, tool_call_id FROM raw_outputs WHERE handle=?", (handle,)
    )
    if rows:
        record(d, str(rows[0]["session_id"]), str(rows[0]["tool_call_id"]), "recalled")


def on_result(
    d: StoreView, rt: SessionRuntime, sig: str, tool_name: str, args: dict[str, Any]
) -> None:
    """A new result arrived: if its call repeats a hidden one, or reads a file whose earlier
    read was hidden, that hidden result was needed again."""
    hidden = rt.hidden_by_sig.get(sig)
    if hidden is not None:
        record(d, rt.session_id, hidden, "reread")
    if tool_name.lower() == "read":
        path = args.get("path", args.get("file_path"))
        if isinstance(path, str):
            for cid in rt.hidden_reads.get(path, ()):
                if cid != hidden:
                    record(d, rt.session_id, cid, "reread")


def summary(
    conn: sqlite3.Connection, *, session: str | None = None, since: float | None = None
) -> dict[str, Any]:
    """Per mechanism: interventions, needed again (recalled / re-read) and the share."""
    where = "1=1"
    params: list[Any] = []
    if session is not None:
        where += " AND session_id = ?"
        params.append(session)
    if since is not None:
        where += " AND ts >= ?"
        params.append(since)
    try:
        edits = conn.execute(
            f"SELECT session_id, tool_call_id, kind FROM edits WHERE {where}", params
        ).fetchall()
        digests = conn.execute(
            f"SELECT session_id, tool_call_id FROM raw_outputs WHERE "
            f"{where.replace('ts >=', 'created_at >=')} AND lower(tool_name) = 'bash'",
            params,
        ).fetchall()
        needed = conn.execute(
            f"SELECT session_id, tool_call_id, how FROM needed_again WHERE {where}", params
        ).fetchall()
    except sqlite3.OperationalError:  # a store from before schema 7
        return {"interventions": 0, "needed_again": 0, "share_pct": None, "mechanisms": {}}
    mech_of: dict[tuple[str, str], str] = {}
    for r in digests:
        mech_of[(r[0], r[1])] = "bash"
    for r in edits:
        mech_of[(r[0], r[1])] = KIND_MECHANISM.get(r[2], r[2])
    per: dict[str, dict[str, Any]] = {}
    for m in mech_of.values():
        per.setdefault(m, {"interventions": 0, "needed_again": 0, "recalled": 0, "reread": 0})
        per[m]["interventions"] += 1
    seen: set[tuple[str, str]] = set()
    for r in needed:
        key = (r[0], r[1])
        mech = mech_of.get(key)
        if mech is None:
            continue
        m = mech
        if key not in seen:
            per[m]["needed_again"] += 1
            seen.add(key)
        if r[2] in ("recalled", "reread"):
            per[m][r[2]] += 1
    for f in per.values():
        f["share_pct"] = (
            round(100.0 * f["needed_again"] / f["interventions"], 1) if f["interventions"] else None
        )
    total = sum(f["interventions"] for f in per.values())
    hit = sum(f["needed_again"] for f in per.values())
    return {
        "interventions": total,
        "needed_again": hit,
        "share_pct": round(100.0 * hit / total, 1) if total else None,
        "mechanisms": dict(sorted(per.items())),
    }


def text_line(s: dict[str, Any]) -> str | None:
    """One line for `ctxwrap stats`, or None when nothing was hidden."""
    if not s["interventions"]:
        return None
    parts = ", ".join(
        f"{m} {f['needed_again']}/{f['interventions']}" for m, f in s["mechanisms"].items()
    )
    return (
        f"needed again: {s['needed_again']} of {s['interventions']} hidden results"
        f" ({s['share_pct']}%; recalled or re-read) — {parts}"
    )
