from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from support import Xdg, make_xdg


@pytest.fixture
def xdg(tmp_path: Path) -> Iterator[Xdg]:
    """Isolated XDG dirs; any daemon started under them is killed afterwards."""
    dirs = make_xdg(tmp_path)
    try:
        yield dirs
    finally:
        dirs.kill_daemon()
        import shutil

        shutil.rmtree(dirs.runtime, ignore_errors=True)
