""" "Needed again" live (DESIGN.md invariant 8): a hidden result the agent asked for again.

Every intervention that hides part of a result — a digest (bash), a tombstone or pointer
(amnesia), a write strip (writes), a history mask (masking) — is recorded where it happens
(`digests` for digests, `edits` for the rest). This module records when the agent then
asked for what was hidden: it recalled the stored output by its handle (`recalled`: pi's
ctx_recall, and `ctxwrap recall` in the agent's shell, both through `/v1/recall`), or issued
the hidden call again (`reread`: a repeat of a hidden signature, or a read of a file whose read
was masked or tombstoned). Copies from hidden text (an edit quoting a line only the hidden
result held) are seen by `ctxwrap replay` only: the daemon never sees the agent's edits whole.

`summary` gives per mechanism the interventions and how many were needed again; `ctxwrap stats`
shows it next to the savings.
"""

from __future__ import annotations

import re
import sqlite3
import time
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ctxwrap.engine.edits import args_sig
from ctxwrap.engine.shellcmd import shell_read

if TYPE_CHECKING:
    from ctxwrap import protocol as P
    from ctxwrap.mechanisms.ports import AuxView, StoreView
    from ctxwrap.state.session import SessionRuntime

# edits.kind → mechanism (a digest is a raw output of a bash-kind tool)
KIND_MECHANISM = {
    "tombstone": "amnesia",
    "remove": "amnesia",
    "pointer": "amnesia",
    "strip_write": "writes",
    # an applied edit's replaced text: its own figure, not diluted into the write strip's
    "strip_edit": "edits",
    "mask": "masking",
}


# A figure shown for a row of savings covers the same interventions as the row: the writes
# row's savings include the edit strip's (vocabulary: "writes and edits kept short"), whose
# needed-again figure is kept apart above.
ROW_MECHANISMS = {"writes": ("writes", "edits")}


@dataclass
class HiddenState:
    """What a session hid, for telling when the agent asks for it again (`rt.part(...)`):
    hidden call signature → its result id, and file → the ids of its hidden reads."""

    hidden_by_sig: dict[str, str] = field(default_factory=dict)
    hidden_reads: dict[str, list[str]] = field(default_factory=dict)


def row_parts(per: Any, mechanism: str) -> list[tuple[str, int, int]]:
    """(mechanism, needed again, interventions) of each part of the row `mechanism` that hid
    something, from a summary's `mechanisms` (replay's or the live store's)."""
    out = []
    for key in ROW_MECHANISMS.get(mechanism, (mechanism,)):
        m = per.get(key) if isinstance(per, dict) else None
        if isinstance(m, dict) and int(m.get("interventions") or 0):
            out.append((key, int(m.get("needed_again") or 0), int(m["interventions"])))
    return out


def row_figure(per: Any, mechanism: str) -> tuple[int, int]:
    """(needed again, interventions) of the row `mechanism` from a summary's `mechanisms`
    (replay's or the live store's)."""
    parts = row_parts(per, mechanism)
    return sum(p[1] for p in parts), sum(p[2] for p in parts)


def parts_text(parts: list[tuple[str, int, int]]) -> str | None:
    """`writes 5 of 8, edits 1 of 38` where a row covers more than one mechanism; else None.
    The write strip's share (most of its strips needed again on real sessions) must not hide
    in the edit strip's."""
    if len(parts) < 2:
        return None
    return ", ".join(f"{k} {n:,} of {h:,}" for k, n, h in parts)


def how_text(f: Any) -> str:
    """`5 copied, 2 re-read`: how a mechanism's needed-again results were needed (a copy costs
    a re-read plain did not pay; a re-read is in the recorded session too)."""
    return ", ".join(
        f"{f[k]} {word}"
        for k, word in (("copied", "copied"), ("reread", "re-read"), ("recalled", "recalled"))
        if isinstance(f, dict) and f.get(k)
    )


# Claude Code numbers the lines of a Read result ("    12→…"); pi does not.
_LINE_NUMBER = re.compile(r"^\s*\d+(?:→|\t)")
# A re-read asks again for a hidden result when at least this share of one of the two (its own
# lines, or the hidden ones) is the other's: a different range of the file, or a file rewritten
# since, is a new question, not the hidden answer asked for again.
REREAD_OVERLAP = 0.5


