"""The `ctxwrap` command's entry point: `ctxwrap pi …` without loading the CLI framework.

`ctxwrap pi` is what users type instead of `pi`, every time; its start-up is pure overhead on
their session. click and the CLI module cost ~130 ms to import, and `pi` takes every argument
unparsed anyway, so that command goes straight to the launcher, as do `claude` and `codex`; so does `ctxwrap hook
claude` (run by Claude Code around every Bash call, no arguments), and `ctxwrap statusline
claude` (its status line, at every refresh). Everything else (and
`ctxwrap --debug pi …`) goes through `ctxwrap.cli`.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # not `typing`'s: its import is ~5 ms of every `ctxwrap pi`
if TYPE_CHECKING:
    from typing import NoReturn


def main() -> NoReturn:
    if sys.argv[1:2] == ["pi"]:
        from ctxwrap.agents.pi.launcher import main as pi_main

        pi_main(sys.argv[2:])
    if sys.argv[1:] == ["hook", "claude"]:
        # Claude Code runs the hook on every tool call (and at session start): the CLI framework's
        # import was most of its start-up.
        from ctxwrap.agents.claude.hook import main as hook_main

        sys.exit(hook_main())
    if sys.argv[1:2] == ["codex"]:  # like `pi`: every argument is Codex's, unparsed
        from ctxwrap.agents.codex.launcher import main as codex_main

        codex_main(sys.argv[2:])
    if sys.argv[1:2] == ["claude"]:  # like `pi`: every argument is Claude Code's, unparsed
        from ctxwrap.agents.claude.launcher import main as claude_main

        claude_main(sys.argv[2:])
    if sys.argv[1:] == ["statusline", "claude"]:
        # Claude Code's status line under `ctxwrap claude`, run at every refresh: one file read.
        from ctxwrap.statusline import main as statusline_main

        sys.exit(statusline_main())
    from ctxwrap.cli import main as cli_main

    cli_main()
