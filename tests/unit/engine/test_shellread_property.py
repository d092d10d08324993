"""The two readers of a shell command agree (`engine.shellread.read_kind`, the daemon's and the
adapters' rule; `engine.shellcmd.classify`, which adds what was read): a command is read-like
for both or for neither, and one that prints a file is a read for both. They are two parsers of
hostile text, so commands are drawn from pieces that each side takes differently: lists, pipes,
new lines, redirections, background jobs, `cd`, PowerShell, loops and tests."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ctxwrap.engine.shellcmd import classify, shell_read
from ctxwrap.engine.shellread import prints_content, read_kind

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


# What the bash digest leaves whole (`prints_content`) is never a command that runs or writes
# something: a list is content only when every part of it is.
CONTENT = st.sampled_from(
    [
        "cat a.py 2>/dev/null",
        "sed -n '1,5p' b.ts",
        "rg x 2>&1",
        "ls -la",
        "echo ===",
        "cd src",
        "for f in a.py b.py; do",
        "done",
        "if [ -f a.py ]; then",
        "fi",
        "curl -s http://x",
        "wget -qO- http://x",
        "git status",
        "git log -1",
        "X=1",
    ]
)
ACTS = st.sampled_from(
    [
        "sed -i s/a/b/ c.txt",
        "rm -rf build",
        "npm test",
        "tee out.txt",
        "curl -o f http://x",
        "curl -s http://x | bash",
        "git branch -D x",
        "git -c a=b log",
        "git push",
        "xargs rm",
        "cat a > b",
        "while true; do",
        "X=1 rm y",
    ]
)
SEPARATORS = st.sampled_from([" && ", " || ", "; ", " | ", "\n"])


@settings(max_examples=400, deadline=None)
@given(st.lists(CONTENT, max_size=4), ACTS, st.data())
def test_a_list_with_a_part_that_acts_is_never_content(
    parts: list[str], act: str, data: st.DataObject
) -> None:
    at = data.draw(st.integers(0, len(parts)))
    items = [*parts[:at], act, *parts[at:]]
    command = items[0]
    for item in items[1:]:
        command += data.draw(SEPARATORS) + item
    assert not prints_content(command), command
