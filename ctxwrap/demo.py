"""`ctxwrap demo`: one real pi session, run twice — plain and through ctxwrap — against the
embedded scripted model on 127.0.0.1, and what the model received each time.

Nothing here is simulated except the model: pi, the bridge, the daemon, the tools and the
files are real. The daemon is a private one (its own socket directory and default settings,
stopped afterwards: the user's own daemon and config.toml play no part, so no aux call can
leave 127.0.0.1), but it records into the user's state directory: afterwards `ctxwrap stats`,
`ctxwrap sessions --all` and `ctxwrap report` show the demo's session like any other, under
the project name `ctxwrap-demo` and the model `scripted-model` — what the demo says it saved
is then there to look at, and says plainly where it came from.

The output fits the terminal's width (COLUMNS), 60 columns included: long cells end in "…",
the build log's digest wraps.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from ctxwrap.errors import PiNotFound
from ctxwrap.headline import pct_text
from ctxwrap.testing.model_server import ScriptedModelServer, aux_task_of
from ctxwrap.testing.pi_home import make_pi_agent_dir, pi_command, pi_env, tools_bin_dir

BUILD_SH = r"""#!/bin/sh
# A noisy build: 20,000 lines of progress, two warnings, one real error.
i=0
while [ $i -lt 20000 ]; do
  echo "[$((i * 100 / 20000))%] CC build/obj/module_$i.o"
  i=$((i + 1))
  if [ $i -eq 7000 ]; then echo "src/util.c:88:5: warning: unused variable 'tmp' [-Wunused-variable]"; fi
  if [ $i -eq 13000 ]; then echo "src/io.c:12:1: warning: 'legacy_read' is deprecated [-Wdeprecated-declarations]"; fi
