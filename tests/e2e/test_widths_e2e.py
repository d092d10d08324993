"""Every command at 60 columns (issue 44, items 8, 13, 19): `COLUMNS=60` runs of `stats` (every
--by view, --verbose, one session), `sessions`, `facts`, `status`, `config show`, `show` and
`report`'s lines against a state dir of real pi sessions (the real pi, a real daemon, the
scripted model server) print no line over 60 characters, cut no id without "…" and no word.

One session runs on a model with a list price (claude-sonnet-4-5), one on a model with none
(kimi-k2.5): the priced one keeps its dollars, the other says it is unpriced."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import sqlite3
import subprocess
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest
from support import CTXWRAP, Xdg, ctxwrap, make_xdg, run_ctxwrap_pi

pytestmark = pytest.mark.e2e

WIDTH = 60
BIG_READ = "".join(f"irrelevant line {i} of a vendored license\n" for i in range(400))
BODY = "".join(f"value_{i} = {i}\n" for i in range(300))
# one long line (≈14k characters): stored raw, digested for the model
LONG_LINE = "seq 1 3000 | paste -sd' '"
SCRIPT = [
    {"tool_calls": [{"name": "bash", "arguments": {"command": LONG_LINE}}]},
    {"tool_calls": [{"name": "read", "arguments": {"path": "VENDOR_LICENSE"}}]},
    {"tool_calls": [{"name": "write", "arguments": {"path": "values.py", "content": BODY}}]},
    {"tool_calls": [{"name": "bash", "arguments": {"command": "echo ok"}}]},
    {"text": "done"},
]
RULES = [{"task": "tag", "match": "vendored license", "answer": '{"decision": "DROP"}'}]
PRICED, UNPRICED = "claude-sonnet-4-5", "kimi-k2.5"


@dataclass
class State:
    xdg: Xdg
    env: dict[str, str]  # the state dir's XDG variables, HOME, COLUMNS=60
    ids: dict[str, str]  # model → session id
    sessions_dir: Path  # a folder holding both pi session files


@pytest.fixture(scope="module")
def state(tmp_path_factory: pytest.TempPathFactory) -> Iterator[State]:
    root = tmp_path_factory.mktemp("widths")
    xdg = make_xdg(root)
    ids: dict[str, str] = {}
    files = root / "pi-sessions"
    files.mkdir()
    try:
        for model in (PRICED, UNPRICED):
            run = run_ctxwrap_pi(
                "pi",
                root / model,
                xdg,
                SCRIPT,
                aux_rules=RULES,
                files={"VENDOR_LICENSE": BIG_READ},
                pi_model=model,
                extra_env={"PI_CTX_WRITE": "1"},  # facts to list (off under pi by default)
            )
            assert run.proc.returncode == 0, run.proc.stderr[-2000:]
            (session_file,) = run.session_files()
            (files / session_file.name).write_bytes(session_file.read_bytes())
            rows = json.loads(ctxwrap(xdg, "sessions", "--all", "--json").stdout)["sessions"]
            ids[model] = next(r["session_id"] for r in rows if r["session_id"] not in ids.values())
        env = xdg.env()
        # as on a real machine, the config and state dirs are under HOME (shown as ~/…)
        env.update(COLUMNS=str(WIDTH), HOME=str(root))
        env.pop("NO_COLOR", None)
        yield State(xdg, env, ids, files)
    finally:
        xdg.kill_daemon()


def run(state: State, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CTXWRAP, *args],
        env=state.env,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        cwd=cwd,
    )


def assert_fits(text: str, what: str) -> None:
    wide = [line for line in text.splitlines() if len(line) > WIDTH]
    assert not wide, f"{what}: {len(wide)} lines over {WIDTH}:\n" + "\n".join(wide)


def on_pty(args: list[str], env: Mapping[str, str]) -> str:
    """The command's output on a real terminal (what a person sees)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(args, env=dict(env), stdout=slave, stderr=slave, stdin=slave)
    os.close(slave)
    chunks = []
    while True:
        ready, _, _ = select.select([master], [], [], 20)
        if not ready:
            break
        try:
            data = os.read(master, 65536)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=20)
    os.close(master)
    return b"".join(chunks).decode().replace("\r\n", "\n")


