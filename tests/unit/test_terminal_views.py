"""Terminal views fit the terminal (issue 22): every table of `stats`, `sessions` and the
help texts at COLUMNS=60 and 100 — no line wider than the terminal (so it never wraps inside a
number), numbers of folded prose lines whole, headers present, plurals right; `recall` without
a daemon; `help --man` without troff warnings."""

from __future__ import annotations

import itertools
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ctxwrap.state.store import Store
from ctxwrap.stats.compute import MECHANISMS

CTXWRAP = Path(sys.executable).parent / "ctxwrap"
DAY1 = 1_795_900_000.0
DAY2 = DAY1 + 86_400
CLAUDE = "c1a0de00-1111-4222-8333-444455556666"
PI = "9e000000-aaaa-4bbb-8ccc-dddddddddddd"
NUMBER = re.compile(r"\d[\d,.]*\d|\d")


def _call(sid: str, idx: int, ts: float, model: str, sent: int, **saved: int) -> dict[str, Any]:
    row: dict[str, Any] = {
        "session_id": sid,
        "call_index": idx,
        "ts": ts,
        "sent_system": 40_000,
        "sent_messages": sent,
        "sent_tools": 20_000,
        "head_changed": 0,
        "message_count": idx + 2,
        "model": model,
    }
    for m in MECHANISMS:
        row[f"saved_{m}"] = saved.get(m, 0)
    return row


def populate(state: Path) -> None:
    store = Store(state / "ctxwrap" / "ctxwrap.db")
    for sid, agent, model, t0 in (
        (CLAUDE, "claude", "claude-opus-4-6", DAY1),
        (PI, "pi", "local/mystery-model", DAY2),
    ):
        store.upsert_session(
            {
                "session_id": sid,
                "session_file": None,
                "cwd": "/home/someone/projects/a-rather-long-project-directory-name",
                "pid": 1,
                "pi_version": "1.6.0",
                "pi_package": None,
                "model": model,
                "started_at": t0,
                "agent": agent,
            }
        )
        for i in range(40):
            store.insert(
                "llm_calls",
                _call(
                    sid,
                    i,
                    t0 + 20 * i,
                    model,
                    90_000 * (i + 1),
                    bash=400_000 * min(i, 9),
                    amnesia=30_000 * i,
                ),
            )
        store.end_session(sid, "quit", at=t0 + 2000)
    store.close()


@pytest.fixture(scope="module")
def state(tmp_path_factory: pytest.TempPathFactory) -> Path:
    state = tmp_path_factory.mktemp("state")
    populate(state)
    return state


def run(state: Path, columns: int, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "XDG_STATE_HOME": str(state), "COLUMNS": str(columns), "NO_COLOR": "1"}
    env.pop("LINES", None)
    return subprocess.run(
        [str(CTXWRAP), *args], env=env, capture_output=True, text=True, timeout=60
    )


def assert_fits(text: str, width: int) -> None:
    for line in text.splitlines():
        assert len(line) <= width, f"{len(line)} > {width}: {line!r}"
    lines = text.splitlines()
    for a, b in itertools.pairwise(lines):
        # a folded prose line goes on indented by two; it must not start inside a number
        if re.match(r"^  \S", b) and a and a[-1].isdigit():
            assert not b.strip()[0].isdigit(), f"split number: {a!r} / {b!r}"


@pytest.mark.parametrize("columns", [60, 100])
@pytest.mark.parametrize("by", ["mechanism", "session", "day", "agent"])
def test_stats_tables_fit(state: Path, columns: int, by: str) -> None:
    narrow = run(state, columns, "stats", "--by", by)
    assert narrow.returncode == 0, narrow.stderr
    assert_fits(narrow.stdout, columns)
    wide = run(state, 1000, "stats", "--by", by).stdout
    # every number of the prose above the table is printed whole at this width too
    head = wide.split("\n\n", 1)[0]
    flat = " ".join(narrow.stdout.split())
    for n in NUMBER.findall(head):
        assert re.search(rf"(?<![\d,.]){re.escape(n)}(?![\d]|[,.]\d)", flat), (n, narrow.stdout)
    assert "2 sessions" in narrow.stdout
    assert "session(s)" not in narrow.stdout and "1 calls" not in narrow.stdout
    # a table with a header row and a rule under it
    rules = [ln for ln in narrow.stdout.splitlines() if re.fullmatch(r"[- ]+", ln) and "--" in ln]
    assert rules, narrow.stdout


@pytest.mark.parametrize("columns", [60, 100])
def test_stats_by_day_reads_like_a_usage_report(state: Path, columns: int) -> None:
    out = run(state, columns, "stats", "--by", "day").stdout
    table = out.split("\n\n", 1)[1]
    header = table.splitlines()[0]
    # the Claude session is priced, the pi one (an unknown model) is not: the day's dollars
    # are the Claude session's, marked * and said so under the table
    assert "cost" in header and "calls" in header and "$" in header, header
    assert "*" in table and "unpriced: no known price for" in " ".join(table.split())
    assert "cost units" not in out
    priced = run(state, columns, "stats", "--by", "day", "--since", "2026-01-01").stdout
    assert priced


