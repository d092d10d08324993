"""Aux answers replace nothing until validated (DESIGN invariant 7, issue 12 finding 6).

A digest must keep what the extractive digester ranked must-keep (summary lines, failing
tests, errors with file:line) and be text; a fact is one printable line of words that is not
a tag answer. Each refusal keeps the extract or the heuristic fact; a good answer is taken.
The accept path runs on a real Daemon object (SQLite on disk), not a stub.
"""

from __future__ import annotations

import random
import string
from collections.abc import Iterator
from pathlib import Path

import pytest

from ctxwrap.aux.prompts import clean_fact
from ctxwrap.config import load_config
from ctxwrap.daemon.service import Daemon
from ctxwrap.digest import digest_bash_output
from ctxwrap.mechanisms.digest import accept_digest, digest_refusal
from ctxwrap.mechanisms.writes import finish_fact
from ctxwrap.state.session import PendingAux, SessionRuntime

PYTEST_OUT = "\n".join(
    [
        "============================= test session starts ==============================",
        "collected 120 items",
        *[
            f"tests/test_mod{i}.py ........................................ [ {i}%]"
            for i in range(60)
        ],
        "=================================== FAILURES ===================================",
        "________________________________ test_slugify _________________________________",
        "    def test_slugify():",
        ">       assert slugify('A B') == 'a-b'",
        "E       AssertionError: assert 'a_b' == 'a-b'",
        "tests/test_slug.py:14: AssertionError",
        "=========================== short test summary info ============================",
        "FAILED tests/test_slug.py::test_slugify - AssertionError: assert 'a_b' == 'a-b'",
        "FAILED tests/test_parse.py::test_dates - ValueError: bad month",
        "======================== 2 failed, 118 passed in 3.21s =========================",
    ]
)
GOOD_DIGEST = (
    "2 failed, 118 passed.\n"
    "FAILED tests/test_slug.py::test_slugify (tests/test_slug.py:14): assert 'a_b' == 'a-b'\n"
    "FAILED tests/test_parse.py::test_dates: ValueError bad month"
)
GARBAGE = "".join(
    random.Random(7).choice(string.ascii_letters + string.punctuation) for _ in range(300)
)
PROSE = (
    "The test suite ran and most of the tests passed, but a couple of them failed because of "
    "assertion problems. You should look at the failing tests and fix them."
)


@pytest.fixture
def must_keep() -> list[str]:
    digest = digest_bash_output(PYTEST_OUT, command="pytest", exit_code=1, max_chars=6000)
    assert digest.family == "pytest"
    assert any("2 failed" in line for line in digest.must_keep), digest.must_keep
    assert any("test_slugify" in line for line in digest.must_keep), digest.must_keep
    return list(digest.must_keep)


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    loaded = load_config(tmp_path / "absent.toml", environ={})
    d = Daemon(loaded, socket=tmp_path / "s.sock", state_dir=tmp_path / "state")
    yield d
    d.store.close()


def test_good_digest_keeps_the_must_keep_lines(must_keep: list[str]) -> None:
    assert digest_refusal(GOOD_DIGEST, must_keep) is None


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        (GARBAGE, "not text"),
        (PROSE, "lost"),
        ('{"decision": "DROP"}', "tag-shaped"),
        ("2 failed, 118 passed. FAILED test_dates: bad month", "lost 'tests/test_slug.py::"),
        (GOOD_DIGEST.replace("2 failed", "3 failed"), "lost '2'"),
        (GOOD_DIGEST + "\x1b[31m", "control characters"),
    ],
    ids=["garbage", "prose", "tag", "lost-failure", "wrong-count", "control"],
)
def test_bad_digests_are_refused(must_keep: list[str], answer: str, why: str) -> None:
    refused = digest_refusal(answer, must_keep)
    assert refused is not None and refused.startswith(why), refused


@pytest.mark.parametrize(
    "answer",
    [GARBAGE[:200], PROSE, "x" * 100_000, '{"decision":"DROP"}'],
    ids=["garbage", "prose", "oversize", "tag"],
)
def test_accept_digest_keeps_the_extract_on_a_bad_answer(
    daemon: Daemon, must_keep: list[str], answer: str
) -> None:
    rt = SessionRuntime("s1", 0)
    extract = "x" * 50_000  # long enough that only validation can refuse a short answer
    ctx = {"extract": extract, "header": "[digest]", "must_keep": must_keep, "exit_line": None}
    assert accept_digest(daemon, rt, PendingAux("digest", "c1", ctx), answer) is None


def test_accept_digest_takes_a_good_answer_and_states_the_exit(
    daemon: Daemon, must_keep: list[str]
) -> None:
    rt = SessionRuntime("s1", 0)
    ctx = {
        "extract": "x" * 50_000,
        "header": "[digest]",
        "must_keep": must_keep,
        "exit_line": "Command exited with code 1",
    }
    text = accept_digest(daemon, rt, PendingAux("digest", "c1", ctx), GOOD_DIGEST)
    assert text == "[digest]\n" + GOOD_DIGEST + "\n\nCommand exited with code 1"


@pytest.mark.parametrize(
    "answer",
    [
        '{"decision":"DROP"}',
        '{"decision": "RETAIN"}',
        PROSE + "\n\n" + PROSE,
        "Sure, here is a summary of the file you wrote for the agent",
        GARBAGE[:120],
        "x" * 1000,
        "CNN model\x00 with hidden bytes",
        " ".join(["word"] * 60),
        "",
    ],
    ids=["drop", "retain", "paragraphs", "preamble", "garbage", "oversize", "nul", "long", "empty"],
)
def test_bad_facts_are_refused_and_the_heuristic_stays(daemon: Daemon, answer: str) -> None:
    assert clean_fact(answer, max_chars=360, path="src/model.py") is None
    rt = SessionRuntime("s1", 0)
    ctx = {"path": "src/model.py", "lines": 40}
    assert finish_fact(daemon, rt, PendingAux("fact", "c1", ctx), answer) is None
    assert daemon.facts("s1").facts == []  # nothing stored over the heuristic


def test_a_good_fact_is_accepted(daemon: Daemon) -> None:
    answer = "CNN architecture, 3 conv layers, trains on CIFAR-10 with Adam (lr 1e-3)"
    assert clean_fact(answer, max_chars=360) == answer
    rt = SessionRuntime("s1", 0)
    fact = finish_fact(daemon, rt, PendingAux("fact", "c1", {"path": "m.py", "lines": 40}), answer)
    assert fact is not None and answer in fact
    assert [f.source for f in daemon.facts("s1").facts] == ["aux"]
    # The echo of our own frame is still trimmed.
    assert clean_fact("Wrote m.py — Flask app, 2 routes", max_chars=360, path="m.py") == (
        "Flask app, 2 routes"
    )
