from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

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


_SUMMARY = "ctxwrap-summary"
_summaries: list[tuple[str, str]] = []


@pytest.fixture
def summary_report(request: pytest.FixtureRequest) -> Callable[[str, str], None]:
    """Add measured figures to the run's closing summary (printed once, after the progress
    dots and before the final counts), instead of printing them among the dots.

    They travel in the test's report (user_properties), so a pytest-xdist worker's figures
    reach the summary its controller prints."""

    def add(title: str, text: str) -> None:
        request.node.user_properties.append((_SUMMARY, (title, text)))

    return add


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "teardown":  # the item's user_properties are complete by then
        _summaries.extend(tuple(v) for k, v in report.user_properties if k == _SUMMARY)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for title, text in _summaries:
        terminalreporter.write_sep("-", title)
        terminalreporter.write_line(text)


# `make test` runs the suite in two passes: every test not marked `serial` on pytest-xdist
# workers (most of them wait on pi, node, Claude Code or the daemon, not on the CPU), then the
# `serial` ones alone, on an otherwise idle machine. `serial` marks a test whose outcome or
# proof depends on timing that load would disturb: a deadline measured against a plain run, a
# cache-TTL gap, keystrokes typed after a fixed pause, a race that is skipped when it did not
# happen. Without --ctxwrap-pass (a plain `pytest`), every test runs in one pass.
def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--ctxwrap-pass",
        choices=("all", "parallel", "serial"),
        default="all",
        help="run only the tests not marked serial (parallel), only the serial ones, or all",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    which = config.getoption("--ctxwrap-pass")
    if which == "all":
        return
    keep: list[pytest.Item] = []
    drop: list[pytest.Item] = []
    for item in items:
        serial = item.get_closest_marker("serial") is not None
        (keep if serial == (which == "serial") else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


# Modules that go to one pytest-xdist worker as a whole, because their module fixture is costly
# (test_fresh_install builds a wheel and a venv: ~40 s; test_widths_e2e runs a pi session and
# a replay: ~11 s; each once instead of once per worker).
# xdist's own `xdist_group` mark does not reach its scheduler under pytest 9 (--dist loadgroup
# renames item._nodeid, which pytest 9 no longer reads), so with --dist loadgroup (`make test`)
# the grouping is done here: each such module is one unit of work, every other test its own.
ONE_WORKER_MODULES = frozenset(
    {"tests/integration/test_fresh_install.py", "tests/e2e/test_widths_e2e.py"}
)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class OneWorkerModules(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return module if module in ONE_WORKER_MODULES else nodeid

    return OneWorkerModules(config, log)