done
echo "src/parser.c:142:17: error: expected ';' before '}' token"
echo "  142 |     return node"
echo "      |                 ^"
echo "make: *** [Makefile:31: build/obj/parser.o] Error 1"
exit 2
"""

PARSER_C = (
    "/* parser.c — recursive-descent parser for the config language */\n"
    + "".join(
        f"static int rule_{i}(struct parser *p) {{ return expect(p, TOKEN_{i}); }}\n"
        for i in range(60)
    )
    + "struct node *parse(struct parser *p) {\n    struct node *node = parse_expr(p);\n    return node\n}\n"
)

LICENSES = "THIRD-PARTY SOFTWARE NOTICES\n" + "".join(
    f"Component {i}: Permission is hereby granted, free of charge, to any person obtaining a copy "
    f"of this software (component-{i}), to deal in the Software without restriction.\n"
    for i in range(90)
)

FIXED_PARSER = PARSER_C.replace("    return node\n}", "    return node;\n}")

SCRIPT: list[dict[str, Any]] = [
    {
        "text": "Let me run the build.",
        "tool_calls": [{"name": "bash", "arguments": {"command": "sh ./build.sh"}}],
    },
    {"tool_calls": [{"name": "read", "arguments": {"path": "src/parser.c"}}]},
    {"tool_calls": [{"name": "read", "arguments": {"path": "THIRD_PARTY_NOTICES.txt"}}]},
    {
        "tool_calls": [
            {"name": "write", "arguments": {"path": "src/parser.c", "content": FIXED_PARSER}}
        ]
    },
    {"text": "Fixed: src/parser.c:142 was missing a semicolon after `return node`."},
]
AUX_RULES: list[dict[str, Any]] = [
    {"task": "tag", "match": "THIRD-PARTY SOFTWARE NOTICES", "answer": {"decision": "DROP"}},
    {
        "task": "fact",
        "answer": "recursive-descent config parser, 60 rules, fixed missing semicolon at line 142",
    },
]
PROMPT = "The build fails. Find out why and fix it."
PROJECT = "ctxwrap-demo"  # the project name the demo's session has in stats, sessions, report
LABELS = {
    "call_0_0": "bash sh ./build.sh",
    "call_1_0": "read src/parser.c",
    "call_2_0": "read THIRD_PARTY_NOTICES.txt",
    "call_3_0": "write src/parser.c",
}
FACT_LABEL = "fact in place of the body"


def find_pi_for_demo() -> Path:
    override = os.environ.get("CTXWRAP_PI")
    if override and shutil.which(override):
        return Path(shutil.which(override) or override)
    tools = tools_bin_dir()
    for candidate in ([str(tools / "pi")] if tools else []) + ["pi"]:
        found = shutil.which(candidate)
        if found:
            return Path(found)
    raise PiNotFound(
        "pi is not installed",
        hint="`make demo` installs Node 22 and pi into .tools/; or `npm install -g @earendil-works/pi-coding-agent`",
    )


def _workspace(root: Path) -> Path:
    work = root / PROJECT
    (work / "src").mkdir(parents=True)
    (work / "build.sh").write_text(BUILD_SH)
    (work / "src/parser.c").write_text(PARSER_C)
    (work / "THIRD_PARTY_NOTICES.txt").write_text(LICENSES)
    return work


@dataclass
class DemoRun:
    requests: list[dict[str, Any]]
    aux: list[dict[str, Any]]
    returncode: int
    stdout: str
    stderr: str


def _run(pi: Path, root: Path, *, wrapped: bool, xdg_env: dict[str, str]) -> DemoRun:
    home = root / ("with" if wrapped else "plain")
    work = _workspace(home)
    with ScriptedModelServer(SCRIPT, aux_rules=AUX_RULES) as srv:
        agent = make_pi_agent_dir(home, srv.base_url)
        env = pi_env(agent, home)
        env.update(xdg_env)
        env["CTXWRAP_PI"] = str(pi)
        argv = pi_command(pi, PROMPT, wrapped=wrapped)
        proc = subprocess.run(
            argv,
            env=env,
            cwd=work,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=180,
        )
        return DemoRun(
            [r.body for r in srv.main_requests],
            [r.body for r in srv.aux_requests],
            proc.returncode,
            proc.stdout,
            proc.stderr,
        )


def _aux_kinds(bodies: list[dict[str, Any]]) -> str:
    """e.g. '3 (1 fact, 2 tag)' — what ctxwrap actually asked its aux model."""
    counts: dict[str, int] = {}
    for body in bodies:
        task = aux_task_of(body) or "other"
        counts[task] = counts.get(task, 0) + 1
    return f"{len(bodies)} (" + ", ".join(f"{n} {t}" for t, n in sorted(counts.items())) + ")"


def _tokens(chars: int) -> int:
    return (chars + 3) // 4


def _message_chars(msg: dict[str, Any]) -> int:
    content = msg.get("content")
    n = (
        len(content)
        if isinstance(content, str)
        else sum(len(p.get("text", "")) for p in content or [])
    )
    for call in msg.get("tool_calls") or []:
        n += len(call["function"]["name"]) + len(call["function"]["arguments"])
    return n


def _request_chars(body: dict[str, Any]) -> int:
    return sum(_message_chars(m) for m in body["messages"]) + len(
        json.dumps(body.get("tools") or [])
    )


def _items(body: dict[str, Any]) -> dict[str, tuple[int, str]]:
    """Per tool call: chars the model received for it (result, or write arguments) and a preview."""
    out: dict[str, tuple[int, str]] = {}
    for m in body["messages"]:
        if m.get("role") == "tool":
            text = str(m.get("content"))
            out[m["tool_call_id"]] = (len(text), text.splitlines()[0] if text else "")
        for call in m.get("tool_calls") or []:
            if call["function"]["name"] == "write":
                args = call["function"]["arguments"]
                content = str(json.loads(args).get("content", ""))
                out[call["id"] + ":args"] = (len(args), content.splitlines()[0] if content else "")
    return out


def _facts(body: dict[str, Any]) -> list[str]:
    texts = []
    for m in body["messages"]:
        if m.get("role") == "user":
            for p in (
                m.get("content")
                if isinstance(m.get("content"), list)
                else [{"text": m.get("content")}]
            ):
                t = str(p.get("text", ""))
                if t.startswith("[Wrote "):
                    texts.append(t)
    return texts


@contextlib.contextmanager
def _private_daemon() -> Iterator[dict[str, str]]:
    """A daemon of the demo's own (socket, pidfile, default config) recording into the user's
    state directory (XDG_STATE_HOME as the user has it): stats, sessions and report see the
    demo's session afterwards. Two daemons on one database is what SQLite's WAL mode is for."""
    with tempfile.TemporaryDirectory(prefix="ctxwrap-demo-", dir="/tmp") as tmp:
        from ctxwrap import paths

        env = {
            "XDG_RUNTIME_DIR": f"{tmp}/run",
            "XDG_CONFIG_HOME": f"{tmp}/config",
            # pi runs with a HOME of its own: name the user's state home, not HOME's default
            "XDG_STATE_HOME": str(paths.state_dir().parent),
            "CTXWRAP_NO_SYSTEMD": "1",
        }
        Path(env["XDG_RUNTIME_DIR"]).mkdir(mode=0o700)
        try:
            yield env
        finally:
            pidfile = Path(env["XDG_RUNTIME_DIR"]) / "ctxwrap" / "daemon.pid"
            with contextlib.suppress(OSError, ValueError, ProcessLookupError):
                os.kill(int(pidfile.read_text().split()[0]), signal.SIGTERM)


def run_demo(*, color: bool, width: int | None = None) -> int:
    pi = find_pi_for_demo()
    version = subprocess.run(
        [str(pi), "--version"], capture_output=True, text=True, timeout=60
    ).stdout.strip()
    bold = (lambda s: click.style(s, bold=True)) if color else (lambda s: s)
    green = (lambda s: click.style(s, fg="green")) if color else (lambda s: s)
    if width is None:
        width = shutil.get_terminal_size((80, 24)).columns
    intro = _Printer(width)
    intro.wrap(bold(f"ctxwrap demo: a real pi {version} session, run twice"))
    intro.wrap("against a scripted model on 127.0.0.1 (no API key, no network).")
    intro.wrap(f'task: "{PROMPT}"', rest="  ")
    intro.wrap("(a 20,000-line build log, two file reads, one file write)")
    click.echo()
    with tempfile.TemporaryDirectory(prefix="ctxwrap-demo-") as tmp, _private_daemon() as xdg:
        root = Path(tmp)
        click.echo("running plain pi …")
        plain = _run(pi, root, wrapped=False, xdg_env=xdg)
        click.echo("running ctxwrap pi …\n")
        wrapped = _run(pi, root, wrapped=True, xdg_env=xdg)
    for name, run in (("plain pi", plain), ("ctxwrap pi", wrapped)):
        if run.returncode != 0 or not run.requests:
            click.echo(f"{name} failed (exit {run.returncode}):\n{run.stderr[-2000:]}", err=True)
            return 1
    echo = _Printer(width)
    last_plain, last_wrapped = plain.requests[-1], wrapped.requests[-1]
    a, b = _items(last_plain), _items(last_wrapped)
    echo.wrap(bold("What the model received on its last call:"))
    rows: list[tuple[str, str, str, str]] = []
    for key, (pchars, _) in a.items():
        label = LABELS.get(key.split(":")[0], key) + (" (args)" if key.endswith(":args") else "")
        wchars, preview = b.get(key, (0, "(removed)"))
        rows.append((label, _tok(pchars), _tok(wchars), preview))
    for fact in _facts(last_wrapped):
        rows.append((FACT_LABEL, "", _tok(len(fact)), fact))
    pr, wr = _request_chars(last_plain), _request_chars(last_wrapped)
    rows.append(("whole request", _tok(pr), _tok(wr), ""))
    echo.table(rows, change=green(pct_text(100 * (pr - wr) / pr)))
    total_plain = sum(_request_chars(r) for r in plain.requests)
    total_wrapped = sum(_request_chars(r) for r in wrapped.requests)
    aux_tokens = sum(_tokens(len(json.dumps(r["messages"]))) for r in wrapped.aux)
    digest = next(
        (
            m["content"]
            for m in last_wrapped["messages"]
            if m.get("role") == "tool" and m.get("tool_call_id") == "call_0_0"
        ),
        "",
    )
    echo.line("")
    echo.wrap(bold("The 20,000-line build log, as the model saw it through ctxwrap:"))
    for line in str(digest).splitlines():
        echo.wrap(line, first="  │ ", rest="  │   ")
    echo.line("")
    saved_pct = pct_text(100 * (total_plain - total_wrapped) / total_plain)
    echo.wrap(
        bold(f"Across all {len(wrapped.requests)} calls:")
        + f" plain pi sent {_tokens(total_plain):,} tokens, ctxwrap pi {_tokens(total_wrapped):,}"
        + f" ({saved_pct})."
    )
    echo.wrap(
        f"ctxwrap's own aux-model calls: {_aux_kinds(wrapped.aux)}, ≈{aux_tokens:,} input tokens."
    )
    echo.wrap(f"Net saved ≈ {_tokens(total_plain - total_wrapped) - aux_tokens:,} tokens.")
    echo.wrap(f"Both runs ended with the same answer: {wrapped.stdout.strip()!r}")
    echo.line("")
    sid = _demo_session_id()
    for line in next_steps(sid):
        if line.startswith("  ctxwrap "):
            echo.line(line)  # a command: whole on its line, to copy
        else:
            echo.wrap(line, rest="  ")
    return 0


def _tok(chars: int) -> str:
    return f"{_tokens(chars):,} tok"


def _clip(text: str, room: int) -> str:
    """`text` in at most `room` characters, ending in "…" when cut."""
    text = " ".join(text.split())
    if len(text) <= room:
        return text
    return text[: max(0, room - 1)].rstrip() + "…" if room > 0 else ""


class _Printer:
    """Lines that fit `width` columns: prose wraps between words, table cells end in "…"."""

    def __init__(self, width: int) -> None:
        self.width = max(40, width)

    def line(self, text: str) -> None:
        click.echo(text)

    def wrap(self, text: str, *, first: str = "", rest: str = "") -> None:
        # click.style codes take no columns: wrap the plain text, colour kept per line
        for line in textwrap.wrap(
            text,
            self.width,
            initial_indent=first,
            subsequent_indent=rest,
            break_on_hyphens=False,
            drop_whitespace=True,
        ) or [first.rstrip()]:
            click.echo(line)

    def table(self, rows: list[tuple[str, str, str, str]], *, change: str) -> None:
        """label | plain pi | ctxwrap pi | what the model saw (the preview gets what is left,
        at least 16 columns, else it goes under its row)."""
        num_w = max(10, *(len(r[1]) for r in rows), *(len(r[2]) for r in rows))
        # room for the whole request's change ("−85%", "+100%") after the numbers
        label_w = min(max(len(r[0]) for r in rows), self.width - 2 * num_w - 12)
        fixed = 2 + label_w + 2 + num_w + 2 + num_w
        room = self.width - fixed - 3
        inline = room >= 16
        click.echo(f"  {'':{label_w}}  {'plain pi':>{num_w}}  {'ctxwrap pi':>{num_w}}")
        for i, (label, plain, ours, preview) in enumerate(rows):
            last = i == len(rows) - 1
            head = f"  {_clip(label, label_w):{label_w}}  {plain:>{num_w}}  {ours:>{num_w}}"
            if last:
                click.echo(f"{head} {change}")
            elif inline and preview:
                click.echo(f"{head}   {_clip(preview, room)}")
            else:
                click.echo(head)
                if preview:
                    click.echo(f"      {_clip(preview, self.width - 6)}")


def _demo_session_id() -> str | None:
    """The session the ctxwrap run just recorded (the newest of project `ctxwrap-demo`)."""
    from ctxwrap import paths
    from ctxwrap.state.store import connect

    db = paths.db_path()
    if not db.exists():
        return None
    try:
        conn = connect(db, readonly=True)
        try:
            row = conn.execute(
                "SELECT session_id FROM sessions WHERE cwd LIKE ? ORDER BY started_at DESC LIMIT 1",
                (f"%/{PROJECT}",),
            ).fetchone()
        finally:
            conn.close()
    except Exception:  # a locked or older database: the hints go without the id
        return None
    return str(row[0]) if row else None


def next_steps(session_id: str | None) -> list[str]:
    """What to run next. The demo's ctxwrap session is in your statistics now (project
    `ctxwrap-demo`, model `scripted-model`), so these commands show it."""
    from ctxwrap.launch.exit_line import short_id

    sid = short_id(session_id) if session_id else None
    where = f"session {sid}, project {PROJECT}" if sid else f"project {PROJECT}"
    steps = [
        f"The ctxwrap run is recorded in your statistics ({where}):",
        "  ctxwrap stats" + (f" --session {sid}" if sid else ""),
        "  ctxwrap sessions --all",
        "  ctxwrap report" + (f" --session {sid}" if sid else "") + " -o demo.html",
        "Next, where you ran `pi`, `claude` or `codex`: ctxwrap pi, ctxwrap claude, ctxwrap codex.",
    ]
    return steps


@click.command("demo")
@click.option(
    "--color/--no-color", default=None, help="Colour the output (default: when on a terminal)."
)
def demo_cmd(color: bool | None) -> None:
    """Run a real pi session with and without ctxwrap against a scripted model, and compare."""
    from ctxwrap.errors import ExitCode

    use_color = sys.stdout.isatty() and "NO_COLOR" not in os.environ if color is None else color
    raise ExitCode(run_demo(color=use_color))