@pytest.mark.parametrize("by", ["mechanism", "session", "day", "agent"])
def test_stats_at_60_columns(state: State, by: str) -> None:
    for extra in ((), ("--verbose",), ("--session", state.ids[PRICED][:13])):
        out = run(state, "stats", "--by", by, *extra)
        assert out.returncode == 0, out.stderr
        assert_fits(out.stdout, f"stats --by {by} {' '.join(extra)}")
        assert "\x1b" not in out.stdout
    on_terminal = on_pty([*CTXWRAP, "stats", "--by", by], {**state.env, "TERM": "xterm"})
    assert_fits(re.sub(r"\x1b\[[0-9;]*m", "", on_terminal), f"stats --by {by} on a terminal")


def test_stats_prices_the_priced_session_and_marks_the_other(state: State) -> None:
    """One unpriced model (kimi-k2.5) leaves the priced session's dollars alone (item 8)."""
    out = run(state, "stats", "--by", "session")
    lines = out.stdout.splitlines()
    # two sessions started within a minute share their first 8 characters (UUIDv7): the rows
    # show each id to where they differ, marked "…"
    rows = {
        m: next(
            line
            for line in lines
            if line[:1].isalnum() and sid.startswith(line.split()[0].rstrip("…"))
        )
        for m, sid in state.ids.items()
    }
    priced_row, unpriced_row = rows[PRICED], rows[UNPRICED]
    assert priced_row != unpriced_row and priced_row.split()[0].endswith("…")
    assert "$" in priced_row and "unpriced" not in priced_row
    assert "unpriced" in unpriced_row and "$" not in unpriced_row
    total = next(line for line in lines if line.startswith("total"))
    assert "$" in total and "*" in total
    assert "cost units" not in out.stdout
    text = " ".join(out.stdout.split())
    assert f"unpriced: no known price for scripted/{UNPRICED} (1 session)" in text
    doc = json.loads(run(state, "stats", "--json").stdout)["totals"]["money"]
    assert doc["partial"] is True and doc["unpriced_sessions"] == [state.ids[UNPRICED]]
    alone = json.loads(run(state, "stats", "--json", "--session", state.ids[PRICED]).stdout)
    assert doc["usd"] == pytest.approx(alone["totals"]["money"]["usd"], abs=1e-6)


def test_sessions_facts_status_config_at_60_columns(state: State) -> None:
    for args in (
        ("sessions", "--all"),
        ("facts",),
        ("facts", "--session", state.ids[PRICED]),
        ("status",),
        ("config", "show"),
    ):
        out = run(state, *args)
        assert out.returncode == 0, (args, out.stderr)
        assert out.stdout.strip(), args
        assert_fits(out.stdout, " ".join(args))
    listed = run(state, "sessions", "--all").stdout
    # ids cut to where they differ (8 characters at least: `_table.short_ids`), marked; the
    # whole ids are one command away. Two ids made in the same instant share their first
    # characters; ones a tick apart may differ within the first 8, and are cut there.
    for sid in state.ids.values():
        assert re.search(rf"^{re.escape(sid[:8])}\S*…", listed, re.M), listed
    assert "whole ids: ctxwrap sessions --all --json" in listed
    facts = run(state, "facts", "--session", state.ids[PRICED]).stdout
    assert "values.py" in facts  # the write's fact, folded at spaces, not cut
    # a value too wide is cut with "…" and said to be whole in --json
    cfg = run_env(state, {"PI_CTX_AUX_BASE_URL": "http://127.0.0.1:9/" + "long/" * 20}, "config")
    assert_fits(cfg, "config show with a long value")
    assert "# env: PI_CTX_AUX_BASE_URL" in cfg and "…" in cfg
    assert "whole in `ctxwrap config show --json`" in " ".join(cfg.split())


