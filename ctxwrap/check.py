"""One line of `ctxwrap doctor`: what every check returns (the doctor and the agent adapters)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Level = Literal["ok", "warn", "fail"]


@dataclass(frozen=True)
class Check:
    name: str
    level: Level
    summary: str
    fix: str | None = None
