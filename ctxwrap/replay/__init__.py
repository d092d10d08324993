"""`ctxwrap replay`: what ctxwrap would have kept out of sessions you already ran.

Reads pi session files (1.x and 0.73) and Claude Code transcripts as streams, replays each
session's requests with ctxwrap's mechanisms applied (no model call) and prices both sides
with the cost model. Never writes to the agent's files.
"""

from __future__ import annotations

from ctxwrap.replay._events import ReadStats
from ctxwrap.replay._read import MAX_LINE_BYTES, NotASession, read_session
from ctxwrap.replay._run import (
    ReplayRun,
    default_roots,
    render_text,
    replay_paths,
    run_json,
)
from ctxwrap.replay._sim import MECHANISMS, SessionReplay, Thresholds

__all__ = [
    "MAX_LINE_BYTES",
    "MECHANISMS",
    "NotASession",
    "ReadStats",
    "ReplayRun",
    "SessionReplay",
    "Thresholds",
    "default_roots",
    "read_session",
    "render_text",
    "replay_paths",
    "run_json",
]
