"""The heuristic one-line fact for a written file, used when the aux model is unavailable.

Path, what the file says about itself (docstring or first comment), size, and its top-level
definitions: enough for the agent to remember what it wrote without the body.

The fact is stored and shown to the model for the rest of the session, so it is redacted,
and a first comment that held a secret (``# key: sk-…``) is left out rather than kept as a
marker: it would describe nothing. The comment is one line, never the lines after it.
"""

from __future__ import annotations

import re

_DEF = re.compile(
    r"^(?:export\s+)?(?:async\s+)?(?:def|class|function|interface|type|struct|enum|fn|func|const|let)\s+([A-Za-z_][\w]*)",
    re.MULTILINE,
)
# The first line of a docstring or the first comment; [^\n] keeps it to that one line.
_COMMENT = re.compile(
    r'^\s*(?:#![^\n]*\n)?\s*(?:"""([^\n]+?)(?:"""|\n|\Z)|\'\'\'([^\n]+?)(?:\'\'\'|\n|\Z)'
    r"|(?://|#|--|/\*+|\*)[ \t]*(\S[^\n]*))"
)


def heuristic_fact(
    path: str,
    content: str,
    *,
    max_chars: int = 240,
    total_bytes: int | None = None,
    total_lines: int | None = None,
) -> str:
    """`content` may be the head of a larger file; `total_*` then give its real size."""
    # Imported here: the proxies import this module for `line_count` only, and the digest
    # package it pulls in (~40 ms) would be built beside the agent's start-up for nothing.
    from ctxwrap.digest.redact import redact_secrets

    if "\x00" in content[:4096]:
        size = total_bytes if total_bytes is not None else len(content.encode("utf-8", "replace"))
        return f"[Wrote {path} — binary content, {size:,} bytes]"
    lines = total_lines if total_lines is not None else line_count(content)
    parts = [f"Wrote {path}"]
    m = _COMMENT.match(content)
    if m:
        summary = next(g for g in m.groups() if g).strip().rstrip("*/").strip()
        # "parser.c — recursive-descent parser": the fact names the file already.
        name = path.rsplit("/", 1)[-1]
        if name and summary.lower().startswith(name.lower()):
            summary = summary[len(name) :].lstrip(" :-—–") or summary
        if summary and redact_secrets(summary) == summary:
            parts.append(summary[:100])
    names = list(dict.fromkeys(_DEF.findall(content)))
    if names:
        shown = ", ".join(names[:6]) + (f" +{len(names) - 6} more" if len(names) > 6 else "")
        parts.append(f"defines {shown}")
    parts.append("empty file" if not content else f"~{lines} lines")
    text = redact_secrets(" — ".join(parts))
    if len(text) > max_chars - 2:
        text = text[: max_chars - 3] + "…"
    return f"[{text}]"


def line_count(content: str) -> int:
    return content.count("\n") + (1 if content and not content.endswith("\n") else 0)


def aux_fact(path: str, summary: str, lines: int) -> str:
    return f"[Wrote {path} — {summary}, ~{lines:,} lines]"
