"""The lines `ctxwrap pi`, `ctxwrap claude` and `ctxwrap codex` print on stderr when the
agent exits:

    ctxwrap: cost −23% · 41,200 tokens kept out · details: ctxwrap stats --session 3f2a9c1e
    ctxwrap: resume through ctxwrap with:
    ctxwrap claude --resume 3f2a9c1e-0b7d-4c55-9e11-2a6f0d8b7c41

The figures wrap at the terminal's width (COLUMNS, else the terminal's, else 80) between their
parts, never inside one; the resume command stands alone on the last line, so it is copied
whole (a triple click) and never wraps inside the session id at 60 columns.

Under Claude Code and Codex, which no proxy can ask to compact, the figures also say when plain
would have compacted by now (the status line's hint, `statusline.compaction_hint`). A session
that cost more than plain says why, after its cost (`why: carried up to 40,000 tokens past
plain's compaction`; `stats.compute.cost_cause`). An adapter may add a note of its own on a
line of its own (`ProxySession.exit_notes`: under Claude Code, the model's `ctxwrap recall`s it
refused, and the rule that allows them).

The agents end with their own resume hint (`claude --resume …`, `pi --session …`, `codex resume
…`), which resumes *without* ctxwrap; these lines say how to resume through it — only when the
agent wrote a session to resume (`resumable`): quitting pi or Claude Code before the first
prompt leaves none, and their `--resume` would fail with "No conversation found". The figures
are those of `ctxwrap stats --session ID` (the same compute over the SQLite file, opened
read-only), worked out in a thread bounded to `TIMEOUT_S`: no database, no session in it, a
slow disk or any failure gives shorter lines (or none), never a traceback, and never a
different exit status.

Quiet with `--ctxwrap-quiet`, or `exit_line = false` (PI_CTX_EXIT_LINE=0).
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from ctxwrap.launch.quiet import QUIET_FLAG as QUIET_FLAG
from ctxwrap.launch.quiet import take_quiet_flag as take_quiet_flag

TIMEOUT_S = 2.0
_FALSE = ("0", "false", "no", "off")


class Savings(NamedTuple):
    llm_calls: int
    cost_pct: float | None  # cache-priced input cost saved, % (negative: ctxwrap cost more)
    net_tokens: int  # tokens kept out of the context, net of the aux model's
    # how many more times plain would have compacted by now (its context is the bigger one)
    compactions_behind: int = 0
    # why it cost more than plain (`stats.compute.cost_cause`), None when it did not
    cause: str | None = None


def enabled() -> bool:
    """The `exit_line` setting: PI_CTX_EXIT_LINE over config.toml over on (read without
    pydantic: this runs after every session)."""
    value = os.environ.get("PI_CTX_EXIT_LINE", "")
    if value:
        return value.strip().lower() not in _FALSE
    import tomllib

    from ctxwrap import paths

    with contextlib.suppress(OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
        setting = tomllib.loads(paths.config_file().read_text(encoding="utf-8")).get("exit_line")
        if isinstance(setting, bool):
            return setting
    return True


def session_savings(session_id: str) -> Savings | None:
    """`ctxwrap stats --session ID`'s totals; None when nothing is recorded for it."""
    from ctxwrap.stats.compute import load_report

    report = load_report(session=session_id, since=None, by="mechanism")
    if report is None or report.session is None:
        return None
    t = report.totals
    c = t.cost
    pct = c.total_saved_pct if c.calls else t.saved_pct
    return Savings(
        t.llm_calls,
        pct,
        t.net_tokens,
        max(0, c.plain_compactions - c.compactions),
        report.costs_more_because,  # it cost more: which effect made it so
    )


def _bounded(session_id: str, timeout_s: float) -> Savings | None:
    found: list[Savings | None] = []

    def work() -> None:
        try:
            found.append(session_savings(session_id))
        except Exception:  # unknown session, locked or broken database: no figures
            found.append(None)

    worker = threading.Thread(target=work, name="ctxwrap-exit-line", daemon=True)
    worker.start()
    worker.join(timeout_s)
    return found[0] if found else None


# Agents no proxy can ask to compact (pi's bridge asks pi itself: `compact_like_plain`).
_NO_COMPACT_ASKED = {"claude": "Claude Code", "codex": "Codex"}
PREFIX = "ctxwrap: "
RESUME_LABEL = PREFIX + "resume through ctxwrap with:"


