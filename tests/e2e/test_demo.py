"""`ctxwrap demo` as a new user meets it (issue 44 items 2, 3, 13): at 60 columns every line
fits; afterwards `ctxwrap stats`, `sessions --all` and `report` show the demo's session, and
`ctxwrap doctor` neither fails for a pi that is only in ./.tools/bin nor prints a line past
the terminal's width."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ctxwrap.testing.pi_home import find_pi, tools_bin_dir

pytestmark = pytest.mark.e2e


def user_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """A new user: their own HOME and XDG dirs, no ctxwrap variables, no pi on PATH."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PI_CTX_", "CTXWRAP_", "XDG_", "COLUMNS", "LINES"))
    }
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700, exist_ok=True)
    env.update(
        HOME=str(tmp_path / "home"),
        XDG_RUNTIME_DIR=str(runtime),
        XDG_STATE_HOME=str(tmp_path / "state"),
        XDG_CONFIG_HOME=str(tmp_path / "config"),
        CTXWRAP_NO_SYSTEMD="1",
        PATH=f"{Path(sys.executable).parent}{os.pathsep}/usr/bin:/bin",
        **extra,
    )
    (tmp_path / "home").mkdir(exist_ok=True)
    return env


def ctxwrap(
    env: dict[str, str], *args: str, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ctxwrap", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def over(text: str, columns: int) -> list[str]:
    return [line for line in text.splitlines() if len(line) > columns]


@pytest.mark.timeout(300)
def test_demo_then_stats_sessions_and_report_show_it(tmp_path: Path) -> None:
    pi = find_pi("pi")
    if pi is None:
        pytest.skip("pi is not installed (run scripts/install-tools.sh)")
    env = user_env(tmp_path, COLUMNS="60", CTXWRAP_PI=str(pi))
    demo = ctxwrap(env, "demo", "--no-color", timeout=280)
    assert demo.returncode == 0, demo.stdout + demo.stderr
    assert not over(demo.stdout, 60), over(demo.stdout, 60)
    assert re.search(r"whole request .* −\d+%$", demo.stdout, re.M), demo.stdout
    clipped = [ln for ln in demo.stdout.splitlines() if ln.endswith("…")]
    assert clipped, demo.stdout  # previews cut at 60 columns say so
    # the run went into this user's statistics, and the demo names it
    found = re.search(r"ctxwrap stats --session (\S+)", demo.stdout)
    assert found, demo.stdout
    sid = found.group(1)
    env.pop("CTXWRAP_PI")
    stats = ctxwrap(env, "stats", "--session", sid, "--json")
    assert stats.returncode == 0, stats.stdout + stats.stderr
    totals = json.loads(stats.stdout)["totals"]
    assert totals["llm_calls"] == 5 and totals["net_tokens"] > 10_000, totals
    every = ctxwrap(env, "stats")
    assert every.returncode == 0 and "no statistics" not in every.stdout, every.stdout
    assert "1 session" in every.stdout, every.stdout
    listed = json.loads(ctxwrap(env, "sessions", "--all", "--json").stdout)["sessions"]
    assert [s["cwd"].rsplit("/", 1)[-1] for s in listed] == ["ctxwrap-demo"], listed
    assert listed[0]["session_id"].startswith(sid)
    page = tmp_path / "demo.html"
    report = ctxwrap(env, "report", "-o", str(page))
    assert report.returncode == 0, report.stdout + report.stderr
    assert page.stat().st_size > 1000
    # no daemon of the demo's left behind, and the user's own never started
    assert not (tmp_path / "run" / "ctxwrap" / "daemon.sock").exists()


def test_doctor_after_the_demo_points_at_tools_bin(tmp_path: Path) -> None:
    """pi only in the repository's .tools/bin (what `make demo` installs), not on PATH: a
    warning saying how to put it there, not a failure; the aux backend is no failure either."""
    tools = tools_bin_dir()
    if tools is None or not (tools / "pi").exists():
        pytest.skip("no .tools/bin/pi (run scripts/install-tools.sh)")
    for columns in (60, 100):
        env = user_env(tmp_path, COLUMNS=str(columns))
        done = ctxwrap(env, "doctor")
        out = done.stdout + done.stderr
        command = f'export PATH="{tools}:$PATH"'
        # a command is never broken: alone on its line, the only one that may be wider
        assert command in [ln.strip() for ln in out.splitlines()], out
        too_wide = [ln for ln in over(out, columns) if ln.strip() != command]
        assert not too_wide, too_wide
        flat = " ".join(out.split())
        assert "FAIL" not in out and done.returncode == 0, out
        assert re.search(r"warn\s+pi\b", out), out
        assert f'export PATH="{tools}:$PATH"' in flat, out
        assert re.search(r"ok\s+node\b", out), out  # checked on .tools/bin/pi's own Node
        assert not re.search(r"FAIL\s+aux", out), out


def test_doctor_failing_at_60_columns_stays_within_them(tmp_path: Path) -> None:
    """The error line too: with every failing check named it would pass 60 columns."""
    env = user_env(tmp_path, COLUMNS="60", CTXWRAP_PI=str(tmp_path / "no-such-pi"))
    (tmp_path / "config" / "ctxwrap").mkdir(parents=True)
    (tmp_path / "config" / "ctxwrap" / "config.toml").write_text(
        'aux_backend = "http"\naux_base_url = "ftp://nowhere"\n'
    )
    done = ctxwrap(env, "doctor")
    out = done.stdout + done.stderr
    assert done.returncode == 1 and "FAIL" in out, out
    assert not over(out, 60), over(out, 60)
    assert "hint: fix the FAIL lines" in done.stderr
