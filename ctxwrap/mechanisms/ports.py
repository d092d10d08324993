"""What a mechanism may touch of the daemon: narrow views, as `typing.Protocol`s.

A mechanism takes the view it needs, so its signature says what it may touch; the daemon
(`daemon/service.py`) satisfies each view structurally and no mechanism imports it, so the
import graph runs one way: service → mechanisms → ports → store, raw store, event log, config.

- :class:`StoreView`: the settings and the state database (dedup, needed_again).
- :class:`AuxView`: + the raw-output store and the aux calls (amnesia, writes).
- :class:`DigestView`: + the event log (digest).
- :class:`MaskView`: the settings, the database, the event log and `hide_signatures` (masking).
- :class:`DaemonView`: all of the above, for the tail decision that runs every mechanism.
"""

from __future__ import annotations

from typing import Protocol

from ctxwrap.config import Settings
from ctxwrap.mechanisms.aux import AuxCalls
from ctxwrap.state.eventlog import EventLog
from ctxwrap.state.rawstore import RawStore
from ctxwrap.state.session import SessionRuntime
from ctxwrap.state.store import Store


class StoreView(Protocol):
    @property
    def cfg(self) -> Settings: ...

    @property
    def store(self) -> Store: ...


class AuxView(StoreView, Protocol):
    @property
    def raw(self) -> RawStore: ...

    @property
    def aux(self) -> AuxCalls: ...


class DigestView(AuxView, Protocol):
    @property
    def events(self) -> EventLog: ...


class MaskView(StoreView, Protocol):
    @property
    def events(self) -> EventLog: ...

    def hide_signatures(self, rt: SessionRuntime, sigs: set[str]) -> None:
        """Results with these signatures, asked for again, reach the model whole (invariant 5)."""


class DaemonView(DigestView, MaskView, Protocol):
    """Every view at once: the tail decision hands each mechanism its part."""
