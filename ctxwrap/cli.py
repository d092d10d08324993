"""The `ctxwrap` command line: parse arguments, call into the package, render. Nothing else.

`main()` is the only place that exits; every failure meant for a person is a CtxwrapError
printed as `ctxwrap: error: …` plus a `hint:` line, with a traceback only under --debug.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any, ClassVar, NoReturn

import click

from ctxwrap import __version__, paths
from ctxwrap.errors import CtxwrapError, ExitCode, NotFoundError, SocketSecurityError

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


def _echo_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=True, default=str))


class FullHelpGroup(click.Group):
    """`--help` lists each command with its whole first sentence, folded to the terminal's
    width, instead of click's cut-off "Run Claude Code exactly as `claude ARGS…`..."."""

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = []
        for name in self.list_commands(ctx):
            cmd = self.get_command(ctx, name)
            if cmd is None or cmd.hidden:
                continue
            rows.append((name, cmd.get_short_help_str(limit=1_000)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


class LazyGroup(FullHelpGroup):
    """Commands that live in their own modules are imported only when run or listed.

    Keeps start-up of `ctxwrap pi` (and of shell completion) free of modules it never uses.
    """

    lazy: ClassVar[dict[str, str]] = {
        "stats": "ctxwrap.stats.command:stats_command",
        "demo": "ctxwrap.demo:demo_cmd",
        "help": "ctxwrap.manpage:help_cmd",
        "init": "ctxwrap.shell:init_cmd",
        "service": "ctxwrap.service:service_group",
        "replay": "ctxwrap.replay.command:replay_cmd",
        "report": "ctxwrap.report.command:report_cmd",
    }

    group_class = FullHelpGroup

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.lazy and cmd_name not in self.commands:
            import importlib

            module, attr = self.lazy[cmd_name].split(":")
            cmd = getattr(importlib.import_module(module), attr)
            if type(cmd) is click.Group:  # a plain group of its own module: whole help lines too
                cmd.__class__ = FullHelpGroup
            self.add_command(cmd, cmd_name)
        return super().get_command(ctx, cmd_name)


@click.group(cls=LazyGroup, context_settings=CONTEXT)
@click.version_option(__version__, "-V", "--version", prog_name="ctxwrap")
@click.option("--debug", is_flag=True, envvar="CTXWRAP_DEBUG", help="Show tracebacks on errors.")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """Keep a coding agent's context window small: run `ctxwrap pi`, `ctxwrap claude` or
    `ctxwrap codex` where you ran `pi`, `claude` or `codex`."""
    ctx.obj = {"debug": debug}


# Here, not in doctor.py: `ctxwrap pi` imports doctor's checks after pi failed (an old Node),
# and that path must not load click.
@cli.command("doctor")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def doctor_cmd(as_json: bool) -> None:
    """Check pi and its Node, the daemon, the socket directory, the config, the aux backend,
    Claude Code and Codex.

    Prints what to fix, in lines that fit the terminal (COLUMNS); exits 1 when a check fails
    (warnings do not fail).
    """
    import shutil
    from dataclasses import asdict

    from ctxwrap.doctor import DoctorFailed, render_text, run_checks
    from ctxwrap.vocabulary import plural

    checks = run_checks()
    width = shutil.get_terminal_size((80, 24)).columns
    if as_json:
        click.echo(json.dumps({"checks": [asdict(c) for c in checks]}, indent=2))
    else:
        for line in render_text(checks, width):
            click.echo(line)
    failed = [c.name for c in checks if c.level == "fail"]
    if failed:
        what = f"{plural(len(failed), 'check')} failed: {', '.join(failed)}"
        if len("ctxwrap: error: ") + len(what) > width:  # the names are on the FAIL lines
            what = f"{plural(len(failed), 'check')} failed"
        raise DoctorFailed(what, hint="fix the FAIL lines, then run `ctxwrap doctor` again")


# -- pi -----------------------------------------------------------------------------------------


@cli.command(
    "pi",
    context_settings={
        **CONTEXT,
        "ignore_unknown_options": True,
        "allow_interspersed_args": False,
        "help_option_names": [],
    },
    add_help_option=False,
)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def pi_cmd(args: tuple[str, ...]) -> None:
    """Run pi exactly as `pi ARGS…` would, with ctxwrap's bridge loaded.

    Every argument goes to pi unchanged (so `ctxwrap pi --help` shows pi's help); the exit
    status is pi's. `--ctxwrap-off` or PI_CTX_OFF=1 runs plain pi. On exit, one line on
    stderr: what the session saved and how to resume it through ctxwrap (`--ctxwrap-quiet`:
    none).
    """
    from ctxwrap.agents.pi.launcher import run_pi

    raise ExitCode(run_pi(list(args)))


@cli.command(
    "claude",
    context_settings={
        **CONTEXT,
        "ignore_unknown_options": True,
        "allow_interspersed_args": False,
        "help_option_names": [],
    },
    add_help_option=False,
)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def claude_cmd(args: tuple[str, ...]) -> None:
    """Run Claude Code exactly as `claude ARGS…` would, through ctxwrap's hook and proxy.

    Every argument goes to claude unchanged; the exit status is claude's. `--ctxwrap-off` or
    PI_CTX_OFF=1 runs plain Claude Code. On exit, one line on stderr: what the session saved
    and how to resume it through ctxwrap (`--ctxwrap-quiet`: none); Claude Code's status line
    shows the savings so far unless you have a statusLine of your own.
    """
    from ctxwrap.agents.claude.launcher import run_claude

    raise ExitCode(run_claude(list(args)))


# -- `ctxwrap codex` (agents/codex/): the same launcher contract as `pi` and `claude` -------------


@cli.command(
    "codex",
    context_settings={
        **CONTEXT,
        "ignore_unknown_options": True,
        "allow_interspersed_args": False,
        "help_option_names": [],
    },
    add_help_option=False,
)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def codex_cmd(args: tuple[str, ...]) -> None:
    """Run Codex CLI exactly as `codex ARGS…` would, through ctxwrap's loopback proxy.

    Every argument goes to codex unchanged; the exit status is codex's. `--ctxwrap-off` or
    PI_CTX_OFF=1 runs plain Codex.
    """
    from ctxwrap.agents.codex.launcher import run_codex

    raise ExitCode(run_codex(list(args)))


@cli.group("hook", context_settings=CONTEXT)
def hook_group() -> None:
    """Agent hooks (run by the agent, not by people)."""


@hook_group.command("claude")
def hook_claude() -> None:
    """Claude Code's PostToolUse hook: event JSON on stdin, its answer on stdout; never fails."""
    from ctxwrap.agents.claude.hook import main as hook_main

    raise ExitCode(hook_main())


@cli.command("recall", short_help="Lines of a summarised output matching PATTERN.")
@click.argument("handle")
@click.argument("pattern", required=False)
@click.option("--lines", "line_range", help="Line range A-B (1-based, inclusive).")
@click.option(
    "-C",
    "--context",
    "context_lines",
    type=click.IntRange(0, 20),
    default=0,
    help="Lines of context around each match.",
)
def recall(handle: str, pattern: str | None, line_range: str | None, context_lines: int) -> None:
    """Lines of a summarised output matching PATTERN (a regex), bounded like ctx_recall.

    Asked of the daemon where it runs, which counts the recall (the hidden result was needed
    again); else read from the raw-output store directly, like `ctxwrap show`: no daemon
    needed.
    """
    from ctxwrap.state.rawstore import InvalidPattern, compile_pattern, scan

    start = end = None
    if line_range:
        a, _, b = line_range.partition("-")
        try:
            start = int(a) if a else None
            end = int(b) if b else None
        except ValueError as exc:
            raise click.BadParameter("use A-B, e.g. 10-40", param_hint="--lines") from exc
    try:
        regex = compile_pattern(pattern) if pattern else None
    except InvalidPattern as exc:
        raise click.BadParameter(str(exc), param_hint="PATTERN") from None
    asked = {"handle": handle, "pattern": pattern, "start_line": start, "end_line": end}
    res = _recall_from_daemon({**asked, "context_lines": context_lines})
    if res is None:
        res = scan(
            _raw_output_path(handle),
            regex,
            start_line=start,
            end_line=end,
            context_lines=context_lines,
            max_chars=_recall_max_tokens() * 4,
        )
    click.echo(res.text)
    note = f"[{res.matched_lines:,} of {res.total_lines:,} lines matched"
    click.echo(note + (", output cut at the recall cap]" if res.truncated else "]"))


# The daemon's answer to a recall is awaited this long at most; then the store is read here.
RECALL_DAEMON_TIMEOUT_S = 2.0


def _recall_from_daemon(asked: dict[str, Any]) -> Any:
    """The daemon's `/v1/recall` answer (the same scan, and it records that the hidden result
    was needed again), or None: no daemon, an unknown handle, a refusal, a slow answer — the
    caller reads the store itself, as it always could."""
    from types import SimpleNamespace

    from ctxwrap.client import post_json

    try:
        status, answer = post_json("/v1/recall", asked, timeout=RECALL_DAEMON_TIMEOUT_S)
    except Exception:  # the store is there without it
        return None
    if status != 200 or not isinstance(answer, dict):
        return None
    try:
        return SimpleNamespace(
            text=str(answer["text"]),
            matched_lines=int(answer["matched_lines"]),
            total_lines=int(answer["total_lines"]),
            truncated=bool(answer["truncated"]),
        )
    except (KeyError, TypeError, ValueError):
        return None


def _recall_max_tokens() -> int:
    """The recall cap as configured (the daemon's `recall_max_tokens`); the default when the
    config cannot be read (`ctxwrap config show` reports why)."""
    from ctxwrap.config import Settings, load_config

    try:
        return int(load_config().settings.recall_max_tokens)
    except Exception:
        return int(Settings().recall_max_tokens)


def _raw_output_path(handle: str) -> Path:
    conn = _readonly_db()
    try:
        row = (
            conn.execute("SELECT path FROM raw_outputs WHERE handle=?", (handle,)).fetchone()
            if conn
            else None
        )
    finally:
        if conn is not None:
            conn.close()
    if row is None or not Path(row[0]).exists():
        raise NotFoundError(
            f"no stored output with handle {handle!r}",
            hint="handles look like r1a2b3c4d; old ones expire with the raw store",
        )
    return Path(row[0])


# -- daemon -------------------------------------------------------------------------------------


@cli.group(context_settings=CONTEXT)
def daemon() -> None:
    """Run, start, stop or inspect the per-user daemon."""


@daemon.command("run")
@click.option("--log-file", type=click.Path(path_type=Path), help="Log here instead of stderr.")
def daemon_run(log_file: Path | None) -> None:
    """Run the daemon in the foreground until SIGTERM or Ctrl+C."""
    from ctxwrap.daemon.lifecycle import run_daemon

    raise ExitCode(run_daemon(log_file=log_file))


@daemon.command("start")
def daemon_start() -> None:
    """Start the daemon in the background (no-op if it is already up)."""
    from ctxwrap.client import ensure_running

    h = ensure_running(started_by="ctxwrap daemon start")
    click.echo(f"ctxwrap daemon {h.version} ready (pid {h.pid}) on {h.socket}")


@daemon.command("stop")
def daemon_stop() -> None:
    """Stop the daemon."""
    from ctxwrap.client import stop_daemon

    click.echo("stopped" if stop_daemon() else "not running")


@daemon.command("restart")
def daemon_restart() -> None:
    """Stop the daemon and start a fresh one."""
    from ctxwrap.client import ensure_running, stop_daemon

    stop_daemon()
    h = ensure_running(started_by="ctxwrap daemon restart")
    click.echo(f"ctxwrap daemon {h.version} ready (pid {h.pid}) on {h.socket}")


def _status(as_json: bool, *, on_demand: bool = False) -> None:
    """`on_demand` (`ctxwrap status`): a daemon that is simply not running is not a fault —
    it starts when an agent needs it — so that is exit 0; `ctxwrap daemon status` keeps
    systemctl's exit 3 for "not running". A socket that answers garbage stays a fault."""
    from ctxwrap.client import NeedsRestart, Ready, Unsafe, probe

    result = probe()
    out: dict[str, Any] = {
        "state": "unreachable",
        "pid": None,
        "version": None,
        "socket": str(paths.socket_path()),
        "uptime_s": None,
        "sessions": None,
        "config_error": None,
        "degraded": None,
    }
    if isinstance(result, (Ready, NeedsRestart)):
        h = result.health
        out.update(
            state="needs-restart"
            if isinstance(result, NeedsRestart)
            else "degraded"
            if h.degraded
            else "ready",
            pid=h.pid,
            version=h.version,
            uptime_s=h.uptime_s,
            sessions=h.sessions,
            config_error=h.config_error,
            degraded=h.degraded,
        )
    else:
        out["reason"] = result.reason
        if isinstance(result, Unsafe):
            out["state"] = "unsafe"  # nothing was sent to that socket
            out["hint"] = result.error.hint if result.error else None
        elif on_demand and _not_running(result.reason):
            out["state"] = "not-running"
    if as_json:
        _echo_json(out)
    else:
        from ctxwrap.vocabulary import plural

        line = f"daemon: {out['state']}"
        if out["state"] == "not-running":
            line = "daemon: not running (starts on demand)"
        if out["pid"]:
            line += (
                f" (pid {out['pid']}, version {out['version']}, up {out['uptime_s']:.0f}s,"
                f" {plural(out['sessions'] or 0, 'live session')})"
            )
        _echo_folded(line)
        _echo_folded(f"socket: {_home_path(out['socket'])}")
        if out.get("reason") and out["state"] != "not-running":
            _echo_folded(f"reason: {out['reason']}")
        if out.get("hint"):
            _echo_folded(f"hint: {out['hint']}")
        if out["config_error"]:
            _echo_folded(f"config error (last good config in force): {out['config_error']}")
        if out["degraded"]:
            _echo_folded(f"degraded: {out['degraded']}")
    if out["state"] == "unsafe":
        raise ExitCode(SocketSecurityError.exit_code)
    if out["state"] not in ("ready", "degraded", "not-running"):  # degraded serves sessions
        raise ExitCode(3)  # like `systemctl status`: scripts can test for "not running"


def _width() -> int:
    """The terminal's width: COLUMNS, else the terminal's, else 100 (a pipe)."""
    import shutil

    return shutil.get_terminal_size((100, 24)).columns


def _echo_folded(line: str, *, indent: str = "  ") -> None:
    """A prose line folded at spaces to the terminal's width (a word longer than the line,
    a path, stays whole on a line of its own rather than cut)."""
    import textwrap

    width = _width()
    if len(line) <= width:
        click.echo(line)
        return
    for part in textwrap.wrap(
        line,
        width=max(20, width),
        subsequent_indent=indent,
        break_long_words=False,
        break_on_hyphens=False,
    ):
        click.echo(part)


def _home_path(path: str | Path) -> str:
    """A path under $HOME as ~/…: shorter, and still what a shell takes."""
    text = str(path)
    home = str(Path.home())
    if home not in ("", "/") and (text == home or text.startswith(home + "/")):
        return "~" + text[len(home) :]
    return text


def _not_running(reason: str) -> bool:
    """No socket, or a socket nobody listens on (a daemon that died): the next agent starts
    one. Anything else (a timeout, garbage) is a fault worth a non-zero exit."""
    return reason.startswith("no socket at") or "ConnectionRefusedError" in reason


@daemon.command("status")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def daemon_status(as_json: bool) -> None:
    """Is the daemon up, which version, how many sessions. Exit 3 when not ready."""
    _status(as_json)


@cli.command("status")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def status(as_json: bool) -> None:
    """Is the daemon up; "not running (starts on demand)" is fine (exit 0).

    Exits 3 when a daemon is there but not ready, or its socket does not answer.
    """
    _status(as_json, on_demand=True)


# -- sessions, facts, show ----------------------------------------------------------------------


def _readonly_db() -> Any:
    from ctxwrap.state.store import connect

    db = paths.db_path()
    if not db.exists():
        return None
    return connect(db, readonly=True)


@cli.command("sessions")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--all", "show_all", is_flag=True, help="Include ended sessions.")
def sessions(as_json: bool, show_all: bool) -> None:
    """List agent sessions (pi, Claude Code, Codex) the daemon knows (live ones by default)."""
    from ctxwrap.state.pidfile import pid_alive

    conn = _readonly_db()
    rows = (
        []
        if conn is None
        else [dict(r) for r in conn.execute("SELECT * FROM sessions ORDER BY started_at DESC")]
    )
    for r in rows:
        r["live"] = r["ended_at"] is None and pid_alive(r["pid"])
    if not show_all:
        rows = [r for r in rows if r["live"]]
    if as_json:
        _echo_json({"sessions": rows})
        return
    if not rows:
        click.echo("no live sessions" if not show_all else "no sessions recorded")
        return
    from ctxwrap import _table as T
    from ctxwrap.vocabulary import agent_name, plural

    width = _width()
    when = [time.strftime("%Y-%m-%d %H:%M", time.localtime(r["started_at"])) for r in rows]
    states = ["live" if r["live"] else "ended" for r in rows]
    cwds = [str(r.get("cwd") or "-") for r in rows]
    ids = [str(r["session_id"]) for r in rows]
    cols = [
        # the whole id when it fits, else a unique prefix (what --session takes) marked "…"
        T.column("session", list(zip(ids, T.short_ids(ids), strict=True)), left=True),
        T.column("state", states, left=True, drop=4),
        T.column("started", [(w, w[5:]) for w in when], left=True, drop=3),
        T.column(
            "agent",
            [(agent_name(r.get("agent") or "pi"), r.get("agent") or "pi") for r in rows],
            left=True,
            drop=2,
        ),
        T.column("pid", [str(r["pid"]) for r in rows], drop=6),
        T.column("model", [r["model"] or "-" for r in rows], left=True, drop=5),
        T.column("directory", [(c, Path(c).name or c) for c in cwds], left=True, drop=1),
    ]
    live = sum(1 for st in states if st == "live")
    title = plural(len(rows), "session") + (f", {live} live" if show_all else "")
    click.echo(title)
    lines = T.render(cols, width=width, color=False)
    for line in lines:
        click.echo(line)
    if len(lines) > 2 and not lines[2].startswith(ids[0]):  # the ids were cut
        _echo_folded(f"whole ids: ctxwrap sessions{' --all' if show_all else ''} --json")


@cli.command("facts")
@click.option(
    "--session", "session_id", help="Session id (default: the most recent session with facts)."
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def facts(session_id: str | None, as_json: bool) -> None:
    """One-line facts kept for files the agent wrote."""
    conn = _readonly_db()
    if conn is None:
        rows: list[dict[str, Any]] = []
    else:
        if session_id is None:
            last = conn.execute(
                "SELECT session_id FROM facts ORDER BY created_at DESC LIMIT 1"
            ).fetchone()
            session_id = last[0] if last else None
        rows = (
            [
                dict(r)
                for r in conn.execute(
                    "SELECT * FROM facts WHERE session_id=? ORDER BY created_at", (session_id,)
                )
            ]
            if session_id
            else []
        )
    if as_json:
        _echo_json({"session_id": session_id, "facts": rows})
    elif not rows:
        click.echo("no facts recorded")
    else:
        for r in rows:  # a fact is a sentence: folded at spaces, its source kept at its end
            _echo_folded(f"{r['text']}  ({r['source']})", indent="    ")


@cli.command("show")
@click.argument("handle")
def show(handle: str) -> None:
    """Print a raw output the model only saw summarised (by its recall handle).

    Byte for byte into a pipe or file; on a terminal, a line wider than it is folded with a
    `↩` at each break, so no character falls off the edge unmarked.
    """
    path = _raw_output_path(handle)
    if not sys.stdout.isatty():
        with open(path, "rb") as fh:
            while chunk := fh.read(1 << 16):
                sys.stdout.buffer.write(chunk)
        return
    width = max(20, _width())
    with open(path, encoding="utf-8", errors="replace", newline="") as fh:
        for line in fh:
            body = line.rstrip("\r\n")
            while len(body) > width:
                sys.stdout.write(body[: width - 1] + "↩\n")
                body = body[width - 1 :]
            sys.stdout.write(body + line[len(line.rstrip("\r\n")) :])


# -- config -------------------------------------------------------------------------------------


@cli.group(context_settings=CONTEXT)
def config() -> None:
    """Show or create the configuration."""


@config.command("show")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def config_show(as_json: bool) -> None:
    """Effective values and where each came from (default, env, file)."""
    from ctxwrap.config import load_config

    loaded = load_config()
    values = loaded.settings.model_dump(mode="json")
    if as_json:
        _echo_json(
            {
                k: {
                    "value": v,
                    "source": loaded.origins[k].source,
                    "detail": loaded.origins[k].detail,
                }
                for k, v in values.items()
            }
        )
        return
    width = _width()
    absent = "" if loaded.file.exists() else " (absent)"
    head = f"# config file{absent}: {_home_path(loaded.file)}"
    click.echo(
        head if len(head) <= width else f"# config file{absent}:\n#   {_home_path(loaded.file)}"
    )
    key_w = max(len(k) for k in values)
    # the sources in one column: 28 wide for the values when there is room for "# default"
    value_w = max(8, min(28, width - key_w - 3 - 1 - len("# default")))
    cut = False
    for k, v in values.items():
        o = loaded.origins[k]
        where = f"# {o.source if o.source == 'default' else f'{o.source}: {o.detail}'}"
        value = json.dumps(v)
        # key = value, the source beside it when there is room, else on the line above
        room = width - key_w - 3
        if len(value) > room:
            value, cut = value[: max(1, room - 1)] + "…", True
        line = f"{k:{key_w}} = {value}"
        wide = f"{k:{key_w}} = {value:{value_w}} {where}"
        if len(wide) <= width:
            click.echo(wide)
        elif len(line) + 1 + len(where) <= width:
            click.echo(f"{line} {where}")
        else:
            _echo_folded(where, indent="#   ")
            click.echo(line)
    if cut:
        _echo_folded("# values cut with … are whole in `ctxwrap config show --json`")


@config.command("init")
@click.option(
    "--force", is_flag=True, help="Replace an existing file (a copy is kept as config.toml.bak)."
)
def config_init(force: bool) -> None:
    """Write a commented config.toml with every setting at its default."""
    from ctxwrap.config import write_config_template

    path = paths.config_file()
    backup = write_config_template(path, force=force)
    click.echo(f"wrote {path}" + (f" (your previous file is kept as {backup})" if backup else ""))


@config.command("path")
def config_path() -> None:
    """Print the config file's path."""
    click.echo(str(paths.config_file()))


# -- entry point --------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> NoReturn:
    debug = (
        "--debug" in (argv if argv is not None else sys.argv[1:])
        or os.environ.get("CTXWRAP_DEBUG") == "1"
    )
    try:
        cli.main(args=argv, prog_name="ctxwrap", standalone_mode=False)
        code = 0
    except ExitCode as exc:
        code = exc.code
    except CtxwrapError as exc:
        if debug:
            import traceback

            traceback.print_exc()
        click.echo(f"ctxwrap: error: {exc.message}", err=True)
        if exc.hint:
            click.echo(f"hint: {exc.hint}", err=True)
        code = exc.exit_code
    except click.exceptions.Exit as exc:
        code = exc.exit_code
    except click.Abort:
        click.echo("aborted", err=True)
        code = 130
    except click.ClickException as exc:
        exc.show()
        code = exc.exit_code
    except KeyboardInterrupt:
        code = 130
    except BrokenPipeError:
        code = 141
    except Exception as exc:  # a bug: say so plainly, traceback only when asked
        if debug:
            raise
        click.echo(f"ctxwrap: internal error: {type(exc).__name__}: {exc}", err=True)
        click.echo("hint: run again with --debug for a traceback, and please report it", err=True)
        code = 70  # EX_SOFTWARE
    sys.exit(code)
