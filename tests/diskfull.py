"""A real full disk for tests: a small tmpfs mounted over a directory, filled on demand."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def small_fs(where: Path, size: str = "512k") -> Iterator[Path]:
    """A tmpfs of ``size`` mounted at ``where``; skips (with the reason) when mounting fails."""
    where.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root (CI runs as root)")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(where)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True, check=False)


def fill(fs: Path) -> Path:
    """Write zeros until the filesystem refuses more; returns the file to delete to free it."""
    ballast = fs / "ballast"
    with contextlib.suppress(OSError), ballast.open("wb") as fh:
        while True:
            fh.write(b"\0" * 4096)
            fh.flush()
    assert os.statvfs(fs).f_bavail == 0
    return ballast
