"""What a shell command reads: a file (which one, which lines), a search, a listing, or
anything else ("bash")? Agents that read through the shell (Codex: `cat`, `sed -n`, `rg`, `ls`)
get their reads treated as reads, with their file: replay reads rollouts by it, and the Codex
proxy tells masking which file each read printed (`agents/codex/responses_wire.call_info`).

A command is read-like only when every part of it is: `cd` and `echo` separators are neutral,
a pipe into a filter (`head`, `sed -n`, `rg`, `wc`, …) keeps the kind of its source, and any
redirection into a file, `sed -i`, `find -exec`/`-delete` or an unknown program makes the whole
command "bash". Pure functions, no I/O.
"""

from __future__ import annotations

import functools
import posixpath
import re
import shlex
from typing import Any

from ctxwrap.engine.shellread import (
    CACHED_COMMAND_CHARS,
    FILTERS,
    NEUTRAL,
    command_words,
    read_kind,
)

READ = frozenset({"cat", "nl", "bat", "batcat", "less", "more", "head", "tail", "sed"})
SEARCH = frozenset({"rg", "grep", "egrep", "fgrep", "ag", "ack"})
LIST = frozenset({"ls", "tree", "find", "fd", "fdfind"})
# PowerShell cmdlets and aliases → the program replay reads them as
_POWERSHELL = {
    "get-content": "cat",
    "gc": "cat",
    "type": "cat",
    "select-string": "rg",
    "sls": "rg",
    "get-childitem": "ls",
    "gci": "ls",
    "dir": "ls",
}
SHELLS = frozenset({"bash", "sh", "zsh", "dash", "fish"})
# Options of rg/grep that take a value (so the value is not the pattern or a path).
_VALUE_OPTS = frozenset(
    {
        "-e", "--regexp", "-f", "--file", "-g", "--glob", "--iglob", "-t", "--type", "-T",
        "--type-not", "-A", "-B", "-C", "--context", "--after-context", "--before-context",
        "-m", "--max-count", "-M", "--max-columns", "-j", "--threads", "--max-depth", "-d",
        "-D", "--sort", "--sortr", "--type-add", "-E", "--encoding", "--include", "--exclude",
    }
)  # fmt: skip
_SED_RANGE = re.compile(r"^(\d+)(?:,(\d+|\$))?p$")
_OPERATORS = frozenset({"&&", "||", ";", "|", "&", ";;", "|&"})


def unwrap_argv(argv: list[str]) -> str:
    """The command string of an argv list (`["bash", "-lc", "ls"]` → `ls`)."""
    if len(argv) >= 3 and argv[0].rsplit("/", 1)[-1] in SHELLS and argv[1] in ("-lc", "-c"):
        return argv[2]
    return shlex.join(argv)


def _tokens(cmd: str) -> list[str] | None:
    cmd = cmd.replace("\\\n", " ")  # a line continued, as the shell joins it
    lexer = shlex.shlex(cmd, posix=True, punctuation_chars="();<>|&\n")
    lexer.whitespace = " \t\r"  # a new line separates commands, as `;` does
    lexer.whitespace_split = True
    lexer.commenters = ""
    try:
        return list(lexer)
    except ValueError:  # unbalanced quotes
        return None


def _split(tokens: list[str]) -> list[list[list[str]]] | None:
    """Command lists → pipelines → words. None when the command writes through a redirect."""
    lists: list[list[list[str]]] = [[[]]]
    i = 0
    while i < len(tokens):
        t = tokens[i]
        if "\n" in t and set(t) <= set("();<>|&\n"):
            t = t.replace("\n", "") or ";"  # `&&` and `|` may end a line
        if t in ("&&", "||", ";", "&", ";;"):
            lists.append([[]])
        elif t in ("|", "|&"):
            lists[-1].append([])
        elif set(t) <= set("<>&") and t:
            # redirections: `2>/dev/null`, `2>&1` and input are harmless; into a file is a write
            target = tokens[i + 1] if i + 1 < len(tokens) else ""
            prev = lists[-1][-1][-1] if lists[-1][-1] else ""
            if t.startswith("<") or target in ("/dev/null", "&1", "&2") or t in (">&", "&>"):
                if t in (">&", "&>") and target not in ("/dev/null", "1", "2"):
                    return None
                i += 2
                if prev.isdigit():
                    lists[-1][-1].pop()  # the fd number of `2>`
                continue
            if target.startswith("&") or (target.isdigit() and t.endswith("&")):
                i += 2
                continue
            return None
        elif t in ("(", ")", "{", "}"):
            return None  # subshells and groups: not worth guessing
        else:
            lists[-1][-1].append(t)
        i += 1
    return lists


