"""The one list of mechanisms the daemon and replay both drive (issue 42).

`default_mechanisms()` is where an eighth mechanism goes: a class of `mechanisms/base.py`'s
shape in its own module, added here. The daemon (`daemon/service.py`) routes protocol requests
to these objects; replay (`replay/_sim.py`) takes the same object's decisions over a recorded
session. A test or a study swaps one (`dataclasses.replace(default_mechanisms(), digest=…)`)
and both see the change.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, fields

from ctxwrap.mechanisms.amnesia import Amnesia
from ctxwrap.mechanisms.base import Mechanism
from ctxwrap.mechanisms.dedup import Rereads
from ctxwrap.mechanisms.digest import BashDigest
from ctxwrap.mechanisms.masking import Masking
from ctxwrap.mechanisms.thinking import OldThinking
from ctxwrap.mechanisms.writes import EditStrip, WriteStrip


@dataclass(frozen=True)
class Mechanisms:
    """The mechanisms by role; iterating gives them in the order a result meets them."""

    digest: BashDigest
    rereads: Rereads  # before amnesia: a repeat becomes a pointer, and is never tagged
    amnesia: Amnesia
    writes: WriteStrip
    edits: EditStrip
    masking: Masking
    # decided in the Claude Code proxy (agents/claude/session.py), not by a daemon route
    thinking: OldThinking

    def __iter__(self) -> Iterator[Mechanism]:
        return iter(tuple(getattr(self, f.name) for f in fields(self)))

    def aux_task(self, task: str) -> BashDigest | Amnesia | WriteStrip | None:
        """The mechanism an aux answer belongs to."""
        by_task: dict[str, BashDigest | Amnesia | WriteStrip] = {
            "digest": self.digest,
            "tag": self.amnesia,
            "fact": self.writes,
        }
        return by_task.get(task)


def default_mechanisms() -> Mechanisms:
    return Mechanisms(
        digest=BashDigest(),
        rereads=Rereads(),
        amnesia=Amnesia(),
        writes=WriteStrip(),
        edits=EditStrip(),
        masking=Masking(),
        thinking=OldThinking(),
    )
