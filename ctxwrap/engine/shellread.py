"""Whether a shell command only reads: one rule for the daemon, the adapters and replay.

Agents read files through the shell (Codex: `cat`, `sed -n`, `rg`, `ls`; Claude Code and pi:
a `cat` now and then; Codex on Windows: `Get-Content`). Such an output is a file's content or
a search's hits, which the agent copies from next: a read for masking, never a log to digest
(on the corpus, 14 of 40 digests of a Windows session's `Get-Content` outputs were copied
from again). Nothing here runs or changes a command (invariant 9). Pure functions.
"""

from __future__ import annotations

import functools
import re
import shlex

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
    # PowerShell (Codex on Windows: `shell_command`), matched without case
    "get-content": "read",
    "gc": "read",
    "type": "read",
    "select-string": "grep",
    "sls": "grep",
    "get-childitem": "find",
    "gci": "find",
    "dir": "find",
}
# `ctxwrap recall HANDLE PATTERN` searches a stored output, `ctxwrap show HANDLE` prints it
CTXWRAP_READS = {"recall": "grep", "show": "read"}
_PUNCTUATION = frozenset("();<>|&")
# The redirections a read may carry (after the fd word `2`): none writes a file
_QUIET = {">": "/dev/null", ">&": "1"}
# Commands a list may hold between its reads without changing what it is (`[ -f x ] && cat x`:
# a test only decides whether the read runs)
NEUTRAL = frozenset({"cd", "pwd", "echo", "printf", "true", ":", "[", "test"})
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# the compound a keyword continues or closes
_CONTINUES = {"do": "for", "then": "if", "else": "if", "elif": "if"}
_CLOSES = {"done": "for", "fi": "if"}


def command_words(words: list[str], open_: list[str]) -> list[str] | None:
    """The command of one list element once the `for` and `if` keywords around it are taken
    off (`do sed -n '1,80p' "$f"` → the sed; `done` → nothing), tracking the compounds open in
    `open_`; None for shell syntax not read here (`while`, `case`, a stray keyword). Agents
    read several files in one loop (`for f in a b; do sed -n '1,80p' "$f"; done`): what the
    loop runs is what it is."""
    while words:
        w = words[0]
        if w in _CONTINUES:
            if not open_ or open_[-1] != _CONTINUES[w]:
                return None
            words = words[1:]
        elif w == "if":
            open_.append("if")
            words = words[1:]
        elif w == "for":
            # `for NAME in WORDS…`: iterates, runs nothing
            if len(words) < 2 or not _NAME.match(words[1]) or words[2:3] not in ([], ["in"]):
                return None
            open_.append("for")
            return []
        elif w in _CLOSES:
            if len(words) != 1 or not open_ or open_[-1] != _CLOSES[w]:
                return None
            open_.pop()
            return []
        else:
            return words
    return []


def shell_words(command: str) -> list[str] | None:
    try:
        return shlex.split(command)
    except ValueError:
        return None


# Programs a read may be piped through without changing what it is: they only select, count
# or lay out what they are given (`sed` only with -n and without -i: checked where it is used).
# The one list: shellcmd.classify takes its filters from here.
FILTERS = frozenset(
    {"wc", "sort", "uniq", "cut", "head", "tail", "grep", "rg", "nl", "tr", "jq", "cat", "column", "sed"}
)  # fmt: skip

# curl's options that write a file (a short option may sit in a group: `-sSLo out`)
_CURL_WRITES = frozenset(
    {
        "--output", "--remote-name", "--remote-name-all", "--output-dir", "--dump-header",
        "--cookie-jar", "--trace", "--trace-ascii", "--stderr", "--libcurl", "--etag-save",
        "--hsts", "--alt-svc", "--create-dirs", "--config", "--upload-file",
    }
)  # fmt: skip
_CURL_SHORT_WRITES = frozenset("oODcKT")
# wget writes a file unless told to print: `wget -qO- URL`, `wget -O - URL`
_WGET_PRINTS = frozenset({"-qO-", "-O-", "--output-document=-", "-qO", "-O"})
_WGET_QUIET = frozenset({"-q", "--quiet", "-nv", "--no-verbose"})


# git subcommands that only print (what changed, the history, a commit's diff), and for those
# that also change things the only forms that print
_GIT_PRINTS = frozenset({"status", "log", "diff", "show", "blame", "rev-parse", "shortlog"})
_GIT_LISTS = {
    "branch": frozenset(
        {"-a", "-r", "-v", "-vv", "--all", "--remotes", "--show-current", "--list"}
    ),
    "remote": frozenset({"-v", "--verbose"}),
    "config": frozenset({"--get", "--get-all", "--list", "-l", "--get-regexp"}),
}


