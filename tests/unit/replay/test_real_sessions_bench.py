"""bench/real_sessions.py on a small subset of the real-session corpus (issue 21).

The corpus lives outside the package (`../shared/realdata`); without it the test skips."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

BENCH = Path(__file__).parents[3] / "bench"
sys.path.insert(0, str(BENCH))
import real_sessions as rs  # noqa: E402

CORPUS = rs.default_corpus()
SUBSET = (
    "claude/codemie-ai_codemie-code__session-196820da.jsonl",
    "pi/badlogic_pi-mono__session.jsonl",
)
pytestmark = pytest.mark.skipif(
    CORPUS is None or not all((CORPUS / f).is_file() for f in SUBSET),
    reason="the real-session corpus (../shared/realdata next to the repository) is absent",
)


def test_subset_per_session_and_medians_with_needed_again(tmp_path: Path) -> None:
    assert CORPUS is not None
    for f in SUBSET:
        (tmp_path / Path(f).parent.name).mkdir(exist_ok=True)
        shutil.copy(CORPUS / f, tmp_path / f)
    before = rs.run(tmp_path, "before", 40)
    after = rs.run(tmp_path, "default", 40)
    assert not before["skipped_files"] and not after["skipped_files"]
    for res in (before, after):
        assert {r["agent"] for r in res["sessions"]} == {"claude", "pi"}
        for r in res["sessions"]:
            assert r["calls"] >= 40 and r["plain_weighted"] > 0
            assert 0 < r["cost_ratio"] < 1.2
            assert r["cost_saved_after_rereads_pct"] <= r["cost_saved_pct"]
            for m in r["needed_again"]["mechanisms"].values():
                assert 0 <= m["needed_again"] <= m["interventions"]
        assert set(res["medians"]) == {"claude", "pi"}
        for med in res["medians"].values():
            for m in med["needed_again"].values():
                # each needed-again result is needed one way: copied, re-read or recalled
                assert m["copied"] + m["reread"] + m["recalled"] == m["needed_again"]
    # The defaults pay more than the old ones on both agents (the corpus's medians are in
    # docs/accounting.md; this subset is one session of each)
    for agent in ("claude", "pi"):
        assert (
            after["medians"][agent]["median_cost_saved_pct"]
            > before["medians"][agent]["median_cost_saved_pct"]
        )
    text = rs.render([before, after], sessions=True)
    assert "needed again" in text and "median claude" in text and "median pi" in text
    masking = after["medians"]["pi"]["needed_again"]["masking"]
    assert masking["needed_again"] > 0  # this pi session re-reads files it read long before
    assert f"{masking['reread']} re-read" in text


@pytest.mark.parametrize(
    ("agent", "model", "aux"),
    [
        ("claude", "claude-opus-4-5", "claude-haiku-4-5"),
        ("codex", "gpt-5.5", "gpt-5-mini"),
        ("pi", "claude-sonnet-4-5", "claude-sonnet-4-5"),
    ],
)
def test_aux_calls_are_priced_on_the_model_that_runs_them(agent: str, model: str, aux: str) -> None:
    """Codex's aux calls run on gpt-5-mini: priced on the session's gpt-5.5 they cost 10×
    as much and made a 20-call rollout look as if ctxwrap cost 12.7 % of plain in aux alone."""
    from ctxwrap.engine.cost import default_prices

    g = {
        "model": model,
        "format": agent,
        "aux_estimated": {"amnesia": {"calls": 2, "input_tokens": 10_000, "output_tokens": 100}},
    }
    p, a = default_prices(model), default_prices(aux)
    assert rs.aux_model(agent, model) == aux
    assert rs.aux_weighted(g) == pytest.approx((10_000 * a.input + 100 * a.output) / p.input)


@pytest.fixture
def one_claude_session(tmp_path: Path) -> Path:
    """A corpus of the subset's Claude Code session alone, laid out per agent."""
    assert CORPUS is not None
    (tmp_path / "claude").mkdir()
    shutil.copy(CORPUS / SUBSET[0], tmp_path / SUBSET[0])
    return tmp_path


