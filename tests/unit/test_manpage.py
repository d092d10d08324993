"""The man pages are generated from the click tree and config.Settings, and cannot drift."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import click
import pytest

from ctxwrap.cli import cli
from ctxwrap.config import ENV_PREFIX, Settings
from ctxwrap.manpage import PAGES, esc, render_ctxwrap_1, walk

REPO = Path(__file__).resolve().parents[2]
PAGE_1 = REPO / "man" / "ctxwrap.1"
PAGE_8 = REPO / "man" / "ctxwrap-daemon.8"


def all_commands() -> list[str]:
    return [" ".join(path) for path, cmd in walk(cli, ["ctxwrap"]) if cmd is not cli]


@pytest.mark.parametrize("name", sorted(PAGES))
def test_committed_pages_match_the_code(name: str) -> None:
    committed = (REPO / "man" / name).read_text(encoding="utf-8")
    assert committed == PAGES[name](cli), f"man/{name} is stale: run `python scripts/gen-man.py`"


@pytest.mark.parametrize("command", all_commands())
def test_every_command_is_in_ctxwrap_1(command: str) -> None:
    assert f".SS \\fB{esc(command)}\\fR" in PAGE_1.read_text(encoding="utf-8")


@pytest.mark.parametrize("setting", sorted(Settings.model_fields))
def test_every_pi_ctx_variable_is_in_ctxwrap_1(setting: str) -> None:
    var = ENV_PREFIX + setting.upper()
    assert f"\\fB{esc(var)}\\fR (default:" in PAGE_1.read_text(encoding="utf-8")


def test_every_option_is_described() -> None:
    text = PAGE_1.read_text(encoding="utf-8")
    for _path, cmd in walk(cli, ["ctxwrap"]):
        for p in cmd.params:
            if isinstance(p, click.Option) and p.help and not p.hidden:
                assert f"\\fB{esc(p.opts[0])}\\fR" in text, p.opts


def test_required_sections() -> None:
    text = PAGE_1.read_text(encoding="utf-8")
    for section in ("NAME", "SYNOPSIS", "DESCRIPTION", "COMMANDS", "ENVIRONMENT", "FILES"):
        assert f"\n.SH {section}\n" in text
    assert "\n.SH EXIT STATUS\n" in text
    daemon = PAGE_8.read_text(encoding="utf-8")
    assert ".TH CTXWRAP-DAEMON 8" in daemon
    assert "LISTEN_FDS" in daemon and "NOTIFY_SOCKET" in daemon


def test_a_new_command_fails_the_check() -> None:
    """The drift check is real: a command added to the tree is missing from the old page."""

    @click.group()
    def root() -> None:
        """Root."""

    @root.command("frobnicate")
    def frob() -> None:
        """Frob."""

    assert ".SS \\fBctxwrap frobnicate\\fR" in render_ctxwrap_1(root)
    assert "frobnicate" not in PAGE_1.read_text(encoding="utf-8")


@pytest.mark.parametrize("locale", ["C", "C.UTF-8"])
@pytest.mark.parametrize("page", [PAGE_1, PAGE_8], ids=lambda p: p.name)
def test_man_renders_without_warnings(page: Path, locale: str) -> None:
    """Under the C locale too (issue 44 item 14: `LC_ALL=C man ./man/ctxwrap.1` warned "can't
    find special character 'u2026'"): the pages are ASCII, other glyphs groff names."""
    if shutil.which("man") is None or shutil.which("groff") is None:
        pytest.skip("man-db/groff not installed (apt-get install -y man-db groff)")
    assert page.read_text(encoding="utf-8").isascii()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LC_") and k != "LANG"}
    done = subprocess.run(
        ["man", "--warnings", "-l", str(page)],
        env={**env, "LC_ALL": locale, "MANWIDTH": "80", "MANPAGER": "cat", "PAGER": "cat"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0
    assert done.stderr == ""
    assert "ctxwrap" in done.stdout


def ctxwrap(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ctxwrap", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "MANPAGER": "cat", "PAGER": "cat", "MANWIDTH": "80"},
    )


def test_help_man_roff_prints_the_page() -> None:
    assert ctxwrap("help", "--man", "--roff").stdout == PAGE_1.read_text(encoding="utf-8")
    assert ctxwrap("help", "--man", "--roff", "daemon").stdout == PAGE_8.read_text(encoding="utf-8")


def test_help_man_renders_through_man() -> None:
    done = ctxwrap("help", "--man")
    assert done.returncode == 0
    if shutil.which("man"):
        assert ".TH" not in done.stdout and "EXIT STATUS" in done.stdout
    else:
        assert done.stdout.startswith('.\\"')


def test_help_for_a_command() -> None:
    done = ctxwrap("help", "daemon", "run")
    assert done.returncode == 0
    assert "Usage: ctxwrap daemon run" in done.stdout
    bad = ctxwrap("help", "nope")
    assert bad.returncode == 2 and "no such command" in bad.stderr


def test_codex_is_named_beside_pi_and_claude() -> None:
    """Issue 44 item 18: Codex was missing from the synopsis, `--help` and `sessions --help`."""
    page = PAGE_1.read_text(encoding="utf-8")
    synopsis = page.split(".SH SYNOPSIS", 1)[1].split(".SH", 1)[0]
    assert all(f"ctxwrap {a}\\fR" in synopsis for a in ("pi", "claude", "codex"))
    top = ctxwrap("--help").stdout
    assert "`ctxwrap codex`" in top or "ctxwrap codex" in top.split("Options:")[0]
    assert "Codex" in ctxwrap("sessions", "--help").stdout
    assert "~/.codex/sessions" in ctxwrap("replay", "--help").stdout


def test_codex_is_named_wherever_the_other_agents_are() -> None:
    """Issue 44 item 18: a line of ctxwrap(1) that names `ctxwrap pi` and `ctxwrap claude`
    names `ctxwrap codex` too (the shell wrappers exist for pi and claude only), and Codex's
    executable variable and exit status are documented."""
    import re

    text = re.sub(r"\\f[BIR]", "", render_ctxwrap_1(cli)).replace("\\-", "-")
    lines = [ln for ln in text.splitlines() if "CTXWRAP_WRAP_" not in ln]
    both = [ln for ln in lines if "ctxwrap pi" in ln and "ctxwrap claude" in ln]
    assert both and all("ctxwrap codex" in ln for ln in both), [
        ln for ln in both if "ctxwrap codex" not in ln
    ]
    assert "CTXWRAP_CODEX" in text
    assert "pi, claude or codex was not found" in text
