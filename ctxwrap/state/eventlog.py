"""JSONL event log with size-based rotation (one previous file kept).

Events carry ids, sizes and decisions, never prompt text or tool output, so no secret that
passed through the daemon can end up here.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any


class EventLog:
    def __init__(self, path: Path, *, max_bytes: int) -> None:
        self.path = path
        self.max_bytes = max_bytes
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)

    def write(self, event: str, **fields: Any) -> None:
        line = (
            json.dumps({"ts": round(time.time(), 3), "event": event, **fields}, default=str) + "\n"
        )
        try:
            if self.path.exists() and self.path.stat().st_size + len(line) > self.max_bytes:
                os.replace(self.path, self.path.with_name(self.path.name + ".1"))
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
            if os.fstat(fd).st_mode & 0o077:  # left readable by an older version
                os.fchmod(fd, 0o600)
            with os.fdopen(fd, "a", encoding="utf-8") as fh:
                fh.write(line)
        except OSError:
            pass  # the log is a diagnostic aid; losing a line must never fail a request
