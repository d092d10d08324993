"""Digests of real CI logs keep what a person fixing the failure needs.

tests/fixtures/realdata_mustkeep.json lists, per log of ../shared/realdata/logs, substrings
chosen by hand from the log and its expert annotation (failing file:line, test ids, error
messages, the final summary). Each log is digested as the daemon does for `sh build.sh` (the
command names no tool, so the family is sniffed or generic) with the log's exit status.
An aux answer that drops the digest's must-keep lines or claims a success the exit status
denies is refused, for every failing log.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from typing import Any

import pytest
from realdata_logs import log_names, log_params, read_log

from ctxwrap.digest import Digest, digest_bash_output
from ctxwrap.engine.bashout import scrub_temp_paths
from ctxwrap.mechanisms.digest import digest_refusal

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "realdata_mustkeep.json"
MUST_KEEP: dict[str, dict[str, Any]] = json.loads(FIXTURE.read_text())["logs"]
MAX_CHARS = 8192  # the daemon's: min(bash_max_summary_tokens * 8, 16000) at the default 1024
_DIGESTS: dict[str, tuple[Digest, str]] = {}


def digest_of(name: str) -> tuple[Digest, str]:
    if name not in _DIGESTS:
        digest = digest_bash_output(
            read_log(name),
            command="sh build.sh",
            exit_code=MUST_KEEP[name]["exit"],
            max_chars=MAX_CHARS,
        )
        _DIGESTS[name] = digest, scrub_temp_paths(digest.text)
    return _DIGESTS[name]


def test_every_real_log_has_hand_picked_lines() -> None:
    names = log_names()
    if not names:
        pytest.skip("real CI logs not found (see realdata_logs.py)")
    assert sorted(MUST_KEEP) == names


@pytest.mark.parametrize("name", log_params())
def test_the_digest_keeps_the_lines_a_reader_needs(name: str) -> None:
    if name not in MUST_KEEP:
        pytest.fail(f"{name}: no hand-picked lines in {FIXTURE.name}; read the log, add them")
    digest, text = digest_of(name)
    lost = [line for line in MUST_KEEP[name]["keep"] if line not in text]
    assert not lost, f"{digest.family}: lost {lost}"
    assert len(text) <= MAX_CHARS


@pytest.mark.parametrize(
    "name", log_params([n for n in log_names() if MUST_KEEP.get(n, {}).get("exit", 0) != 0])
)
def test_a_false_success_or_a_lossy_answer_is_refused(name: str) -> None:
    digest, _ = digest_of(name)
    must_keep = list(digest.must_keep)
    assert must_keep, "a failing run always has must-keep lines (generic ones at least)"
    exit_code = MUST_KEEP[name]["exit"]
    for false in ("Build OK, 0 errors.", "All tests passed.", "Everything succeeded."):
        assert digest_refusal(false, must_keep, exit_code=exit_code), false
    # Only the last must-keep line: every other failure is lost.
    if len(must_keep) > 1:
        assert digest_refusal(must_keep[-1], must_keep, exit_code=exit_code)
    # The must-keep lines themselves are a faithful answer.
    assert digest_refusal("\n".join(must_keep), must_keep, exit_code=exit_code) is None


def test_all_logs_digest_fast_and_small(summary_report: Any) -> None:
    names = log_names()
    if not names:
        pytest.skip("real CI logs not found (see realdata_logs.py)")
    texts = {name: read_log(name) for name in names if name in MUST_KEEP}
    started = time.process_time()
    reductions = []
    for name, text in texts.items():
        digest = digest_bash_output(
            text, command="sh build.sh", exit_code=MUST_KEEP[name]["exit"], max_chars=MAX_CHARS
        )
        reductions.append(1 - len(digest.text) / len(text))
    seconds = time.process_time() - started
    megabytes = sum(len(t) for t in texts.values()) / 1e6
    kept = sum(line in digest_of(name)[1] for name in names for line in MUST_KEEP[name]["keep"])
    total = sum(len(MUST_KEEP[name]["keep"]) for name in names)
    summary_report(
        "digests of the real CI logs",
        f"{len(texts)} logs, {megabytes:.1f} MB in {seconds:.2f} s CPU; median reduction "
        f"{statistics.median(reductions):.1%}; must-keep lines kept {kept} of {total}",
    )
    # ~1 s of CPU on the 2-core dev machine for 6.3 MB; the bound leaves room for load.
    assert seconds < 8.0
    assert statistics.median(reductions) > 0.9