_UUID7 = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-", re.I)


def short_id(session_id: str) -> str:
    """The id as `stats --session` takes it (a unique prefix): 8 characters, as its table
    shows; but the first 8 hex digits of a time-ordered UUIDv7 (pi's sessions, Codex's
    threads) are the top of a millisecond timestamp, the same for every session started within
    about a minute, so such an id gives 18 characters, through its first random digits."""
    return session_id[:18] if _UUID7.match(session_id) else session_id[:8]


def width() -> int:
    """COLUMNS, else the terminal's (stderr's), else 80."""
    value = os.environ.get("COLUMNS", "")
    if value.isdigit() and int(value) > 0:
        return int(value)
    try:
        return os.get_terminal_size(sys.stderr.fileno()).columns or 80
    except (OSError, ValueError, AttributeError):
        return 80


def _wrap(parts: list[str], columns: int) -> list[str]:
    """`ctxwrap: a · b · c` lines of at most `columns`, broken between parts only."""
    import textwrap

    lines: list[str] = []
    for part in parts:
        if lines and len(lines[-1]) + 3 + len(part) <= columns:
            lines[-1] += " · " + part
        else:  # a part longer than a line (a narrow terminal) breaks between its words
            room = max(20, columns - len(PREFIX))
            lines += [PREFIX + piece for piece in textwrap.wrap(part, room, break_on_hyphens=False)]
    return lines


def _figures(agent: str, session_id: str, savings: Savings | None) -> list[str]:
    from ctxwrap.headline import pct_text, why_text  # stdlib only, like this module

    parts: list[str] = []
    if savings is not None and savings.llm_calls:
        net = savings.net_tokens
        tokens = f"{abs(net):,} tokens {'kept out' if net >= 0 else 'added'}"
        if savings.cost_pct is None:
            parts.append(tokens)
        else:
            parts.append(f"cost {pct_text(savings.cost_pct)}")
            if savings.cause:
                parts.append(why_text(savings.cause))
            parts.append(tokens)
    if savings is not None and savings.compactions_behind > 0 and agent in _NO_COMPACT_ASKED:
        # the status line's hint (statusline.compaction_hint), for a `-p` run or a Codex user:
        # what the resumed session carries that plain's compaction had dropped
        from ctxwrap.statusline import hint_text

        parts.append(hint_text(_NO_COMPACT_ASKED[agent]))
    if parts:
        parts.append(f"details: ctxwrap stats --session {short_id(session_id)}")
    return parts


def render(
    agent: str,
    session_id: str,
    resume: list[str] | None,
    savings: Savings | None,
    *,
    columns: int = 80,
    notes: Sequence[str] = (),
) -> str:
    """The lines (joined by newlines), or "" when there is nothing to say. `notes` (the
    adapter's: a refused recall) each start a line of their own, before the resume command."""
    lines = _wrap(_figures(agent, session_id, savings), columns)
    for note in notes:
        lines += _wrap([note], columns)
    if resume:
        lines += [RESUME_LABEL, shlex.join(["ctxwrap", agent, *resume])]
    return "\n".join(lines)


def print_exit_line(
    agent: str,
    session_id: str | None,
    resume: list[str] | None,
    *,
    timeout_s: float = TIMEOUT_S,
    notes: Sequence[str] = (),
) -> None:
    """The lines on stderr for the session that just ended; never raises."""
    try:
        if not session_id or not enabled():
            return
        savings = _bounded(session_id, timeout_s)
        text = render(agent, session_id, resume, savings, columns=width(), notes=notes)
        if text:
            sys.stderr.write(text + "\n")
            sys.stderr.flush()
    except Exception:  # a courtesy line must never turn the agent's exit into a failure
        return


def print_for_proxy(
    agent: str, proxy: Any, quiet: bool, resume: Callable[[str], list[str] | None]
) -> None:
    """The line for the session a loopback proxy saw last (Claude Code's latest SessionStart
    or request, Codex's latest thread); none when quiet or when no session reached it
    (`claude --version`, `claude mcp …`)."""
    if quiet:
        return
    try:
        ids = list(proxy.sessions)
    except Exception:
        return
    if not ids:
        return
    notes: list[str] = []
    with contextlib.suppress(Exception):  # a note never costs the line
        notes = list(proxy.sessions[ids[-1]].exit_notes())
    print_exit_line(agent, ids[-1], resume(ids[-1]), notes=notes)
