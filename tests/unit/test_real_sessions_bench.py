"""bench/real_sessions.py on a small subset of the real-session corpus (issue 21).

The corpus lives outside the package (`../shared/realdata`); without it the test skips."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).parents[2] / "bench"
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
