"""Where the real CI logs of ``../shared/realdata/logs`` are, for tests that read them.

The corpus stays out of the repository (SOURCES.md lists where each file comes from). It is
looked for beside the clone: ``<repo>/../shared/realdata``, then one level further up (a git
worktree under ``<project>/wt/<name>``), or wherever ``CTXWRAP_REALDATA`` points.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[3]


def realdata_dir() -> Path | None:
    env = os.environ.get("CTXWRAP_REALDATA")
    candidates = [Path(env)] if env else []
    candidates += [REPO.parent / "shared" / "realdata", REPO.parent.parent / "shared" / "realdata"]
    for candidate in candidates:
        if (candidate / "logs").is_dir():
            return candidate
    return None


def real_logs() -> list[Path]:
    """The real logs, or a skip that says where they were looked for."""
    root = realdata_dir()
    if root is None:
        pytest.skip(_ABSENT)
    return sorted((root / "logs").glob("*.txt"))


_ABSENT = (
    f"real CI logs not found: no shared/realdata/logs beside {REPO} or its parent "
    "(set CTXWRAP_REALDATA to the realdata directory)"
)


def log_names() -> list[str]:
    """The real logs' names; [] when the corpus is absent."""
    root = realdata_dir()
    return [] if root is None else [p.name for p in sorted((root / "logs").glob("*.txt"))]


def log_params(names: list[str] | None = None) -> list[Any]:
    """Parameters for parametrize: the names, or one test skipped with the reason."""
    names = log_names() if names is None else names
    if names:
        return names
    return [pytest.param("absent", marks=pytest.mark.skip(reason=_ABSENT))]


def read_log(name: str) -> str:
    root = realdata_dir()
    if root is None:
        pytest.skip(_ABSENT)
    return (root / "logs" / name).read_text(errors="replace")
