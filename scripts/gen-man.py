#!/usr/bin/env python3
"""Regenerate man/ctxwrap.1 and man/ctxwrap-daemon.8 from the click commands and settings.

Run after changing a command, an option or a setting: `python scripts/gen-man.py`.
tests/unit/test_manpage.py fails while the committed pages differ from this output.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # the checkout's ctxwrap, even without an install

from ctxwrap.cli import cli  # noqa: E402
from ctxwrap.manpage import main_gen  # noqa: E402

if __name__ == "__main__":
    main_gen(str(REPO / "man") if len(sys.argv) < 2 else sys.argv[1], cli)
