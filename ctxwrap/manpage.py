"""Man pages built from the click command tree and config.Settings, and `ctxwrap help`.

`scripts/gen-man.py` writes `man/ctxwrap.1` and `man/ctxwrap-daemon.8` from these functions;
a test regenerates them and fails on any difference, so the pages cannot drift from the code.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections.abc import Iterator

import click

from ctxwrap import __version__

# Environment variables that are not settings (the PI_CTX_* ones come from config.Settings).
OTHER_ENVIRONMENT = {
    "CTXWRAP_PI": "The pi executable to run (a name looked up on PATH, or a path); default: "
    "`pi` on PATH.",
    "CTXWRAP_CLAUDE": "The Claude Code executable to run (a name looked up on PATH, or a path); "
    "default: `claude` on PATH.",
    "CTXWRAP_CODEX": "The Codex CLI executable to run (a name looked up on PATH, or a path); "
    "default: `codex` on PATH.",
    "ANTHROPIC_BASE_URL": "`ctxwrap claude`: the upstream its loopback proxy forwards to (the "
    "user's own value, else https://api.anthropic.com); Claude Code itself is pointed at the proxy.",
    "PI_CTX_RECALL": "`ctxwrap pi`: `tool` keeps the bridge's ctx_recall tool in every "
    "request; by default the model recalls with `ctxwrap recall` in pi's bash, and the tool "
    "rides along only where pi has no bash or no `ctxwrap` on its PATH, or in a resumed "
    "session whose history already names it.",
    "CTXWRAP_DEBUG": "1 shows tracebacks on errors, like --debug.",
    "CTXWRAP_NO_SYSTEMD": "1 makes the client auto-start the daemon even when the systemd "
    "user units are installed.",
    "CTXWRAP_WRAP_PI": "1, when set before `ctxwrap init` runs in the shell's rc file, makes "
    "plain `pi` run as `ctxwrap pi`.",
    "CTXWRAP_WRAP_CLAUDE": "1, when set before `ctxwrap init` runs in the shell's rc file, "
    "makes plain `claude` run as `ctxwrap claude` (`command claude` runs the plain one).",
    "XDG_RUNTIME_DIR": "The socket and pidfile live in $XDG_RUNTIME_DIR/ctxwrap (fallback: "
    "/tmp/ctxwrap-$UID-HASH, HASH naming the state directory, so that each HOME has its own "
    "daemon). An empty or relative value counts as unset, here and below.",
    "XDG_STATE_HOME": "State (database, raw outputs, logs) lives in $XDG_STATE_HOME/ctxwrap "
    "(default ~/.local/state/ctxwrap).",
    "XDG_CONFIG_HOME": "The config file is $XDG_CONFIG_HOME/ctxwrap/config.toml and the "
    "systemd units go to $XDG_CONFIG_HOME/systemd/user (default ~/.config).",
}

FILES = {
    "$XDG_CONFIG_HOME/ctxwrap/config.toml": "Settings, without the PI_CTX_ prefix and in lower "
    "case (`ctxwrap config init` writes a commented one). The daemon reloads it when it "
    "changes; a broken edit keeps the last good config in force.",
    "$XDG_RUNTIME_DIR/ctxwrap/daemon.sock": "The daemon's socket (directory 0700, socket 0600, "
    "peer uid checked).",
    "$XDG_RUNTIME_DIR/ctxwrap/daemon.pid": "The daemon's pidfile, locked while it runs.",
    "$XDG_STATE_HOME/ctxwrap/ctxwrap.db": "Sessions, decisions, facts and statistics (SQLite).",
    "$XDG_STATE_HOME/ctxwrap/claude/SESSION.jsonl": "`ctxwrap claude`: the frozen edit set of a "
    "Claude Code session (0600), replayed on every request and on `claude --continue`. No "
    "credentials.",
    "$XDG_STATE_HOME/ctxwrap/daemon.log": "The log of an auto-started daemon (under systemd: "
    "the journal).",
    "$XDG_STATE_HOME/ctxwrap/events.jsonl": "The event log (PI_CTX_LOG_FILE moves it).",
    "$XDG_STATE_HOME/ctxwrap/prompt-segment": "One line of savings that the shell function "
    "ctxwrap_prompt_segment prints: the savings of whichever live pi or Claude Code session "
    "ended a turn last.",
    "$XDG_CONFIG_HOME/systemd/user/ctxwrap.socket": "Written by `ctxwrap service install`; "
    "while it exists the client leaves starting the daemon to systemd.",
    "$XDG_CONFIG_HOME/systemd/user/ctxwrap.service": "Written by `ctxwrap service install`.",
}

EXIT_STATUS = [
    ("0", "Success."),
    ("1", "A general error, or `ctxwrap doctor` found a failing check."),
    (
        "3",
        "`ctxwrap status`, `daemon status`: the daemon is not ready; `service status`: the "
        "units are not installed or not active.",
    ),
    ("66", "A requested session, handle or record does not exist."),
    ("69", "The daemon could not be reached or started."),
    ("70", "An internal error (a bug; --debug shows the traceback)."),
    ("73", "`config init`: the config file exists (--force replaces it and keeps a .bak copy)."),
    (
        "74",
        "`daemon run`, `daemon start`: the state directory refuses writes (disk full, I/O error).",
    ),
    ("77", "The socket directory or socket is not private to this user."),
    ("78", "The configuration is invalid."),
    (
        "127",
        "pi, claude or codex was not found (CTXWRAP_PI, CTXWRAP_CLAUDE, CTXWRAP_CODEX or PATH).",
    ),
    ("130", "Interrupted."),
    (
        "any",
        "`ctxwrap pi`, `ctxwrap claude` and `ctxwrap codex` exit with the agent's own status (a "
        "signal N gives 128+N).",
    ),
]


# -- roff ----------------------------------------------------------------------------------------


def esc(text: str) -> str:
    """Escape plain text for roff: backslashes, hyphens, and `code` spans in bold; a long
    word (a glob, a path) gets break points after its , ; | / so a narrow terminal can fold it."""
    text = re.sub(r"\S{28,}", lambda m: _BREAK_AT.sub(r"\g<0>\0", m.group(0)), text)
    text = text.replace("\\", "\\e").replace("-", "\\-")
    text = text.replace("\0", "\\:")
    text = re.sub(r"`([^`]+)`", r"\\fB\1\\fR", text)
    return text.translate(_GLYPHS)


# Non-ASCII characters as groff glyph names, which every output device can draw (`\[->]` is
# "->" under the C locale, "→" under UTF-8); the ellipsis has no ASCII fallback in groff
# (`LC_ALL=C man` warned "can't find special character 'u2026'"), so it is three dots.
# tests/unit/test_manpage.py renders the pages under LC_ALL=C: a new character fails there.
_GLYPHS = str.maketrans(
    {
        "\u2026": "...",
        "\u2192": "\\[->]",
        "\u2212": "\\-",
        "\u00b7": "\\[pc]",
        "\u2248": "\\[~~]",
        "\u2014": "\\[em]",
        "\u2013": "\\[en]",
        "\u00d7": "\\[mu]",
        "\u2264": "\\[<=]",
        "\u2265": "\\[>=]",
        "\u21a9": "\\[lA]",  # the fold mark `show` prints: a left arrow, "<=" under LC_ALL=C
    }
)


_BREAK_AT = re.compile(r"[,;|/](?=\S)")


def _line(text: str) -> str:
    # a line starting with . or ' would be read as a request
    return "\\&" + text if text[:1] in {".", "'"} else text


def paragraphs(help_text: str) -> Iterator[str]:
    """Roff for click help text: blank lines split paragraphs, `\\b` keeps one verbatim."""
    for block in re.split(r"\n\s*\n", help_text.strip()):
        lines = block.splitlines()
        if lines and lines[0].strip() == "\b":
            yield (
                ".PP\n.nf\n.RS 2\n"
                + "\n".join(_line(esc(ln.rstrip())) for ln in lines[1:])
                + "\n.RE\n.fi"
            )
        else:
            yield ".PP\n" + _line(esc(" ".join(ln.strip() for ln in lines)))


def _opt_synopsis(param: click.Parameter) -> str:
    if isinstance(param, click.Option):
        names = ", ".join(f"\\fB{esc(o)}\\fR" for o in [*param.opts, *param.secondary_opts])
        if not param.is_flag and not param.count:
            metavar = (
                param.make_metavar(click.Context(click.Command("x")))
                if param.metavar is None
                else param.metavar
            )
            names += f" \\fI{esc(metavar)}\\fR"
        return names
    return f"\\fI{esc(param.human_readable_name.upper())}\\fR"


def _usage(path: list[str], cmd: click.Command) -> str:
    parts = [f"\\fB{esc(' '.join(path))}\\fR"]
    if any(isinstance(p, click.Option) for p in cmd.params) or cmd.add_help_option:
        parts.append("[\\fIOPTIONS\\fR]")
    for p in cmd.params:
        if isinstance(p, click.Argument):
            name = f"\\fI{esc(p.human_readable_name.upper())}\\fR"
            if p.nargs != 1:
                name += "..."
            parts.append(name if p.required else f"[{name}]")
    if isinstance(cmd, click.Group):
        parts.append("\\fICOMMAND\\fR")
    return " ".join(parts)


def walk(cmd: click.Command, path: list[str]) -> Iterator[tuple[list[str], click.Command]]:
    """Every visible command under `cmd`, depth first, groups before their children."""
    yield path, cmd
    if isinstance(cmd, click.Group):
        ctx = click.Context(cmd)
        # list/get_command, not .commands: the root group loads some commands lazily.
        for name in sorted(cmd.list_commands(ctx)):
            sub = cmd.get_command(ctx, name)
            if sub is not None and not sub.hidden:
                yield from walk(sub, [*path, name])


def _command_section(path: list[str], cmd: click.Command) -> list[str]:
    out = [f".SS {_usage(path, cmd)}"]
    out.extend(paragraphs(cmd.help or cmd.short_help or ""))
    for p in cmd.params:
        if isinstance(p, click.Option) and not p.hidden and p.help:
            out.append(f".TP\n{_opt_synopsis(p)}\n{_line(esc(p.help))}")
    return out


def _settings_environment() -> list[str]:
    from ctxwrap.config import ENV_PREFIX, Settings

    out = []
    for name, field in Settings.model_fields.items():
        default = field.default
        shown = (
            "unset"
            if default is None
            else ("1" if default is True else "0")
            if isinstance(default, bool)
            else str(default)
        )
        out.append(
            f".TP\n\\fB{esc(ENV_PREFIX + name.upper())}\\fR (default: {esc(shown)})\n"
            f"{_line(esc(field.description or ''))}"
        )
    return out


def _header(title: str, section: int, manual: str, name: str, what: str) -> list[str]:
    return [
        '.\\" Generated by scripts/gen-man.py from the click commands and config.Settings.',
        '.\\" Do not edit: change the code and run `python scripts/gen-man.py`.',
        f'.TH {title} {section} "" "ctxwrap {__version__}" "{manual}"',
        # ragged right, no hyphenation: a long glob or path cannot be spread or split, so
        # narrow terminals get no "cannot adjust line" warnings and numbers stay whole
        ".ad l",
        ".nh",
        ".SH NAME",
        f"{name} \\- {esc(what)}",
    ]


def render_ctxwrap_1(root: click.Group) -> str:
    # the command tree comes from the caller (the running CLI, scripts/gen-man.py): the CLI
    # loads this module lazily, so importing it back here would be a cycle
    out = _header(
        "CTXWRAP", 1, "User Commands", "ctxwrap", "keep a coding agent's context window small"
    )
    out += [
        ".SH SYNOPSIS",
        _usage(["ctxwrap"], root),
        ".br",
        "\\fBctxwrap pi\\fR [\\fIPI-ARGS\\fR...]",
        ".br",
        "\\fBctxwrap claude\\fR [\\fICLAUDE-ARGS\\fR...]",
        ".br",
        "\\fBctxwrap codex\\fR [\\fICODEX-ARGS\\fR...]",
    ]
    out += [".SH DESCRIPTION", *paragraphs(root.help or "")]
    out += paragraphs(
        "ctxwrap runs the pi coding agent under a PTY with a bridge extension and keeps its "
        "context small without breaking the prompt cache: large bash output is digested, "
        "read/grep/find/ls results the model no longer needs are pruned from the tail, the skills "
        "catalog loads lazily, and large write bodies become one-line facts. A per-user daemon "
        "(see ctxwrap-daemon(8)) holds the state and the statistics; pi behaves as plain pi "
        "whenever the daemon is absent."
    )
    out += paragraphs(
        "`ctxwrap claude` does the same for Claude Code through its hooks (a per-launch "
        "--settings layer; ~/.claude/settings.json is never edited) and a loopback Anthropic "
        "Messages proxy that ANTHROPIC_BASE_URL points at: large Bash output becomes a digest "
        "with a `ctxwrap recall HANDLE PATTERN` hint, Read/Grep/Glob, web and MCP results "
        "judged not needed become one-line tombstones, and large Write bodies a stub with a "
        "one-line fact. "
        "The model runs that recall in Bash, so Claude Code asks before it unless a rule such "
        "as Bash(ctxwrap recall:*) in permissions.allow allows it (`claude -p` refuses it); "
        "`ctxwrap doctor` says which. "
        "Credentials pass through the proxy and are never stored."
    )
    out += paragraphs(
        "`ctxwrap codex` does the same for Codex CLI through a loopback Responses proxy: the "
        "active provider's base_url is redirected for that launch only, by a -c override "
        "(~/.codex/config.toml is never written), and Codex runs with --no-daemon, as any -c "
        "override makes it. `ctxwrap codex resume ID` resumes a thread through ctxwrap."
    )
    out += _figures_section()
    out += [".SH OPTIONS"]
    for p in root.params:
        if isinstance(p, click.Option) and p.help:
            out.append(f".TP\n{_opt_synopsis(p)}\n{_line(esc(p.help))}")
    out.append(".TP\n\\fB\\-h\\fR, \\fB\\-\\-help\\fR\nShow help for ctxwrap or any command.")
    out.append(".SH COMMANDS")
    for path, cmd in walk(root, ["ctxwrap"]):
        if cmd is not root:
            out += _command_section(path, cmd)
    out += [
        ".SH ENVIRONMENT",
        *paragraphs(
            "Every setting can be given as an environment variable PI_CTX_<NAME>, which overrides "
            "the config file. Booleans are 1/0 (or true/false). The daemon reads its own "
            "environment: one started by systemd does not see a shell's exports, so put lasting "
            "settings in the config file."
        ),
    ]
    out += _settings_environment()
    for var, text in OTHER_ENVIRONMENT.items():
        out.append(f".TP\n\\fB{esc(var)}\\fR\n{_line(esc(text))}")
    out.append(".SH FILES")
    for file, text in FILES.items():
        out.append(f".TP\n\\fI{esc(file)}\\fR\n{_line(esc(text))}")
    out.append(".SH EXIT STATUS")
    for code, text in EXIT_STATUS:
        out.append(f".TP\n\\fB{code}\\fR\n{_line(esc(text))}")
    out += [".SH SEE ALSO", "\\fBctxwrap\\-daemon\\fR(8), \\fBsystemd.socket\\fR(5), \\fBpi\\fR(1)"]
    return "\n".join(out) + "\n"


def render_ctxwrap_daemon_8(root: click.Group) -> str:
    # the command tree comes from the caller (the running CLI, scripts/gen-man.py): the CLI
    # loads this module lazily, so importing it back here would be a cycle
    group = root.commands["daemon"]
    out = _header(
        "CTXWRAP-DAEMON",
        8,
        "System Administration",
        "ctxwrap-daemon",
        "the per-user ctxwrap daemon",
    )
    out += [".SH SYNOPSIS", _usage(["ctxwrap", "daemon", "run"], root_command(group, "run"))]
    out += [
        ".SH DESCRIPTION",
        *paragraphs(
            "One daemon per user owns ctxwrap's state: sessions, frozen context edits, facts, the "
            "raw-output store and the statistics. Every `ctxwrap pi` and every CLI command talks to "
            "it over HTTP on a Unix socket private to the user. It starts in one of two ways:"
        ),
    ]
    out += paragraphs(
        "\b\n"
        "auto-start  the first `ctxwrap pi` starts it in the background;\n"
        "            it logs to $XDG_STATE_HOME/ctxwrap/daemon.log\n"
        "systemd     after `ctxwrap service install`, ctxwrap.socket listens\n"
        "            and starts ctxwrap.service on first use"
    )
    out += paragraphs(
        "Under systemd it takes the listening socket passed as file descriptor 3 "
        "(LISTEN_FDS/LISTEN_PID) and reports READY=1 on NOTIFY_SOCKET once it serves (Type=notify). "
        "With PI_CTX_IDLE_EXIT_S set it exits after that many seconds without a live session; "
        "socket activation brings it back on the next connection."
    )
    out += [".SH COMMANDS"]
    for path, cmd in walk(group, ["ctxwrap", "daemon"]):
        if cmd is not group:
            out += _command_section(path, cmd)
    out.append(".SH SIGNALS")
    out.append(
        ".TP\n\\fBSIGTERM\\fR, \\fBSIGINT\\fR\nFinish open requests, close the database and exit 0."
    )
    out.append(".SH ENVIRONMENT")
    out.append(
        ".TP\n\\fBLISTEN_FDS\\fR, \\fBLISTEN_PID\\fR\nSocket activation: use file descriptor 3 instead of binding the socket."
    )
    out.append(".TP\n\\fBNOTIFY_SOCKET\\fR\nWhere READY=1 and STOPPING=1 are sent.")
    out.append(".TP\n\\fBPI_CTX_*\\fR\nSettings; see \\fBctxwrap\\fR(1).")
    out.append(".SH FILES")
    for file, text in FILES.items():
        if "daemon" in file or ".db" in file or "systemd" in file:
            out.append(f".TP\n\\fI{esc(file)}\\fR\n{_line(esc(text))}")
    out += [".SH SEE ALSO", "\\fBctxwrap\\fR(1), \\fBsystemd.socket\\fR(5), \\fBsd_notify\\fR(3)"]
    return "\n".join(out) + "\n"


def _figures_section() -> list[str]:
    """What `ctxwrap stats`, `replay` and `report` call each mechanism: the words of
    ctxwrap.vocabulary (user words first, the mechanism's name second), as the CLI shows them."""
    from ctxwrap.vocabulary import MECHANISM_NAMES, MECHANISM_WORDS

    out = [
        ".SH WHAT THE FIGURES SAY",
        *paragraphs(
            "Every view of a session (`ctxwrap stats`, /ctx-stats and the status line in the "
            "agent, the shell prompt segment, `ctxwrap report`) leads with one headline: the "
            "cost with ctxwrap against the plain agent's, cache-priced and net of ctxwrap's own "
            "aux-model calls, e.g. `cost −60% · $0.12 saved`. Token sizes marked ≈ are "
            "estimates (chars/4), shown beside what the provider counted. The rows name what "
            "ctxwrap did, in these words:"
        ),
    ]
    for mech, (words, _short) in MECHANISM_WORDS.items():
        name = esc(f"{MECHANISM_NAMES[mech]} (`{mech}` in --json)")
        out.append(".TP\n\\fB" + esc(words) + "\\fR\n" + name)
    return [_line(x) if not x.startswith(".") else x for x in out]


def root_command(group: click.Command, name: str) -> click.Command:
    assert isinstance(group, click.Group)
    found = group.get_command(click.Context(group), name)
    assert found is not None, name
    return found


PAGES = {"ctxwrap.1": render_ctxwrap_1, "ctxwrap-daemon.8": render_ctxwrap_daemon_8}


# -- `ctxwrap help` ------------------------------------------------------------------------------


def show_page(roff: str, raw: bool) -> None:
    """Through `man -l -` when man exists (it pages on a terminal), else the roff source."""
    man = shutil.which("man")
    if raw or man is None:
        click.echo(roff, nl=False)
        return
    subprocess.run([man, "-l", "-"], input=roff.encode(), check=False)


@click.command("help")
@click.option("--man", "as_man", is_flag=True, help="Show the man page instead of --help text.")
@click.option("--roff", is_flag=True, help="With --man: print the page's roff source.")
@click.argument("command", nargs=-1)
@click.pass_context
def help_cmd(ctx: click.Context, as_man: bool, roff: bool, command: tuple[str, ...]) -> None:
    """Help for ctxwrap or COMMAND; --man shows ctxwrap(1) (ctxwrap-daemon(8) for `daemon`)."""
    root = ctx.find_root().command
    if as_man:
        page = "ctxwrap-daemon.8" if command[:1] == ("daemon",) else "ctxwrap.1"
        assert isinstance(root, click.Group)
        show_page(PAGES[page](root), roff)
        return
    cmd: click.Command = root
    sub_ctx = ctx.find_root()
    for name in command:
        found = cmd.get_command(sub_ctx, name) if isinstance(cmd, click.Group) else None
        if found is None:
            raise click.UsageError(f"no such command: {' '.join(command)}", ctx=ctx)
        cmd = found
        sub_ctx = click.Context(cmd, info_name=name, parent=sub_ctx)
    click.echo(cmd.get_help(sub_ctx))


def main_gen(out_dir: str, root: click.Group) -> None:
    """Write every page of `root`'s tree into `out_dir` (used by scripts/gen-man.py)."""
    import pathlib

    for name, render in PAGES.items():
        pathlib.Path(out_dir, name).write_text(render(root), encoding="utf-8")
        print(f"wrote {out_dir}/{name}", file=sys.stderr)
