"""`ctxwrap report` opened in a real headless Chromium (Debian's `chromium`).

The DOM must hold one bar per call and the totals `ctxwrap replay --json` reports, the page
must log no console message and request nothing over the network, and screenshots (1280×800
light and dark, phone width) are written as artifacts: $CTXWRAP_TEST_ARTIFACTS or tmp_path.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
import sys
import zlib
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

FIXTURES = Path(__file__).parents[1] / "fixtures" / "sessions"
PI16 = FIXTURES / "pi-compaction.jsonl"
CLAUDE = FIXTURES / "claude-2.1.197.jsonl"
CTXWRAP = [sys.executable, "-m", "ctxwrap"]
CHROMIUM = shutil.which("chromium")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)"
)
# Chromium's own background services still show up in a net log even with every
# --disable-* flag; a request of the page would go anywhere else.
_CHROMIUM_OWN = re.compile(r"(^|\.)(google\.com|googleapis\.com|gstatic\.com|gvt1\.com)$")


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CTXWRAP, *args], capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL
    )


def artifacts(tmp_path: Path) -> Path:
    root = os.environ.get("CTXWRAP_TEST_ARTIFACTS")
    out = Path(root) / "report" if root else tmp_path / "artifacts"
    out.mkdir(parents=True, exist_ok=True)
    return out


def chromium(tmp_path: Path, page: Path, *extra: str) -> tuple[str, str, Path]:
    """Run headless Chromium on a file; (stdout, stderr, net log path)."""
    assert CHROMIUM is not None
    profile = tmp_path / f"profile-{len(list(tmp_path.glob('profile-*')))}"
    net = profile.with_suffix(".net.json")
    proc = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--hide-scrollbars",
            f"--user-data-dir={profile}",
            "--enable-logging=stderr",
            "--v=0",
            f"--log-net-log={net}",
            *extra,
            page.resolve().as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout, proc.stderr, net


def console_messages(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if ":CONSOLE" in line]


def page_requests(net_log: Path) -> set[str]:
    urls = set(re.findall(r'"url":"([^"]+)"', net_log.read_text(errors="replace")))
    out = set()
    for url in urls:
        parts = urlsplit(url)
        if parts.scheme in ("http", "https", "ws", "wss") and not _CHROMIUM_OWN.search(
            parts.hostname or ""
        ):
            out.add(url)
    return out


def png_info(path: Path) -> tuple[int, int, bytes]:
    """Width, height and the top-left pixel's RGB of an 8-bit RGB(A) PNG."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    i, idat = 8, b""
    while i < len(data):
        (n,) = struct.unpack(">I", data[i : i + 4])
        if data[i + 4 : i + 8] == b"IDAT":
            idat += data[i + 8 : i + 8 + n]
        i += 12 + n
    raw = zlib.decompress(idat)
    return width, height, raw[1:4]  # row 0, after its filter byte: unaffected by any filter


def card(dom: str, cid: str) -> str:
    m = re.search(rf'id="{cid}" data-value="([^"]*)"', dom)
    assert m, cid
    return m.group(1)


@pytest.fixture(scope="module")
def replayed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("report")
    out = tmp / "report.html"
    made = cli("report", "--replay", str(PI16), "-o", str(out))
    assert made.returncode == 0, made.stderr
    doc = json.loads(cli("replay", "--json", str(PI16)).stdout)
    return out, doc["groups"][0]


def test_report_html_is_self_contained(replayed: tuple[Path, dict[str, Any]]) -> None:
    html_path, _ = replayed
    text = html_path.read_text()
    assert not re.search(r"https?://|//[a-z0-9.-]+\.[a-z]{2,}/", text, re.I)
    assert "<script" not in text and "<link" not in text and "@import" not in text
    assert "prefers-color-scheme:dark" in text and "@media print" in text
    assert 'name="viewport"' in text


def test_hostile_labels_are_escaped(tmp_path: Path) -> None:
    lines = PI16.read_text().splitlines()
    evil = '<img src=https://evil.invalid/x onerror=alert(1)>"'
    doc = [json.loads(line) for line in lines]
    for entry in doc:
        for block in entry.get("message", {}).get("content", []) or []:
            if isinstance(block, dict) and block.get("name") == "bash":
                block["arguments"]["command"] = "seq 1 30000 # " + evil
    f = tmp_path / "evil.jsonl"
    f.write_text("\n".join(json.dumps(e) for e in doc) + "\n")
    out = tmp_path / "evil.html"
    assert cli("report", "--replay", str(f), "-o", str(out)).returncode == 0
    text = out.read_text()
    assert "<img" not in text and "&lt;img src=https://evil.invalid/x" in text


