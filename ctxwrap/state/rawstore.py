"""Raw outputs the model saw only as a digest or tombstone, kept so ctx_recall can grep them.

Secrets are redacted line by line before anything touches the disk; files are 0600 in a 0700
directory; total size and age are capped. Recall never returns a whole output, only matching
lines or a line range, capped in characters.

Recall patterns come from the model, i.e. from whatever the model read: they run on RE2, whose
matching time is linear in the input (no catastrophic backtracking), and an invalid or
unsupported pattern (backreferences, lookaround) is an `InvalidPattern`, never a crash.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import re2

from ctxwrap.digest import redact_secrets
from ctxwrap.state.store import Store, disk_write_failure

_CHUNK = 1 << 16
MAX_LINE_CHARS = 4000  # one absurd line must not fill a recall answer
_RE2_MAX_MEM = 8 << 20  # a compiled pattern's memory; a huge repetition count fails to compile


class InvalidPattern(ValueError):
    """A recall pattern RE2 cannot run; the message says why, in RE2's words."""


def compile_pattern(pattern: str) -> Any:
    """Case-insensitive RE2 pattern (linear-time matching) or InvalidPattern."""
    options = re2.Options()
    options.case_sensitive = False
    options.log_errors = False  # a model's typo is not the daemon log's business
    options.max_mem = _RE2_MAX_MEM
    # Line semantics over whole blocks: ^/$ at line ends, and nothing ever matches a newline.
    options.never_nl = True
    try:
        return re2.compile("(?m)" + pattern, options)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else exc
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "replace")
        raise InvalidPattern(
            f"{str(reason)[:200]} (RE2 syntax: no backreferences or lookaround)"
        ) from exc


@dataclass(frozen=True)
class StoredOutput:
    handle: str
    bytes: int
    lines: int


@dataclass(frozen=True)
class Recall:
    text: str
    total_lines: int
    matched_lines: int
    truncated: bool


def line_blocks_of_file(path: Path, limit_bytes: int, block_bytes: int = _CHUNK) -> Iterator[str]:
    """A file's decoded lines joined by "\\n", in blocks of about `block_bytes`, reading at most
    limit_bytes (memory stays bounded). A line over 1 MB comes in pieces, each a line.

    One Python step per block, not per line: a 30,000-line spill file is stored and digested in
    a few ms instead of ~35 ms, while the agent waits."""
    read = 0
    pending = b""
    with path.open("rb") as fh:
        while read < limit_bytes:
            chunk = fh.read(min(block_bytes, limit_bytes - read))
            if not chunk:
                break
            read += len(chunk)
            pending += chunk
            cut = pending.rfind(b"\n")
            if cut >= 0:
                # "\n" never occurs inside a UTF-8 sequence: decoding a block is decoding its lines.
                yield pending[:cut].decode("utf-8", errors="replace")
                pending = pending[cut + 1 :]
            if len(pending) > 1 << 20:  # a single huge line: flush it in pieces
                yield pending.decode("utf-8", errors="replace")
                pending = b""
    if pending:
        yield pending.decode("utf-8", errors="replace")


def text_lines(text: str) -> list[str]:
    """A text's lines as a file's are read (`line_blocks_of_file`): a final newline ends the
    last line, it starts no empty one (a 3,000-line output is stored as 3,000 lines, and a
    recall says "of 3,000")."""
    return (text[:-1] if text.endswith("\n") else text).split("\n")


