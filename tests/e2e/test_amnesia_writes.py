"""Mechanisms 2 and 4 end to end: tags, frozen tail-only edits, write facts, resume."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support import (
    PI_VERSIONS,
    ROUND_ONE_TAGS,
    Xdg,
    ctxwrap,
    request_messages_json,
    run_ctxwrap_pi,
    tool_contents,
)

from ctxwrap.testing.model_server import aux_task_of

pytestmark = pytest.mark.e2e

RELEVANT = "def parse_config(path):\n" + "".join(
    f"    # relevant detail {i}: keep me\n" for i in range(120)
)
IRRELEVANT = "LICENSE TEXT\n" + "".join(
    f"Permission is hereby granted, clause {i}, irrelevant-marker\n" for i in range(120)
)
WRITE_BODY = '"""Model definition: a small CNN."""\n' + "".join(
    f"layer_{i} = Conv(channels={i})\n" for i in range(220)
)

READS = [
    {"tool_calls": [{"name": "read", "arguments": {"path": "config_parser.py"}}]},
    {"tool_calls": [{"name": "read", "arguments": {"path": "LICENSE"}}]},
    {"tool_calls": [{"name": "bash", "arguments": {"command": "echo after-reads"}}]},
    {"text": "done"},
]
DROP_LICENSE = [{"task": "tag", "match": "irrelevant-marker", "answer": '{"decision": "DROP"}'}]
FILES = {"config_parser.py": RELEVANT, "LICENSE": IRRELEVANT}


def assert_prefix_chain(bodies: list[dict[str, Any]]) -> None:
    """Request k's messages are a prefix of request k+1's, byte for byte (invariant 3)."""
    for k in range(len(bodies) - 1):
        a, b = request_messages_json(bodies[k]), request_messages_json(bodies[k + 1])
        assert b[: len(a)] == a, f"request {k + 1} rewrote what request {k} sent"
        assert b != a, "two consecutive requests are identical (invariant 5)"


@pytest.mark.parametrize("pi", PI_VERSIONS)
def test_dropped_read_never_reaches_model_after_its_round(
    pi: str, tmp_path: Path, xdg: Xdg
) -> None:
    run = run_ctxwrap_pi(
        pi, tmp_path, xdg, READS, aux_rules=DROP_LICENSE, files=FILES, extra_env=ROUND_ONE_TAGS
    )
    assert run.proc.returncode == 0, run.proc.stderr
    bodies = run.main_bodies()
    assert len(bodies) == 4
    assert_prefix_chain(bodies)
    sent = [json.dumps(b["messages"]) for b in bodies]
    assert "relevant detail 119" in sent[1] and "relevant detail 119" in sent[3]  # kept
    assert not any("irrelevant-marker" in s for s in sent), "the dropped file reached the model"
    tomb = [c for c in tool_contents(bodies[2]) if "judged not needed" in c]
    assert len(tomb) == 1 and "read LICENSE" in tomb[0] and "`ctxwrap recall r" in tomb[0]
    assert sorted(r.aux_task for r in run.server.aux_requests) == ["tag", "tag"]
    # The session keeps the true history (pi's own record is not edited) ...
    assert "irrelevant-marker" in run.session_text()
    # ... and a resumed session shows the same view: the edit is replayed, not re-decided.
    resumed = run_ctxwrap_pi(
        pi,
        tmp_path,
        xdg,
        [{"text": "resumed"}],
        home=run.home,
        args=("--continue",),
        aux_status=500,
        extra_env=ROUND_ONE_TAGS,
    )
    assert resumed.proc.returncode == 0, resumed.proc.stderr
    (body,) = resumed.main_bodies()
    assert "irrelevant-marker" not in json.dumps(body["messages"], ensure_ascii=False)
    assert any("judged not needed" in c for c in tool_contents(body))
    # Same messages as the last request of the first run, then the new prompt.
    before = request_messages_json(bodies[3])[1:]  # without the system message
    after = request_messages_json(body)[1:]
    assert after[: len(before)] == before


@pytest.mark.serial
@pytest.mark.parametrize("pi", PI_VERSIONS)
def test_aux_down_retains_everything_without_delay(pi: str, tmp_path: Path, xdg: Xdg) -> None:
    run = run_ctxwrap_pi(
        pi, tmp_path, xdg, READS, aux_rules=DROP_LICENSE, files=FILES, aux_status=500
    )
    assert run.proc.returncode == 0
    bodies = run.main_bodies()
    assert_prefix_chain(bodies)
    assert "irrelevant-marker" in json.dumps(bodies[3]["messages"])  # retained
    slow = run_ctxwrap_pi(
        pi, tmp_path / "slow", xdg, READS, aux_rules=DROP_LICENSE, files=FILES, aux_delay_s=5
    )
    assert slow.proc.returncode == 0
    assert "irrelevant-marker" in json.dumps(slow.main_bodies()[3]["messages"])  # too late → RETAIN
    # Each tag waits at most tag_wait_ms (0.4 s) at the next LLM call, not the aux's 5 s.
    assert slow.elapsed < run.elapsed + 4, (slow.elapsed, run.elapsed)


@pytest.mark.serial
@pytest.mark.parametrize("pi", PI_VERSIONS)
def test_the_tag_grace_does_not_keep_pi_alive(pi: str, tmp_path: Path, xdg: Xdg) -> None:
    """The tags answer at once; the grace timer the context step armed for them must not hold
    `pi -p` open after its last request (it did, for the rest of tag_wait_ms)."""
    script = [
        {"tool_calls": [{"name": "read", "arguments": {"path": "LICENSE"}}]},
        {"text": "done"},
    ]
    run = run_ctxwrap_pi(
        pi,
        tmp_path,
        xdg,
        script,
        aux_rules=DROP_LICENSE,
        files=FILES,
        extra_env={"PI_CTX_TAG_WAIT_MS": "8000", **ROUND_ONE_TAGS},
    )
    assert run.proc.returncode == 0, run.proc.stderr
    assert [r.aux_task for r in run.server.aux_requests] == ["tag"]
    assert "judged not needed" in json.dumps(run.main_bodies()[-1]["messages"])  # tag applied
    assert run.ended_at - run.server.main_requests[-1].timestamp < 4.0


WRITE = [
    {
        "tool_calls": [
            {"name": "write", "arguments": {"path": "src/model.py", "content": WRITE_BODY}}
        ]
    },
    # The model "thinks" for a second: the aux fact (not waited for) is in by the next round.
    {
        "tool_calls": [{"name": "bash", "arguments": {"command": "wc -l src/model.py"}}],
        "delay_s": 1.0,
    },
    {"text": "done"},
]


# `write = true`: the write strip on under pi, where its default (`auto`) keeps the body
ON = {"PI_CTX_WRITE": "1"}


def test_pis_default_keeps_the_write_body_and_asks_no_fact(tmp_path: Path, xdg: Xdg) -> None:
    """Under pi the write strip is off by default (`write = "auto"`: on pi's real sessions the
    agent needed the body again in one write of two, docs/accounting.md): every later request
    carries the body as plain pi sends it, and no fact is made or asked of the aux model."""
    rules = [{"task": "fact", "answer": "small CNN definition with 220 conv layers"}]
    run = run_ctxwrap_pi("pi", tmp_path, xdg, WRITE, aux_rules=rules)
    assert run.proc.returncode == 0, run.proc.stderr
    bodies = run.main_bodies()
    assert_prefix_chain(bodies)
    for body in bodies[1:]:
        text = json.dumps(body["messages"], ensure_ascii=False)
        assert "layer_219" in text and "content stripped by ctxwrap" not in text
        assert "[Wrote src/model.py" not in text
    assert [aux_task_of(r.body) for r in run.server.aux_requests] == []  # no fact, no tag


@pytest.mark.parametrize("pi", PI_VERSIONS)
def test_write_body_is_stripped_and_a_fact_kept(pi: str, tmp_path: Path, xdg: Xdg) -> None:
    rules = [{"task": "fact", "answer": "small CNN definition with 220 conv layers"}]
    # the write strip on (its default under pi, `auto`, keeps the body: tested below)
    run = run_ctxwrap_pi(pi, tmp_path, xdg, WRITE, aux_rules=rules, extra_env=ON)
    assert run.proc.returncode == 0, run.proc.stderr
    assert (run.work / "src/model.py").read_text() == WRITE_BODY  # the file on disk is complete
    bodies = run.main_bodies()
    assert_prefix_chain(bodies)
    for body in bodies[1:]:
        text = json.dumps(body["messages"], ensure_ascii=False)
        assert "layer_219" not in text, "the write body was sent again"
        assert "content stripped by ctxwrap" in text
        # The heuristic fact at once: the write round does not wait for the aux model ...
        assert "[Wrote src/model.py — Model definition: a small CNN." in text
    # ... whose fact follows one round later.
    aux_fact = "[Wrote src/model.py — small CNN definition with 220 conv layers"
    assert aux_fact not in json.dumps(bodies[1]["messages"], ensure_ascii=False)
    assert aux_fact in json.dumps(bodies[2]["messages"], ensure_ascii=False)
    out = ctxwrap(xdg, "facts", "--json")
    facts = json.loads(out.stdout)["facts"]
    assert [f["path"] for f in facts] == ["src/model.py"] and facts[0]["source"] == "aux"
    resumed = run_ctxwrap_pi(
        pi, tmp_path, xdg, [{"text": "resumed"}], home=run.home, args=("--continue",)
    )
    text = json.dumps(resumed.main_bodies()[0]["messages"], ensure_ascii=False)
    assert aux_fact in text and "layer_219" not in text


@pytest.mark.serial
@pytest.mark.parametrize("pi", PI_VERSIONS)
def test_a_slow_aux_model_does_not_delay_the_write_round(pi: str, tmp_path: Path, xdg: Xdg) -> None:
    """The aux fact is not waited for: a write round with an aux model that takes 4 s to answer
    goes on at once, with the heuristic fact (it waited up to the round's 20 s budget)."""
    rules = [{"task": "fact", "answer": "small CNN definition with 220 conv layers"}]
    run = run_ctxwrap_pi(pi, tmp_path, xdg, WRITE, aux_rules=rules, aux_delay_s=4.0, extra_env=ON)
    assert run.proc.returncode == 0, run.proc.stderr
    first, second, _ = run.server.main_requests
    assert second.timestamp - first.timestamp < 2.5, second.timestamp - first.timestamp
    assert "[Wrote src/model.py — Model definition: a small CNN." in json.dumps(
        second.body["messages"], ensure_ascii=False
    )


@pytest.mark.parametrize("pi", ["pi"])
def test_write_fact_falls_back_to_heuristic_and_small_writes_pass(
    pi: str, tmp_path: Path, xdg: Xdg
) -> None:
    script = [
        {
            "tool_calls": [
                {"name": "write", "arguments": {"path": "src/model.py", "content": WRITE_BODY}}
            ]
        },
        {"tool_calls": [{"name": "write", "arguments": {"path": "tiny.txt", "content": "small"}}]},
        {"text": "done"},
    ]
    run = run_ctxwrap_pi(pi, tmp_path, xdg, script, aux_status=500, extra_env=ON)
    bodies = run.main_bodies()
    text = json.dumps(bodies[-1]["messages"], ensure_ascii=False)
    assert "[Wrote src/model.py — Model definition: a small CNN." in text  # heuristic fact
    assert (
        '"content\\": \\"small\\"' in text or '\\"small\\"' in text
    )  # under the threshold: untouched
    assert "layer_219" not in json.dumps(bodies[-1]["messages"], ensure_ascii=False)


ODD = {
    "bin.dat": "\x00\x01\x02\x7f header \x1b[31m" + "é漢" * 300,  # control bytes, ANSI, non-ASCII
    "surrogate.txt": "lone \ud800 surrogate "
    * 40,  # not encodable as UTF-8: pi decides what lands on disk
    "empty.txt": "",
}


@pytest.mark.parametrize("pi", ["pi"])
def test_odd_writes_land_on_disk_exactly_as_with_plain_pi(
    pi: str, tmp_path: Path, xdg: Xdg
) -> None:
    # ~11 MB: far past pi's window by its own estimate, as a generated file or a dump can be
    big = "".join(f"row {i:08d} {'x' * 80}\n" for i in range(120_000))
    writes = {**ODD, "big.txt": big}
    script: list[dict[str, Any]] = [
        {"tool_calls": [{"name": "write", "arguments": {"path": p, "content": c}}]}
        for p, c in writes.items()
    ] + [{"text": "done"}]
    plain = run_ctxwrap_pi(pi, tmp_path / "plain", xdg, script, plain=True, timeout=300)
    run = run_ctxwrap_pi(pi, tmp_path / "wrapped", xdg, script, timeout=300, extra_env=ON)
    assert plain.proc.returncode == 0 and run.proc.returncode == 0, run.proc.stderr[-2000:]
    for name in writes:
        assert (run.work / name).read_bytes() == (plain.work / name).read_bytes(), name
    assert (run.work / "big.txt").stat().st_size == len(big)
    bodies = [json.dumps(b["messages"], ensure_ascii=False) for b in run.main_bodies()]
    last = bodies[-1]
    assert "row 00119999" not in last  # the 11 MB body is not sent again
    assert "[Wrote big.txt" in last and "120,000 lines" in last  # the fact knows the real size
    assert len(last) < 60_000
    # pi's own estimate counts the unpruned 11 MB and it compacts; the earlier facts were in
    # every request before that.
    assert any("[Wrote bin.dat" in b and "[Wrote surrogate.txt" in b for b in bodies)


APP_OLD = "".join(
    f"    legacy_step_{i} = run_legacy({i})  # old-only line {i}\n" for i in range(12)
)
APP_NEW = "".join(f"    step_{i} = run({i})\n" for i in range(12))
APP = "def main():\n" + APP_OLD + "    return 0\n"
MISSING = "".join(f"    never_in_the_file_{i} = 1  # failing-edit line\n" for i in range(12))


@pytest.mark.parametrize("pi", PI_VERSIONS)
def test_an_applied_edits_old_text_leaves_later_requests(pi: str, tmp_path: Path, xdg: Xdg) -> None:
    """The edit itself runs as the model asked (the file changes); from the next request on,
    the model's own call carries its new text and a marker for the old text, which is no longer
    in the file. An edit that failed keeps its old text (the model may retry with it)."""
    assert len(APP_OLD) >= 300 and len(MISSING) >= 300
    script = [
        {
            "tool_calls": [
                {
                    "name": "edit",
                    "arguments": {
                        "path": "src/app.py",
                        "edits": [{"oldText": APP_OLD, "newText": APP_NEW}],
                    },
                }
            ]
        },
        {
            "tool_calls": [
                {
                    "name": "edit",
                    "arguments": {"path": "src/app.py", "oldText": MISSING, "newText": "x = 1\n"},
                }
            ]
        },
        {"text": "done"},
    ]
    run = run_ctxwrap_pi(pi, tmp_path, xdg, script, files={"src/app.py": APP})
    assert run.proc.returncode == 0, run.proc.stderr
    assert (run.work / "src/app.py").read_text() == "def main():\n" + APP_NEW + "    return 0\n"
    bodies = run.main_bodies()
    assert len(bodies) == 3
    assert_prefix_chain(bodies)
    for body in bodies[1:]:
        text = json.dumps(body["messages"], ensure_ascii=False)
        assert "old-only line" not in text, "the replaced text was sent again"
        assert "this edit was applied, so that text is no longer in the file" in text
        assert "step_11 = run(11)" in text  # the new text stays
    # the failed edit's old text is all the model has of what it tried: kept
    assert "failing-edit line" in json.dumps(bodies[2]["messages"], ensure_ascii=False)
    # pi's own session keeps the true call
    assert "old-only line 11" in run.session_text()
    stats = json.loads(ctxwrap(xdg, "stats", "--json").stdout)
    edits = stats["needed_again"]["mechanisms"]["edits"]
    assert edits["interventions"] == 1 and edits["needed_again"] == 0
    by_mech = {m["mechanism"]: m for m in stats["totals"]["mechanisms"]}
    assert by_mech["writes"]["saved_chars"] > len(APP_OLD)  # counted each request it was left out
    # --continue replays the frozen strip: the same view, the chain goes on
    resumed = run_ctxwrap_pi(
        pi, tmp_path, xdg, [{"text": "resumed"}], home=run.home, args=("--continue",)
    )
    (body,) = resumed.main_bodies()
    assert "old-only line" not in json.dumps(body["messages"], ensure_ascii=False)
    before = request_messages_json(bodies[2])[1:]
    assert request_messages_json(body)[1:][: len(before)] == before