def _program(words: list[str]) -> tuple[str, list[str]]:
    while words and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]):
        words = words[1:]  # VAR=value prefixes
    if not words:
        return "", []
    return words[0].rsplit("/", 1)[-1], words[1:]


def _positional(args: list[str], value_opts: frozenset[str] = frozenset()) -> list[str]:
    out: list[str] = []
    skip = False
    for i, a in enumerate(args):
        if skip:
            skip = False
            continue
        if a == "--":
            out += args[i + 1 :]
            break
        if a.startswith("-") and a != "-":
            if a in value_opts:
                skip = True
            continue
        out.append(a)
    return out


def _in_place(sed_args: list[str]) -> bool:
    return any(a.startswith(("-i", "--in-place")) for a in sed_args)


def _read_args(prog: str, args: list[str]) -> dict[str, Any] | None:
    if prog == "sed":
        if _in_place(args):
            return None
        if "-n" not in args:
            return None
        rest = [a for a in args if a != "-n"]
        if len(rest) < 2 or (m := _SED_RANGE.match(rest[0])) is None:
            return None
        start = int(m.group(1))
        end = m.group(2)
        limit = None if end == "$" else (int(end) - start + 1 if end else 1)
        return {"paths": rest[1:], "offset": start, "limit": limit}
    if prog in ("head", "tail"):
        n = 10
        paths = []
        it = iter(range(len(args)))
        for i in it:
            a = args[i]
            if a in ("-n", "--lines") and i + 1 < len(args):
                n_text = args[i + 1].lstrip("+-")
                n = int(n_text) if n_text.isdigit() else n
                next(it, None)
            elif re.fullmatch(r"-n?\d+", a):
                n = int(a.lstrip("-n"))
            elif a.startswith("--lines="):
                n_text = a.split("=", 1)[1].lstrip("+-")
                n = int(n_text) if n_text.isdigit() else n
            elif a.startswith("-") and a != "-":
                if a in ("-c", "--bytes", "-f", "--follow", "-F"):
                    return None  # bytes or following a growing file: not a line read
                continue
            else:
                paths.append(a)
        return {"paths": paths, "offset": 1 if prog == "head" else None, "limit": n}
    return {"paths": _positional(args), "offset": None, "limit": None}


def _classify_stage(words: list[str]) -> tuple[str, dict[str, Any]] | None:
    """One command of a pipeline: (kind, args), or None when it is not read-like."""
    prog, args = _program(words)
    if prog in READ:
        read = _read_args(prog, args)
        return ("read", read) if read is not None else None
    if prog == "git" and args[:1] == ["grep"]:
        prog, args = "rg", args[1:]
    if prog == "git" and args[:1] == ["ls-files"]:
        return "find", {"paths": _positional(args[1:])}
    if prog in SEARCH:
        if prog == "rg" and "--files" in args:
            return "find", {"paths": _positional(args, _VALUE_OPTS)}
        pattern = None
        for i, a in enumerate(args):
            if a in ("-e", "--regexp") and i + 1 < len(args):
                pattern = args[i + 1]
                break
        pos = _positional(args, _VALUE_OPTS)
        if pattern is None:
            if not pos:
                return None
            pattern, pos = pos[0], pos[1:]
        return "grep", {"pattern": pattern, "paths": pos}
    if prog in LIST:
        if prog == "find" and any(a in ("-exec", "-execdir", "-delete", "-ok") for a in args):
            return None
        kind = "ls" if prog in ("ls", "tree") else "find"
        paths = _positional(args) if prog != "find" else [a for a in args[:1] if a[:1] != "-"]
        return kind, {"paths": paths}
    return None


def classify(command: str) -> tuple[str, dict[str, Any]]:
    """(kind, args) of a shell command: kind is "read", "grep", "find", "ls" or "bash"; args
    always hold `command`, and for reads the file (`path`, all of them in `paths`) and, when
    only part of it is shown, `offset`/`limit`; for searches `pattern`.

    The daemon's and the adapters' rule (`engine.shellread.read_kind`) decides whether a
    command is read-like at all, as live; this module adds what was read."""
    kind, args = _classify(_powershell_paths(command))
    if kind != "bash" and read_kind(command) is None:
        return "bash", {"command": command}
    return kind, {**args, "command": command}  # as the agent wrote it, PowerShell or not


