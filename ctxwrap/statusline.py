"""The lines the daemon writes at every turn end: Claude Code's status line under `ctxwrap
claude`, and the shell's prompt segment (`ctxwrap init`'s `ctxwrap_prompt_segment` prints it).

No CLI framework here: the daemon imports this module in its turn-end path. It writes one
small file per live Claude Code session (`write_status`) and removes it when the session ends,
and one prompt-segment file for the user (`write_prompt_segment`); `ctxwrap statusline claude`
(run by Claude Code at every refresh, JSON on stdin) prints that file and nothing else — no
daemon round trip, standard library only (ctxwrap/entry.py runs it without the CLI framework).
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import IO, Any

_SAFE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")
MAX_CHARS = 120
PROMPT_SEGMENT_MAX = 64
WAITING = "ctxwrap: nothing saved yet"


def status_dir() -> Path:
    from ctxwrap import paths

    return paths.state_dir() / "status"


def status_path(session_id: str) -> Path | None:
    """The session's status file; None for an id that cannot be a file name."""
    if not _SAFE_ID.match(session_id):
        return None
    return status_dir() / session_id


def status_text(totals: Any) -> str:
    """`ctxwrap: cost −23% · 41,200 tokens saved` from a SessionTotals (the pi footer's figures:
    cache-priced input cost with compactions, tokens net of the aux model's)."""
    if not totals.llm_calls:
        return ""
    net = int(totals.net_tokens)
    tokens = f"{abs(net):,} tokens {'saved' if net >= 0 else 'added'}"
    pct = totals.cost_saved_pct
    if pct is None:
        return f"ctxwrap: {tokens}{compaction_hint(totals)}"
    from ctxwrap.headline import pct_text  # the one rounding (the writing side: the daemon)

    return f"ctxwrap: cost {pct_text(pct)} · {tokens}{compaction_hint(totals)}"


# Under ctxwrap Claude Code's context is smaller, so it compacts later than it would without
# ctxwrap, carrying what plain Claude Code's compaction dropped; no proxy can ask it to compact
# (docs/accounting.md, "Compaction timing"). Past the point where the cost model's plain session
# compacted, the line says so: the user's `/compact` is plain's compaction, and it counts as
# the session catching up (engine/cost.py), not as one plain would run again.
def hint_text(agent_name: str) -> str:
    """The hint's words, here and in the exit line (`launch/exit_line.py`)."""
    return f"plain {agent_name} would have compacted by now: /compact"


HINT = " · " + hint_text("Claude Code")


def compaction_hint(totals: Any) -> str:
    """HINT while plain has compacted more often than the session, else ""."""
    behind = int(getattr(totals, "plain_compactions", 0) or 0) - int(
        getattr(totals, "compactions", 0) or 0
    )
    return HINT if behind > 0 else ""


def write_status(session_id: str, text: str) -> None:
    """Replace the session's line atomically (a refresh never reads half a line)."""
    target = status_path(session_id)
    if target is not None:
        _replace_line(target, text, MAX_CHARS, ".status.")


def prompt_segment_path() -> Path:
    """The one-line cache `ctxwrap_prompt_segment` prints (same rule as the shell scripts)."""
    from ctxwrap import paths

    return paths.state_dir() / "prompt-segment"


def write_prompt_segment(text: str) -> None:
    """Replace the prompt segment atomically: a prompt never reads a half-written line.

    Called by whoever knows the savings (the daemon at turn end); an empty `text` clears the
    segment.
    """
    _replace_line(prompt_segment_path(), text, PROMPT_SEGMENT_MAX, ".prompt-segment.")


def _replace_line(target: Path, text: str, most: int, prefix: str) -> None:
    """`text`'s first line, printable characters only, at most `most` of them, written to a
    temporary file beside `target` and renamed over it."""
    import tempfile  # not at the top: the reading side runs at every refresh

    line = "".join(ch for ch in text.splitlines()[0] if ch.isprintable()) if text else ""
    target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=prefix)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(line[:most] + "\n")
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def clear_status(session_id: str) -> None:
    target = status_path(session_id)
    if target is not None:
        target.unlink(missing_ok=True)


def render(event: object) -> str:
    """The line for one refresh: the session's file, else a short placeholder."""
    sid = event.get("session_id") if isinstance(event, dict) else None
    target = status_path(sid) if isinstance(sid, str) else None
    if target is None:
        return WAITING
    try:
        with open(target, encoding="utf-8") as fh:
            line = fh.read(MAX_CHARS * 4).strip()
    except OSError:
        return WAITING
    return line or WAITING


def main(stdin: IO[str] | None = None, stdout: IO[str] | None = None) -> int:
    """`ctxwrap statusline claude`: always exits 0 (a failing status line only shows an error)."""
    stdin = sys.stdin if stdin is None else stdin
    stdout = sys.stdout if stdout is None else stdout
    try:
        event = json.loads(stdin.read(1 << 20) or "{}")
    except (OSError, ValueError):
        event = {}
    try:
        stdout.write(render(event) + "\n")
        stdout.flush()
    except OSError:
        pass
    return 0


def prompt_segment_text(totals: Any) -> str:
    """`ctxwrap ↓12.3k cost −60%`: tokens kept out net of aux cost (`↑` when ctxwrap cost
    more), then the session's headline cost figure as every other view shows it."""
    from ctxwrap.headline import pct_text

    if totals.llm_calls == 0:
        return ""
    net = totals.net_tokens
    n = abs(net)
    amount = f"{n / 1e6:.1f}M" if n >= 999_950 else f"{n / 1e3:.1f}k" if n >= 1000 else str(n)
    text = f"ctxwrap {'↓' if net >= 0 else '↑'}{amount}"
    if totals.headline_pct is not None:
        text += f" cost {pct_text(totals.headline_pct)}"
    return text