def distinctive_lines(text: str) -> list[str]:
    """The distinctive lines of a text (stripped, line numbers off, at least 10 chars with a
    letter or digit), each once: what a later edit can be seen copying, or a re-read return."""
    out: dict[str, None] = {}
    for raw in text.splitlines():
        line = _LINE_NUMBER.sub("", raw, count=1).strip()
        if len(line) >= 10 and any(ch.isalnum() for ch in line):
            out[line] = None
    return list(out)


def asks_again(hidden: Collection[str], new: Collection[str]) -> bool:
    """Whether a re-read returned what was hidden (both as `distinctive_lines`): most of the
    smaller of the two is in the other — a narrower range of the hidden result, the same file
    again, or a wider range around it. A different range, or a file rewritten since, is not.
    Without distinctive lines on either side (a tiny or binary file), any re-read counts."""
    if not hidden or not new:
        return True
    small, large = (hidden, new) if len(hidden) <= len(new) else (new, hidden)
    big = set(large)
    shared = sum(1 for line in small if line in big)
    return shared >= REREAD_OVERLAP * len(small)


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


# At most this much of a stored hidden read is compared with a re-read (the rest is ignored).
_COMPARE_MAX_CHARS = 512 * 1024


def _stored_text(d: AuxView, session_id: str, tool_call_id: str) -> str | None:
    """The text ctxwrap kept of a hidden result (redacted as stored), or None."""
    rows = d.store.query(
        "SELECT handle FROM raw_outputs WHERE session_id=? AND tool_call_id=?",
        (session_id, tool_call_id),
    )
    path = d.raw.path_of(str(rows[0]["handle"])) if rows else None
    if path is None:
        return None
    try:
        with path.open(encoding="utf-8", errors="replace") as f:
            return f.read(_COMPARE_MAX_CHARS)
    except OSError:
        return None


def on_first_arrival(d: AuxView, rt: SessionRuntime, req: P.ToolResult) -> None:
    """A tool result the daemon has not seen before (its size recorded, `rt.sizes`): does it
    ask again for something hidden (`on_result`)? A result sent again is not asked twice."""
    if req.tool_call_id in rt.sizes:
        return
    rt.sizes[req.tool_call_id] = len(req.text)
    on_result(
        d,
        rt,
        args_sig(req.tool_name, req.input),
        req.tool_name,
        req.input,
        req.text,
        is_error=req.is_error,
    )


def on_result(
    d: AuxView,
    rt: SessionRuntime,
    sig: str,
    tool_name: str,
    args: dict[str, Any],
    text: str,
    *,
    is_error: bool = False,
) -> None:
    """A new result arrived: if its call repeats a hidden one, or reads a file whose earlier
    read was hidden, and it returned what was hidden (`asks_again`: not another range of the
    file, not a file rewritten since), that hidden result was needed again. Replay applies the
    same rule (replay/_sim.py)."""
    is_read = tool_name.lower() == "read"
    path = args.get("path", args.get("file_path"))
    if tool_name.lower() == "bash":  # `cat f` through the shell reads f too
        is_read, path = shell_read(str(args.get("command", "")))
    hidden = rt.part(HiddenState).hidden_by_sig.get(sig)
    candidates: list[str] = [] if hidden is None else [hidden]
    if is_read and isinstance(path, str):
        candidates += [c for c in rt.part(HiddenState).hidden_reads.get(path, ()) if c != hidden]
    if not candidates or (is_read and is_error):
        return
    new: list[str] | None = None
    for cid in candidates:
        if is_read:
            old = _stored_text(d, rt.session_id, cid)
            if new is None:
                new = distinctive_lines(text)
            if old is not None and not asks_again(distinctive_lines(old), new):
                continue
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
        # the digests that replaced an output (a stored output the digest left whole, or one
        # kept for masking's recall, hid nothing)
        digests = conn.execute(
            f"SELECT session_id, tool_call_id FROM digests WHERE {where}", params
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