def test_report_refuses_a_file_that_is_no_session(tmp_path: Path) -> None:
    bad = tmp_path / "x.jsonl"
    bad.write_bytes(b"\x00\x01binary")
    out = cli("report", "--replay", str(bad), "-o", str(tmp_path / "x.html"))
    assert out.returncode == 66 and "Traceback" not in out.stderr
    assert "no replayable session" in out.stderr and "binary file" in out.stderr
    both = cli("report", "--replay", str(PI16), "--session", "x")
    assert both.returncode == 2 and "exclude each other" in both.stderr


@needs_chromium
def test_report_in_headless_chromium(replayed: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    html_path, session = replayed
    dom, stderr, net = chromium(tmp_path, html_path, "--dump-dom")
    # one bar per call, each holding what was sent
    bars = re.findall(r'<g class="call" data-call="(\d+)" data-sent="(\d+)"', dom)
    assert [int(i) for i, _ in bars] == list(range(session["llm_calls"]))
    assert all(int(sent) > 0 for _, sent in bars)
    # the totals are replay's
    assert int(card(dom, "llm-calls")) == session["llm_calls"]
    assert int(card(dom, "plain-tokens")) == session["plain_tokens"]
    assert int(card(dom, "sent-tokens")) == session["sent_tokens"]
    cost = session["cost"]
    assert float(card(dom, "cost-plain")) == pytest.approx(cost["plain"]["weighted_tokens"], abs=1)
    assert float(card(dom, "cost-ctxwrap")) == pytest.approx(
        cost["ctxwrap"]["weighted_tokens"], abs=1
    )
    kinds = re.findall(r'<tr class="intervention" data-kind="([a-z-]+)"', dom)
    assert sorted(kinds) == ["digest", "pointer", "strip"]  # pointer: the unchanged re-read
    assert dom.count('data-mark="compaction"') == session["compactions"]
    assert console_messages(stderr) == []
    assert page_requests(net) == set()


@needs_chromium
def test_screenshots_light_dark_and_phone(
    replayed: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    html_path, _ = replayed
    out = artifacts(tmp_path)
    shots = {
        "report-1280x800-light.png": ("--window-size=1280,800",),
        "report-1280x800-dark.png": (
            "--window-size=1280,800",
            "--blink-settings=preferredColorScheme=0",
        ),
        "report-390x844-phone.png": ("--window-size=390,844",),
    }
    for name, flags in shots.items():
        _, stderr, _ = chromium(tmp_path, html_path, *flags, f"--screenshot={out / name}")
        assert console_messages(stderr) == []
    w, h, light = png_info(out / "report-1280x800-light.png")
    assert (w, h) == (1280, 800) and min(light) > 230  # light background
    _, _, dark = png_info(out / "report-1280x800-dark.png")
    assert max(dark) < 60  # the dark scheme is applied
    assert png_info(out / "report-390x844-phone.png")[:2] == (390, 844)


@needs_chromium
def test_claude_transcript_report_in_chromium(tmp_path: Path) -> None:
    out = tmp_path / "claude.html"
    assert cli("report", "--replay", str(CLAUDE), "-o", str(out)).returncode == 0
    dom, stderr, _ = chromium(tmp_path, out, "--dump-dom")
    assert len(re.findall(r'<g class="call"', dom)) == 4
    assert "estimated" in dom  # Claude Code records no system prompt: said on the page
    assert console_messages(stderr) == []


@needs_chromium
def test_the_browser_checks_catch_a_bad_page(tmp_path: Path) -> None:
    """Control: the console and network checks above do see what a bad page does."""
    bad = tmp_path / "bad.html"
    bad.write_text(
        '<!doctype html><p>x</p><img src="https://example.invalid/a.png">'
        '<script>console.error("boom")</script>'
    )
    _, stderr, net = chromium(tmp_path, bad, "--dump-dom")
    assert any("boom" in line for line in console_messages(stderr))
    assert "https://example.invalid/a.png" in page_requests(net)
