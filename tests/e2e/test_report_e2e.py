"""`ctxwrap report --session` for a session that really ran under `ctxwrap pi`, and the
per-call chart `ctxwrap stats --session` prints on a terminal."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support import ROUND_ONE_TAGS, Xdg, ctxwrap, run_ctxwrap_pi

pytestmark = pytest.mark.e2e

BIG_READ = "".join(f"irrelevant line {i} of a vendored license\n" for i in range(400))
BODY = "".join(f"value_{i} = {i}\n" for i in range(300))
SCRIPT = [
    {"tool_calls": [{"name": "bash", "arguments": {"command": "seq 1 30000"}}]},
    {"tool_calls": [{"name": "read", "arguments": {"path": "VENDOR_LICENSE"}}]},
    {"tool_calls": [{"name": "write", "arguments": {"path": "values.py", "content": BODY}}]},
    {"text": "done"},
]
RULES = [{"task": "tag", "match": "vendored license", "answer": '{"decision": "DROP"}'}]


def _session(xdg: Xdg, tmp_path: Path) -> tuple[str, dict[str, Any]]:
    run = run_ctxwrap_pi(
        "pi",
        tmp_path,
        xdg,
        SCRIPT,
        aux_rules=RULES,
        files={"VENDOR_LICENSE": BIG_READ},
        # every mechanism drawn (the strip: off under pi; the tagger from the first round)
        extra_env={"PI_CTX_WRITE": "1", **ROUND_ONE_TAGS},
    )
    assert run.proc.returncode == 0, run.proc.stderr
    sid = json.loads(ctxwrap(xdg, "sessions", "--all", "--json").stdout)["sessions"][0][
        "session_id"
    ]
    stats = json.loads(ctxwrap(xdg, "stats", "--session", sid, "--json").stdout)["totals"]
    return sid, stats


def test_report_of_a_ctxwrap_session(tmp_path: Path, xdg: Xdg) -> None:
    sid, stats = _session(xdg, tmp_path)
    out = Path(os.environ.get("CTXWRAP_TEST_ARTIFACTS", tmp_path)) / "report-session.html"
    made = ctxwrap(xdg, "report", "--session", sid[:8], "-o", str(out))
    assert made.returncode == 0, made.stderr
    text = out.read_text()
    bars = re.findall(r'<g class="call" data-call="\d+" data-sent="(\d+)"', text)
    assert len(bars) == stats["llm_calls"] == 4
    assert re.search(rf'id="plain-tokens" data-value="{stats["plain_tokens"]}"', text)
    assert re.search(rf'id="sent-tokens" data-value="{stats["sent_tokens"]}"', text)
    kinds = sorted(set(re.findall(r'data-kind="([a-z_]+)"', text)))
    assert kinds == ["digest", "strip", "tombstone"]
    # the digest row names its recall handle, which `ctxwrap show` resolves
    handle = re.search(r"<code class=\"handle\">(r[0-9a-f]{8})</code>", text)
    assert handle and ctxwrap(xdg, "show", handle.group(1)).returncode == 0
    aux = re.findall(r'<tr class="aux"><td data-label="task">([a-z]+)</td>', text)
    assert sorted(set(aux)) == ["fact", "tag"] and len(aux) == stats["aux_calls"]
    # the headline is `ctxwrap stats`'s: the same saving and the same %
    hero = re.search(
        r'id="hero" data-saved="([-0-9.]+)" data-pct="([-0-9.]+)" data-unit="(\w+)"', text
    )
    assert hero, "no hero"
    cost = stats["cost"]
    assert float(hero.group(2)) == pytest.approx(cost["total_saved_pct"], abs=0.01)
    if hero.group(3) == "usd":
        assert float(hero.group(1)) == pytest.approx(cost["total_saved_usd"], abs=1e-6)
    else:
        assert float(hero.group(1)) == pytest.approx(cost["total_saved_weighted"], abs=0.05)
    # ... names the mechanisms stats names ("mostly by ...")
    top = re.search(r'<p class="lead" id="why" data-top="([a-z ]*)">Mostly by', text)
    assert top and top.group(1).split() == stats["headline"]["top_mechanisms"]
    # the cost chart ends at the same figures: stats' priced session, aux calls included
    ends = re.search(
        r'id="cost" data-end-plain="([0-9.]+)" data-end-ours="([0-9.]+)" data-unit="(\w+)"', text
    )
    assert ends and ends.group(3) == hero.group(3) == "units"  # the scripted model has no price
    assert float(ends.group(1)) == pytest.approx(cost["total_plain_weighted"], abs=0.05)
    assert float(ends.group(2)) == pytest.approx(cost["total_weighted"], abs=0.05)
    # the live tagger is real: a row of its own, counted like the others
    row = re.search(r'<tr class="mechanism" data-mechanism="amnesia"[^>]*>', text)
    assert row and 'data-saved="0"' not in row.group(0)
    assert 'id="tagger-range"' not in text
    chromium = shutil.which("chromium")
    if chromium:
        dom = subprocess.run(
            [
                chromium,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
                f"--user-data-dir={tmp_path / 'profile'}",
                "--enable-logging=stderr",
                "--v=0",
                "--dump-dom",
                out.resolve().as_uri(),
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert dom.stdout.count('<g class="call"') == 4
        assert ":CONSOLE" not in dom.stderr


def test_report_defaults_to_the_latest_session(tmp_path: Path, xdg: Xdg) -> None:
    sid, _ = _session(xdg, tmp_path)
    made = subprocess.run(
        [sys.executable, "-m", "ctxwrap", "report"],
        env=xdg.env(),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert made.returncode == 0, made.stderr
    assert (tmp_path / f"ctxwrap-report-{sid[:12]}.html").exists()


def test_stats_session_chart_on_a_terminal_only(tmp_path: Path, xdg: Xdg) -> None:
    import pexpect

    sid, _ = _session(xdg, tmp_path)
    child = pexpect.spawn(
        sys.executable,
        ["-m", "ctxwrap", "stats", "--session", sid],
        env={**xdg.env(), "COLUMNS": "100", "TERM": "xterm"},
        encoding="utf-8",
        timeout=60,
    )
    child.expect(pexpect.EOF)
    child.close()
    screen = re.sub(r"\x1b\[[0-9;]*m", "", child.before or "")
    line = next(ln for ln in screen.splitlines() if ln.startswith("per call "))
    bars = re.search(r"per call ([ ▁▂▃▄▅▆▇█]+) sent vs plain", line)
    assert bars and len(bars.group(1)) == 4  # one column per call
    piped = ctxwrap(xdg, "stats", "--session", sid)
    assert "per call" not in piped.stdout
    _ = os
