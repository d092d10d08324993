"""Text clean-up shared by every family: ANSI, carriage returns, control bytes, long lines.

Block-level functions work on raw UTF-8 bytes, megabytes at a time, as single C-level regex
passes guarded by a cheap ``in`` test; only the few lines a digest keeps are decoded.
"""

from __future__ import annotations

import re

# CSI sequences, OSC sequences (titles, hyperlinks) ended by BEL or ST, and two-byte escapes.
_SGR = re.compile(rb"\x1b\[[0-9;]*m")
_ANSI = re.compile(rb"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b\n]*(?:\x07|\x1b\\)?|[@-Z\\-_])")
LINE_MAX_CHARS = 500
LINE_KEEP_CHARS = 400

# Control characters other than tab are shown in caret notation (NUL → ^@), as `cat -v` does.
_VISIBLE_CONTROLS = {c: "^" + chr(c + 64) for c in range(32) if c != 9} | {127: "^?"}
_CONTROL_CHARS = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")

_BINARY_MAGIC = (
    (b"\x7fELF", "ELF executable"),
    (b"\x89PNG", "PNG image"),
    (b"\xff\xd8\xff", "JPEG image"),
    (b"GIF8", "GIF image"),
    (b"PK\x03\x04", "zip archive"),
    (b"\x1f\x8b", "gzip data"),
    (b"%PDF", "PDF document"),
    (b"SQLite format 3", "SQLite database"),
    (b"\xfd7zXZ", "xz data"),
    (b"BZh", "bzip2 data"),
)
# Every byte except the control bytes that plain text does not contain (tab, newline, CR,
# form feed, escape and backspace are text): deleting these leaves the suspicious ones.
_NOT_BINARY_CONTROL = bytes(b for b in range(256) if b >= 32 or b in b"\t\n\r\f\v\x1b\x08")
BINARY_SNIFF_BYTES = 8192
_BINARY_RATIO = 0.30


def strip_ansi(block: bytes) -> bytes:
    if b"\x1b" not in block:
        return block
    # Colour codes are nearly all escapes; their simpler pattern runs twice as fast.
    block = _SGR.sub(b"", block)
    return _ANSI.sub(b"", block) if b"\x1b" in block else block


def collapse_carriage_returns(block: bytes) -> bytes:
    """Keep only the final state of each line a terminal would have rewritten with \\r."""
    if b"\r" not in block:
        return block
    block = block.replace(b"\r\n", b"\n")
    # Only lines holding a \r are touched: a regex over the block would try every offset.
    pieces: list[bytes] = []
    done = 0
    carriage_return = block.find(b"\r")
    while carriage_return >= 0:
        start = block.rfind(b"\n", 0, carriage_return) + 1
        end = block.find(b"\n", carriage_return)
        end = len(block) if end < 0 else end
        pieces.append(block[done:start])
        pieces.append(final_line_state(block[start:end]))
        done = end
        carriage_return = block.find(b"\r", end)
    pieces.append(block[done:])
    return b"".join(pieces)


def final_line_state(line: bytes) -> bytes:
    """What a terminal shows for a line rewritten with \\r: its last non-empty segment."""
    for segment in reversed(line.split(b"\r")):
        if segment:
            return segment
    return b""


def clean_block(block: bytes) -> bytes:
    # Carriage returns first: progress bars are dense with colour codes that would otherwise
    # all be stripped before being thrown away with the overwritten segments.
    return strip_ansi(collapse_carriage_returns(block))


def decode(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


def display_line(line: str) -> str:
    """One kept line as it appears in a digest: controls visible, over-long lines cut."""
    if _CONTROL_CHARS.search(line):
        line = line.translate(_VISIBLE_CONTROLS)
    if len(line) > LINE_MAX_CHARS:
        line = cut_line(line, len(line))
    return line.rstrip()


def cut_line(prefix: str, total_chars: int) -> str:
    """The first LINE_KEEP_CHARS of a line whose full length is total_chars, with a marker."""
    return f"{prefix[:LINE_KEEP_CHARS]} …[+{total_chars - LINE_KEEP_CHARS:,} chars]"


def looks_binary(sample: bytes) -> bool:
    """True when a leading sample is mostly not text (control bytes or invalid UTF-8)."""
    if not sample:
        return False
    controls = len(sample.translate(None, _NOT_BINARY_CONTROL))
    # Drop a possibly cut multi-byte character at the end before counting decode errors.
    invalid = sample[:-4].decode("utf-8", "replace").count("\ufffd") if len(sample) > 4 else 0
    return (controls + invalid) / len(sample) > _BINARY_RATIO


def binary_kind(sample: bytes) -> str:
    for magic, kind in _BINARY_MAGIC:
        if sample.startswith(magic):
            return kind
    return "binary data"
