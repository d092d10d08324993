"""`ctxwrap report` opened in a real headless Chromium (Debian's `chromium`).

The DOM must hold one bar per call and the totals `ctxwrap replay --json` reports, the page
must log no console message and request nothing over the network, and screenshots (1280×800
light and dark, phone width) are written as artifacts: $CTXWRAP_TEST_ARTIFACTS or tmp_path.
"""

from __future__ import annotations

import functools
import html
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import zlib
from collections import Counter
from datetime import datetime, timedelta
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


# The report draws every mechanism: the write strip on, as `write = true` has it under pi
# (its default, `auto`, keeps pi's write bodies).
_ENV = {**os.environ, "PI_CTX_WRITE": "1"}


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CTXWRAP, *args],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        env=_ENV,
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
    # --session with --replay picks among the replayed sessions: none starts with "x"
    none = cli("report", "--replay", str(PI16), "--session", "x")
    assert none.returncode == 64 and "no session in" in none.stderr
    assert "with an id starting 'x'" in none.stderr


def test_nothing_to_report_names_every_agent_and_where_it_keeps_sessions(
    tmp_path: Path,
) -> None:
    """Codex is first-class in the hints (issue 44 item 18): no database, and a replay path
    that holds no session, both say how to get one for pi, Claude Code and Codex."""
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}
    (tmp_path / "empty").mkdir()
    runs = [
        subprocess.run(
            [*CTXWRAP, "report", *args], capture_output=True, text=True, timeout=120, env=env
        )
        for args in ([], ["--replay", str(tmp_path / "empty")])
    ]
    for out in runs:
        assert out.returncode == 66, out.stderr
        hint = out.stderr[out.stderr.index("hint: ") :]
        assert "Codex" in hint or "ctxwrap codex" in hint
        for where in ("~/.pi/agent/sessions", "~/.claude/projects", "~/.codex/sessions"):
            assert where in hint, (where, hint)
        assert max(len(line) for line in hint.splitlines()) <= 60, hint
    assert "`ctxwrap codex`" in runs[0].stderr


