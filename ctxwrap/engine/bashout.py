"""What pi's bash tool puts around the output, and how to take it apart.

pi appends a truncation note naming its temp file, and on failure throws with
"Command exited with code N" (then details is {} and the path exists only in the text).
Neither may reach the model once we digest (invariant 2), so both are parsed out here.

The output itself is hostile data: a file the agent cats may carry a line shaped like pi's
note. So only pi's own report names a spill file — `details.fullOutputPath`, or the one note pi
appends at the very end — and `open_trusted_spill` still checks the file before anything
reads it (invariant 7).
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Literal

# where the agent saves a long output (AgentProfile.spill): a log in its temp dir named in the
# result (pi's spill file), a tool-results file named in the structured response only (Claude
# Code's), or none
SpillKind = Literal["temp-log", "tool-results", "none"]

# pi writes "\n\n[note]" after the shown tail, then at most "\n\n<status line>" (bash.js
# formatOutput/appendStatus), so the note is anchored to the end of the body.
_NOTE = re.compile(
    r"\n{2,}\[(?:Showing lines (?P<start>\d+)-(?P<end>\d+) of (?P<total>\d+)(?: \(\d+(?:\.\d+)?[KMG]?B limit\))?"
    r"|Showing last \d+(?:\.\d+)?[KMG]?B of line \d+ \(line is \d+(?:\.\d+)?[KMG]?B\))"
    r"\. Full output: (?P<path>/[^\]\n]+)\]\Z"
)
_EXIT = re.compile(r"\n*Command exited with code (?P<code>-?\d+)\s*$")
# pi 1.x may add ". The shell exited with code N after S seconds, but background processes …".
_TIMEOUT = re.compile(
    r"\n*Command timed out after (?P<secs>[\d.]+) seconds?(?:\. The shell exited [^\n]*)?\s*$"
)
_ABORT = re.compile(r"\n*Command aborted\s*$")
# From the start of a whitespace-delimited token only: `\S*` tried at every position of a long
# unbroken run backtracks quadratically (hostile output: 100 KB took 30 s of daemon CPU).
_TEMP_PATH = re.compile(r"(?<!\S)\S*pi-bash-[0-9a-f]{8,}\.log")


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
    if (m := _NOTE.search(body)) and _note_numbers_agree(m):
        path = m.group("path")
        body = body[: m.start()]
    return BashText(
        body=body, full_output_path=path, exit_code=exit_code, timed_out=timed_out, aborted=aborted
    )


def _note_numbers_agree(m: re.Match[str]) -> bool:
    """pi shows a tail: "lines S-E of T" always ends at the last line (E == T)."""
    if m.group("total") is None:
        return True  # the "last N of line L" form
    start, end, total = int(m.group("start")), int(m.group("end")), int(m.group("total"))
    return 1 <= start <= end == total


def scrub_temp_paths(text: str) -> str:
    """Last line of defence for invariant 2: no pi-bash-*.log path survives a digest."""
    if "pi-bash-" not in text:
        return text
    return _TEMP_PATH.sub("[pi temp file]", text)


# pi names its spill file join(os.tmpdir(), `pi-bash-${randomBytes(8).toString("hex")}.log`).
_SPILL_NAME = re.compile(r"pi-bash-[0-9a-f]{16}\.log")
# Claude Code saves an output over its cap as <its config dir>/projects/…/tool-results/<id>.txt
# and reports the path in the tool's structured response (persistedOutputPath).
_CLAUDE_SPILL_NAME = re.compile(r"[A-Za-z0-9_-]{1,200}\.txt")
# File timestamps come from the kernel's coarse clock; the bridge's start time from Date.now().
CLOCK_SLACK_S = 1.0
_FD_DIR = "/proc/self/fd" if os.path.isdir("/proc/self/fd") else "/dev/fd"


class TrustedSpill:
    """The outcome of `open_trusted_spill`: a checked, open spill file, or why there is none.

    `source` reads the very file that was checked (/proc/self/fd of the open descriptor), so
    swapping the path after the check changes nothing. Use as a context manager.
    """

    def __init__(self, fd: int | None, path: str | None, refused: str | None) -> None:
        self.fd = fd
        self.path = path  # as pi reported it
        self.refused = refused  # None when trusted, or when pi reported no spill file at all

    @property
    def source(self) -> Path | None:
        if self.fd is None:
            return None
        # Opening this re-opens the checked inode itself, not whatever the path names now.
        return Path(f"{_FD_DIR}/{self.fd}")

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def __enter__(self) -> TrustedSpill:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def spill_path_refusal(
    path: str,
    *,
    pi_tmpdir: str | None,
    from_note: bool,
    call_started_ms: float | None,
    spill: SpillKind = "temp-log",
) -> str | None:
    """Why a reported spill path is not the agent's, judged on the name alone (None: plausible)."""
    if not os.path.isabs(path):
        return "not an absolute path"
    if os.path.normpath(path) != path:
        return "not a normalised path"
    if spill == "none":
        return "the agent saves no output file"
    if spill == "tool-results":
        # Only the structured response names it (Claude Code prints no note to trust).
        if from_note:
            return "Claude Code names its saved output only in the tool response"
        if not _CLAUDE_SPILL_NAME.fullmatch(os.path.basename(path)) or (
            os.path.basename(os.path.dirname(path)) != "tool-results"
        ):
            return "not named like Claude Code's saved output (…/tool-results/<id>.txt)"
        return None
    if not _SPILL_NAME.fullmatch(os.path.basename(path)):
        return "not named like pi's spill file (pi-bash-<16 hex>.log)"
    if pi_tmpdir is None:
        # Only pi's structured details may name a file when pi's temp dir is unknown.
        return "pi's temp directory is unknown" if from_note else None
    if not os.path.isabs(pi_tmpdir) or os.path.dirname(path) != os.path.normpath(pi_tmpdir):
        return "not in pi's temp directory"
    if from_note and call_started_ms is None:
        return "the tool call's start time is unknown"
    return None