def test_sweep_finds_the_best_policy_under_each_needed_again_cap(one_claude_session: Path) -> None:
    """`--sweep`: every policy of a grid replayed, the defaults among them, and per cap on the
    worst mechanism's needed-again share the policy that saves most within it."""
    grid = {"mask_kinds": ("recall", "all"), "write": (True, False)}
    seen: list[tuple[int, int]] = []
    res = rs.sweep(
        one_claude_session, "claude", 40, grid=grid, progress=lambda n, t: seen.append((n, t))
    )
    pts = res["points"]
    assert seen[-1] == (4, 4) and len(pts) == 4
    assert [p["settings"] for p in pts] == [
        {"mask_kinds": k, "write": w} for k in ("recall", "all") for w in (True, False)
    ]
    # the defaults: masking what can be recalled, the write strip off (issue 41's rule)
    assert res["default"] is pts[1] and [p["is_default"] for p in pts] == [
        False,
        True,
        False,
        False,
    ]
    assert [p["built"] for p in pts] == [True, True, False, False]
    for p in pts:
        shares = [v["share_pct"] for v in p["needed_again"].values() if v["interventions"]]
        assert p["worst_share_pct"] == max(shares, default=0.0)
        # with the write strip off, no write is stripped, so none can be needed again
        assert ("writes" in p["needed_again"]) == p["settings"]["write"]

    # masking every result kind hides no less than masking only what can be recalled (on this
    # session every result masking takes has a recall path: reads, and command outputs too
    # short to digest that masking keeps for recall)
    def masked(p: dict[str, Any]) -> int:
        return int(p["needed_again"].get("masking", {}).get("interventions", 0))

    assert masked(pts[2]) >= masked(pts[0]) > 0
    for fr in res["frontier"]:
        within = [p for p in pts if fr["cap_pct"] is None or p["worst_share_pct"] <= fr["cap_pct"]]
        assert fr["policies"] == len(within)
        if within:
            assert fr["most_saved"]["cost_saved_pct"] == max(p["cost_saved_pct"] for p in within)
            assert fr["most_after_rereads"]["after_rereads_pct"] == max(
                p["after_rereads_pct"] for p in within
            )
        built = [p for p in within if p["built"]]
        assert (fr["most_saved_built"] is None) == (not built)
        if built:
            assert fr["most_saved_built"]["cost_saved_pct"] == max(
                p["cost_saved_pct"] for p in built
            )
    text = rs.render_sweep(res)
    assert text.startswith("== sweep claude: 4 policies, median of 1 session(s)")
    assert f"the defaults: {res['default']['cost_saved_pct']:g}% saved" in text
    assert "no cap: 4 policies" in text


def test_sweep_of_an_agent_without_a_long_session_says_so(one_claude_session: Path) -> None:
    res = rs.sweep(one_claude_session, "codex", 40, grid={"write": (True, False)})
    assert res["points"] == [] and res["default"] is None
    assert rs.render_sweep(res) == "== sweep codex: no session of this agent long enough\n"


def test_sweep_render_names_a_repeated_best_once() -> None:
    """A looser cap that admits nothing better prints one line, not the same three again."""

    def point(saved: float, share: float, built: bool) -> dict[str, Any]:
        return {
            "settings": {"write": built},
            "sessions": 4,
            "cost_saved_pct": saved,
            "after_rereads_pct": saved - 1,
            "worst_share_pct": share,
            "worst_mechanism": "masking",
            "built": built,
        }

    a, b = point(10.0, 4.0, True), point(20.0, 12.0, False)

    def cap(pct: float | None, *pts: dict[str, Any]) -> dict[str, Any]:
        best = max(pts, key=lambda p: p["cost_saved_pct"])
        return {
            "cap_pct": pct,
            "policies": len(pts),
            "most_saved": best,
            "most_after_rereads": best,
            "most_saved_built": a,
        }

    res = {
        "agent": "claude",
        "points": [a, b],
        "default": a,
        "frontier": [cap(5.0, a), cap(15.0, a, b), cap(None, a, b)],
    }
    text = rs.render_sweep(res)
    assert "needed again <= 5%: 1 policy\n      most saved:   10% saved" in text
    assert "needed again <= 15%: 2 policies\n      most saved:   20% saved" in text
    assert "most saved with a recall path: 10% saved" in text
    assert text.endswith("   no cap: 2 policies, the same best\n")


def test_sweep_ties_on_the_saving_go_to_what_keeps_more_after_the_charge() -> None:
    more = {"cost_saved_pct": 21.2, "after_rereads_pct": 17.6}
    less = {"cost_saved_pct": 21.2, "after_rereads_pct": 15.8}
    assert max([less, more], key=rs._by_saved) is more
    assert max([more, less], key=rs._by_saved) is more


def test_sweep_from_the_command_line(
    one_claude_session: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    corpus = str(one_claude_session)
    monkeypatch.setattr(rs, "SWEEP_GRID", {"write": (True, False)})
    assert rs.main(["--corpus", corpus, "--sweep", "claude"]) == 0
    assert capsys.readouterr().out.startswith("== sweep claude: 2 policies, median of 1 session")
    assert rs.main(["--corpus", corpus, "--sweep", "claude", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [p["settings"] for p in doc["points"]] == [{"write": True}, {"write": False}]
    # a policy next to the sweep would be ignored: refused instead
    with pytest.raises(SystemExit) as e:
        rs.main(["--corpus", corpus, "--sweep", "claude", "--policy", "default"])
    assert e.value.code == 2
    assert "--sweep replays its own grid" in capsys.readouterr().err