def test_report_of_a_folder_lists_its_sessions_and_takes_session(tmp_path: Path) -> None:
    """`report --replay DIR` with two sessions in DIR picks none silently (issue 44, item 19):
    it lists them with the command to pick one, and `--session PREFIX` picks that one."""
    folder = tmp_path / "sessions"
    folder.mkdir()
    shutil.copy(PI16, folder / PI16.name)
    shutil.copy(CLAUDE, folder / CLAUDE.name)
    ids = {
        g["path"]: g["session_id"]
        for g in json.loads(cli("replay", "--json", str(folder)).stdout)["groups"]
    }
    assert len(ids) == 2, ids
    out = tmp_path / "r.html"
    env = {**os.environ, "COLUMNS": "60"}
    listed = subprocess.run(
        [*CTXWRAP, "report", "--replay", str(folder), "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert listed.returncode == 64 and not out.exists()
    assert "holds 2 sessions" in listed.stderr
    assert f"ctxwrap report --replay {folder} --session ID" in listed.stderr
    # each session listed by a prefix --session takes, its agent and calls, within 60 columns
    for sid in ids.values():
        assert re.search(rf"^  {re.escape(sid[:8])}\S*\s", listed.stderr, re.M), listed.stderr
    assert "Claude Code" in listed.stderr or "claude" in listed.stderr
    assert all(len(line) <= 60 for line in listed.stderr.splitlines() if line.startswith("  "))

    claude_id = ids[str(folder / CLAUDE.name)]
    picked = cli("report", "--replay", str(folder), "--session", claude_id[:12], "-o", str(out))
    assert picked.returncode == 0, picked.stderr
    page = out.read_text()
    assert f"replay of {CLAUDE.name}" in page and f"replay of {PI16.name}" not in page


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


# -- the ten-second answer ------------------------------------------------------------------------


@functools.cache
def replay_doc(path: Path) -> dict[str, Any]:
    out = cli("replay", "--json", str(path))
    assert out.returncode == 0, out.stderr
    group: dict[str, Any] = json.loads(out.stdout)["groups"][0]
    return group


_PAGES: dict[Path, str] = {}


def report_of(path: Path, tmp_path: Path) -> str:
    """`ctxwrap report --replay PATH` (each file once per test run: the CLI is slow to start)."""
    if path not in _PAGES:
        out = tmp_path / f"{path.stem}.html"
        made = cli("report", "--replay", str(path), "-o", str(out))
        assert made.returncode == 0, made.stderr
        _PAGES[path] = out.read_text()
    return _PAGES[path]


def masked_session(tmp_path: Path) -> Path:
    """PI16 without its compaction, with a 10-minute pause before the second prompt and the
    second read of NOTES.txt changed: the idle gap lets the cache expire, so the replay masks
    the superseded first read (a masking pass at call 5)."""
    entries = [json.loads(line) for line in PI16.read_text().splitlines()]
    comp = next(k for k, e in enumerate(entries) if e.get("type") == "compaction")
    out = []
    for k, e in enumerate(entries):
        if k == comp:
            continue
        if k == comp + 1:
            e["parentId"] = entries[comp]["parentId"]
        if k > comp:
            ts = datetime.fromisoformat(e["timestamp"].replace("Z", "+00:00"))
            e["timestamp"] = (ts + timedelta(seconds=600)).isoformat().replace("+00:00", "Z")
            msg = e.get("message")
            if isinstance(msg, dict) and isinstance(msg.get("timestamp"), int | float):
                msg["timestamp"] += 600_000
        out.append(e)
    reads = [
        e
        for e in out
        if isinstance(e.get("message"), dict)
        and e["message"].get("role") == "toolResult"
        and e["message"].get("toolName") == "read"
    ]
    reads[-1]["message"]["content"][0]["text"] += "\none more line, added since\n"
    f = tmp_path / "masked.jsonl"
    f.write_text("".join(json.dumps(e) + "\n" for e in out))
    return f


def hero_figures(page: str) -> tuple[float, float, str]:
    m = re.search(
        r'<h1 id="hero" data-saved="([-0-9.]+)" data-pct="([-0-9.]+)" data-unit="(\w+)"', page
    )
    assert m, "no hero"
    return float(m.group(1)), float(m.group(2)), m.group(3)


def text_of(fragment: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", fragment))


def element(page: str, pattern: str) -> str:
    m = re.search(pattern, page, re.S)
    assert m, pattern
    return m.group(0)


@pytest.mark.parametrize("fixture", [PI16, CLAUDE], ids=["pi-units", "claude-usd"])
def test_hero_states_replays_saving_and_what_did_most(fixture: Path, tmp_path: Path) -> None:
    """The headline is `ctxwrap replay`'s: the requests' cost, plain − ctxwrap, input side,
    in $ when the model has a price, else in cost units; the % as every view prints it."""
    doc = replay_doc(fixture)
    page = report_of(fixture, tmp_path)
    saved, pct, unit = hero_figures(page)
    cost = doc["cost"]
    aux = {m["mechanism"]: m["aux_tokens_estimated"] for m in doc["mechanisms"]}
    # the tagger estimated, not run (its budget leaves a short session's tags out: aux 0)
    assert not doc["tagged_by_aux"] and aux["amnesia"] >= 0
    plain = cost["plain"]["weighted_tokens"]
    expect = plain - cost["ctxwrap"]["weighted_tokens"]
    assert pct == pytest.approx(100 * expect / plain, abs=0.01)
    hero = text_of(element(page, r'<h1 id="hero".*?</h1>'))
    shown = round(100 * expect / plain)
    assert hero.startswith("Would have saved") and hero.endswith(f"(cost \u2212{shown}%)")
    # the same words as `ctxwrap replay`'s headline line
    replay_text = cli("replay", str(fixture)).stdout
    assert f"cost \u2212{shown}%" in replay_text
    per_unit = 1.0
    if fixture is CLAUDE:  # claude-opus-4-8: priced
        from ctxwrap.engine.cost import default_prices

        price = default_prices(doc["model"]).input
        assert price is not None
        per_unit = price / 1e6  # a cost unit is one fresh input token
        assert unit == "usd" and saved == pytest.approx(expect * per_unit, rel=1e-6)
        assert f"${saved:.2f}" in hero and f"${saved:.2f} saved" in replay_text
    else:  # scripted-model: no price
        assert unit == "units" and saved == pytest.approx(expect, abs=0.01)
        assert "cost units" in hero and "cost unit is one fresh input token" in page
    # the cost chart ends at replay's request costs (the aux calls are only in the headline)
    ends = re.search(r'id="cost" data-end-plain="([0-9.]+)" data-end-ours="([0-9.]+)"', page)
    assert ends
    scale = per_unit if unit == "usd" else 1.0
    assert float(ends.group(1)) == pytest.approx(plain * scale, rel=1e-4)
    assert float(ends.group(2)) == pytest.approx(
        cost["ctxwrap"]["weighted_tokens"] * scale, rel=1e-4
    )
    # ... and names what did most, in the user's words, the biggest first
    why = text_of(element(page, r'<p class="lead" id="why"[^>]*>.*?</p>'))
    best = max(
        (m for m in doc["mechanisms"] if m["mechanism"] != "amnesia"),
        key=lambda m: m["saved_tokens"] - m["aux_tokens_estimated"],
    )
    assert why.startswith("Mostly by " + WORDS[best["mechanism"]])


WORDS = {
    "bash": "summarising big outputs",
    "writes": "keeping written files as one line and leaving edits' old text out",
    "masking": "masking old results",
}


def test_tagger_is_a_range_with_its_cost_and_counted_in_no_total(tmp_path: Path) -> None:
    doc = replay_doc(CLAUDE)
    page = report_of(CLAUDE, tmp_path)
    amnesia = next(m for m in doc["mechanisms"] if m["mechanism"] == "amnesia")
    rng = element(page, r'<p class="range" id="tagger-range".*?</p>')
    assert f'data-high="{doc["tagger_bound_tokens"]}"' in rng and 'data-low="0"' in rng
    assert f'data-aux="{amnesia["aux_tokens_estimated"]}"' in rng
    assert "0 … " in text_of(rng) and "aux model" in text_of(rng)
    row = element(page, r'<tr class="mechanism" data-mechanism="amnesia".*?</tr>')
    assert 'data-saved="0"' in row and "(not counted)" in text_of(row)
    low = -amnesia["aux_tokens_estimated"]
    high = doc["tagger_bound_tokens"] - amnesia["aux_tokens_estimated"]
    assert f"{low:,} … {high:,}".replace("-", "−") in text_of(row).replace("-", "−")
    # the total counts neither its saving nor its aux tokens
    total = text_of(element(page, r'<tr class="total">.*?</tr>'))
    counted = [m for m in doc["mechanisms"] if m["mechanism"] != "amnesia"]
    assert f"{sum(m['aux_tokens_estimated'] for m in counted):,}" in total


def test_per_mechanism_table_is_replays(tmp_path: Path) -> None:
    doc = replay_doc(PI16)
    page = report_of(PI16, tmp_path)
    rows = {
        m: (int(s), int(a), int(n))
        for m, s, a, n in re.findall(
            r'<tr class="mechanism" data-mechanism="(\w+)" data-saved="(-?\d+)" '
            r'data-aux="(\d+)" data-net="(-?\d+)"',
            page,
        )
    }
    for m in doc["mechanisms"]:
        key = m["mechanism"]
        if key == "amnesia":  # without --tag: the re-read pointers, and the tagger's range
            assert rows["dedup"] == (m["saved_tokens"], 0, m["saved_tokens"])
            assert rows["amnesia"][:2] == (0, m["aux_tokens_estimated"])
        elif m["saved_tokens"] or m["aux_tokens_estimated"]:
            aux = m["aux_tokens_estimated"]
            assert rows[key] == (m["saved_tokens"], aux, m["saved_tokens"] - aux)
        else:
            assert key not in rows  # an empty row says nothing
    # user words first, the mechanism's name second
    bash = element(page, r'<tr class="mechanism" data-mechanism="bash".*?</tr>')
    assert re.search(r'big outputs summarised</span><span class="name">bash digest', bash)
    # replay's "needed again", beside each mechanism's saving
    assert '<th class="n">needed again</th>' in page
    for key, (n, of) in (
        (k, (v["needed_again"], v["interventions"]))
        for k, v in doc["needed_again"]["mechanisms"].items()
    ):
        if key in rows and key != "amnesia":
            row = text_of(element(page, rf'<tr class="mechanism" data-mechanism="{key}".*?</tr>'))
            assert f"{n} of {of}" in row, (key, row)
    # the kept-out figure is the table's total, as replay prints it (no rounding apart)
    total = sum(m["saved_tokens"] for m in doc["mechanisms"])
    assert re.search(rf'id="saved-tokens" data-value="{total}"', page)
    row = element(page, r'<tr class="total">.*?</tr>')
    assert f'data-label="tokens kept out">{total:,}</td>' in row


def test_needed_again_column_when_the_replay_has_it() -> None:
    from ctxwrap.report import ReportData, render_html
    from ctxwrap.report._data import MechanismRow

    data = ReportData("t", "replay", "s", None, None)
    data.mechanisms = [MechanismRow("masking", 1000, 0, needed_again=(2, 9))]
    page = render_html(data)
    row = text_of(element(page, r'<tr class="mechanism".*?</tr>'))
    assert '<th class="n">needed again</th>' in page and "2 of 9 (22 %)" in row
    # policies' replay figure, per mechanism
    from ctxwrap.report._data import needed_again_of

    doc = {"mechanisms": {"masking": {"interventions": 9, "needed_again": 2, "share_pct": 22.2}}}
    assert needed_again_of(doc, "masking") == (2, 9)
    assert needed_again_of(doc, "bash") == (0, 0)
    assert needed_again_of(None, "masking") is None
    # the writes row's savings include the edit strip's: its figure covers both
    doc["mechanisms"]["writes"] = {"interventions": 8, "needed_again": 5}
    doc["mechanisms"]["edits"] = {"interventions": 38, "needed_again": 1}
    assert needed_again_of(doc, "writes") == (6, 46)
    # ... and says each apart: the write strip's 5 of 8 would hide in "6 of 46"
    from ctxwrap.report._data import needed_parts_of

    parts = needed_parts_of(doc, "writes")
    assert parts == "writes 5 of 8, edits 1 of 38"
    assert needed_parts_of(doc, "masking") is None
    data.mechanisms = [MechanismRow("writes", 1000, 0, needed_again=(6, 46), needed_parts=parts)]
    row = text_of(element(render_html(data), r'<tr class="mechanism".*?</tr>'))
    assert "6 of 46 (13 %)" in row and "writes 5 of 8, edits 1 of 38" in row


def test_ticks_are_round_and_short() -> None:
    from ctxwrap.report._html import call_ticks, nice_ticks, short

    assert nice_ticks(68_692) == [0, 20_000, 40_000, 60_000, 80_000]
    assert nice_ticks(2.53, 5) == [0, 1, 2, 3]
    assert nice_ticks(0.42, 4) == [0, 0.2, 0.4, 0.6]
    assert [short(v) for v in (0, 950, 1_500, 34_000, 1_200_000, 2_000_000)] == [
        "0",
        "950",
        "1.5k",
        "34k",
        "1.2M",
        "2M",
    ]
    assert call_ticks(55, 14) == [1, 5, 10, 15, 20, 25, 30, 35, 40, 45, 50, 55]
    assert call_ticks(217, 5) == [1, 50, 100, 150, 200]


def test_charts_have_round_ticks_an_x_axis_and_only_present_series(tmp_path: Path) -> None:
    for fixture, money in ((PI16, False), (CLAUDE, True)):
        page = report_of(fixture, tmp_path)
        svgs = re.findall(r'<svg class="(wide|narrow)" id="([\w-]+)".*?</svg>', page, re.S)
        assert sorted(i for _, i in svgs) == ["cost", "cost-narrow", "per-call", "per-call-narrow"]
        for svg in re.findall(r'<svg class="(?:wide|narrow)" id="[\w-]+".*?</svg>', page, re.S):
            ticks = re.findall(r'<text class="ytick"[^>]*>([^<]+)</text>', svg)
            assert len(ticks) >= 3 and ticks[0] in ("0", "$0")
            for t in ticks:  # 20k, 1.5M, $2.50: round, never 34,346
                assert re.fullmatch(r"\$?\d+(\.\d{1,2})?[kM]?|\$\d+\.\d+", t), t
            assert re.search(r'<text class="xtick"[^>]*>1</text>', svg)  # the x axis: calls
            assert 'class="xtitle"' in svg and "call" in svg
        cost = next(s for s in re.findall(r'<svg class="wide" id="cost".*?</svg>', page, re.S))
        ticks = re.findall(r'<text class="ytick"[^>]*>([^<]+)</text>', cost)
        assert all(t.startswith("$") for t in ticks) == money
        # the bars' legend names only the series that have a value
        doc = replay_doc(fixture)
        legend = text_of(element(page, r"<section id='per-call-section'>.*?</ul>"))
        saved = {m["mechanism"]: m["saved_tokens"] for m in doc["mechanisms"]}
        assert ("big outputs summarised" in legend) == (saved["bash"] > 0)
        assert saved["masking"] == 0 and "old results masked" not in legend
        assert "skills" not in legend
        assert ("C: compaction" in legend) == (doc["compactions"] > 0)
        shown = page.split("<details>")[0]  # the glossary explains them
        assert "input-eq" not in shown and "head change" not in shown


def test_compaction_and_masking_markers_differ_and_are_labelled(tmp_path: Path) -> None:
    page = report_of(PI16, tmp_path)
    compaction = re.findall(r'<g class="marker" data-mark="compaction">(.*?)</g>', page)
    assert len(compaction) == 1
    assert 'class="mark-compaction"' in compaction[0] and ">C</text>" in compaction[0]
    masked = masked_session(tmp_path)
    doc = replay_doc(masked)
    assert doc["interventions"]["mask"] >= 1 and doc["compactions"] == 0
    page = report_of(masked, tmp_path)
    marks = re.findall(r'<g class="marker" data-mark="(\w+)">(.*?)</g>', page)
    assert [k for k, _ in marks] == ["masking"]
    inner = marks[0][1]
    assert 'class="mark-masking"' in inner and ">M</text>" in inner and "call 5: masking" in inner
    # not the same line: compaction solid, masking dotted; not the same symbol
    css = page.split("<style>")[1]
    assert "dasharray" not in re.search(r"\.mark-compaction\{[^}]*\}", css).group(0)  # type: ignore[union-attr]
    assert "dasharray" in re.search(r"\.mark-masking\{[^}]*\}", css).group(0)  # type: ignore[union-attr]
    legend = text_of(element(page, r"<section id='cost-section'>.*?</ul>"))
    assert "M: masking pass" in legend and "C: compaction" not in legend
    assert "old results masked" in text_of(
        element(page, r"<section id='per-call-section'>.*?</ul>")
    )
    why = text_of(element(page, r'<p class="lead" id="why"[^>]*>.*?</p>'))
    assert "masking old results" in why


def test_words_put_the_user_first(tmp_path: Path) -> None:
    page = report_of(PI16, tmp_path)
    head, glossary = page.split("</style>")[1].split("<details>")
    # jargon is no more than a secondary name under the user's words, or in the glossary
    shown = text_of(
        re.sub(r'<span class="name">[^<]*</span>|<span class="muted">\([^<]*\)</span>', "", head)
    )
    for jargon in ("input-eq", "head change", "amnesia", "tombstone"):
        assert jargon not in shown, jargon
    assert '<span class="name">tagger · read amnesia</span>' in head
    for user in ("big outputs summarised", "writes and edits kept short"):
        assert user in shown
    for term in ("cost units", "compaction", "head change", "amnesia"):
        assert term in glossary


# -- in the browser: the first screenful, the phone, the themes, colour vision ------------------

SIZES = {"1280x800": (1280, 800), "390x844": (390, 844)}
DARK = "--blink-settings=preferredColorScheme=0"  # Chromium's enum: 0 = dark, 1 = light
_HARNESS = """<!doctype html><html><body style="margin:0">
<iframe id="f" src="{src}" width="{w}" height="{h}" style="border:0;display:block"></iframe>
<script>
document.getElementById("f").addEventListener("load", () => {{
  const d = document.getElementById("f").contentDocument;
  const box = (el) => {{ const r = el.getBoundingClientRect();
    return [Math.round(r.left), Math.round(r.top), Math.round(r.right), Math.round(r.bottom)]; }};
  const width = d.documentElement.clientWidth;
  document.body.setAttribute("data-result", JSON.stringify({{
    width: width, scrollWidth: d.documentElement.scrollWidth,
    hero: box(d.getElementById("hero")), why: box(d.getElementById("why")),
    what: box(d.getElementById("what")),
    svgs: [...d.querySelectorAll("svg[id]")].filter(s => s.getBoundingClientRect().width > 0)
      .map(s => [s.id, ...box(s)]),
    overflowing: [...d.querySelectorAll("td, th, h1, h2, p, dd, li, code")]
      .filter(e => e.getBoundingClientRect().right > width + 0.5).map(e => e.textContent.slice(0, 40)),
    background: getComputedStyle(d.body).backgroundColor,
  }}));
}});
</script></body></html>"""


def measure(tmp_path: Path, page: Path, size: str, dark: bool) -> dict[str, Any]:
    """Lay the report out in a frame of `size` and read back where things are (a harness page
    with a script; the report itself has none)."""
    w, h = SIZES[size]
    harness = tmp_path / f"harness-{size}-{int(dark)}.html"
    harness.write_text(_HARNESS.format(src=page.resolve().as_uri(), w=w, h=h))
    flags = ["--allow-file-access-from-files", "--hide-scrollbars", "--virtual-time-budget=5000"]
    dom, stderr, _ = chromium(tmp_path, harness, *flags, *([DARK] if dark else []), "--dump-dom")
    assert console_messages(stderr) == []
    m = re.search(r'data-result="([^"]+)"', dom)
    assert m, dom[-500:]
    result: dict[str, Any] = json.loads(html.unescape(m.group(1)))
    return result


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The pi fixture (no price: cost units, a compaction) and the Claude one ($)."""
    tmp = tmp_path_factory.mktemp("pages")
    out = {}
    for name, src in (("pi", PI16), ("claude", CLAUDE)):
        out[name] = tmp / f"report-{name}.html"
        made = cli("report", "--replay", str(src), "-o", str(out[name]))
        assert made.returncode == 0, made.stderr
    return out


@needs_chromium
@pytest.mark.parametrize("size", list(SIZES))
@pytest.mark.parametrize("theme", ["light", "dark"])
def test_first_screenful_answers_how_much_and_why(
    pages: dict[str, Path], tmp_path: Path, size: str, theme: str
) -> None:
    w, h = SIZES[size]
    for name, page in pages.items():
        got = measure(tmp_path, page, size, theme == "dark")
        assert got["width"] == w, got
        # how much, and why: the hero and its sentence, and the table's start, on screen
        assert got["hero"][3] < h / 3 and got["why"][3] < h * 0.6, (name, got)
        assert got["what"][1] < h, (name, got)
        # nothing wider than the screen: the charts are the layout made for it
        assert got["scrollWidth"] <= w and got["overflowing"] == [], (name, got)
        ids = sorted(s[0] for s in got["svgs"])
        expect = ["cost", "per-call"] if w > 640 else ["cost-narrow", "per-call-narrow"]
        assert ids == expect, (name, got)
        assert all(s[1] >= 0 and s[3] <= w for s in got["svgs"]), (name, got)
        dark_bg = got["background"] != "rgb(255, 255, 255)"
        assert dark_bg == (theme == "dark"), got


@needs_chromium
def test_screenshots_at_both_widths_and_themes(pages: dict[str, Path], tmp_path: Path) -> None:
    out = artifacts(tmp_path)
    for name, page in pages.items():
        for size, (w, h) in SIZES.items():
            for theme in ("light", "dark"):
                shot = out / f"report-{name}-{size}-{theme}.png"
                flags = [f"--window-size={w},{h}", f"--screenshot={shot}"]
                _, stderr, net = chromium(
                    tmp_path, page, *flags, *([DARK] if theme == "dark" else [])
                )
                assert console_messages(stderr) == [] and page_requests(net) == set()
                width, height, corner = png_info(shot)
                assert (width, height) == (w, h)
                if theme == "light":
                    assert min(corner) > 230, shot
                else:
                    assert max(corner) < 60, shot


# Machado, Oliveira & Fernandes (2009), severity 1, on linear RGB.
DEUTERANOPIA = (
    (0.367322, 0.860646, -0.227968),
    (0.280085, 0.672501, 0.047413),
    (-0.011820, 0.042940, 0.968881),
)
PROTANOPIA = (
    (0.152286, 1.052583, -0.204868),
    (0.114503, 0.786281, 0.099216),
    (-0.003882, -0.048116, 1.051998),
)
Matrix = tuple[tuple[float, float, float], ...]
MIN_DELTA_E = 40.0  # CIE76; the old red/green pair is at 9-17 under deuteranopia


def _linear(c: int) -> float:
    v = c / 255
    return v / 12.92 if v <= 0.04045 else ((v + 0.055) / 1.055) ** 2.4


def _srgb(v: float) -> int:
    v = min(1.0, max(0.0, v))
    s = v * 12.92 if v <= 0.0031308 else 1.055 * v ** (1 / 2.4) - 0.055
    return round(s * 255)


def simulate(rgb: tuple[int, int, int], m: Matrix) -> tuple[float, float, float]:
    lin = [_linear(c) for c in rgb]
    r, g, b = (min(1.0, max(0.0, sum(m[i][k] * lin[k] for k in range(3)))) for i in range(3))
    return r, g, b


def lab(lin: tuple[float, float, float]) -> tuple[float, float, float]:
    r, g, b = lin
    x = (0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.95047
    y = 0.2126 * r + 0.7152 * g + 0.0722 * b
    z = (0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.08883

    def f(t: float) -> float:
        return t ** (1 / 3) if t > 0.008856 else 7.787 * t + 16 / 116

    return 116 * f(y) - 16, 500 * (f(x) - f(y)), 200 * (f(y) - f(z))


def delta_e(a: tuple[float, float, float], b: tuple[float, float, float]) -> float:
    return float(sum((p - q) ** 2 for p, q in zip(lab(a), lab(b), strict=True)) ** 0.5)


def png_rows(path: Path) -> tuple[int, int, list[bytes]]:
    """Decode an 8-bit RGB or RGBA, non-interlaced PNG (what Chromium writes) to RGB rows."""
    data = path.read_bytes()
    width, height, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", data[16:29])
    assert depth == 8 and ctype in (2, 6) and interlace == 0
    bpp = 3 if ctype == 2 else 4
    i, idat = 8, bytearray()
    while i < len(data):
        (n,) = struct.unpack(">I", data[i : i + 4])
        if data[i + 4 : i + 8] == b"IDAT":
            idat += data[i + 8 : i + 8 + n]
        i += 12 + n
    raw = zlib.decompress(bytes(idat))
    stride = width * bpp
    prev = bytearray(stride)
    rows = []
    for y in range(height):
        pos = y * (stride + 1)
        kind, line = raw[pos], bytearray(raw[pos + 1 : pos + 1 + stride])
        if kind == 1:
            for x in range(bpp, stride):
                line[x] = (line[x] + line[x - bpp]) & 255
        elif kind == 2:
            line = bytearray((a + b) & 255 for a, b in zip(line, prev, strict=True))
        elif kind == 3:
            for x in range(stride):
                left = line[x - bpp] if x >= bpp else 0
                line[x] = (line[x] + ((left + prev[x]) >> 1)) & 255
        elif kind == 4:
            for x in range(stride):
                a = line[x - bpp] if x >= bpp else 0
                b, c = prev[x], (prev[x - bpp] if x >= bpp else 0)
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line) if bpp == 3 else bytes(v for k, v in enumerate(line) if k % 4 != 3))
        prev = line
    return width, height, rows


def write_png(path: Path, width: int, rows: list[bytes]) -> None:
    def chunk(kind: bytes, body: bytes) -> bytes:
        return (
            struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
        )

    raw = b"".join(b"\x00" + r for r in rows)
    path.write_bytes(
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", width, len(rows), 8, 2, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(raw, 6))
        + chunk(b"IEND", b"")
    )


def series_colours(page: str, dark: bool) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    css = page.split("<style>")[1].split("</style>")[0]
    block = css.split("prefers-color-scheme:dark")[1] if dark else css.split("@media")[0]

    def rgb(var: str) -> tuple[int, int, int]:
        m = re.search(rf"--{var}:#([0-9a-f]{{6}})", block)
        assert m, var
        h = m.group(1)
        return int(h[0:2], 16), int(h[2:4], 16), int(h[4:6], 16)

    return rgb("plain"), rgb("ours")


def test_the_colour_check_catches_red_against_green() -> None:
    """Control: the old palette (plain red, ctxwrap green) fails the check the report passes."""
    for red, green in (
        ((0xC9, 0x2A, 0x2A), (0x2B, 0x8A, 0x3E)),
        ((0xFF, 0x6B, 0x6B), (0x69, 0xDB, 0x7C)),
    ):
        assert delta_e(simulate(red, DEUTERANOPIA), simulate(green, DEUTERANOPIA)) < MIN_DELTA_E
        assert (
            delta_e(
                simulate(red, ((1, 0, 0), (0, 1, 0), (0, 0, 1))),
                simulate(green, ((1, 0, 0), (0, 1, 0), (0, 0, 1))),
            )
            > MIN_DELTA_E
        )


@needs_chromium
@pytest.mark.parametrize("theme", ["light", "dark"])
def test_plain_and_ctxwrap_stay_apart_for_red_green_colour_blindness(
    pages: dict[str, Path], tmp_path: Path, theme: str
) -> None:
    """A screenshot of the cost chart through a deuteranopia (and protanopia) simulation: the
    pixels drawn in the plain and the ctxwrap colours stay far apart (CIE76 ΔE)."""
    page = pages["claude"]
    out = artifacts(tmp_path)
    shot = out / f"report-claude-1280-{theme}-full.png"
    flags = ["--window-size=1280,1300", f"--screenshot={shot}"]
    _, stderr, _ = chromium(tmp_path, page, *flags, *([DARK] if theme == "dark" else []))
    assert console_messages(stderr) == []
    plain, ours = series_colours(page.read_text(), theme == "dark")
    width, _, rows = png_rows(shot)

    counts: Counter[bytes] = Counter()  # a screenshot has few distinct colours
    for row in rows:
        counts.update(row[x : x + 3] for x in range(0, len(row), 3))

    def near(px: bytes, c: tuple[int, int, int]) -> bool:
        return all(abs(a - b) <= 3 for a, b in zip(px, c, strict=True))

    found = {
        name: [px for px in counts if near(px, colour)]
        for name, colour in (("plain", plain), ("ours", ours))
    }
    # both series are on screen, drawn in the colours the page declares
    drawn = {name: sum(counts[px] for px in pxs) for name, pxs in found.items()}
    assert drawn["plain"] > 200 and drawn["ours"] > 200, drawn
    for name, m in (("deuteranopia", DEUTERANOPIA), ("protanopia", PROTANOPIA)):
        sim_p = [simulate((px[0], px[1], px[2]), m) for px in found["plain"]]
        sim_o = [simulate((px[0], px[1], px[2]), m) for px in found["ours"]]
        worst = min(delta_e(a, b) for a in sim_p for b in sim_o)
        assert worst > MIN_DELTA_E, (name, worst)
    # what a deuteranope sees, for a person to look at
    sim = {
        px: bytes(_srgb(v) for v in simulate((px[0], px[1], px[2]), DEUTERANOPIA)) for px in counts
    }
    sim_rows = [b"".join(sim[row[x : x + 3]] for x in range(0, len(row), 3)) for row in rows]
    write_png(out / f"report-claude-1280-{theme}-deuteranopia.png", width, sim_rows)


# -- a phone-sized page with the widest figures a session gives (issue 44, item 11) --------------

_FIT_HARNESS = """<!doctype html><html><body style="margin:0">
<iframe id="f" src="{src}" width="{w}" height="{h}" style="border:0;display:block"></iframe>
<script>
document.getElementById("f").addEventListener("load", () => {{
  const d = document.getElementById("f").contentDocument;
  const width = d.documentElement.clientWidth;
  const right = (e) => e.getBoundingClientRect().right;
  // a number is whole when its cell holds all of it and the cell is on the screen (or in a
  // container that scrolls sideways, which then holds all of it too)
  const scroller = (e) => e.closest(".scroll");
  const cut = [...d.querySelectorAll("td.n, dd")].filter((e) =>
    e.scrollWidth > e.clientWidth + 0.5 ||
    (right(e) > width + 0.5 && !(scroller(e) && scroller(e).scrollWidth > scroller(e).clientWidth)))
    .map((e) => e.textContent.slice(0, 40) + " @" + Math.round(right(e)));
  const wide = [...d.querySelectorAll("body > *, section > *, header > *")]
    .filter((e) => right(e) > width + 0.5).map((e) => e.tagName + "#" + e.id);
  document.body.setAttribute("data-result", JSON.stringify({{
    width: width, scrollWidth: d.documentElement.scrollWidth, cut: cut, wide: wide,
    numbers: [...d.querySelectorAll("td.n")].map((e) => e.textContent),
  }}));
}});
</script></body></html>"""


def widest_report(path: Path) -> None:
    """The pi fixture's report with the widest strings a session can give: seven-digit
    figures, a two-mechanism needed-again line, a long path as a label and in a note."""
    from dataclasses import replace

    from ctxwrap.report import from_replay, render_html
    from ctxwrap.report._data import AuxRow, InterventionRow

    d = from_replay(PI16)
    d.mechanisms = [
        replace(
            m,
            saved_tokens=m.saved_tokens * 1000 + 1269,
            needed_again=(1269, 22000),
            needed_parts="writes 5 of 8, edits 1,269 of 22,222",
        )
        for m in d.mechanisms
    ]
    deep = "/home/someone/projects/a-rather-long-repository-name/src/deeply/nested/module.py"
    d.interventions += [
        InterventionRow(
            "mask", 21, deep, 1_269_000, 22, "r1a2b3c4d5e6f7a8b9", note=f"masked: idle; {deep}"
        )
    ]
    d.aux.append(AuxRow("summarise a long command's output", "bash", 1_269_000, 22_000, True))
    path.write_text(render_html(d))


@needs_chromium
@pytest.mark.parametrize("width", [390, 1280])
def test_no_card_runs_off_and_no_number_is_cut(tmp_path: Path, width: int) -> None:
    """At 390 px the page was 485 px wide: the mechanism cards ran off the right edge (a
    needed-again line that could not wrap) and numbers at the edge read `1,26` for 1,269."""
    page = tmp_path / "widest.html"
    widest_report(page)
    harness = tmp_path / f"fit-{width}.html"
    harness.write_text(_FIT_HARNESS.format(src=page.resolve().as_uri(), w=width, h=844))
    flags = ["--allow-file-access-from-files", "--hide-scrollbars", "--virtual-time-budget=5000"]
    dom, stderr, _ = chromium(tmp_path, harness, *flags, "--dump-dom")
    assert console_messages(stderr) == []
    m = re.search(r'data-result="([^"]+)"', dom)
    assert m, dom[-500:]
    got = json.loads(html.unescape(m.group(1)))
    assert got["width"] == width
    assert got["scrollWidth"] <= width, got
    assert got["wide"] == [] and got["cut"] == [], got
    assert "1,268,978" in got["numbers"] and "1,269,000" in got["numbers"]
    shot = artifacts(tmp_path) / f"report-widest-{width}.png"
    chromium(tmp_path, page, f"--window-size={width},2400", f"--screenshot={shot}")
    assert png_info(shot)[:2] == (width, 2400)