class RawStore:
    def __init__(self, root: Path, store: Store, *, max_bytes: int, retention_days: int) -> None:
        self.root = root
        self.store = store
        self.max_bytes = max_bytes
        self.retention_days = retention_days
        root.mkdir(mode=0o700, parents=True, exist_ok=True)

    def _new_handle(self) -> str:
        return "r" + secrets.token_hex(4)

    def put_lines(
        self,
        lines: Iterable[str],
        *,
        session_id: str,
        tool_call_id: str,
        tool_name: str,
        command: str | None,
    ) -> StoredOutput:
        """Store ``lines`` (redacted); raises OSError when the disk refuses the write.

        Even then every line has been consumed, so a digester fed by the same iterator still
        sees the whole output; the failure is recorded in the store's write health first.
        """
        stored = self.try_put_lines(
            lines,
            session_id=session_id,
            tool_call_id=tool_call_id,
            tool_name=tool_name,
            command=command,
        )
        if stored is None:
            raise OSError(errno.ENOSPC, f"raw store: {self.store.degraded or 'write failed'}")
        return stored

    def try_put_lines(
        self,
        lines: Iterable[str],
        *,
        session_id: str,
        tool_call_id: str,
        tool_name: str,
        command: str | None,
    ) -> StoredOutput | None:
        """Like put_lines, but None when the disk is full (or refuses writes): the caller
        digests anyway and offers no recall handle. Nothing half-written is left behind."""
        handle = self._new_handle()
        path = self.root / f"{handle}.txt"
        it = iter(lines)
        try:
            nbytes, nlines = self._write_redacted(path, it)
        except OSError as exc:
            cause = disk_write_failure(exc)
            if cause is None:
                raise
            self.store.health.failed("raw store", cause)
            with contextlib.suppress(OSError):
                path.unlink()
            for _ in it:  # the digester reading the same stream must still see all of it
                pass
            return None
        lost_before = self.store.health.lost_writes
        self.store.insert(
            "raw_outputs",
            {
                "handle": handle,
                "session_id": session_id,
                "tool_call_id": tool_call_id,
                "tool_name": tool_name,
                "command": redact_secrets(command) if command else None,
                "created_at": time.time(),
                "bytes": nbytes,
                "lines": nlines,
                "path": str(path),
            },
        )
        if self.store.health.lost_writes != lost_before:
            # The row did not land (database full): without it the handle cannot be recalled.
            path.unlink(missing_ok=True)
            return None
        self.store.health.ok("raw store")
        self.enforce_limits()
        return StoredOutput(handle, nbytes, nlines)

    def _write_redacted(self, path: Path, lines: Iterator[str]) -> tuple[int, int]:
        nbytes = nlines = 0
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        block: list[str] = []
        block_chars = 0

        def flush(out: TextIO) -> None:
            nonlocal nbytes
            # Redact whole blocks: one regex pass per ~64 KB instead of one per line.
            text = redact_secrets("\n".join(block).replace("\x00", "\\0")) + "\n"
            out.write(text)
            nbytes += len(text)
            block.clear()

        with os.fdopen(fd, "w", encoding="utf-8", errors="replace") as out:
            for line in lines:  # a line, or several joined by "\n" (line_blocks_of_file)
                block.append(line)
                block_chars += len(line) + 1
                nlines += line.count("\n") + 1
                if block_chars >= _CHUNK:
                    flush(out)
                    block_chars = 0
                    if nbytes >= self.max_bytes:
                        out.write("[ctxwrap: output cut here, store size cap reached]\n")
                        break
            if block:
                flush(out)
            out.flush()  # inside the try of the caller: a full disk may surface only here
        return nbytes, nlines

    def put_file(self, src: Path, **meta: str | None) -> StoredOutput:
        return self.put_lines(line_blocks_of_file(src, self.max_bytes + _CHUNK), **meta)  # type: ignore[arg-type]

    def put_text(self, text: str, **meta: str | None) -> StoredOutput:
        return self.put_lines(text_lines(text), **meta)  # type: ignore[arg-type]

    def try_put_file(self, src: Path, **meta: str | None) -> StoredOutput | None:
        return self.try_put_lines(line_blocks_of_file(src, self.max_bytes + _CHUNK), **meta)  # type: ignore[arg-type]

    def try_put_text(self, text: str, **meta: str | None) -> StoredOutput | None:
        return self.try_put_lines(text_lines(text), **meta)  # type: ignore[arg-type]

    def enforce_limits(self) -> None:
        rows = self.store.query(
            "SELECT handle, bytes, created_at, path FROM raw_outputs ORDER BY created_at DESC"
        )
        cutoff = time.time() - self.retention_days * 86400 if self.retention_days else None
        total = 0
        for row in rows:
            total += row["bytes"]
            if total > self.max_bytes or (cutoff is not None and row["created_at"] < cutoff):
                Path(row["path"]).unlink(missing_ok=True)
                self.store.conn.execute("DELETE FROM raw_outputs WHERE handle=?", (row["handle"],))

    def path_of(self, handle: str) -> Path | None:
        rows = self.store.query("SELECT path FROM raw_outputs WHERE handle=?", (handle,))
        if not rows:
            return None
        path = Path(rows[0]["path"])
        return path if path.exists() else None

    def recall(
        self,
        handle: str,
        *,
        pattern: str | None,
        start_line: int | None,
        end_line: int | None,
        context_lines: int,
        max_chars: int,
    ) -> Recall | None:
        path = self.path_of(handle)
        if path is None:
            return None
        regex = compile_pattern(pattern) if pattern else None
        return scan(
            path,
            regex,
            start_line=start_line,
            end_line=end_line,
            context_lines=context_lines,
            max_chars=max_chars,
        )


def _line_blocks(path: Path) -> Iterator[list[str]]:
    """The file's lines, a block (~1 MB of whole lines) at a time."""
    for block in line_blocks_of_file(path, 1 << 62, block_bytes=1 << 20):
        yield block.split("\n")


def scan(
    path: Path,
    regex: Any,
    *,
    start_line: int | None,
    end_line: int | None,
    context_lines: int,
    max_chars: int,
) -> Recall:
    """Matching lines (or a line range) of one stored output; pure file work, thread-safe.

    A block with no match anywhere is skipped whole (one RE2 search in C, the pattern compiled
    multi-line and never matching a newline), so a scan costs the Python loop only the lines
    near a match: the event loop beside it keeps its GIL turns.
    """
    out: list[str] = []
    used = 0
    total = matched = 0
    truncated = False
    before: list[tuple[int, str]] = []
    after_left = 0
    lo = start_line or 1
    hi = end_line or (lo + 199 if regex is None else 1 << 62)
    for lines in _line_blocks(path):
        first = total + 1
        total += len(lines)
        if (
            truncated
            or total < lo
            or first > hi
            or (after_left <= 0 and regex is not None and regex.search("\n".join(lines)) is None)
        ):
            if context_lines:
                before = [(first + i, ln) for i, ln in enumerate(lines)][-context_lines:]
            continue
        for lineno, line in enumerate(lines, start=first):
            if truncated or lineno < lo or lineno > hi:
                continue
            line = line if len(line) <= MAX_LINE_CHARS else line[:MAX_LINE_CHARS] + " […]"
            hit = regex is None or regex.search(line) is not None
            if hit or after_left > 0:
                for n, prev in before:
                    out.append(f"{n}: {prev}")
                before.clear()
                entry = f"{lineno}: {line}"
                if used + len(entry) > max_chars:
                    truncated = True
                    continue
                out.append(entry)
                used += len(entry) + 1
                matched += 1 if hit else 0
                after_left = context_lines if hit else after_left - 1
            elif context_lines:
                before.append((lineno, line))
                del before[:-context_lines]
    return Recall("\n".join(out), total, matched, truncated)
