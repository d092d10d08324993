"""Secret redaction applied to anything ctxwrap shows a model or stores.

Each pattern replaces the secret itself with ``[REDACTED:<kind>]``; for ``NAME=value``
assignments the name stays, so the reader still knows which setting was there.
"""

from __future__ import annotations

import re

_PEM_BLOCK = re.compile(
    r"-----BEGIN ((?:[A-Z0-9]+ )*)PRIVATE KEY-----"
    r"(?:\r?\n[A-Za-z0-9+/=:,\- ]*)*?"
    r"(?:\r?\n-----END (?:[A-Z0-9]+ )*PRIVATE KEY-----|(?=\r?\n[^A-Za-z0-9+/=:,\- \r\n])|\Z)"
)
# The end of a key whose BEGIN line was cut off (a digest kept only the tail).
_PEM_TAIL = re.compile(
    r"(?:^[A-Za-z0-9+/=]{16,}\r?\n)+-----END (?:[A-Z0-9]+ )*PRIVATE KEY-----", re.M
)

# (plain substring every match contains, pattern, kind): the substring test is a cheap
# pre-check, since most text holds no secret at all.
_TOKENS: tuple[tuple[str, re.Pattern[str], str], ...] = (
    ("sk-", re.compile(r"\bsk-(?:proj-|ant-)?[A-Za-z0-9_\-]{16,}"), "api-key"),
    ("IA", re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"), "aws-access-key"),
    (
        "gh",
        re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{40,})"),
        "github-token",
    ),
    ("xox", re.compile(r"\bxox[abposr]-[A-Za-z0-9\-]{10,}"), "slack-token"),
    ("glpat-", re.compile(r"\bglpat-[A-Za-z0-9_\-]{20,}"), "gitlab-token"),
    ("AIza", re.compile(r"\bAIza[0-9A-Za-z_\-]{35}\b"), "google-api-key"),
    ("earer ", re.compile(r"(?<=[Bb]earer )[A-Za-z0-9._~+/\-]{12,}=*"), "bearer-token"),
)
_SECRET_WORDS = ("key", "token", "secret", "passw", "pwd", "credential")
# NAME=value, NAME: value, "name": "value" where the name says it holds a secret.
_ASSIGNMENT = re.compile(
    r"""(?P<name>\b[A-Za-z0-9_.\-]*(?:KEY|TOKEN|SECRET|PASSWORD|PASSWD|PWD|CREDENTIALS?)\b"""
    r"""|\b[A-Za-z0-9_.\-]*(?:api[_\-]?key|access[_\-]?key|secret|token|password|passwd))"""
    r"""(?P<sep>["']?\s*[=:]\s*)(?P<quote>["']?)(?P<value>(?!\$|\[REDACTED|(?:None|null|nil|true|false|undefined|True|False)\b)[^\s"',;&|(){}<>]{3,})""",
)


def _assignment(match: re.Match[str]) -> str:
    return f"{match['name']}{match['sep']}{match['quote']}[REDACTED:secret]"


def redact_secrets(text: str) -> str:
    """Replace API keys, tokens, secret assignments and private keys with a marker."""
    if "PRIVATE KEY-----" in text:
        text = _PEM_BLOCK.sub("[REDACTED:private-key]", text)
        text = _PEM_TAIL.sub("[REDACTED:private-key]", text)
    for marker, pattern, kind in _TOKENS:
        if marker in text:
            text = pattern.sub(f"[REDACTED:{kind}]", text)
    folded = text.lower()
    if any(word in folded for word in _SECRET_WORDS):
        text = _ASSIGNMENT.sub(_assignment, text)
    return text
