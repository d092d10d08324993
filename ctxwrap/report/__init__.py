"""`ctxwrap report`: one self-contained HTML page of a session (ran under ctxwrap, or replayed)."""

from __future__ import annotations

from pathlib import Path

from ctxwrap.report._data import ReportData, from_db, from_replay, load_db_report
from ctxwrap.report._html import render_html


def build_report(
    *, session: str | None = None, replay: Path | None = None, width: int = 100
) -> ReportData:
    """A session that ran under ctxwrap (`session`: an id prefix, default the latest), or one
    replayed from `replay` (`session` picks among several; `width`: of the list if needed)."""
    if replay is not None:
        return from_replay(replay, session=session, width=width)
    return load_db_report(session)


__all__ = ["ReportData", "build_report", "from_db", "from_replay", "render_html"]
