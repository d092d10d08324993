"""edits.py and edits.ts agree on generated inputs, not only on the golden files.

Generated: arbitrary JSON arguments (non-ASCII and lone-surrogate strings, astral keys, floats
JavaScript prints differently, integers past 2**53), odd messages, malformed and conflicting
edits, reused ids. One node process per batch keeps this fast.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from ctxwrap.engine.edits import apply_edits, describe_tail, parse_edits

ROOT = Path(__file__).parents[3]
NODE = ROOT / ".tools" / "bin" / "node"
node = str(NODE) if NODE.exists() else shutil.which("node")


def node_ok() -> bool:
    if node is None:
        return False
    out = subprocess.run([node, "--version"], capture_output=True, text=True).stdout
    major, minor = (int(x) for x in out.strip().lstrip("v").split(".")[:2])
    return (major, minor) >= (22, 18)  # type stripping without a flag


pytestmark = pytest.mark.skipif(not node_ok(), reason="needs node >= 22.18")

IDS = st.sampled_from(["a", "b", "c", "d", ""])
TEXT = st.text(st.characters(exclude_categories=()), max_size=12) | st.sampled_from(
    ["😀", "é\n", " \t\n", "", "\ud800", "x\ud83d", "\uffff", "\x1c", "\x85", "\u00a0", " \ufeff"]
)
NUM = (
    st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from([1.0, 1e21, 1.5e-7, -0.0, 0.1, 5e-324])
)
JSON_VALUE = st.recursive(
    st.none() | st.booleans() | NUM | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=8,
)
BLOCK = st.one_of(
    st.fixed_dictionaries({"type": st.just("text"), "text": TEXT}),
    st.fixed_dictionaries({"type": st.just("thinking"), "thinking": TEXT}),
    st.fixed_dictionaries(
        {
            "type": st.just("toolCall"),
            "id": IDS | st.integers(0, 2),
            "name": st.sampled_from(["read", "write", "bash", ""]),
            "arguments": JSON_VALUE
            | st.fixed_dictionaries({"path": TEXT, "content": TEXT | st.integers()}),
        }
    ),
    st.just({"type": "image", "data": "AAAA", "mimeType": "image/png"}),
    st.none(),
)
MESSAGE = st.one_of(
    st.fixed_dictionaries({"role": st.just("user"), "content": st.lists(BLOCK, max_size=2)}),
    st.fixed_dictionaries({"role": st.just("custom"), "customType": TEXT, "content": TEXT}),
    st.fixed_dictionaries(
        {"role": st.just("assistant"), "content": st.lists(BLOCK, max_size=4) | TEXT}
    ),
    st.fixed_dictionaries(
        {
            "role": st.just("toolResult"),
            "toolCallId": IDS | st.none(),
            "toolName": TEXT,
            "content": st.lists(BLOCK, max_size=2),
            "isError": st.booleans() | st.none(),
        }
    ),
    st.just({"role": "compactionSummary", "summary": "s", "tokensBefore": 1}),
    st.none() | st.integers(),
)
EDIT = st.one_of(
    st.fixed_dictionaries(
        {
            "kind": st.sampled_from(["tombstone", "remove", "strip_write", "bogus"]),
            "toolCallId": IDS | st.integers(0, 2),
            "text": TEXT,
            "savedChars": st.integers(-5, 5) | st.floats(-5, 5) | TEXT,
        }
    ),
    st.fixed_dictionaries(
        {"kind": st.sampled_from(["tombstone", "strip_write", "remove"]), "toolCallId": IDS}
    ),
    st.none(),
)
CASE = st.fixed_dictionaries(
    {
        "messages": st.lists(MESSAGE, max_size=8),
        "seen": st.lists(IDS, max_size=2),
        "edits": st.lists(EDIT, max_size=5),
    }
)


def js_like(v: Any) -> Any:
    """What a JavaScript round trip does to a JSON value: integers past 2**53 become doubles."""
    if isinstance(v, bool) or v is None or isinstance(v, str | float):
        return v
    if isinstance(v, int):
        return float(v) if abs(v) >= 2**53 else v
    if isinstance(v, list):
        return [js_like(x) for x in v]
    return {k: js_like(x) for k, x in v.items()}


# No shrinking: each example runs node once, and shrinking a batch of 40 cases would take
# minutes; the failing case is printed by the assertion instead.
@settings(
    max_examples=15,
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    suppress_health_check=[HealthCheck.too_slow],
)
@given(cases=st.lists(CASE, min_size=20, max_size=40))
def test_python_and_typescript_agree(cases: list[dict[str, Any]]) -> None:
    assert node is not None
    proc = subprocess.run(
        [node, str(Path(__file__).with_name("cross_edits.ts"))],
        input=json.dumps(cases),  # ensure_ascii: lone surrogates travel as \\udxxx escapes
        capture_output=True,
        text=True,
        check=True,
    )
    ts_out = json.loads(proc.stdout)
    for case, got in zip(cases, ts_out, strict=True):
        tail = describe_tail(case["messages"], set(case["seen"])).to_json()
        sent = apply_edits(case["messages"], parse_edits(case["edits"]))
        assert got["tail"] == tail, case
        assert js_like(got["sent"]) == js_like(json.loads(json.dumps(sent))), case
