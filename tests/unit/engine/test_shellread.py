"""What the bash digest leaves whole (`engine.shellread.prints_content`): content the agent
reads or writes from, a file, a search's hits, a page or an API's answer, what git prints of
the repository; never a command that runs or writes something."""

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
        # what the repository holds, printed (a Codex rollout read five files and ended the
        # list with `git status --short`: the digest kept 774 of 41,337 chars)
        ("sed -n '1,80p' a.ts\nrg -n x README.md | sed -n '1,820p'\ngit status --short", True),
        ("cd /d && git show HEAD -- lib.sh | head -700", True),
        ("git -C anchor log --oneline -20 && git remote -v", True),
        ("git config --get user.name; git diff --stat", True),
        ('cfg=~/.x.json; if [ -f "$cfg" ]; then sed -n \'1,40p\' "$cfg"; fi', True),
        ("find ~/.codex -name '*.jsonl' | head -1 | xargs cat", True),
        # what runs or writes something is not
        ("git branch -D old", False),
        ("git branch new", False),
        ("git config user.name me", False),
        ("git remote add origin u", False),
        ("git diff --output=p.diff", False),
        ("git -c core.pager=x log", False),
        ("git commit -m x && git log -1", False),
        ("find . | xargs rm", False),
        ("X=1 rm -rf y", False),
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
