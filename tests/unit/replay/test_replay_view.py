"""`ctxwrap replay` as a person reads it (issue 22): one row per session sorted by date with
project, agent, calls, $ plain → $ with ctxwrap and %, a total; sessions that already ran under
ctxwrap apart; the tagger as a range with its own cost, outside the totals; every line fits
COLUMNS; nothing readable → a non-zero exit with the reason."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ctxwrap.replay._view import render_text

FIXTURES = Path(__file__).parents[2] / "fixtures" / "sessions"
CTXWRAP = Path(sys.executable).parent / "ctxwrap"


def cli(
    *args: str, columns: int = 100, state: Path | None = None
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": str(columns), "NO_COLOR": "1"}
    if state is not None:
        env["XDG_STATE_HOME"] = str(state)
    return subprocess.run(
        [str(CTXWRAP), "replay", *args], env=env, capture_output=True, text=True, timeout=120
    )


@pytest.fixture(scope="module")
def sessions(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("sessions")
    proj = root / ".claude" / "projects" / "-home-me-src-shop"
    proj.mkdir(parents=True)
    shutil.copy(FIXTURES / "claude-2.1.197.jsonl", proj / "a1.jsonl")
    shutil.copy(FIXTURES / "pi-compaction.jsonl", root / "pi-one.jsonl")
    # a session that really ran under ctxwrap (its digests, tombstones and state entries)
    shutil.copy(FIXTURES / "pi-under-ctxwrap.jsonl", root / "under.jsonl")
    return root


@pytest.mark.parametrize("columns", [60, 100])
def test_one_row_per_session_sorted_with_total_and_it_fits(
    sessions: Path, columns: int, tmp_path: Path
) -> None:
    out = cli(str(sessions), columns=columns, state=tmp_path)
    assert out.returncode == 0, out.stderr
    for line in out.stdout.splitlines():
        assert len(line) <= columns, line
    text = out.stdout
    assert text.startswith("ctxwrap replay — 2 sessions,")
    assert "no model was called" in text
    table = text.split("\n\n")[1].splitlines()
    header = table[0].split()
    assert header[0] == "date" and "calls" in header and "cost" in header
    rows = [
        ln
        for ln in table[2:]
        if ln and not ln.startswith(("-", " ", "cost in", "plain ÷ bill", "unpriced:"))
    ]
    assert rows[-1].startswith("total")
    dates = [r.split()[0] for r in rows[:-1]]
    assert dates == sorted(dates) and all(re.fullmatch(r"(\d{4}-)?\d\d-\d\d", d) for d in dates)
    if columns == 100:
        # Claude Code's project directory name (its last part when the column is narrow)
        assert re.search(r"(-home-me-src-)?shop ", text), text
        assert "Claude Code" in text and " pi " in text


def test_already_run_under_ctxwrap_is_listed_apart(sessions: Path, tmp_path: Path) -> None:
    text = cli(str(sessions), state=tmp_path).stdout
    _, _, apart = text.partition("already run under ctxwrap")
    assert apart, text
    assert "1 session" in apart
    doc = json.loads(cli("--json", str(sessions), state=tmp_path).stdout)
    flags = {Path(g["path"]).name: g["under_ctxwrap"] for g in doc["groups"]}
    assert flags == {"a1.jsonl": False, "pi-one.jsonl": False, "under.jsonl": True}
    # --json totals are the replayed sessions only; the one that ran under ctxwrap apart
    calls = {Path(g["path"]).name: g["llm_calls"] for g in doc["groups"]}
    assert doc["totals"]["sessions"] == 2
    assert doc["totals"]["llm_calls"] == calls["a1.jsonl"] + calls["pi-one.jsonl"]
    assert doc["ran_under_ctxwrap"]["sessions"] == 1
    assert doc["ran_under_ctxwrap"]["llm_calls"] == calls["under.jsonl"] > 0


def test_tagger_is_a_range_with_its_cost_and_outside_the_totals(
    sessions: Path, tmp_path: Path
) -> None:
    doc = json.loads(cli("--json", str(sessions / "pi-one.jsonl"), state=tmp_path).stdout)
    text = render_text(doc, width=100)
    bound = doc["totals"]["tagger_bound_tokens"]
    amnesia = next(m for m in doc["totals"]["mechanisms"] if m["mechanism"] == "amnesia")
    tagger = next(ln for ln in text.splitlines() if "(tagger)" in ln)
    assert re.search(rf"\b0 ?… ?{bound:,}\b", tagger) and "bounded" in tagger, tagger
    assert f"≈{amnesia['aux_tokens_estimated']:,}" in tagger
    total = next(ln for ln in text.splitlines() if ln.startswith("total") and "," in ln)
    counted_aux = sum(
        m["aux_tokens_estimated"]
        for m in doc["totals"]["mechanisms"]
        if m["mechanism"] != "amnesia"
    )
    assert total.split()[2] == f"{counted_aux:,}"  # the tagger's estimate is not charged
    assert "simulated" in text


def test_with_tag_the_header_does_not_claim_no_model_call(sessions: Path, tmp_path: Path) -> None:
    doc = json.loads(cli("--json", str(sessions / "pi-one.jsonl"), state=tmp_path).stdout)
    text = render_text(doc, width=100, tagged=True)
    assert "no model" not in text.splitlines()[0]
    assert "tagged" in text.splitlines()[0]


def test_nothing_readable_exits_non_zero_with_the_reason(tmp_path: Path) -> None:
    (tmp_path / "x.jsonl").write_text('{"hello": "world"}\n')
    out = cli(str(tmp_path), state=tmp_path)
    assert out.returncode == 66
    assert "no session could be read" in out.stderr and "Claude Code entry" in out.stderr
    missing = cli(str(tmp_path / "nope"), state=tmp_path)
    assert missing.returncode == 66 and "no session file found" in missing.stderr
    # the hint names where each of the three agents keeps its sessions, at 60 columns
    hint = missing.stderr[missing.stderr.index("hint: ") :]
    for where in ("~/.pi/agent/sessions", "~/.claude/projects", "~/.codex/sessions"):
        assert where in hint
    assert "Codex" in hint
    assert max(len(line) for line in hint.splitlines()) <= 60


def test_each_mechanism_row_says_how_much_of_what_it_hid_was_needed_again(
    sessions: Path, tmp_path: Path
) -> None:
    doc = json.loads(cli("--json", str(sessions / "pi-one.jsonl"), state=tmp_path).stdout)
    (group,) = doc["groups"]
    group["needed_again"]["mechanisms"] = {
        "masking": {"interventions": 9, "needed_again": 2},
        "writes": {"interventions": 3, "needed_again": 1},
        "edits": {"interventions": 5, "needed_again": 0},
    }
    lines = render_text(doc, width=120).splitlines()

    def row(label: str) -> str:
        return next(ln for ln in lines if label in ln)

    assert "2 of 9" in row("(history masking)")
    assert "1 of 8" in row("(write facts, edit strip)")  # its savings include the edit strip's
    assert row("(bash digest)").split()[-2] == "–"  # it hid nothing here
    assert "3 of 17" in row("total ")
    assert any(ln.startswith("needed again: of the results a mechanism hid") for ln in lines)
    # the write strip's share is said apart from the edit strip's it shares a row with
    assert "the writes row apart: writes 1 of 3, edits 0 of 5" in " ".join(
        ln.strip() for ln in lines
    )
    group["needed_again"]["mechanisms"].pop("edits")
    assert "apart" not in render_text(doc, width=120)  # one mechanism: nothing to split


def test_one_unpriced_model_leaves_the_priced_sessions_in_dollars(
    sessions: Path, tmp_path: Path
) -> None:
    """The pi fixture runs on a model with no known price, the Claude Code one on a priced
    model: the priced row stays in $, the other says unpriced, the total is the priced part
    (marked *), and --json's headline carries the same figures the text prints."""
    text = cli(str(sessions), columns=100, state=tmp_path).stdout
    rows: dict[str, str] = {}
    for ln in text.split("already run under ctxwrap")[0].splitlines():
        if re.match(r"\d{4}-\d\d-\d\d ", ln):
            rows[ln.split()[2]] = ln
    assert "unpriced" in rows["pi"] and "$" not in rows["pi"], rows
    assert re.search(r"\$\d", rows["Claude"]), rows
    total = next(ln for ln in text.splitlines() if ln.startswith("total"))
    assert "*" in total and "unpriced: no known price for" in text
    doc = json.loads(cli("--json", str(sessions), state=tmp_path).stdout)
    head = doc["headline"]
    assert head["usd_partial"] and len(head["unpriced_sessions"]) == 1
    assert f"cost {head['text']} · " in text.splitlines()[1]


def test_a_session_that_would_cost_more_says_why(sessions: Path, tmp_path: Path) -> None:
    """Invariant 10 in replay's text: the cause replay found (`costs_more_because`, also in
    --json) printed for its session, in the words every view uses; none for the others."""
    from ctxwrap.headline import carried_text

    doc = json.loads(cli("--json", str(sessions / "pi-one.jsonl"), state=tmp_path).stdout)
    (group,) = doc["groups"]
    assert "costs_more_because" in group
    assert "costs more:" not in render_text(doc, width=100)
    group["costs_more_because"] = carried_text(40_000)
    lines = render_text(doc, width=60).splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.startswith("costs more: "))
    said = " ".join(ln.strip() for ln in lines[at : at + 3])
    assert f"({group['session_id'][:8]}): carried up to 40,000 tokens past plain's" in said
    assert all(len(ln) <= 60 for ln in lines[at : at + 3])
