"""Inputs that break naive digesters: huge streams, binary, broken UTF-8, giant lines."""

from __future__ import annotations

import tracemalloc

import pytest

from ctxwrap.digest import StreamingDigester, digest_bash_output

GIB = 1 << 30
CHUNK_LINES = 8192


def _log_chunk(start: int) -> bytes:
    return "".join(
        f"2026-01-01 12:00:00 INFO worker-{n % 8} GET /api/items/{n} 200 in {n % 97}ms\n"
        for n in range(start, start + CHUNK_LINES)
    ).encode()


@pytest.mark.slow
def test_one_gigabyte_stream_keeps_memory_bounded() -> None:
    # One chunk, fed again and again: generating fresh text would dominate the run time.
    chunk = _log_chunk(0)
    needle = b"ERROR worker-3 lost connection to db-primary: connection refused\n"
    digester = StreamingDigester(command="./server --serve", exit_code=137)
    fed = 0
    tracemalloc.start()
    try:
        while fed < GIB:
            digester.feed(chunk)
            fed += len(chunk)
            if fed // len(chunk) == 1000:  # about half way
                digester.feed(needle)
        digest = digester.finish()
        _current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 48 * 1024 * 1024, f"peak {peak:,} bytes"
    assert "connection refused" in digest.text
    assert digest.original_lines > 10_000_000
    assert len(digest.text) <= 8000


def test_binary_output_gives_a_short_note() -> None:
    payload = bytes(range(256)) * 400
    digest = digest_bash_output(b"\x7fELF" + payload, command="cat ./a.out", exit_code=0)
    assert digest.family == "binary"
    assert digest.text.startswith("[binary output: ")
    assert "102,404 bytes" in digest.text and "ELF" in digest.text


def test_invalid_utf8_is_replaced_not_raised() -> None:
    raw = b"ok line\n" + b"bad \xff\xfe bytes then error: boom \xc3\x28\n" * 3 + b"done\n"
    digest = digest_bash_output(raw, command="./tool", exit_code=1)
    assert "error: boom" in digest.text
    assert "\ufffd" in digest.text


def test_a_ten_megabyte_line_is_cut() -> None:
    raw = b"start\n" + b"x" * (10 * 1024 * 1024) + b"\nerror: after the long line\nend\n"
    digester = StreamingDigester(command="./tool", exit_code=1)
    for offset in range(0, len(raw), 1 << 16):
        digester.feed(raw[offset : offset + (1 << 16)])
    digest = digester.finish()
    assert "error: after the long line" in digest.text
    assert "chars]" in digest.text  # the cut marker
    assert max(len(line) for line in digest.text.splitlines()) < 600
    assert digest.original_chars == len(raw)


def test_a_ten_megabyte_line_in_one_piece() -> None:
    digest = digest_bash_output("y" * (10 * 1024 * 1024), command="./tool", exit_code=0)
    assert len(digest.text) < 600
    assert digest.original_lines == 1


def test_nul_and_control_bytes_are_made_visible() -> None:
    raw = b"name\x00value\x01\x02 error: bad\x07 thing\n" + b"plain line\n" * 5
    digest = digest_bash_output(raw, command="./tool", exit_code=1)
    assert "name^@value^A^B error: bad^G thing" in digest.text
    assert not any(ch in digest.text for ch in "\x00\x01\x02\x07")


def test_empty_output() -> None:
    for empty in (b"", ""):
        digest = digest_bash_output(empty, command="true", exit_code=0)
        assert digest.text == "[no output]"
        assert (digest.original_chars, digest.original_lines, digest.kept_lines) == (0, 0, 0)


def test_progress_without_newlines_keeps_the_final_state() -> None:
    digester = StreamingDigester(command="./download", exit_code=0)
    for percent in range(0, 101):
        digester.feed(f"\rdownloading {percent:3d}%".encode())
    digester.feed(b"\ndone\n")
    digest = digester.finish()
    assert "downloading 100%" in digest.text
    assert "downloading  99%" not in digest.text


def test_chunking_does_not_change_the_digest() -> None:
    raw = (
        b"".join(f"step {n}: compiling module_{n}.c\n".encode() for n in range(2000))
        + b"module_77.c:3:1: error: expected ';'\n\xe2\x9c\x96 1 problem\n"
    )
    whole = digest_bash_output(raw, command="make", exit_code=2)
    digester = StreamingDigester(command="make", exit_code=2)
    for offset in range(0, len(raw), 7):  # splits lines and multi-byte characters
        digester.feed(raw[offset : offset + 7])
    assert digester.finish() == whole


def test_str_and_bytes_give_the_same_digest() -> None:
    text = "café ☕ error: naïve failure\n" * 3 + "fin\n"
    assert digest_bash_output(text, command="x", exit_code=1) == digest_bash_output(
        text.encode(), command="x", exit_code=1
    )


def test_finish_twice_returns_the_same_digest_and_feed_after_finish_raises() -> None:
    digester = StreamingDigester(command="x", exit_code=0)
    digester.feed("a\n")
    first = digester.finish()
    assert digester.finish() is first
    with pytest.raises(RuntimeError):
        digester.feed("b\n")
