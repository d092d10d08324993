"""One line of `ctxwrap doctor`: what every check returns (the doctor and the agent adapters)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, Protocol, TypeVar

Level = Literal["ok", "warn", "fail"]


@dataclass(frozen=True)
class Check:
    name: str
    level: Level
    summary: str
    fix: str | None = None


class _Install(Protocol):
    @property
    def argv(self) -> list[str]: ...


InstallT = TypeVar("InstallT", bound=_Install)


def installed(
    name: str,
    label: str,
    find: Callable[[], InstallT],
    version: Callable[[InstallT], str | None],
    not_found: type[Exception],
    hint: str,
) -> tuple[InstallT | None, str | None, Check]:
    """An agent's first doctor line: found and runs (`label VERSION (path)`), not found (a
    warning: only `ctxwrap NAME` is unavailable), or found and failing `--version`."""
    try:
        found = find()
    except not_found as exc:
        why = getattr(exc, "message", str(exc))
        return None, None, Check(name, "warn", f"{why}; `ctxwrap {name}` is unavailable", hint)
    v = version(found)
    if v is None:
        return None, None, Check(name, "fail", f"`{found.argv[0]} --version` failed", hint)
    return found, v, Check(name, "ok", f"{label} {v} ({found.argv[0]})")