def test_stats_by_day_dollar_columns_when_every_price_is_known(state: Path, tmp_path: Path) -> None:
    only_claude = tmp_path / "claude-only"
    populate(only_claude)
    import sqlite3

    db = sqlite3.connect(only_claude / "ctxwrap" / "ctxwrap.db")
    db.execute("DELETE FROM llm_calls WHERE session_id=?", (PI,))
    db.execute("DELETE FROM sessions WHERE session_id=?", (PI,))
    db.commit()
    db.close()
    for columns in (60, 100):
        out = run(only_claude, columns, "stats", "--by", "day").stdout
        assert_fits(out, columns)
        header = out.split("\n\n", 1)[1].splitlines()[0]
        assert "$" in header and "saved" in header, header
        if columns == 100:
            assert "$ without ctxwrap" in header and "$ with" in header, header
        assert "plain Claude Code" in out and "plain pi" not in out
        assert "1 session" in out and "1 sessions" not in out


@pytest.mark.parametrize("columns", [60, 100])
def test_sessions_all_has_a_header_and_fits(state: Path, columns: int) -> None:
    out = run(state, columns, "sessions", "--all")
    assert out.returncode == 0, out.stderr
    assert_fits(out.stdout, columns)
    lines = out.stdout.splitlines()
    assert lines[0] == "2 sessions, 0 live"
    assert lines[1].split()[0] == "session" and "agent" in lines[1]
    assert "Claude Code" in out.stdout or "claude" in out.stdout


COMMANDS = [
    (),
    ("daemon",),
    ("config",),
    ("stats",),
    ("sessions",),
    ("replay",),
    ("recall",),
    ("status",),
    ("service",),
    ("hook",),
]


@pytest.mark.parametrize("columns", [60, 100])
def test_help_lines_are_whole(state: Path, columns: int) -> None:
    for cmd in COMMANDS:
        out = run(state, columns, *cmd, "--help")
        assert out.returncode == 0, (cmd, out.stderr)
        # no description cut short ("Usage: … [ARGS]..." is click's own notation)
        body = [ln for ln in out.stdout.splitlines() if not ln.startswith("Usage:")]
        assert not any(ln.rstrip().endswith("...") for ln in body), (cmd, out.stdout)
        assert_fits(out.stdout, columns)


@pytest.mark.skipif(shutil.which("man") is None, reason="no man(1) here")
@pytest.mark.parametrize("page", [(), ("daemon",)])
def test_man_page_at_60_columns_has_no_troff_warnings(state: Path, page: tuple[str, ...]) -> None:
    out = run(state, 60, "help", "--man", *page)
    assert out.returncode == 0
    assert "warning" not in out.stderr, out.stderr
    assert out.stdout.strip()


def test_recall_works_without_a_daemon(state: Path, tmp_path: Path) -> None:
    raw = tmp_path / "raw.txt"
    raw.write_text("".join(f"line {i} ok\n" for i in range(50)) + "FAILED test_x\n")
    store = Store(state / "ctxwrap" / "ctxwrap.db")
    store.insert(
        "raw_outputs",
        {
            "handle": "r0123abcd",
            "session_id": PI,
            "tool_call_id": "t1",
            "tool_name": "bash",
            "command": "pytest",
            "created_at": DAY2,
            "bytes": raw.stat().st_size,
            "lines": 51,
            "path": str(raw),
        },
    )
    store.close()
    env_runtime = tmp_path / "no-daemon-here"
    env = {
        **os.environ,
        "XDG_STATE_HOME": str(state),
        "XDG_RUNTIME_DIR": str(env_runtime),
    }
    out = subprocess.run(
        [str(CTXWRAP), "recall", "r0123abcd", "FAILED"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 0, out.stderr
    assert "FAILED test_x" in out.stdout
    assert "[1 of 51 lines matched]" in out.stdout
    assert not env_runtime.exists() or not any(env_runtime.rglob("*.sock"))  # none started
    missing = subprocess.run(
        [str(CTXWRAP), "recall", "rdeadbeef"], env=env, capture_output=True, text=True, timeout=30
    )
    assert missing.returncode != 0 and "no stored output" in missing.stderr


def test_one_vocabulary_in_cli_readme_and_man_page(state: Path) -> None:
    from ctxwrap.manpage import PAGES
    from ctxwrap.vocabulary import MECHANISM_NAMES, MECHANISM_WORDS

    readme = (Path(__file__).parents[2] / "README.md").read_text()
    import click

    from ctxwrap.cli import cli

    assert isinstance(cli, click.Group)
    page = PAGES["ctxwrap.1"](cli).replace("\\-", "-")
    stats = run(state, 200, "stats").stdout
    for mech, (words, _) in MECHANISM_WORDS.items():
        if mech in ("skills", "tools"):
            assert "loaded on demand" in readme
        else:
            assert words in readme, words
        assert words in page, words
        assert MECHANISM_NAMES[mech] in page
        if mech in MECHANISMS:  # the mechanisms `stats` has rows for
            assert f"{words} ({MECHANISM_NAMES[mech]})" in stats, stats
