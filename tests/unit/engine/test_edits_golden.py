"""Golden cases shared with tests/node/edits.test.ts: both languages must produce these files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ctxwrap.engine.edits import apply_edits, decide_edits, describe_tail, parse_edits

CASES = sorted((Path(__file__).parents[2] / "fixtures" / "edits").glob("*.json"))


def load(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(path.read_text())
    return doc


def test_enough_cases() -> None:
    assert len(CASES) >= 8


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.stem)
def test_describe_tail(path: Path) -> None:
    case = load(path)
    assert describe_tail(case["messages"], set(case["seen"])).to_json() == case["tail"]


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.stem)
def test_decide_edits(path: Path) -> None:
    case = load(path)
    if "tags" not in case:
        pytest.skip("apply-only case")
    edits = decide_edits(
        describe_tail(case["messages"], set(case["seen"])),
        case["tags"],
        mode=case["mode"],
        dropped_sigs=set(case["droppedSigs"]),
        write_min_bytes=case["writeMinBytes"],
        edit_min_chars=case.get("editMinChars", 0),
    )
    assert [e.model_dump() for e in edits] == case["edits"]


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.stem)
def test_apply_edits(path: Path) -> None:
    case = load(path)
    frozen = parse_edits(case["frozen"]) + parse_edits(case["edits"])
    sent = apply_edits(case["messages"], frozen)
    assert sent == case["expected"]
    # byte for byte, not just equal as values (key order is part of the cache key)
    assert json.dumps(sent, ensure_ascii=False) == json.dumps(case["expected"], ensure_ascii=False)
