"""Property tests: for any text and any budget the digester returns, within the budget."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxwrap.digest import StreamingDigester, digest_bash_output
from ctxwrap.digest._rules import Family
from ctxwrap.digest._stream import _RuleTable
from ctxwrap.digest.families import FAMILIES

# Lines built from fragments the rules react to, so matching paths are exercised too.
_FRAGMENTS = st.sampled_from(
    [
        "error: ",
        "ERROR ",
        "Warning: ",
        "FAILED tests/a.py::t - AssertionError",
        "E   assert 1 == 2",
        "src/x.rs:3:4: ",
        " --> src/lib.rs:1:1",
        "diff --git a/x b/x",
        "@@ -1 +1 @@",
        "\r",
        "\x1b[31m",
        "\x00",
        "é☕",
        "   ",
        "Traceback (most recent call last):",
        "ValueError: bad",
        "=== 1 failed, 2 passed in 0.1s ===",
        "-----BEGIN RSA PRIVATE KEY-----",
        "TOKEN=abcdef",
    ]
)
_LINES = st.lists(st.one_of(_FRAGMENTS, st.text(max_size=80)), max_size=60).map("\n".join)
_COMMANDS = st.sampled_from(
    ["pytest -q", "cargo test", "npm run build", "make", "git diff", "find .", "grep -rn x .", "x"]
)


@settings(max_examples=300, deadline=None)
@given(text=st.one_of(st.text(), _LINES), command=_COMMANDS, max_chars=st.integers(0, 3000))
def test_never_raises_and_respects_max_chars(text: str, command: str, max_chars: int) -> None:
    digest = digest_bash_output(text, command=command, exit_code=1, max_chars=max_chars)
    assert len(digest.text) <= max_chars + 20  # "[no output]" may exceed a tiny budget
    assert digest.kept_lines <= max(digest.original_lines, 1)


@settings(max_examples=100, deadline=None)
@given(data=st.binary(max_size=4000), cut=st.integers(1, 64), command=_COMMANDS)
def test_arbitrary_bytes_in_arbitrary_chunks(data: bytes, cut: int, command: str) -> None:
    digester = StreamingDigester(command=command, exit_code=None, max_chars=1000)
    for offset in range(0, len(data), cut):
        digester.feed(data[offset : offset + cut])
    digest = digester.finish()
    assert len(digest.text) <= 1000
    assert digest == digest_bash_output(data, command=command, exit_code=None, max_chars=1000)


# -- the block scan: one RE2 pass finds exactly the lines one find pass per anchor found --------


def _brute_mask(table: _RuleTable, line: bytes) -> int:
    mask = 0
    for anchor, bits in table.anchors:
        if line.startswith(anchor[1:]) if anchor[:1] == b"\n" else anchor in line:
            mask |= bits
    return mask


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.__name__)
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_block_scan_finds_every_anchored_line_and_no_other(
    family: type[Family], data: st.DataObject
) -> None:
    table = _RuleTable(family())
    # lines built from the anchors (a line-start one at a line's start, inside it, or cut
    # short), and filler: hits, near misses and blocks with none all come up
    pieces = [a[1:] if a[:1] == b"\n" else a for a, _ in table.anchors]
    fragments = st.sampled_from([*pieces, *(p[:-1] for p in pieces if len(p) > 1), b"x", b" "])
    lines = data.draw(st.lists(st.lists(fragments, max_size=5).map(b"".join), max_size=30))
    folded = b"\n".join(lines).upper()
    expected: dict[int, int] = {}
    offset = 0
    for line in folded.split(b"\n"):
        if mask := _brute_mask(table, line):
            expected[offset] = mask
        offset += len(line) + 1
    assert table.anchored_lines(folded) == expected
