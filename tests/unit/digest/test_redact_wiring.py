"""Secrets never reach the daemon's own records: aux error rows, log lines, tracebacks."""

from __future__ import annotations

import logging
from pathlib import Path

from ctxwrap.config import Settings
from ctxwrap.daemon.lifecycle import _RedactingFormatter
from ctxwrap.mechanisms.aux import AuxCalls
from ctxwrap.state.store import Store

AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
OPENAI_KEY = "sk-proj-" + "Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z"


def test_aux_error_row_is_redacted(tmp_path: Path) -> None:
    store = Store(tmp_path / "db.sqlite")
    aux = AuxCalls(store, Settings())
    aux.record("s1", "digest", "http", 10, 2, False, 5.0, f"401 for key {OPENAI_KEY}")
    (row,) = store.query("SELECT error FROM aux_calls")
    assert OPENAI_KEY not in row["error"]
    assert "REDACTED" in row["error"]


def test_daemon_log_lines_and_tracebacks_are_redacted() -> None:
    fmt = _RedactingFormatter("%(levelname)s %(message)s")
    try:
        raise ValueError(f"bad pattern near {AWS_SECRET}")
    except ValueError:
        import sys

        record = logging.LogRecord(
            "ctxwrap.daemon",
            logging.ERROR,
            __file__,
            1,
            "handler failed: %s",
            (OPENAI_KEY,),
            sys.exc_info(),
        )
    line = fmt.format(record)
    assert "handler failed" in line and "ValueError" in line
    assert AWS_SECRET not in line and OPENAI_KEY not in line
