"""The spill-file path reads whole-line blocks, not lines: same stored text, same digest."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from ctxwrap.digest import StreamingDigester
from ctxwrap.mechanisms.digest import _store_and_digest_file
from ctxwrap.state.rawstore import RawStore, line_blocks_of_file
from ctxwrap.state.store import Store

CASES = {
    "seq": b"".join(b"%d\n" % i for i in range(1, 30001)),
    "no_final_newline": b"alpha\nbeta\n\n\ngamma",
    "only_newlines": b"\n\n\n",
    "invalid_utf8": b"ok \xff\xfe line\n\xe2\x82 cut sequence\n\xc3\xa9t\xc3\xa9\n" * 5000,
    "huge_line": b"x" * (3 << 20) + b"\nafter\n",
    "nul_and_ansi": b"\x1b[31mred\x1b[0m \x00 nul\n" * 10000,
}


def reference_lines(data: bytes) -> list[str]:
    """What a line-by-line reader yields: each line decoded on its own, no final empty line."""
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return [line.decode("utf-8", errors="replace") for line in lines]


@pytest.mark.parametrize("name", sorted(CASES))
def test_blocks_hold_exactly_the_lines(name: str, tmp_path: Path) -> None:
    src = tmp_path / "out.log"
    src.write_bytes(CASES[name])
    blocks = list(line_blocks_of_file(src, 1 << 40))
    got = "\n".join(blocks).split("\n") if blocks else []
    if name == "huge_line":  # > 1 MB without a newline comes in pieces, each its own line
        assert "".join(got[:-1]) == "x" * (3 << 20) and got[-1] == "after"
        return
    assert got == reference_lines(CASES[name])


@pytest.mark.parametrize("name", sorted(set(CASES) - {"huge_line"}))
def test_spill_digest_and_store_match_the_whole_output(name: str, tmp_path: Path) -> None:
    src = tmp_path / "spill.log"
    src.write_bytes(CASES[name])
    store = Store(tmp_path / "state.db")
    raw = RawStore(tmp_path / "raw", store, max_bytes=1 << 30, retention_days=7)
    digester = StreamingDigester(command="make", exit_code=0, max_chars=16000)
    meta = {"session_id": "s", "tool_call_id": "c", "tool_name": "bash", "command": "make"}
    stored = _store_and_digest_file(SimpleNamespace(raw=raw), src, digester, meta)
    lines = reference_lines(CASES[name])
    assert stored.lines == len(lines)
    kept = Path(store.query("SELECT path FROM raw_outputs")[0]["path"]).read_text()
    assert kept == "\n".join(line.replace("\x00", "\\0") for line in lines) + "\n"
    # The digester saw the same text as if it had been fed the decoded output line by line.
    by_line = StreamingDigester(command="make", exit_code=0, max_chars=16000)
    for line in lines:
        by_line.feed(line + "\n")
    assert digester.finish() == by_line.finish()


@pytest.mark.parametrize("name", sorted(set(CASES) - {"huge_line", "invalid_utf8"}))
def test_an_output_given_as_text_is_stored_as_the_same_output_in_a_file(
    name: str, tmp_path: Path
) -> None:
    """The two ways an output reaches the store keep the same lines: a final newline ends the
    last line (the text path stored one empty line more, and a recall of a 3,000-line output
    said "of 3,001 lines")."""
    from ctxwrap.state.rawstore import scan

    store = Store(tmp_path / "state.db")
    raw = RawStore(tmp_path / "raw", store, max_bytes=1 << 30, retention_days=7)
    meta = {"session_id": "s", "tool_call_id": "c", "tool_name": "bash", "command": "make"}
    stored = raw.try_put_text(CASES[name].decode("utf-8"), **meta)
    assert stored is not None
    lines = reference_lines(CASES[name])
    assert stored.lines == len(lines)
    path = Path(store.query("SELECT path FROM raw_outputs")[0]["path"])
    assert path.read_text() == "\n".join(line.replace("\x00", "\\0") for line in lines) + "\n"
    recall = scan(path, None, start_line=1, end_line=None, context_lines=0, max_chars=1 << 20)
    assert recall.total_lines == max(1, len(lines))


def test_a_large_spill_file_is_read_in_blocks(tmp_path: Path) -> None:
    """Per-line Python work made a 30,000-line spill cost ~35 ms while the agent waited
    (bench/overhead); a block is ~64 KB of whole lines."""
    src = tmp_path / "spill.log"
    src.write_bytes(CASES["seq"])
    blocks = list(line_blocks_of_file(src, 1 << 40))
    assert len(blocks) <= len(CASES["seq"]) // (1 << 16) + 2


def test_recall_blocks_keep_every_byte_of_a_huge_line(tmp_path: Path) -> None:
    """Recall reads a stored output in ~1 MB blocks; a line longer than that comes in pieces,
    and no byte may fall between two pieces (the recall reader once dropped one per piece)."""
    from ctxwrap.state.rawstore import _line_blocks

    line = "".join(chr(ord("a") + i % 26) for i in range(3 << 20))
    src = tmp_path / "stored.txt"
    src.write_text(f"first\n{line}\nlast\n")
    lines = [ln for block in _line_blocks(src) for ln in block]
    assert lines[0] == "first" and lines[-1] == "last"
    assert "".join(lines[1:-1]) == line
