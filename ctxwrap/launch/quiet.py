"""`--ctxwrap-quiet`: taken off the agent's arguments before it starts (no imports: the exit
line's module, launch/exit_line.py, loads shlex, re and typing, ~5 ms before the agent's exec)."""

from __future__ import annotations

QUIET_FLAG = "--ctxwrap-quiet"


def take_quiet_flag(args: list[str]) -> tuple[list[str], bool]:
    """`args` without `--ctxwrap-quiet` (before any `--`), and whether it was there."""
    if QUIET_FLAG not in args:
        return args, False
    end = args.index("--") if "--" in args else len(args)
    if QUIET_FLAG not in args[:end]:
        return args, False
    return [a for a in args[:end] if a != QUIET_FLAG] + args[end:], True
