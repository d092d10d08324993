"""What Codex's tool calls are, read from their text: pure functions, no I/O.

Codex reads files through the shell (``cat``, ``sed -n``, ``rg``, ``ls``), so a "read" is a
command; its outputs carry a header Codex wrote (``Chunk ID … Process exited with code N …
Output:``); ``apply_patch`` is freeform patch text. Nothing here runs or changes a command
(invariant 9): it only says what a command was, so the right mechanism sees its output.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass

# The first word of a command that only reads → the mechanism's tool kind (pi's names).
READ_COMMANDS = {
    "cat": "read",
    "head": "read",
    "tail": "read",
    "nl": "read",
    "less": "read",
    "bat": "read",
    "sed": "read",  # only with -n (printing a range), checked below
    "rg": "grep",
    "grep": "grep",
    "egrep": "grep",
    "ag": "grep",
    "ls": "find",
    "find": "find",
    "fd": "find",
    "tree": "find",
}
_PUNCTUATION = frozenset("();<>|&")
_OUTPUT_MARK = "\nOutput:\n"
_EXIT_RE = re.compile(r"^Process exited with code (-?\d+)$", re.M)
# `tools.exec_command({cmd: "…"` as a JS literal: the first key, bare or quoted. A model
# writes JSON too (`{"cmd":"…","workdir":…}`, Codex 0.152), which is parsed whole first.
_JS_EXEC_CALL = "exec_command("
_JS_EXEC_RE = re.compile(
    r"""exec_command\(\s*\{\s*(?:cmd|"cmd"|'cmd')\s*:\s*("(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')"""
)


def shell_words(command: str) -> list[str] | None:
    try:
        return shlex.split(command)
    except ValueError:
        return None


_FILTERS = frozenset({"wc", "sort", "uniq", "cut", "head", "tail", "grep", "rg", "nl", "tr"})


def _stage_kind(words: list[str], *, first: bool) -> str | None:
    if not words:
        return None
    prog = words[0].rsplit("/", 1)[-1]
    if prog == "sed" and ("-n" not in words or any(w.startswith("-i") for w in words)):
        return None
    if prog == "find" and any(
        w in ("-exec", "-execdir", "-delete", "-ok", "-fprint") for w in words
    ):
        return None
    if first:
        return READ_COMMANDS.get(prog)
    return "filter" if prog in _FILTERS or prog == "sed" else None


def read_kind(command: str) -> str | None:
    """ "read" / "grep" / "find" for a read-like command, else None.

    One simple command, or a pipeline whose first stage reads and whose other stages only
    filter (``nl -ba f | sed -n '1,200p'``, ``rg --files | rg x``); no lists, redirections,
    subshells or substitutions: anything else may also write or run something. ``bash -lc X``
    is unwrapped once. ``sed`` counts only with ``-n`` (printing), never with ``-i``.
    """
    words = shell_words(command)
    if not words:
        return None
    if (
        len(words) == 3
        and words[0] in ("bash", "/bin/bash", "sh", "/bin/sh", "zsh")
        and words[1] in ("-lc", "-c")
    ):
        return read_kind(words[2])
    stages = _pipeline(command)
    if stages is None:
        return None
    kind = _stage_kind(stages[0], first=True)
    if kind is None or any(_stage_kind(st, first=False) is None for st in stages[1:]):
        return None
    return kind


def _pipeline(command: str) -> list[list[str]] | None:
    """The stages of a plain pipeline, or None when the command has any other operator."""
    if "`" in command or "$(" in command:
        return None
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    stages: list[list[str]] = [[]]
    try:
        for tok in lexer:
            if tok == "|":
                stages.append([])
            elif tok and set(tok) <= _PUNCTUATION:
                return None
            else:
                stages[-1].append(tok)
    except ValueError:
        return None
    return stages if all(stages) else None


@dataclass(frozen=True)
class ExecOutput:
    header: str  # Codex's lines up to and including "Output:\n" ("" when there are none)
    body: str  # what the command printed, as Codex kept it
    exit_code: int | None


def split_exec_output(text: str) -> ExecOutput:
    """Codex's exec_command / shell output: its header, then what the command printed."""
    cut = text.find(_OUTPUT_MARK)
    if cut < 0 or cut > 2000:
        if text.startswith("Output:\n"):
            return ExecOutput("Output:\n", text[8:], None)
        return ExecOutput("", text, None)
    header = text[: cut + len(_OUTPUT_MARK)]
    body = text[cut + len(_OUTPUT_MARK) :]
    nested = _nested_exec_result(header, body)
    if nested is not None:
        return nested
    m = _EXIT_RE.search(header)
    return ExecOutput(header, body, int(m.group(1)) if m else None)


_TRUNCATION_NOTE_RE = re.compile(
    r"^Warning: truncated output \(original token count: \d+\)\nTotal output lines: \d+\n\n"
)
_NESTED_OUTPUT_RE = re.compile(r'^\{"chunk_id":.*?"exit_code":(-?\d+|null).*?"output":"', re.S)
_ESCAPE_RE = re.compile(r"\\(u[0-9a-fA-F]{4}|.)", re.S)
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f", '"': '"', "\\": "\\", "/": "/"}


def _unescape(fragment: str) -> str:
    """A JSON string body that may have been cut anywhere (Codex truncates the middle)."""

    def one(m: re.Match[str]) -> str:
        e = m.group(1)
        if e.startswith("u") and len(e) == 5:
            return chr(int(e[1:], 16))
        return _ESCAPES.get(e, e)

    return _ESCAPE_RE.sub(one, fragment)


def _nested_exec_result(header: str, body: str) -> ExecOutput | None:
    """The JS ``exec`` tool's output: the script's ``text(await tools.exec_command(…))`` is the
    nested call's result as JSON (``{"chunk_id", "exit_code", …, "output"}``). Codex cuts a long
    one in the middle of that single line, so it is read as text, not parsed as JSON."""
    text = body.lstrip("\n")
    note = _TRUNCATION_NOTE_RE.match(text)
    if note is not None:
        text = text[note.end() :]
    m = _NESTED_OUTPUT_RE.match(text)
    if m is None:
        return None
    rest = text[m.end() :].rstrip()
    if rest.endswith('"}'):
        rest = rest[:-2]
    code = int(m.group(1)) if m.group(1) != "null" else None
    return ExecOutput(header, _unescape(rest), code)


def _json_exec_argument(script: str) -> str | None:
    """`cmd` of a `tools.exec_command({...})` whose argument is a JSON object, else None."""
    at = script.find(_JS_EXEC_CALL)
    if at < 0:
        return None
    start = at + len(_JS_EXEC_CALL)
    while start < len(script) and script[start].isspace():
        start += 1
    try:
        value, _ = json.JSONDecoder().raw_decode(script, start)
    except ValueError:
        return None
    cmd = value.get("cmd") if isinstance(value, dict) else None
    return cmd if isinstance(cmd, str) else None


def shell_command_of(name: str, arguments: object) -> str | None:
    """The command line of an exec-like call: exec_command {cmd}, shell {command: [argv]},
    local_shell {action: {command}}, or the JS ``exec`` tool's ``tools.exec_command({cmd})``."""
    if name == "exec" and isinstance(arguments, str):
        if arguments.count("tools.") != 1:
            return None  # a script of several calls is no one command
        as_json = _json_exec_argument(arguments)
        if as_json is not None:
            return as_json
        m = _JS_EXEC_RE.search(arguments)
        if m is None:
            return None
        lit = m.group(1)
        if lit.startswith("'"):
            lit = '"' + lit[1:-1].replace('"', '\\"').replace("\\'", "'") + '"'
        try:
            value = json.loads(lit)
        except ValueError:
            return None
        return value if isinstance(value, str) else None
    if not isinstance(arguments, dict):
        return None
    if name == "exec_command" and isinstance(arguments.get("cmd"), str):
        return str(arguments["cmd"])
    command = arguments.get("command")
    if name == "local_shell_call" and isinstance(arguments.get("action"), dict):
        command = arguments["action"].get("command")
    if isinstance(command, list) and all(isinstance(w, str) for w in command):
        if len(command) == 3 and command[1] in ("-lc", "-c"):
            return str(command[2])
        return shlex.join(command)
    if isinstance(command, str) and name in ("shell", "shell_command"):
        return command
    return None


@dataclass(frozen=True)
class AddedFile:
    path: str
    content: str  # the file's text (the `+` prefixes removed)
    start: int  # offset of the first `+` line in the patch text
    end: int  # offset just past the last `+` line


_ADD_RE = re.compile(r"^\*\*\* Add File: (.+)\n", re.M)


def added_files(patch: str) -> list[AddedFile]:
    """The ``*** Add File:`` hunks of an apply_patch text, with where their bodies are."""
    out: list[AddedFile] = []
    for m in _ADD_RE.finditer(patch):
        pos = m.end()
        lines: list[str] = []
        while pos < len(patch) and patch.startswith("+", pos):
            nl = patch.find("\n", pos)
            stop = len(patch) if nl < 0 else nl + 1
            lines.append(patch[pos + 1 : stop])
            pos = stop
        if lines:
            out.append(AddedFile(m.group(1).strip(), "".join(lines), m.end(), pos))
    return out


def largest_added_file(patch: str) -> AddedFile | None:
    files = added_files(patch)
    return max(files, key=lambda f: len(f.content)) if files else None


def patch_succeeded(output: str) -> bool:
    """apply_patch's output says it applied (Codex 0.171: ``Exit code: 0`` … ``Success.``)."""
    head = output[:400]
    return ("Success." in head and "Exit code: 0" in head) or head.startswith("Success.")
