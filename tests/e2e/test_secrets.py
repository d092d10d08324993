"""Secrets pushed through bash, read and write with real pi: nothing ctxwrap keeps or sends
to an aux model holds one (issue 12, finding 4).

A corpus of fake secrets (tests/fixtures/secrets/corpus.json: bare and named AWS keys,
provider keys, GitHub/GitLab/Slack tokens, JWTs, PEM blocks, URL passwords, passwords) is
printed by a large bash command (digested), read (tagged) and written (fact), once with
the aux model answering and once with it down. Then no secret may be in any file under
ctxwrap's state, runtime or config dirs, in `ctxwrap facts`, in `ctxwrap show`, in any
aux request the scripted server received, in the digest or fact the model saw, or in the
bash result of pi's session file.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support import PI_VERSIONS, ROUND_ONE_TAGS, PiRun, Xdg, ctxwrap, run_ctxwrap_pi, tool_contents

pytestmark = pytest.mark.e2e

CORPUS = json.loads(
    (Path(__file__).resolve().parent.parent / "fixtures" / "secrets" / "corpus.json").read_text()
)["secrets"]
SECRET_LINES = sorted({line for e in CORPUS for line in e["secret"].splitlines() if len(line) >= 8})
SECRETS_TXT = "\n".join(e["text"] for e in CORPUS) + "\n"
# The secrets first: the tagger and the fact writer see the first 6,000 characters.
ENV_FILE = SECRETS_TXT + "".join(f"SETTING_{i}=value-{i}\n" for i in range(60))
FIRST_LINE_KEY = "sk-proj-" + "Qw3rTy7UiOp9AsDf1GhJkL2ZxCvBnM5" * 2
SETTINGS_PY = (
    f"# OPENAI_API_KEY={FIRST_LINE_KEY}\n"
    "SECOND_LINE_MARKER = True\n"
    + "".join(f"VALUE_{i} = {e['text']!r}\n" for i, e in enumerate(CORPUS))
    + "".join(f"def handler_{i}():\n    return {i}\n" for i in range(40))
)
SECRETS = [*SECRET_LINES, FIRST_LINE_KEY]
SCRIPT = [
    {"tool_calls": [{"name": "bash", "arguments": {"command": "seq 1 30000; cat secrets.txt"}}]},
    {"tool_calls": [{"name": "read", "arguments": {"path": "secrets.env"}}]},
    {
        "tool_calls": [
            {"name": "write", "arguments": {"path": "src/settings.py", "content": SETTINGS_PY}}
        ]
    },
    {"text": "done"},
]
# every aux task, the write fact too (the write strip is off under pi by default)
AUX_ALWAYS = {"PI_CTX_BASH_AUX_MIN_CHARS": "0", "PI_CTX_WRITE": "1", **ROUND_ONE_TAGS}


def found_in(text: str) -> list[str]:
    return [s[:16] + "…" for s in SECRETS if s in text]


def files_under(*roots: Path) -> Iterator[Path]:
    for root in roots:
        if root.exists():
            yield from (p for p in root.rglob("*") if p.is_file() and not p.is_socket())


def session_bash_results(run: PiRun) -> list[str]:
    out: list[str] = []
    for path in run.session_files():
        for line in path.read_text(errors="replace").splitlines():
            entry = json.loads(line)
            message = entry.get("message") or {}
            if message.get("role") == "toolResult" and message.get("toolName") == "bash":
                out.append(json.dumps(message.get("content"), ensure_ascii=False))
    return out


def model_saw(run: PiRun) -> tuple[str, str]:
    """(the bash digest, the write fact) as the last main request carried them."""
    last = run.main_bodies()[-1]
    digest = next(
        c for c in tool_contents(last) if " digested by ctxwrap · " in c.split("\n", 1)[0]
    )
    text = json.dumps(last["messages"], ensure_ascii=False)
    start = text.index("[Wrote src/settings.py")
    return digest, text[start : text.index("]", start) + 1]


def stored_handles(xdg: Xdg) -> list[str]:
    with sqlite3.connect(f"file:{xdg.db}?mode=ro", uri=True) as conn:
        return [row[0] for row in conn.execute("SELECT handle FROM raw_outputs")]


def aux_bodies(run: PiRun) -> dict[str, list[str]]:
    by_task: dict[str, list[str]] = {}
    for request in run.server.aux_requests:
        body: Any = request.body
        by_task.setdefault(str(request.aux_task), []).append(json.dumps(body, ensure_ascii=False))
    return by_task


@pytest.mark.parametrize("pi", PI_VERSIONS)
def test_no_secret_is_kept_or_sent_to_the_aux_model(pi: str, tmp_path: Path, xdg: Xdg) -> None:
    files = {"secrets.env": ENV_FILE, "secrets.txt": SECRETS_TXT}
    up = run_ctxwrap_pi(pi, tmp_path / "up", xdg, SCRIPT, files=files, extra_env=AUX_ALWAYS)
    assert up.proc.returncode == 0, up.proc.stderr[-2000:]
    down = run_ctxwrap_pi(
        pi, tmp_path / "down", xdg, SCRIPT, files=files, extra_env=AUX_ALWAYS, aux_status=500
    )
    assert down.proc.returncode == 0, down.proc.stderr[-2000:]
    assert (up.work / "src/settings.py").read_text() == SETTINGS_PY  # pi wrote the real file

    # Aux requests: all three kinds were made, carried the redacted corpus, and no secret.
    for run in (up, down):
        bodies = aux_bodies(run)
        assert sorted(bodies) == ["digest", "fact", "tag"], sorted(bodies)
        for task, texts in bodies.items():
            for text in texts:
                assert found_in(text) == [], (pi, task, found_in(text))
                assert "[REDACTED:" in text, (task, "the corpus never reached this prompt")

    # What the model saw as the digest and the fact, with the aux model up and down, and
    # the bash result pi kept in its session file.
    for run in (up, down):
        digest, fact = model_saw(run)
        assert found_in(digest) == [] and found_in(fact) == [], (found_in(digest), fact)
        assert "SECOND_LINE_MARKER" not in fact
        for result in session_bash_results(run):
            assert found_in(result) == []
    down_digest, down_fact = model_saw(down)
    assert "[REDACTED:" in down_digest  # the extract held the secrets, redacted
    assert down_fact.startswith("[Wrote src/settings.py — defines handler_0")

    # ctxwrap facts and ctxwrap show, as a user would run them.
    facts = ctxwrap(xdg, "facts", "--json")
    assert facts.returncode == 0 and "src/settings.py" in facts.stdout
    assert found_in(facts.stdout) == []
    handles = stored_handles(xdg)
    assert len(handles) >= 4  # two bash outputs, two reads
    for handle in handles:
        shown = ctxwrap(xdg, "show", handle)
        assert shown.returncode == 0, shown.stderr
        assert found_in(shown.stdout) == [], (handle, found_in(shown.stdout))
        assert "[REDACTED:" in shown.stdout

    # Every file ctxwrap owns: SQLite (and its WAL), raw outputs, events, daemon log.
    owned = list(files_under(xdg.state, xdg.runtime, xdg.config))
    assert any(p.name.endswith(".db") for p in owned) and any(p.parent.name == "raw" for p in owned)
    for path in owned:
        text = path.read_bytes().decode("utf-8", "replace")
        assert found_in(text) == [], (str(path), found_in(text))