def _git_prints(words: list[str]) -> bool:
    """`git status`, `git log`, `git show HEAD -- f`, `git -C d diff`, `git remote -v`: a git
    command that only prints what the repository holds (never `--output`, never `-c`)."""
    args = words[1:]
    while args[:1] == ["--no-pager"] or (args[:1] == ["-C"] and len(args) > 1):
        args = args[1:] if args[0] == "--no-pager" else args[2:]
    if not args or any(a.startswith("--output") for a in args):
        return False
    sub, rest = args[0], args[1:]
    if sub in _GIT_PRINTS:
        return True
    allowed = _GIT_LISTS.get(sub)
    if allowed is None:
        return False
    if sub == "config":  # `--get NAME`: a name follows; setting one needs no option
        return bool(rest) and rest[0] in allowed
    return all(a in allowed for a in rest)


# A stage after a pipe that prints the files named on its input: `find … | xargs cat`
_XARGS_PRINTS = frozenset({"cat", "head", "tail", "wc", "grep", "rg", "ls", "nl"})


def _content_stage(words: list[str], *, first: bool) -> bool:
    """What `prints_content` takes beside reads: a download, a git command that prints, a
    variable set for the commands after it (`cfg=~/.x.json; sed -n '1,40p' "$cfg"`), a pipe
    into `xargs cat`."""
    prog = words[0].rsplit("/", 1)[-1]
    if first:
        if all(_ASSIGNMENT.match(w) for w in words):
            return True
        return _fetch_kind(words) is not None or (prog == "git" and _git_prints(words))
    return prog == "xargs" and len(words) > 1 and words[1] in _XARGS_PRINTS


_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def _fetch_kind(words: list[str]) -> str | None:
    """ "fetch" for a download printed to the output (`curl -s URL`, `wget -qO- URL`), else
    None: what a page or an API answered is content the agent reads, like a web tool's."""
    prog, args = words[0].rsplit("/", 1)[-1], words[1:]
    if prog == "curl":
        for a in args:
            name = a.split("=", 1)[0]
            if name in _CURL_WRITES or (
                a.startswith("-") and not a.startswith("--") and set(a[1:]) & _CURL_SHORT_WRITES
            ):
                return None
        return "fetch"
    if prog == "wget":
        printed = False
        for i, a in enumerate(args):
            if a in _WGET_PRINTS:
                printed = a.endswith("-") or args[i + 1 : i + 2] == ["-"]
                if not printed:
                    return None
            elif a.startswith("-") and a != "-" and a not in _WGET_QUIET:
                return None
        return "fetch" if printed else None
    return None


# What `find -exec` may run for the find to stay a read: the file's content (`cat {}`), a
# search in it, or a label (`echo "=== {} ==="`). pi printed skill files this way; its digest
# hid the lines it then copied.
_EXEC_KIND = {
    "cat": "read",
    "head": "read",
    "tail": "read",
    "nl": "read",
    "bat": "read",
    "sed": "read",
    "grep": "grep",
    "egrep": "grep",
    "rg": "grep",
    "echo": "find",
    "printf": "find",
    "wc": "find",
    "ls": "find",
    "basename": "find",
    "dirname": "find",
}
_FIND_WRITES = frozenset({"-delete", "-ok", "-okdir", "-fprint", "-fprint0", "-fprintf", "-fls"})
# A find's escaped terminator (`\;`, `';'`, `";"`) is one word, not the shell's `;`: quoted
# before lexing so that it survives as the word `\;`.
_FIND_END_RE = re.compile(r"""(?<!\S)(?:\\;|';'|";")(?=\s|$)""")
_FIND_ENDS = frozenset({"\\;", "+"})


def _find_kind(words: list[str]) -> str | None:
    """A find whose every `-exec`/`-execdir` only prints (`_EXEC_KIND`): "read" when one
    prints file content, "grep" when one searches it, else "find"; None when it may change
    anything."""
    kinds: set[str] = set()
    i = 1
    while i < len(words):
        w = words[i]
        if w in _FIND_WRITES:
            return None
        if w in ("-exec", "-execdir"):
            end = i + 1
            while end < len(words) and words[end] not in _FIND_ENDS:
                end += 1
            if end == len(words):
                return None  # no terminator: not a find the shell would run as written
            cmd = words[i + 1 : end]
            if not cmd:
                return None
            prog = cmd[0].rsplit("/", 1)[-1]
            kind = _EXEC_KIND.get(prog)
            if kind is None or (
                prog == "sed" and ("-n" not in cmd or any(a.startswith("-i") for a in cmd))
            ):
                return None
            kinds.add(kind)
            i = end
        i += 1
    return "read" if "read" in kinds else "grep" if "grep" in kinds else "find"


def _stage_kind(words: list[str], *, first: bool) -> str | None:
    if not words:
        return None
    prog = words[0].rsplit("/", 1)[-1]
    if prog == "sed" and ("-n" not in words or any(w.startswith("-i") for w in words)):
        return None
    if prog == "find":
        return _find_kind(words) if first else None
    if first and prog == "ctxwrap":
        # what ctxwrap itself gave back on the model's request: digesting it would hide again
        # the very lines asked for
        return CTXWRAP_READS.get(words[1]) if len(words) > 1 else None
    if first:
        return READ_COMMANDS.get(prog) or READ_COMMANDS.get(prog.lower())
    return "filter" if prog in FILTERS else None


