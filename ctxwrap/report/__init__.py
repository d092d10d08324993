"""`ctxwrap report`: one self-contained HTML page of a session (ran under ctxwrap, or replayed)."""

from __future__ import annotations

from pathlib import Path

from ctxwrap.report._data import ReportData, from_db, from_replay, load_db_report
from ctxwrap.report._html import render_html


def build_report(*, session: str | None = None, replay: Path | None = None) -> ReportData:
    if replay is not None:
        return from_replay(replay)
    return load_db_report(session)


__all__ = ["ReportData", "build_report", "from_db", "from_replay", "render_html"]
