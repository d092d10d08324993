"""Every captured real output keeps its must-survive lines, and the corpus shrinks a lot.

Run with -s to see the per-fixture table.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from ctxwrap.digest import Digest, digest_bash_output

CORPUS = Path(__file__).resolve().parents[2] / "fixtures" / "outputs"
FIXTURES = sorted(p.name for p in CORPUS.iterdir() if (p / "meta.json").is_file())
MAX_CHARS = 8000
LARGE = 8000
MEDIAN_REDUCTION_TARGET = 0.90


def _digest(name: str) -> tuple[dict[str, object], bytes, Digest]:
    meta = json.loads((CORPUS / name / "meta.json").read_text())
    raw = (CORPUS / name / "output.txt").read_bytes()
    exit_code = meta["exit_code"]
    assert isinstance(exit_code, int | None)
    digest = digest_bash_output(
        raw, command=str(meta["command"]), exit_code=exit_code, max_chars=MAX_CHARS
    )
    return meta, raw, digest


def test_corpus_is_big_enough() -> None:
    assert len(FIXTURES) >= 25


@pytest.mark.parametrize("name", FIXTURES)
def test_must_survive_lines_survive(name: str) -> None:
    meta, _raw, digest = _digest(name)
    must_survive = meta["must_survive"]
    assert isinstance(must_survive, list) and must_survive, "each fixture names what must survive"
    missing = [line for line in must_survive if line not in digest.text]
    assert not missing, f"{name}: lost {missing}\n--- digest ---\n{digest.text}"
    assert len(digest.text) <= MAX_CHARS
    assert "\x1b" not in digest.text
    assert digest.original_lines >= digest.kept_lines


def test_median_reduction_on_large_outputs() -> None:
    rows = []
    reductions = []
    for name in FIXTURES:
        _meta, _raw, digest = _digest(name)
        reduction = 1 - len(digest.text) / max(1, digest.original_chars)
        rows.append((name, digest.family, digest.original_chars, len(digest.text), reduction))
        if digest.original_chars > LARGE:
            reductions.append(reduction)
    print(f"\n{'fixture':26} {'family':10} {'chars':>8} {'digest':>7} {'reduction':>9}")
    for name, family, original, kept, reduction in rows:
        print(f"{name:26} {family:10} {original:>8,} {kept:>7,} {reduction:>9.1%}")
    median = statistics.median(reductions)
    print(f"median reduction over {len(reductions)} outputs > {LARGE} chars: {median:.1%}")
    assert len(reductions) >= 5
    assert median >= MEDIAN_REDUCTION_TARGET