# Asked of every shell call of a conversation at each request (the proxies describe the whole
# history): a command up to this long is parsed once (at most ~4 MB kept)
CACHED_COMMAND_CHARS = 1000


def read_kind(command: str) -> str | None:
    """ "read" / "grep" / "find" for a read-like command, else None (`_read_kind`)."""
    return _cached_kind(command) if len(command) <= CACHED_COMMAND_CHARS else _read_kind(command)


def prints_content(command: str) -> bool:
    """Whether a command's output is content the agent reads rather than a log: a read-like
    command, or a download printed to the output (`curl -s URL | jq .`, `wget -qO- URL`),
    alone or in a list of such. The bash digest keeps a log's errors and summary lines; of
    a page or an API's answer it kept a tenth, and the agent wrote from what it had: a
    research session outside the corpus searched an API thirteen times through `curl`, and
    a Codex rollout fetched the API docs it then coded against (41k chars to 1.7k)."""
    if len(command) <= CACHED_COMMAND_CHARS:
        return _cached_kind(command, fetch=True) is not None
    return _read_kind(command, fetch=True) is not None


def _read_kind(command: str, fetch: bool = False) -> str | None:
    """ "read" / "grep" / "find" for a read-like command, else None.

    A list (`&&`, `||`, `;`, a new line) of pipelines, each of which reads: its first stage
    reads and its other stages only filter (``nl -ba f | sed -n '1,200p'``, ``rg --files |
    rg x``); ``cd``, ``echo`` and the like between them are neutral. "read" when any part
    prints file content (``sed -n '70,150p' a.ts && sed -n '1,220p' b.ts``, ``sed -n … f &&
    rg -n x src``: the agent copies from it next). A ``for`` loop or an ``if`` is what it
    runs (``command_words``); a test (``[ -f x ]``) is neutral. No redirection but
    ``2>/dev/null`` and ``2>&1``, no subshells, background jobs or substitutions: anything
    else may also write or run something. ``bash -lc X`` is unwrapped once. ``sed`` counts
    only with ``-n`` (printing), never with ``-i``.
    """
    words = shell_words(command)
    if not words:
        return None
    if (
        len(words) == 3
        and words[0] in ("bash", "/bin/bash", "sh", "/bin/sh", "zsh")
        and words[1] in ("-lc", "-c")
    ):
        return _read_kind(words[2], fetch)
    lists = _lists(command)
    if lists is None:
        return None
    kinds: list[str] = []
    open_: list[str] = []
    for stages in lists:
        first = command_words(stages[0], open_)
        if first is None or any(
            _stage_kind(st, first=False) is None and not (fetch and _content_stage(st, first=False))
            for st in stages[1:]
        ):
            return None
        if not first or (len(stages) == 1 and first[0].rsplit("/", 1)[-1] in NEUTRAL):
            continue  # a keyword alone (`done | sort` filters the loop's reads), `cd`, `echo`
        kind = _stage_kind(first, first=True)
        if kind is None and fetch and _content_stage(first, first=True):
            kind = "content"
        if kind is None:
            return None
        kinds.append(kind)
    if not kinds or open_:
        return None
    return "read" if "read" in kinds else kinds[0]


_cached_kind = functools.lru_cache(maxsize=4096)(_read_kind)


def _lists(command: str) -> list[list[list[str]]] | None:
    """The pipelines (each a list of stages' words) of a command list, or None when the
    command has any other operator."""
    if "`" in command or "$(" in command:
        return None
    if "-exec" in command:
        command = _FIND_END_RE.sub(lambda _: "'\\;'", command)
    command = command.replace("\\\n", " ")  # a line continued, as the shell joins it
    lexer = shlex.shlex(command, posix=True, punctuation_chars="();<>|&\n")
    lexer.whitespace = " \t\r"  # a new line separates commands, as `;` does
    lexer.whitespace_split = True
    try:
        tokens = list(lexer)
    except ValueError:
        return None
    lists: list[list[list[str]]] = [[[]]]
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok and set(tok) <= _PUNCTUATION | {"\n"}:
            op = tok.replace("\n", "")  # `&&` and `|` may end a line
            stage = lists[-1][-1]
            if op in ("", ";", "&&", "||"):
                lists.append([[]])
            elif op == "|":
                lists[-1].append([])
            elif stage[-1:] == ["2"] and tokens[i + 1 : i + 2] == [_QUIET.get(op)]:
                stage.pop()  # `2>/dev/null`, `2>&1`: its errors dropped or shown with it
                i += 1
            else:
                return None
        else:
            lists[-1][-1].append(tok)
        i += 1
    out = [stages for stages in lists if stages != [[]]]  # blank lines, a trailing `;`
    return out if out and all(all(stages) for stages in out) else None
