"""What the RETAIN/DROP tagger sees of a result: head, outline, tail — within a small budget.

Whether a file listing or a source file matters for the task shows in its first lines, its
structure (definitions, headings) and its end; the tagger needs no more than that. Sending the
whole capped result (6,000 chars) cost more aux tokens per tag than most drops saved. Pure and
deterministic: the same result always gives the same view.
"""

from __future__ import annotations

import re

# Lines that carry a file's structure: definitions, headings, sections, top-level statements.
_OUTLINE = re.compile(
    r"^\s{0,4}(?:(?:export\s+)?(?:async\s+)?(?:def|class|function|interface|struct|enum|impl|fn|"
    r"func|type|module|package|trait|const|let|var|pub(?:\(\w+\))?\s+\w+)\b|#{1,6}\s|\[[^\]]+\]\s*$|"
    r"[A-Za-z_][\w.-]*:\s*$|@\w+)"
)
_LINE_MAX = 120


def _clip(line: str) -> str:
    return line if len(line) <= _LINE_MAX else line[: _LINE_MAX - 1] + "…"


def tag_view(text: str, budget: int = 1500) -> str:
    """`text` itself when it fits `budget` chars; else its head, an outline of the middle and
    its tail, never longer than `budget`."""
    if len(text) <= budget:
        return text
    lines = text.split("\n")
    head_budget, tail_budget = int(budget * 0.45), int(budget * 0.2)
    head: list[str] = []
    used = 0
    for line in lines:
        line = _clip(line)
        if used + len(line) + 1 > head_budget:
            break
        head.append(line)
        used += len(line) + 1
    if not head:  # one huge first line
        head = [text[: head_budget - 1] + "…"]
        start = 1
    else:
        start = len(head)
    tail: list[str] = []
    used = 0
    for line in reversed(lines[start:]):
        line = _clip(line)
        if used + len(line) + 1 > tail_budget:
            break
        tail.insert(0, line)
        used += len(line) + 1
    middle = lines[start : len(lines) - len(tail)]
    marks = [_clip(m.strip()) for m in middle if _OUTLINE.match(m)]
    label = "outline"
    if not marks:
        marks, label = [_clip(m.strip()) for m in middle if m.strip()], "sample"
    room = budget - sum(len(x) + 1 for x in head) - sum(len(x) + 1 for x in tail) - 80
    picked = _spread(marks, room)
    note = f"[… {len(middle):,} lines between; {label} of them:]"
    parts = [*head, note, *("  " + m for m in picked), "[…]", *tail]
    out = "\n".join(parts)
    return out if len(out) <= budget else out[: budget - 1] + "…"


def _spread(items: list[str], room: int) -> list[str]:
    """As many items as fit `room` chars, evenly spread over the list, in order."""
    if room <= 0 or not items:
        return []
    avg = max(1, sum(len(x) + 3 for x in items) // len(items))
    n = min(len(items), max(1, room // avg))
    while n > 0:
        step = len(items) / n
        chosen = [items[int(i * step)] for i in range(n)]
        if sum(len(x) + 3 for x in chosen) <= room:
            return chosen
        n -= 1
    return []
