"""Files shipped next to the code: shell scripts, man pages, systemd unit templates.

A wheel carries them in `ctxwrap/_data/<kind>/` (pyproject force-include); an editable
install or a checkout has them in the repository's top-level `<kind>/` directories.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

KINDS = ("shell", "man", "systemd")


def data_file(kind: str, name: str) -> Path:
    """The path of a shipped file, e.g. `data_file("shell", "ctxwrap.bash")`.

    Raises FileNotFoundError naming both places looked in, so a broken install says so.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown data kind {kind!r}")
    packaged = Path(str(files("ctxwrap"))) / "_data" / kind / name
    if packaged.is_file():
        return packaged
    checkout = Path(__file__).resolve().parent.parent / kind / name
    if checkout.is_file():
        return checkout
    raise FileNotFoundError(f"{name} is neither in {packaged.parent} nor in {checkout.parent}")


def read_data_text(kind: str, name: str) -> str:
    return data_file(kind, name).read_text(encoding="utf-8")