def shell_read(command: str) -> tuple[bool, str | None]:
    """Whether a command prints file content (`engine.shellread.read_kind` is "read": `cat f`,
    `sed -n '1,80p' f`, `find … -exec cat {} \\;`), and the file it prints (several named
    files: their names joined, as replay keys them; None where it cannot tell). Asked of
    every stored or described command at each request: a short command is parsed once."""
    if len(command) <= CACHED_COMMAND_CHARS:
        return _cached_read(command)
    return _shell_read(command)


def _shell_read(command: str) -> tuple[bool, str | None]:
    if read_kind(command) != "read":
        return False, None
    kind, args = classify(command)
    path = args.get("path") if kind == "read" else None
    return True, path if isinstance(path, str) and path else None


_cached_read = functools.lru_cache(maxsize=4096)(_shell_read)


# a PowerShell cmdlet where a command of a list starts
_POWERSHELL_PART = re.compile(
    r"(^|[;&|\n]\s*)(" + "|".join(map(re.escape, _POWERSHELL)) + r")(?=\s|$)", re.IGNORECASE
)


def _powershell_paths(command: str) -> str:
    """A PowerShell read (Codex on Windows) as the POSIX reader below takes it: its Windows
    paths with forward slashes (a backslash would be an escape), each cmdlet that starts a
    command of the list as the program it stands for."""
    if not _POWERSHELL_PART.search(command):
        return command
    return _POWERSHELL_PART.sub(
        lambda m: m.group(1) + _POWERSHELL[m.group(2).lower()], command
    ).replace("\\", "/")


def _classify(command: str) -> tuple[str, dict[str, Any]]:
    bash: tuple[str, dict[str, Any]] = ("bash", {"command": command})
    if "`" in command or "$(" in command:
        return bash  # a substitution runs something else
    tokens = _tokens(command)
    if not tokens:
        return bash
    lists = _split(tokens)
    if lists is None:
        return bash
    found: list[tuple[str, dict[str, Any]]] = []
    cwd = ""  # where a `cd` earlier in the list went: the paths after it are in there
    open_: list[str] = []
    looped = False  # a loop's paths name its variable (`"$f"`), not a file
    for pipeline in lists:
        stages = [s for s in pipeline if s]
        if not stages:
            continue
        words = command_words(stages[0], open_)
        if words is None:
            return bash
        looped = looped or "for" in open_
        if not words:  # `done | sort`: the loop's output through filters
            if any(_program(st)[0] not in FILTERS for st in stages[1:]):
                return bash
            continue
        stages = [words, *stages[1:]]
        prog, cd_args = _program(stages[0])
        if prog in NEUTRAL and len(stages) == 1:
            if prog == "cd":  # `cd` alone goes home, `cd -` back: neither is known here
                to = cd_args[0] if cd_args and cd_args[0] != "-" else "~"
                cwd = posixpath.join(cwd, to)
            continue
        first = _classify_stage(stages[0])
        if first is None:
            return bash
        kind, args = first
        if cwd and args.get("paths"):
            args = {
                **args,
                "paths": [posixpath.normpath(posixpath.join(cwd, p)) for p in args["paths"]],
            }
        for stage in stages[1:]:
            p, rest = _program(stage)
            if p not in FILTERS or (p == "sed" and ("-n" not in rest or _in_place(rest))):
                return bash
            if kind == "read":
                args = {**args, "limit": args.get("limit") or -1}  # piped: part of the file
        found.append((kind, args))
    if not found or open_:
        return bash
    kinds = {k for k, _ in found}
    if "read" in kinds and (kinds != {"read"} or looped):
        # a file's content and a search's hits: a read of no one file (`shell_read`)
        return "read", {"command": command}
    kind = next(iter(kinds)) if len(kinds) == 1 else found[0][0]
    out: dict[str, Any] = {"command": command}
    paths = [p for _, a in found for p in a.get("paths", [])]
    if kind == "read":
        if not paths:
            return bash  # reading stdin
        # several files: one key for the lot (a later identical read supersedes it)
        out["path"] = paths[0] if len(paths) == 1 else " ".join(paths)
        if len(paths) > 1:
            out["paths"] = paths
        offsets = [a.get("offset") for _, a in found]
        limits = [a.get("limit") for _, a in found]
        if any(o is not None for o in offsets) or any(limits):
            # only part of the file (a range, a head or tail, a pipe through a filter); a limit
            # of -1: a part of unknown length
            out["offset"] = offsets[0]
            out["limit"] = limits[0] or -1
    else:
        first_args = next(a for k, a in found if k == kind)
        if kind == "grep":
            out["pattern"] = first_args["pattern"]
        out["path"] = (first_args.get("paths") or ["."])[0]
    return kind, out
