"""The one line `ctxwrap pi`, `ctxwrap claude` and `ctxwrap codex` print on stderr when the
agent exits.

    ctxwrap: this session saved 23% of its input cost (41,200 tokens) · resume: ctxwrap claude
    --resume 3f2a… · details: ctxwrap stats --session 3f2a…

Under Claude Code and Codex, which no proxy can ask to compact, the line also says when plain
would have compacted by now (the status line's hint, `statusline.compaction_hint`).

The agents end with their own resume hint (`claude --resume …`, `pi --session …`, `codex resume
…`), which resumes *without* ctxwrap; this line says how to resume through it. The figures are
those of `ctxwrap stats --session ID` (the same compute over the SQLite file, opened read-only),
worked out in a thread bounded to `TIMEOUT_S`: no database, no session in it, a slow disk or any
failure gives a shorter line (or none), never a traceback, and never a different exit status.

Quiet with `--ctxwrap-quiet`, or `exit_line = false` (PI_CTX_EXIT_LINE=0).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import sys
import threading
from collections.abc import Callable
from typing import Any, NamedTuple

QUIET_FLAG = "--ctxwrap-quiet"
TIMEOUT_S = 2.0
_FALSE = ("0", "false", "no", "off")


class Savings(NamedTuple):
    llm_calls: int
    cost_pct: float | None  # cache-priced input cost saved, % (negative: ctxwrap cost more)
    net_tokens: int  # tokens kept out of the context, net of the aux model's
    # how many more times plain would have compacted by now (its context is the bigger one)
    compactions_behind: int = 0


def take_quiet_flag(args: list[str]) -> tuple[list[str], bool]:
    """`args` without `--ctxwrap-quiet` (before any `--`), and whether it was there."""
    if QUIET_FLAG not in args:
        return args, False
    end = args.index("--") if "--" in args else len(args)
    if QUIET_FLAG not in args[:end]:
        return args, False
    return [a for a in args[:end] if a != QUIET_FLAG] + args[end:], True


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
    from ctxwrap.stats import load_report

    report = load_report(session=session_id, since=None, by="mechanism")
    if report is None or report.session is None:
        return None
    t = report.totals
    c = t.cost
    pct = c.total_saved_pct if c.calls else t.saved_pct
    return Savings(t.llm_calls, pct, t.net_tokens, max(0, c.plain_compactions - c.compactions))


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


def render(agent: str, session_id: str, resume: list[str] | None, savings: Savings | None) -> str:
    parts: list[str] = []
    if savings is not None and savings.llm_calls:
        tokens = f"{savings.net_tokens:,} tokens".replace("-", "−")
        if savings.cost_pct is None:
            parts.append(f"this session kept {tokens} out of the context")
        elif savings.cost_pct >= 0:
            parts.append(f"this session saved {savings.cost_pct:.0f}% of its input cost ({tokens})")
        else:
            parts.append(f"ctxwrap cost this session {-savings.cost_pct:.0f}% more ({tokens})")
    if savings is not None and savings.compactions_behind > 0 and agent in _NO_COMPACT_ASKED:
        # the status line's hint (statusline.compaction_hint), for a `-p` run or a Codex user:
        # what the resumed session carries that plain's compaction had dropped
        from ctxwrap.statusline import hint_text  # stdlib only, like this module

        parts.append(hint_text(_NO_COMPACT_ASKED[agent]))
    if resume:
        parts.append("resume: " + shlex.join(["ctxwrap", agent, *resume]))
    if savings is not None:
        parts.append(f"details: ctxwrap stats --session {session_id}")
    return "ctxwrap: " + " · ".join(parts) if parts else ""


def print_exit_line(
    agent: str, session_id: str | None, resume: list[str] | None, *, timeout_s: float = TIMEOUT_S
) -> None:
    """One line on stderr for the session that just ended; never raises."""
    try:
        if not session_id or not enabled():
            return
        line = render(agent, session_id, resume, _bounded(session_id, timeout_s))
        if line:
            sys.stderr.write(line + "\n")
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
    if ids:
        print_exit_line(agent, ids[-1], resume(ids[-1]))
