"""Re-reads: how an unchanged repeat of a read is recognised and worded (pure functions).

The decision lives in `ctxwrap/mechanisms/dedup.py` (the daemon) and is re-enacted by
`ctxwrap replay` (`replay/_sim.py`); both use these, so they count the same thing.
"""

from __future__ import annotations

import hashlib


def result_digest(text: str) -> str:
    """What two results are compared by: equal digests mean the same text."""
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


def pointer_text(label: str, chars: int, recall: str | None = None) -> str:
    """The one line a repeat becomes. `recall` says how to get the earlier result back: a
    later compaction may summarise it away while this pointer stays."""
    how = f"; if it is no longer above, recall it with {recall}" if recall else ""
    return (
        f"[ctxwrap: {label} returned the same {chars:,} chars as the earlier identical call "
        f"above (unchanged); that result is current, so it is not repeated{how}]"
    )
