"""Every place a secret could leave or be kept: aux prompts, heuristic facts, the raw store."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ctxwrap.aux import prompts
from ctxwrap.engine.facts import heuristic_fact
from ctxwrap.state.rawstore import RawStore
from ctxwrap.state.store import Store

CORPUS = json.loads(
    (Path(__file__).resolve().parents[2] / "fixtures" / "secrets" / "corpus.json").read_text()
)["secrets"]
ALL_TEXT = "\n".join(e["text"] for e in CORPUS)


def leaks(text: str) -> list[str]:
    return [
        f"{e['kind']}: {line[:20]}"
        for e in CORPUS
        for line in e["secret"].splitlines()
        if line and line in text
    ]


def test_digest_prompt_is_redacted() -> None:
    prompt = prompts.digest_prompt(
        command="deploy --token ghp_" + "A1b2C3d4E5" * 4,
        exit_code=1,
        user_prompt="use key " + CORPUS[0]["text"],
        extract=ALL_TEXT,
    )
    assert leaks(prompt) == [] and "ghp_A1b2" not in prompt


def test_tag_prompt_is_redacted_including_arguments() -> None:
    prompt = prompts.tag_prompt(
        tool="read",
        args={"path": ".env", "note": CORPUS[0]["text"]},
        result=ALL_TEXT,
        user_prompt="read it",
        max_chars=200_000,
    )
    assert leaks(prompt) == []


def test_fact_prompt_is_redacted() -> None:
    prompt = prompts.fact_prompt(path="src/settings.py", content=ALL_TEXT, max_chars=200_000)
    assert leaks(prompt) == [] and prompt.startswith("Path: src/settings.py")


@pytest.mark.parametrize("entry", CORPUS, ids=[e["kind"] for e in CORPUS])
def test_a_cut_through_a_secret_leaks_no_part_of_it(entry: dict[str, str]) -> None:
    secret = entry["secret"].splitlines()[0]
    filler = "x = 1\n" * 100
    start = len(filler) + entry["text"].index(secret)
    for cut in (start + 8, start + len(secret) // 2, start + len(secret) - 4):
        prompt = prompts.tag_prompt(
            tool="read", args={}, result=filler + entry["text"], user_prompt="", max_chars=cut
        )
        shown = prompt.split("Result:\n", 1)[1]
        assert secret[:8] not in shown or len(secret) < 12, (cut, shown[-80:])


def test_fact_answer_is_redacted_too() -> None:
    fact = prompts.clean_fact("settings with key AKIAIOSFODNN7EXAMPLE", max_chars=200)
    assert fact is not None and "AKIAIOSFODNN7EXAMPLE" not in fact


@pytest.mark.parametrize(
    "first_line",
    [
        "# OPENAI_API_KEY=sk-proj-" + "Ab1Cd2Ef3G" * 5,
        "// token: ghp_" + "a1B2c3D4e5" * 4,
        "# wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        '"""password = "hunter2-correct-horse" """',
        "-- postgres://app:Xy7dbpass9@db.internal:5432/app",
    ],
)
def test_heuristic_fact_never_carries_a_secret_nor_the_next_line(first_line: str) -> None:
    content = first_line + "\nSECOND_LINE_MARKER = 1\n" + "def handler():\n    pass\n" * 200
    fact = heuristic_fact("src/app.py", content)
    for piece in ("sk-proj-Ab1", "ghp_a1B2", "wJalrXUtn", "hunter2", "Xy7dbpass9"):
        assert piece not in fact, fact
    assert "SECOND_LINE_MARKER" not in fact and "\n" not in fact
    assert fact.startswith("[Wrote src/app.py — defines handler") and "~402 lines" in fact


def test_heuristic_fact_keeps_a_harmless_first_comment_line_only() -> None:
    content = "# Parses the config file.\n# Second comment line.\nimport os\n" + "x = 1\n" * 300
    fact = heuristic_fact("src/config.py", content)
    assert "Parses the config file." in fact and "Second comment" not in fact


def test_raw_store_redacts_across_block_boundaries(tmp_path: Path) -> None:
    store = Store(tmp_path / "db.sqlite")
    raw = RawStore(tmp_path / "raw", store, max_bytes=1 << 26, retention_days=7)
    lines: list[str] = []
    for i, entry in enumerate(CORPUS * 3):
        lines.extend(f"{i} filler line {j} " + "y" * 60 for j in range(400))  # ~30 KB apart
        lines.extend(entry["text"].splitlines())
    stored = raw.put_lines(
        iter(lines),
        session_id="s",
        tool_call_id="c",
        tool_name="bash",
        command="cat .env # " + CORPUS[0]["text"],
    )
    kept = (raw.root / f"{stored.handle}.txt").read_text()
    assert leaks(kept) == []
    assert kept.count("[REDACTED:") >= len(CORPUS) * 3
    row = store.query("SELECT command FROM raw_outputs WHERE handle=?", (stored.handle,))
    assert leaks(row[0]["command"]) == []
    store.conn.commit()
    assert leaks((tmp_path / "db.sqlite").read_bytes().decode("latin-1")) == []
