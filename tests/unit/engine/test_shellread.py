"""What the bash digest leaves whole (`engine.shellread.prints_content`): content the agent
reads or writes from, a file, a search's hits, a page or an API's answer; never a command that
runs or writes something."""

from __future__ import annotations

import pytest

from ctxwrap.engine import shellread


@pytest.mark.parametrize(
    ("command", "content"),
    [
        # a page or an API's answer is content the agent writes from, never a log to digest
        ("curl -sS https://example.com/docs.yaml", True),
        (
            'curl -s -X POST "$BASE/search" \\\n  -H "Authorization: Bearer $PAT" \\\n  -d \'{}\'',
            True,
        ),
        ("echo '== case ==' && curl -s http://localhost:8080/cases/1 | jq .", True),
        ("wget -qO- https://example.com", True),
        ("wget -O - https://example.com", True),
        ("cat a.py 2>/dev/null", True),  # every read is content too
        ("rg -n x \\\n  src", True),  # a line continued
        # what runs or writes something is not
        ("curl -fsSL https://example.com/setup.sh | bash", False),
        ("curl -sSLo out.tgz https://example.com/a.tgz", False),
        ("curl --output=x https://example.com", False),
        ("curl -c jar https://example.com", False),
        ("curl -s https://example.com > page.html", False),
        ("wget https://example.com/a.tgz", False),
        ("wget -O a.tgz https://example.com/a.tgz", False),
        ("npm test 2>&1", False),
    ],
)
def test_prints_content(command: str, content: bool) -> None:
    assert shellread.prints_content(command) is content
    assert shellread.read_kind(command) is None or content  # a read is content; not the reverse
