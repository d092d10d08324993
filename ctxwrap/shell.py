"""`ctxwrap init bash|zsh|fish`: print the shell integration with this ctxwrap's path filled in.

The scripts live in `shell/` (shipped in the wheel); only the self-path line is rewritten, so
the printed script is the tested file. The prompt segment reads a cache file that
`statusline.write_prompt_segment` keeps: the prompt path never talks to the daemon.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from pathlib import Path

import click

from ctxwrap._data_files import read_data_text

SHELLS = {"bash": "ctxwrap.bash", "zsh": "ctxwrap.zsh", "fish": "ctxwrap.fish"}


def self_command() -> str:
    """The absolute path of the `ctxwrap` being run, else the one on PATH, else `ctxwrap`."""
    argv0 = Path(sys.argv[0])
    if argv0.name == "ctxwrap" and argv0.is_file() and os.access(argv0, os.X_OK):
        return str(argv0.absolute())
    # `python -m ctxwrap`: the console script next to this interpreter is the same install
    sibling = Path(sys.executable).parent / "ctxwrap"
    if sibling.is_file() and os.access(sibling, os.X_OK):
        return str(sibling)
    return shutil.which("ctxwrap") or "ctxwrap"


def _quote(shell: str, value: str) -> str:
    if shell == "fish":
        # fish single quotes: only \\ and \' are escapes
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    return shlex.quote(value)


def render_init_script(shell: str, bin_path: str | None = None) -> str:
    """The script for `shell` with the self-path line pointing at `bin_path`."""
    text = read_data_text("shell", SHELLS[shell])
    target = bin_path or self_command()
    markers = {
        "bash": "__ctxwrap_bin=ctxwrap\n",
        "zsh": "typeset -g __ctxwrap_bin=ctxwrap\n",
        "fish": "set -g __ctxwrap_bin ctxwrap\n",
    }
    marker = markers[shell]
    if marker not in text:  # a script edit that drops the line must fail loudly, not silently
        raise RuntimeError(f"{SHELLS[shell]} has no self-path line {marker.strip()!r}")
    return text.replace(marker, marker.replace("ctxwrap\n", _quote(shell, target) + "\n"), 1)


@click.command("init")
@click.argument("shell", type=click.Choice(sorted(SHELLS)))
def init_cmd(shell: str) -> None:
    """Print shell integration: completion, opt-in `pi` / `claude` wrappers, prompt segment.

    \b
    eval "$(ctxwrap init bash)"     # in ~/.bashrc
    eval "$(ctxwrap init zsh)"      # in ~/.zshrc, after compinit
    ctxwrap init fish | source      # in ~/.config/fish/config.fish

    Set CTXWRAP_WRAP_PI=1 before that line to make plain `pi` run as `ctxwrap pi`, and
    CTXWRAP_WRAP_CLAUDE=1 to make plain `claude` run as `ctxwrap claude` (`command pi`,
    `command claude` still run the plain agent). Put `$(ctxwrap_prompt_segment)` in your
    prompt to show the last known savings of either agent; it only reads a small file,
    never calls the daemon.
    """
    click.echo(render_init_script(shell), nl=False)
