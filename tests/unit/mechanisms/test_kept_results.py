"""Which results the daemon is given only to keep for masking (`mechanisms.keeps_result_of`):
the same list as the pi bridge's `keepsResultOf` (tests/fixtures/kept_results.json)."""

from __future__ import annotations

import json
from pathlib import Path

from ctxwrap.mechanisms import keeps_result_of

CASES = Path(__file__).parents[2] / "fixtures" / "kept_results.json"


def test_a_tool_no_other_mechanism_takes_is_kept() -> None:
    cases = {k: v for k, v in json.loads(CASES.read_text()).items() if k != "_"}
    assert len(cases) >= 20
    assert {name: keeps_result_of(name) for name in cases} == cases
