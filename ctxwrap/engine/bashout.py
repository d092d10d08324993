"""What pi's bash tool puts around the output, and how to take it apart.

pi appends a truncation note naming its temp file, and on failure throws with
"Command exited with code N" (then details is {} and the path exists only in the text).
Neither may reach the model once we digest (invariant 2), so both are parsed out here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_NOTE = re.compile(
    r"\n*\[(?:Showing (?:lines \d+-\d+ of \d+(?: \([^)]*\))?|last [^\]]*? of line \d+ \([^)]*\))\. Full output: (?P<path>[^\]\s]+)\]\s*)"
)
_EXIT = re.compile(r"\n*Command exited with code (?P<code>-?\d+)\s*$")
_TIMEOUT = re.compile(r"\n*Command timed out after (?P<secs>[\d.]+) seconds?\s*$")
_ABORT = re.compile(r"\n*Command aborted\s*$")
_TEMP_PATH = re.compile(r"\S*pi-bash-[0-9a-f]{8,}\.log")


@dataclass(frozen=True)
class BashText:
    body: str  # output text without pi's note and status line
    full_output_path: str | None
    exit_code: int | None
    timed_out: bool
    aborted: bool


def split_bash_text(text: str) -> BashText:
    body = text
    exit_code: int | None = None
    timed_out = aborted = False
    if m := _EXIT.search(body):
        exit_code = int(m.group("code"))
        body = body[: m.start()]
    elif m := _TIMEOUT.search(body):
        timed_out = True
        body = body[: m.start()]
    elif m := _ABORT.search(body):
        aborted = True
        body = body[: m.start()]
    path = None
    if m := _NOTE.search(body):
        path = m.group("path")
        body = body[: m.start()] + body[m.end() :]
    return BashText(
        body=body, full_output_path=path, exit_code=exit_code, timed_out=timed_out, aborted=aborted
    )


def scrub_temp_paths(text: str) -> str:
    """Last line of defence for invariant 2: no pi-bash-*.log path survives a digest."""
    return _TEMP_PATH.sub("[pi temp file]", text)
