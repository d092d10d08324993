"""The two readers of a shell command agree (`engine.shellread.read_kind`, the daemon's and the
adapters' rule; `engine.shellcmd.classify`, which adds what was read): a command is read-like
for both or for neither, and one that prints a file is a read for both. They are two parsers of
hostile text, so commands are drawn from pieces that each side takes differently: lists, pipes,
new lines, redirections, background jobs, `cd`, PowerShell, loops and tests."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ctxwrap.engine.shellcmd import classify, shell_read
from ctxwrap.engine.shellread import read_kind

PARTS = st.sampled_from(
    [
        "cat a.py",
        "sed -n '1,5p' b.ts",
        "sed -i s/a/b/ c.txt",
        "head -n 20 README.md",
        "rg -n 'x|y' src",
        "grep -rn foo .",
        "ls -la",
        "find . -name '*.py'",
        "echo ===",
        "cd src",
        "rm -rf build",
        "npm test",
        "Get-Content app\\page.tsx",
        "wc -l",
        "sort",
        "tee out.txt",
        "for f in a.py b.py; do",
        "do",
        "done",
        "if [ -f a.py ]; then",
        "else",
        "fi",
        "[ -d src ]",
        "while true; do",
    ]
)
JOINS = st.sampled_from(
    [" && ", " || ", "; ", " | ", "\n", " & ", " > out.txt ", " 2>/dev/null ", " 2>&1 ", " 2>x "]
)


@st.composite
def commands(draw: st.DrawFn) -> str:
    parts = draw(st.lists(PARTS, min_size=1, max_size=4))
    joins = draw(st.lists(JOINS, min_size=len(parts) - 1, max_size=len(parts) - 1))
    out = parts[0]
    for join, part in zip(joins, parts[1:], strict=True):
        out += join + part
    return out


@settings(max_examples=400, deadline=None)
@given(commands())
def test_both_readers_call_the_same_commands_read_like(command: str) -> None:
    kind = read_kind(command)
    classified, args = classify(command)
    assert (kind is None) == (classified == "bash"), (command, kind, classified)
    if kind == "read":
        assert classified == "read" and shell_read(command)[0], (command, args)
    assert args["command"] == command  # described as written, never rewritten (invariant 9)
