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

from ctxwrap.engine.shellread import READ_COMMANDS as READ_COMMANDS
from ctxwrap.engine.shellread import read_kind as read_kind
from ctxwrap.engine.shellread import shell_words as shell_words

_OUTPUT_MARK = "\nOutput:\n"
_EXIT_RE = re.compile(r"^Process exited with code (-?\d+)$", re.M)
# `tools.exec_command({cmd: "…"` as a JS literal: the first key, bare or quoted. A model
# writes JSON too (`{"cmd":"…","workdir":…}`, Codex 0.152), which is parsed whole first.
_JS_EXEC_CALL = "exec_command("
_JS_EXEC_RE = re.compile(
    r"""exec_command\(\s*\{\s*(?:cmd|"cmd"|'cmd')\s*:\s*("(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')"""
)


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


# `tools.NAME(` in a JS exec script: a nested tool call
_JS_TOOL_RE = re.compile(r"\btools\.([A-Za-z_$][\w$]*)\s*\(")
# The tools whose answer is data the model reads once, as it reads a file: an MCP server's
# (code mode names them `mcp__SERVER__TOOL`, a plain call carries the `mcp__SERVER` namespace)
# and the web tool's (`web__run`, newer model entries). Shell, patch and plan tools are not.
_LOOKUP_PREFIXES = ("mcp__", "web__")
_CODE_RUNNERS = frozenset({"js", "exec"})


def lookup_of(name: str, arguments: object, namespace: object = None) -> str | None:
    """The tool a call looks something up with, or None: a namespaced MCP call, or a JS
    ``exec`` script of exactly one nested MCP or web call (its result is that tool's answer)."""
    if isinstance(namespace, str) and namespace.startswith("mcp__") and name:
        # a code runner's (Codex Desktop's `js` in `mcp__node_repl__`) answer is what its
        # script printed, a command's output: no lookup
        return None if name in _CODE_RUNNERS else f"{namespace.rstrip('_')}__{name}"
    if name == "exec" and isinstance(arguments, str) and arguments.count("tools.") == 1:
        found = _JS_TOOL_RE.findall(arguments)
        if len(found) == 1 and found[0].startswith(_LOOKUP_PREFIXES):
            return str(found[0])
    return None


def lookup_text(body: str) -> str:
    """A lookup's answer as text: an MCP result (`{"content": [{"type": "text", "text": …}],
    "isError": …}`, what code mode prints) is the text of its parts, one JSON-escaped line no
    more; anything else as it is."""
    stripped = body.strip()
    if not stripped.startswith("{"):
        return body
    try:
        doc = json.loads(stripped)
    except (ValueError, RecursionError):  # a tool's output is hostile: nested past the limit
        return body
    parts = doc.get("content") if isinstance(doc, dict) else None
    if not isinstance(parts, list):
        return body
    texts = [p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str)]
    return "\n".join(texts) if texts else body


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


_PATCH_HEADER = re.compile(r"^\*\*\* (Add|Update|Delete) File: (.+)$")


def patch_files(patch: str) -> list[tuple[str, str, str]]:
    """(op, path, body) per file of an apply_patch text: op "add" (body: the new file),
    "update" (body: the hunks as written) or "delete"."""
    ops: list[tuple[str, str, list[str]]] = []
    for line in patch.splitlines():
        m = _PATCH_HEADER.match(line)
        if m:
            ops.append((m.group(1).lower(), m.group(2).strip(), []))
        elif line.startswith("*** End Patch") or line.startswith("*** Begin Patch"):
            continue
        elif ops:
            ops[-1][2].append(line)
    out = []
    for op, path, lines in ops:
        if op == "add":
            body = "".join((ln[1:] if ln.startswith("+") else ln) + "\n" for ln in lines)
        else:
            body = "\n".join(lines)
        out.append((op, path, body))
    return out


def patch_calls(patch: str) -> list[tuple[str, str, str]]:
    """The files of a patch as the mechanisms take them, one neutral call each: the largest
    added file first (the call's own id, the body the write strip may take), then the rest in
    patch order (ids `CALL#1`, `CALL#2`, …). The proxy and replay split a patch the same way."""
    ops = patch_files(patch)
    adds = [i for i, (op, _, _) in enumerate(ops) if op == "add"]
    if adds:
        top = max(adds, key=lambda i: len(ops[i][2]))
        ops.insert(0, ops.pop(top))
    return ops


def heredoc_patch(command: str) -> str | None:
    """The patch of `apply_patch <<'EOF' … EOF` run through the shell (older Codex)."""
    if not command.lstrip().startswith(("apply_patch", "applypatch")):
        return None
    start = command.find("*** Begin Patch")
    end = command.find("*** End Patch")
    if start < 0:
        return None
    return command[start : end + len("*** End Patch") if end >= 0 else len(command)]


def patch_succeeded(output: str) -> bool:
    """apply_patch's output says it applied (Codex 0.171: ``Exit code: 0`` … ``Success.``)."""
    head = output[:400]
    return ("Success." in head and "Exit code: 0" in head) or head.startswith("Success.")
