"""Deterministic, extractive digests of large command output.

``digest_bash_output`` and ``StreamingDigester`` pick a command family (pytest, cargo, npm,
gcc, git, find, …) from the command line or the output, keep what that family's readers need
(failing tests, errors with file:line and context, summary lines, counts), fold repeats, and
fit the result in ``max_chars``. Memory stays bounded whatever the input size.
"""

from __future__ import annotations

import contextlib

from ctxwrap.digest._stream import Digest, StreamingDigester
from ctxwrap.digest.redact import redact_secrets


def digest_bash_output(
    output: str | bytes, *, command: str, exit_code: int | None, max_chars: int = 8000
) -> Digest:
    """Digest a whole output held in memory (a StreamingDigester fed once)."""
    digester = StreamingDigester(command=command, exit_code=exit_code, max_chars=max_chars)
    # feed() only raises on a digester bug; finish() still returns what it has.
    with contextlib.suppress(Exception):
        digester.feed(output)
    return digester.finish()


__all__ = ["Digest", "StreamingDigester", "digest_bash_output", "redact_secrets"]
