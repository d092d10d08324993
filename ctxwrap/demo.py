"""`ctxwrap demo`: one real pi session, run twice — plain and through ctxwrap — against the
embedded scripted model on 127.0.0.1, and what the model received each time.

Nothing here is simulated except the model: pi, the bridge, the daemon, the tools and the
files are real. The daemon runs in private temporary directories and is stopped afterwards,
so the demo leaves the user's own statistics and sessions untouched.
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
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from ctxwrap.errors import PiNotFound
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
LABELS = {
    "call_0_0": "bash sh ./build.sh",
    "call_1_0": "read src/parser.c",
    "call_2_0": "read THIRD_PARTY_NOTICES.txt",
    "call_3_0": "write src/parser.c",
}


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
    work = root / "project"
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
    """e.g. '3: 2 tag, 1 fact' — what ctxwrap actually asked its aux model."""
    counts: dict[str, int] = {}
    for body in bodies:
        task = aux_task_of(body) or "other"
        counts[task] = counts.get(task, 0) + 1
    return f"{len(bodies)}: " + ", ".join(f"{n} {t}" for t, n in sorted(counts.items()))


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
                out[call["id"] + ":args"] = (len(args), json.loads(args).get("content", "")[:80])
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
    with tempfile.TemporaryDirectory(prefix="ctxwrap-demo-", dir="/tmp") as tmp:
        env = {
            "XDG_RUNTIME_DIR": f"{tmp}/run",
            "XDG_STATE_HOME": f"{tmp}/state",
            "XDG_CONFIG_HOME": f"{tmp}/config",
            "CTXWRAP_NO_SYSTEMD": "1",
        }
        Path(env["XDG_RUNTIME_DIR"]).mkdir(mode=0o700)
        try:
            yield env
        finally:
            pidfile = Path(env["XDG_RUNTIME_DIR"]) / "ctxwrap" / "daemon.pid"
            with contextlib.suppress(OSError, ValueError, ProcessLookupError):
                os.kill(int(pidfile.read_text().split()[0]), signal.SIGTERM)


def run_demo(*, color: bool) -> int:
    pi = find_pi_for_demo()
    version = subprocess.run(
        [str(pi), "--version"], capture_output=True, text=True, timeout=60
    ).stdout.strip()
    bold = (lambda s: click.style(s, bold=True)) if color else (lambda s: s)
    green = (lambda s: click.style(s, fg="green")) if color else (lambda s: s)
    click.echo(
        bold(
            f"ctxwrap demo — a real pi {version} session, run twice against a scripted model on 127.0.0.1"
        )
    )
    click.echo(f'task: "{PROMPT}"  (a 20,000-line build log, two file reads, one file write)\n')
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
    last_plain, last_wrapped = plain.requests[-1], wrapped.requests[-1]
    a, b = _items(last_plain), _items(last_wrapped)
    click.echo(bold("What the model received on its last call:"))
    click.echo(f"  {'':34} {'plain pi':>12} {'ctxwrap pi':>12}")
    for key, (pchars, _) in a.items():
        label = LABELS.get(key.split(":")[0], key) + (
            " (arguments)" if key.endswith(":args") else ""
        )
        wchars, preview = b.get(key, (0, "(removed)"))
        click.echo(
            f"  {label:34} {_tokens(pchars):>8,} tok {_tokens(wchars):>8,} tok   {preview[:70]}"
        )
    for fact in _facts(last_wrapped):
        click.echo(
            f"  {'fact kept in place of the body':34} {'':>12} {_tokens(len(fact)):>8,} tok   {fact[:70]}"
        )
    pr, wr = _request_chars(last_plain), _request_chars(last_wrapped)
    click.echo(
        f"  {'whole request':34} {_tokens(pr):>8,} tok {_tokens(wr):>8,} tok   "
        + green(f"{100 * (wr - pr) / pr:+.0f}%")
    )
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
    click.echo("\n" + bold("The 20,000-line build log, as the model saw it through ctxwrap:"))
    for line in str(digest).splitlines():
        click.echo(f"  │ {line}")
    click.echo()
    click.echo(
        bold(f"Across all {len(wrapped.requests)} calls:")
        + f" plain pi sent {_tokens(total_plain):,} tokens, ctxwrap pi {_tokens(total_wrapped):,} "
        + f"({100 * (total_wrapped - total_plain) / total_plain:+.0f}%)."
    )
    click.echo(
        f"ctxwrap's own aux-model calls ({_aux_kinds(wrapped.aux)}) cost about {aux_tokens:,} "
        f"input tokens; net saved ≈ {_tokens(total_plain - total_wrapped) - aux_tokens:,} tokens."
    )
    click.echo(f"Both runs ended with the same answer: {wrapped.stdout.strip()!r}")
    click.echo("\nNext: `ctxwrap pi` where you ran `pi`; `ctxwrap stats` shows what it saved.")
    return 0


@click.command("demo")
@click.option(
    "--color/--no-color", default=None, help="Colour the output (default: when on a terminal)."
)
def demo_cmd(color: bool | None) -> None:
    """Run a real pi session with and without ctxwrap against a scripted model, and compare."""
    from ctxwrap.cli import ExitCode

    use_color = sys.stdout.isatty() and "NO_COLOR" not in os.environ if color is None else color
    raise ExitCode(run_demo(color=use_color))
