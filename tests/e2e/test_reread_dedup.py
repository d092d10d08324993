"""A file read again, unchanged, is not sent twice (mechanisms/dedup.py), on both pi versions.

The second identical read reaches the model as a one-line pointer to the first, which stays
whole; a read after the file changed, and a third read after a pointer (the model asked again,
invariant 5), are whole. Requests still extend each other byte for byte (a tail edit), and no
tag is asked for the repeat.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support import PI_VERSIONS, ROUND_ONE_TAGS, Xdg, run_ctxwrap_pi, tool_contents

pytestmark = pytest.mark.e2e

SOURCE = "".join(f"def handler_{i}(request):\n    return respond({i})\n\n" for i in range(150))
CHANGED = SOURCE.replace("respond(149)", "respond(-1)  # changed-marker")


def read(path: str) -> dict[str, object]:
    return {"tool_calls": [{"name": "read", "arguments": {"path": path}}]}


def bash(command: str) -> dict[str, object]:
    return {"tool_calls": [{"name": "bash", "arguments": {"command": command}}]}


def prefix_chain(bodies: list[dict[str, object]]) -> None:
    for k in range(len(bodies) - 1):
        a = json.dumps(bodies[k]["messages"])[:-1]
        assert json.dumps(bodies[k + 1]["messages"]).startswith(a), f"request {k + 1} rewrote"


@pytest.mark.parametrize("pi", PI_VERSIONS)
def test_an_unchanged_reread_points_at_the_first_read(pi: str, tmp_path: Path, xdg: Xdg) -> None:
    script = [
        read("app.py"),
        bash("echo checking"),
        read("app.py"),  # unchanged: a pointer
        read("app.py"),  # asked again after the pointer: whole
        bash(f"printf '%s' '{CHANGED}' > app.py"),
        read("app.py"),  # changed on disk: whole
        {"text": "done"},
    ]
    run = run_ctxwrap_pi(
        pi, tmp_path, xdg, script, files={"app.py": SOURCE}, extra_env=ROUND_ONE_TAGS
    )
    assert run.proc.returncode == 0, run.proc.stderr
    bodies = run.main_bodies()
    assert len(bodies) == 7
    prefix_chain(bodies)
    results = tool_contents(bodies[-1])
    reads = [r for r in results if "handler_" in r or "returned the same" in r]
    assert len(reads) == 4, [r[:80] for r in reads]
    first, second, third, fourth = reads
    assert "def handler_149" in first  # the first read stays whole
    assert "returned the same" in second and "read app.py" in second
    assert "`ctxwrap recall r" in second  # the first read, should a compaction summarise it
    assert len(second) < 400
    assert "def handler_149" in third  # the model asked again: kept (invariant 5)
    assert "changed-marker" in fourth  # new content: whole
    # The pointer was there the first time the model saw that result (a tail edit).
    assert any("returned the same" in r for r in tool_contents(bodies[3]))
    # Only the first read is tagged: no tag for the repeat, and later reads of a signature
    # ctxwrap hid once are kept whatever a tag would say.
    assert len([r for r in run.server.aux_requests if r.aux_task == "tag"]) == 1