def spill_stat_refusal(
    st: os.stat_result, *, uid: int, call_started_ms: float | None, spill: SpillKind = "temp-log"
) -> str | None:
    """Why an opened file is not the spill file pi wrote during this call (None: it is)."""
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file"
    if st.st_uid != uid:
        return f"owned by uid {st.st_uid}, not {uid}"
    # Claude Code hard-links its saved outputs itself, inside the user's own home; pi's spill
    # file sits in a shared temp dir where another user's hard link is the attack.
    if st.st_nlink != 1 and spill != "tool-results":
        return "has other hard links"
    if call_started_ms is not None:
        # A file pi spilled to during the call was created and written after it began;
        # an older file (another call's spill, a planted copy) was not.
        earliest = call_started_ms / 1000 - CLOCK_SLACK_S
        if st.st_mtime < earliest or st.st_ctime < earliest:
            return "older than this tool call"
    return None


def open_trusted_spill(
    reported_path: str | None,
    note_path: str | None,
    *,
    pi_tmpdir: str | None,
    call_started_ms: float | None,
    uid: int | None = None,
    spill: SpillKind = "temp-log",
) -> TrustedSpill:
    """Open pi's spill file for this tool call, or say why the output text must be used instead.

    `reported_path` is `details.fullOutputPath` (pi 1.x; also 0.73 on success); `note_path`
    the path of the final note pi appended (`split_bash_text`), the only source when pi threw.
    The file is opened with O_NOFOLLOW and judged by fstat of that descriptor.
    """
    from_note = reported_path is None
    path = reported_path if reported_path is not None else note_path
    if path is None:
        return TrustedSpill(None, None, None)
    if why := spill_path_refusal(
        path,
        pi_tmpdir=pi_tmpdir,
        from_note=from_note,
        call_started_ms=call_started_ms,
        spill=spill,
    ):
        return TrustedSpill(None, path, why)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        return TrustedSpill(None, path, f"cannot open it without following links: {exc.strerror}")
    try:
        why = spill_stat_refusal(
            os.fstat(fd),
            uid=os.geteuid() if uid is None else uid,
            call_started_ms=call_started_ms,
            spill=spill,
        )
    except OSError as exc:
        why = f"cannot stat it: {exc.strerror}"
    if why:
        os.close(fd)
        return TrustedSpill(None, path, why)
    return TrustedSpill(fd, path, None)
