"""A terminal for the tests that drive an agent's TUI on a real pseudo-terminal.

The TUIs (Claude Code's Ink, Codex's ratatui) redraw only the cells that changed, with cursor
moves between them, so their byte stream seldom holds a whole line: a word can be drawn in two
pieces. `Terminal` feeds the stream to pyte (a VT100 emulator) for what is on the screen now,
and keeps the stream with its escapes removed for what was ever printed; a wait is met by
either, a "not shown" check must hold for both.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Callable

import pexpect
import pyte

_ESCAPES = re.compile(
    rb"\x1b\[[0-9;?<>=]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[()][A-Z0-9]|\x1b[=>78cDEHM]"
)


def _squeeze(text: str) -> str:
    return re.sub(r"\s+", " ", text.replace("\u2019", "'"))


class Terminal:
    def __init__(self, child: pexpect.spawn, rows: int, cols: int) -> None:  # type: ignore[type-arg]
        self.child = child
        self.screen = pyte.Screen(cols, rows)
        self.stream = pyte.ByteStream(self.screen)
        self.raw = b""

    def feed(self, data: bytes) -> None:
        self.raw += data
        self.stream.feed(data)

    def adopt(self) -> None:
        """Take over what the child's last `expect` read: the text up to and with the match,
        and what pexpect read past it (its buffer, which `pump` would not see)."""
        before, after = self.child.before, self.child.after
        self.feed(
            (before if isinstance(before, bytes) else b"")
            + (after if isinstance(after, bytes) else b"")
            + self.child.buffer
        )
        self.child.buffer = b""

    def pump(self, timeout: float = 0.2) -> None:
        """Read what the child printed within `timeout` (nothing: no error)."""
        with contextlib.suppress(pexpect.TIMEOUT):
            self.feed(self.child.read_nonblocking(65536, timeout=timeout))

    def resize(self, rows: int, cols: int) -> None:
        self.child.setwinsize(rows, cols)
        self.screen.resize(rows, cols)

    def forget(self) -> None:
        """Drop what was printed so far (the screen stays as it is)."""
        self.raw = b""

    @property
    def display(self) -> str:
        """The screen now, a line per row."""
        return "\n".join(line.rstrip() for line in self.screen.display)

    @property
    def printed(self) -> str:
        """Everything printed since the start (or `forget`), escapes removed, blanks squeezed."""
        return _squeeze(_ESCAPES.sub(b" ", self.raw).decode("utf-8", "replace"))

    @property
    def text(self) -> str:
        """Both, for a search: what was printed, then the screen now (squeezed)."""
        return f"{self.printed} {_squeeze(self.display)}"

    def wait_for(self, needle: str, timeout: float = 60, *, blanks: bool = True) -> str:
        """Read until `needle` was printed or is on the screen; `text` then. `blanks=False`:
        compare without any blank (a TUI that moves the cursor instead of printing one)."""

        def met() -> bool:
            if blanks:
                return needle in self.text
            return needle.replace(" ", "") in self.text.replace(" ", "")

        if not self.poll(met, timeout):
            raise AssertionError(
                f"{needle!r} not on screen:\n{self.display}\nprinted: {self.printed[-1500:]!r}"
            )
        return self.text

    def poll(self, done: Callable[[], bool], timeout: float) -> bool:
        """Read until `done()` or the timeout; whether it was done."""
        end = time.monotonic() + timeout
        while not done():
            if time.monotonic() > end:
                return False
            self.pump()
        return True

    def type(self, text: str) -> None:
        for ch in text:  # an input box drops a burst sent while it redraws
            self.child.send(ch)
            time.sleep(0.05)

    def submit(self, text: str, arrived: Callable[[], bool], *, tries: int = 3) -> None:
        """Type `text` and Enter until `arrived()` (the model server has the request): a loaded
        machine can drop keystrokes while the TUI settles, so a prompt that never left is
        cleared (Ctrl+U) and typed again."""
        for _ in range(tries):
            time.sleep(1.0)  # let the input box take keystrokes
            self.type(text)
            time.sleep(1.0)  # the TUI redraws the echo with cursor moves: no literal match
            self.child.send("\r")
            if self.poll(arrived, timeout=45):
                return
            self.child.sendcontrol("u")
        raise AssertionError(f"{text!r} never reached the model; screen:\n{self.display}")


def wait_for_claude_code(screen: Terminal, timeout: float = 90) -> None:
    """Claude Code's TUI is up: its prompt, and the footer hint ("? for shortcuts", "for
    agents" on some versions) whose place ctxwrap's status line takes."""
    assert screen.poll(
        lambda: (
            "❯" in screen.text and ("for shortcuts" in screen.text or "for agents" in screen.text)
        ),
        timeout=timeout,
    ), f"the TUI did not come up; tail: {screen.text[-2000:]!r}"


def bash_permission_prompt(screen: Terminal) -> str:
    """Claude Code's permission prompt for a Bash command, once it is on screen: its text from
    "Bash command" to "Esc to cancel"."""
    screen.wait_for("Esc to cancel")
    text = screen.printed
    return text[text.rindex("Bash command") : text.rindex("Esc to cancel")]
