"""Which models bind their thinking to the history (pure; every agent and the figures use it).

Claude Fable 5.1 and Opus/Sonnet/Haiku 5.5 refuse a request (400, "bound to a different
conversation") when `system`, `tools` or anything before a returned thinking block changed since
the model wrote it (docs/architecture.md, invariant 3): on them ctxwrap rewrites nothing a later
thinking block follows, and says so where masking saved little.
"""

from __future__ import annotations

import re

_CHECKED_FROM = {
    "opus": (5, 5),
    "sonnet": (5, 5),
    "haiku": (5, 5),
    "fable": (5, 1),
    "mythos": (5, 1),
}
_CLAUDE_MODEL_RE = re.compile(r"^claude-([a-z]+)-(\d+)(?:[-.](\d+))?")  # -5-5, or 5.5 (OpenRouter)


def checks_thinking_prefix(model: object) -> bool:
    """Whether `model` checks its thinking blocks' prefix. A Claude model this cannot place
    (a family or a naming scheme not known here) is taken to check it: refusing a mask costs
    a saving, a rewrite that fails the check costs the session."""
    if not isinstance(model, str):
        return False
    name = model.rsplit("/", 1)[-1].lower()
    if name.startswith("anthropic."):  # Bedrock's `anthropic.claude-…`
        name = name[len("anthropic.") :]
    if not name.startswith("claude-") or name[7:8].isdigit():
        return False  # not Claude, or the old naming (claude-3-7-sonnet-…): no check
    m = _CLAUDE_MODEL_RE.match(name)
    if m is None or m.group(1) not in _CHECKED_FROM:
        return True
    minor = int(m.group(3)) if m.group(3) is not None and len(m.group(3)) <= 2 else 0
    return (int(m.group(2)), minor) >= _CHECKED_FROM[m.group(1)]