def run_env(state: State, extra: Mapping[str, str], *args: str) -> str:
    out = subprocess.run(
        [*CTXWRAP, *args, "show"],
        env={**state.env, **extra},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_show_folds_long_lines_on_a_terminal_and_not_in_a_pipe(state: State) -> None:
    conn = sqlite3.connect(state.xdg.db)
    handle, path = conn.execute(
        "SELECT handle, path FROM raw_outputs WHERE command LIKE 'seq 1 3000%'"
    ).fetchone()
    conn.close()
    raw = Path(path).read_text()
    assert max(len(line) for line in raw.splitlines()) > 10_000
    piped = run(state, "show", handle)
    assert piped.stdout == raw  # byte for byte into a pipe
    seen = on_pty([*CTXWRAP, "show", handle], {**state.env, "TERM": "xterm"})
    assert_fits(seen, "show on a terminal")
    assert seen.replace("↩\n", "") == raw  # every character there, each break marked


def test_report_lines_at_60_columns(state: State, tmp_path: Path) -> None:
    made = run(state, "report", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    assert_fits(made.stdout + made.stderr, "report")
    # a folder of two sessions: listed, with the command to pick one (item 19)
    listed = run(state, "report", "--replay", str(state.sessions_dir), cwd=tmp_path)
    assert listed.returncode == 64
    assert "--session ID" in listed.stderr
    for line in listed.stderr.splitlines():
        if not line.startswith(("ctxwrap: error:", "hint: ctxwrap report")):  # hold the path
            assert len(line) <= WIDTH, line
    unknown = run(state, "report", "--session", "zzzz", cwd=tmp_path)
    assert unknown.returncode == 66
    assert_fits(unknown.stderr, "report --session zzzz")


# -- /ctx-stats inside pi's TUI on a 60-column terminal (item 12) --------------------------------


@pytest.mark.timeout(300)
def test_ctx_stats_in_pi_fits_a_60_column_terminal(tmp_path: Path) -> None:
    """The bridge asked the daemon for 90 columns whatever the terminal: on a 60-column one
    every row of the table broke in two. Now each line of the text is one row on the screen."""
    import signal

    import pexpect
    from support import client, pi_path, wait_ready
    from terminal import Terminal

    from ctxwrap.testing.model_server import ScriptedModelServer
    from ctxwrap.testing.pi_home import MODEL, PROVIDER, make_pi_agent_dir, pi_env

    rows, cols = 50, WIDTH
    xdg = make_xdg(tmp_path)
    home = tmp_path / "home"
    work = home / "work"
    work.mkdir(parents=True)
    script = [
        {"tool_calls": [{"name": "bash", "arguments": {"command": "seq 1 30000"}}]},
        {"text": "ANSWER-DONE"},
    ]
    server = ScriptedModelServer(script)
    server.start()
    child = None
    try:
        agent_dir = make_pi_agent_dir(home, server.base_url)
        env = xdg.env(pi_env(agent_dir, home))
        env.pop("COLUMNS", None)  # the terminal's own size, as a person's shell has it
        env.pop("LINES", None)
        env.update(CTXWRAP_PI=str(pi_path("pi")), TERM="xterm-256color")
        argv = [*CTXWRAP, "pi", "--offline", "--provider", PROVIDER, "--model", MODEL]
        child = pexpect.spawn(
            argv[0], argv[1:], env=env, cwd=str(work), dimensions=(rows, cols), timeout=60
        )
        screen = Terminal(child, rows, cols)
        screen.wait_for(MODEL, 60)
        for ch in "count":
            child.send(ch)
            time.sleep(0.05)
        child.send("\r")
        screen.wait_for("ANSWER-DONE", 90)
        wait_ready(xdg)
        with client(xdg) as c:
            (sid,) = [s["session_id"] for s in c.get("/v1/sessions").json()["sessions"]]
        screen.type("/ctx-stats")
        time.sleep(0.5)
        child.send("\r")
        screen.wait_for("ctxwrap stats — session", 30)
        screen.wait_for("total", 30)
        time.sleep(1.0)
        screen.pump(0.5)
        shown = [line.strip() for line in screen.display.splitlines()]
        with client(xdg) as c:
            text = c.get("/v1/stats", params={"session": sid, "width": str(cols - 2)}).json()
        table = [ln.strip() for ln in text["text"].splitlines() if ln.strip()]
        # the table's rows (header, rules, every mechanism, total) each whole on one row
        start = next(i for i, ln in enumerate(table) if ln.startswith(("what ctxwrap", "mech")))
        body = table[start : next(i for i, ln in enumerate(table) if ln.startswith("total")) + 1]
        assert len(body) >= 5
        missing = [ln for ln in body if ln not in shown]
        assert not missing, f"rows not whole on the screen: {missing}\n{screen.display}"
    finally:
        if child is not None:
            if child.isalive():
                child.kill(signal.SIGKILL)
            child.close(force=True)
        server.close()
        xdg.kill_daemon()
