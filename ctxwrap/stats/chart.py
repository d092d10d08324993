"""The one-line per-call chart `ctxwrap stats --session ID` prints on a terminal.

Each character is one call (or the largest of a bucket of calls when there are more calls than
columns): its height is what was sent, on the scale of the largest plain request, so the gap
to a full block is what ctxwrap kept out; green where it kept something out, red where it
cost more than plain (its own tool specs, facts).
"""

from __future__ import annotations

import sqlite3

BLOCKS = " ▁▂▃▄▅▆▇█"


def _buckets(values: list[tuple[int, int]], width: int) -> list[tuple[int, int]]:
    if len(values) <= width:
        return values
    out = []
    for k in range(width):
        chunk = values[k * len(values) // width : (k + 1) * len(values) // width]
        out.append((max(s for s, _ in chunk), max(p for _, p in chunk)))
    return out


def per_call_chart(sent_plain: list[tuple[int, int]], *, width: int, color: bool) -> str:
    """`sent_plain`: (sent, plain) per call, any unit. Returns one line (no newline)."""
    if not sent_plain:
        return ""
    cols = _buckets(sent_plain, max(8, width))
    peak = max(max(p for _, p in cols), max(s for s, _ in cols), 1)
    chars = []
    for sent, plain in cols:
        level = max(1, round(8 * sent / peak)) if sent > 0 else 0
        ch = BLOCKS[level]
        if color:
            code = "32" if plain > sent else "31" if plain < sent else "2"
            ch = f"\x1b[{code}m{ch}\x1b[0m"
        chars.append(ch)
    return "".join(chars)


def session_chart_line(
    conn: sqlite3.Connection, session_id: str, *, width: int, color: bool
) -> str | None:
    """`per call  ▂▃▅▆▇ sent vs plain (▇ = 12.3k tokens)` for one session, or None."""
    from ctxwrap.mechanisms.cost_accounting import saved_sql

    rows = conn.execute(
        "SELECT sent_system + sent_messages + sent_tools AS sent,"
        f" {saved_sql(conn)} AS saved"
        " FROM llm_calls WHERE session_id=? ORDER BY call_index, ts",
        (session_id,),
    ).fetchall()
    if not rows:
        return None
    values = [(int(r[0]), int(r[0]) + int(r[1])) for r in rows]
    label = "per call "
    legend = f" sent vs plain; █ = {max(p for _, p in values) // 4:,} tokens"
    room = max(8, width - len(label) - len(legend))
    return label + per_call_chart(values, width=room, color=color) + legend


def stats_chart(session_id: str, *, width: int, color: bool) -> str:
    """The chart line for `ctxwrap stats --session ID` (read-only store), or "" without data."""
    from ctxwrap import paths
    from ctxwrap.state.store import connect

    db = paths.db_path()
    if not db.exists():
        return ""
    conn = connect(db, readonly=True)
    try:
        line = session_chart_line(conn, session_id, width=width, color=color)
    except sqlite3.Error:
        return ""  # the chart is a garnish: a store it cannot read leaves the table alone
    finally:
        conn.close()
    return line + "\n" if line else ""
