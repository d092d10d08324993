"""Batched tagging end to end: the read-like results of one parallel tool round are tagged in
one aux request run through pi's own provider code, and each result gets its own decision."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from support import PI_VERSIONS, ROUND_ONE_TAGS, Xdg, run_ctxwrap_pi, tool_contents

from ctxwrap.testing.model_server import tag_batch_items

pytestmark = pytest.mark.e2e

RELEVANT = "def parse_config(path):\n" + "".join(
    f"    # relevant detail {i}: keep me\n" for i in range(120)
)
LICENSE = "LICENSE TEXT\n" + "".join(
    f"Permission is hereby granted, clause {i}, vendored license\n" for i in range(120)
)
NOTES = "".join(f"design note {i}: the parser keeps comments\n" for i in range(120))
MORE = "".join(f"changelog entry {i}: parser fixes\n" for i in range(120))
FILES = {
    "config_parser.py": RELEVANT,
    "LICENSE": LICENSE,
    "NOTES.md": NOTES,
    "CHANGES.md": MORE,
    "tiny.txt": "hi\n",
}
ROUND = [
    {
        "tool_calls": [
            {"name": "read", "arguments": {"path": "config_parser.py"}},
            {"name": "read", "arguments": {"path": "LICENSE"}},
            {"name": "bash", "arguments": {"command": "echo beside-the-reads"}},
            {"name": "read", "arguments": {"path": "tiny.txt"}},  # too small to tag
            {"name": "read", "arguments": {"path": "NOTES.md"}},
        ]
    },
    # a round of one (another file: an unchanged re-read would be a pointer, not tagged)
    {"tool_calls": [{"name": "read", "arguments": {"path": "CHANGES.md"}}]},
    {"text": "done"},
]
RULES = [{"task": "tag", "match": "vendored license", "answer": '{"decision": "DROP"}'}]


@pytest.mark.parametrize("pi", PI_VERSIONS)
def test_a_parallel_round_is_tagged_in_one_aux_request(pi: str, tmp_path: Path, xdg: Xdg) -> None:
    run = run_ctxwrap_pi(
        pi, tmp_path, xdg, ROUND, aux_rules=RULES, files=FILES, extra_env=ROUND_ONE_TAGS
    )
    assert run.proc.returncode == 0, run.proc.stderr
    tags = [r for r in run.server.aux_requests if r.aux_task == "tag"]
    # one request for the round of three taggable reads, one for the round of one
    assert len(tags) == 2, [json.dumps(r.body)[:200] for r in tags]
    batches = [tag_batch_items(str(r.body["messages"][-1]["content"])) for r in tags]
    sizes = sorted(len(b[1]) for b in batches if b is not None)
    assert sizes == [1, 3]
    bodies = run.main_bodies()
    assert len(bodies) == 3
    sent = json.dumps(bodies[1]["messages"])
    assert "vendored license" not in sent  # the license alone was dropped ...
    assert "relevant detail 119" in sent and "design note 119" in sent  # ... the others kept
    tomb = [c for c in tool_contents(bodies[1]) if "judged not needed" in c]
    assert len(tomb) == 1 and "read LICENSE" in tomb[0]
    with sqlite3.connect(xdg.db) as db:
        decisions = sorted(db.execute("SELECT decision FROM tags").fetchall())
        aux = db.execute("SELECT COUNT(*), MIN(input_tokens) FROM aux_calls WHERE task='tag'")
        n_calls, min_tokens = aux.fetchone()
    assert decisions == [("DROP",), ("RETAIN",), ("RETAIN",), ("RETAIN",)]
    assert n_calls == 2 and min_tokens > 0  # the batch's tokens counted once


SLOW_BESIDE = [
    {
        "tool_calls": [
            {"name": "read", "arguments": {"path": "config_parser.py"}},
            {"name": "read", "arguments": {"path": "LICENSE"}},
            {"name": "bash", "arguments": {"command": "sleep 2; echo slept"}},
        ]
    },
    {"text": "done"},
]


@pytest.mark.parametrize("pi", PI_VERSIONS)
def test_the_batch_does_not_wait_for_calls_it_does_not_tag(
    pi: str, tmp_path: Path, xdg: Xdg
) -> None:
    """The tag (1 s here) starts when the last read ends, not when the slow bash does: it is
    ready before the next LLM call, so its DROP applies (started after the bash, it would miss
    the 0.4 s grace and count as RETAIN)."""
    run = run_ctxwrap_pi(
        pi,
        tmp_path,
        xdg,
        SLOW_BESIDE,
        aux_rules=RULES,
        files=FILES,
        aux_delay_s=1.0,
        extra_env=ROUND_ONE_TAGS,
    )
    assert run.proc.returncode == 0, run.proc.stderr
    bodies = run.main_bodies()
    assert len(bodies) == 2
    sent = json.dumps(bodies[1]["messages"])
    assert "slept" in sent and "relevant detail 119" in sent
    assert "vendored license" not in sent
    assert len([r for r in run.server.aux_requests if r.aux_task == "tag"]) == 1
