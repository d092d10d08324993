from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
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


_SUMMARY_REPORTS = pytest.StashKey[list[tuple[str, str]]]()


@pytest.fixture
def summary_report(request: pytest.FixtureRequest) -> Callable[[str, str], None]:
    """Add measured figures to the run's closing summary (printed once, after the progress
    dots and before the final counts), instead of printing them among the dots."""
    reports = request.config.stash.setdefault(_SUMMARY_REPORTS, [])

    def add(title: str, text: str) -> None:
        reports.append((title, text))

    return add


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for title, text in terminalreporter.config.stash.get(_SUMMARY_REPORTS, []):
        terminalreporter.write_sep("-", title)
        terminalreporter.write_line(text)
