"""The mechanism as the unit (issue 42): one class per mechanism, its own settings slice, hooks
named after the protocol routes it answers, and the decisions replay takes the same way.

The daemon (`daemon/service.py`) routes each request to the mechanisms of
:func:`ctxwrap.mechanisms.chain.default_mechanisms`; replay (`replay/_sim.py`) runs the same
objects over a recorded session, so a mechanism's decision is written once and live and
replay cannot disagree on it (tests/unit/mechanisms/test_one_chain.py swaps one and sees both
change).

A decision reads its settings through a narrow `Protocol` (the fields it needs by name):
the daemon passes `config.Settings`, replay its `Thresholds` — two views of one slice.
"""

from __future__ import annotations

from typing import ClassVar, Protocol


class Mechanism:
    """One mechanism: its name (stats and replay key their figures by it), the setting that
    turns it on and the settings it reads (its slice of `config.Settings`)."""

    name: ClassVar[str]
    switch: ClassVar[str]  # the boolean setting that turns it on
    settings: ClassVar[tuple[str, ...]] = ()

    def enabled(self, s: object) -> bool:
        return bool(getattr(s, self.switch))


class DigestSettings(Protocol):
    @property
    def bash(self) -> bool: ...
    @property
    def bash_min_tokens(self) -> int: ...
    @property
    def bash_max_summary_tokens(self) -> int: ...
    @property
    def bash_aux_min_chars(self) -> int: ...


class RereadSettings(Protocol):
    @property
    def dedup(self) -> bool: ...


class AmnesiaSettings(Protocol):
    @property
    def amnesia_min_tokens(self) -> int: ...


class WriteSettings(Protocol):
    @property
    def write(self) -> bool | str: ...  # true, false or "auto" (the agent's default)
    @property
    def write_min_bytes(self) -> int: ...


class EditSettings(Protocol):
    @property
    def edit_strip(self) -> bool: ...
    @property
    def edit_min_chars(self) -> int: ...


class MaskSettings(Protocol):
    @property
    def mask(self) -> bool: ...
    @property
    def mask_warm(self) -> bool: ...
    @property
    def mask_keep_rounds(self) -> int: ...
    @property
    def mask_min_chars(self) -> int: ...
    @property
    def mask_earlier_tasks(self) -> bool: ...
    @property
    def mask_stale_reads(self) -> bool: ...
    @property
    def mask_older_rounds(self) -> int: ...
    @property
    def mask_read_idle_rounds(self) -> int: ...
    @property
    def mask_reference_reads(self) -> int: ...
    @property
    def rewrite_within_savings(self) -> bool: ...
