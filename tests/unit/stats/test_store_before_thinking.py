"""`ctxwrap stats` and `ctxwrap report` read a store an older daemon wrote — schema 12 (before
the old-thinking column), 13 (before history masking's own column): an upgrade shows the
figures before the new daemon migrates the store."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from ctxwrap.report._data import from_db
from ctxwrap.state.store import connect
from ctxwrap.stats.chart import session_chart_line
from ctxwrap.stats.compute import compute_stats
from tests.unit.stats.test_costs_more import CARRYING, SID, build


def _figures(db: Path) -> tuple[object, ...]:
    conn = connect(db, readonly=True)
    try:
        report = compute_stats(conn, session=SID)
        chart = session_chart_line(conn, SID, width=80, color=False)
        data = from_db(conn, SID)
    finally:
        conn.close()
    t = report.totals
    return (
        t.saved_chars,
        t.cost.total_saved_weighted,
        chart,
        [c.kept for c in data.calls],
        [c.sent for c in data.calls],
    )


@pytest.mark.parametrize(
    ("version", "dropped"), [(12, ("saved_thinking", "saved_masking")), (13, ("saved_masking",))]
)
def test_an_older_store_reads_as_it_did(
    tmp_path: Path, version: int, dropped: tuple[str, ...]
) -> None:
    new = build(tmp_path / "new.db", CARRYING)
    old = build(tmp_path / "old.db", CARRYING)
    with sqlite3.connect(old) as conn:
        for column in dropped:
            conn.execute(f"ALTER TABLE llm_calls DROP COLUMN {column}")
        conn.execute(f"PRAGMA user_version = {version}")
    assert _figures(old) == _figures(new)
