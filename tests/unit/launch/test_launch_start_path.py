"""What `ctxwrap pi` does before pi's process exists is the user's wait, every launch: it loads
no module it does not need there, and the exit line's imports wait for pi's session start."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ctxwrap.agents.pi import launcher

# Each is a few ms of imports that used to run before pi's exec (typing: NamedTuple and NoReturn;
# hashlib: the /tmp fallback's tag; tempfile/random: the exit note; shlex/re via exit_line: the
# quiet flag; subprocess: only the no-terminal path spawns with it).
NOT_BEFORE_PI = (
    "typing",
    "hashlib",
    "tempfile",
    "random",
    "shlex",
    "dataclasses",
    "subprocess",
    "ctxwrap.launch.exit_line",
    "ctxwrap.client",
    "httpx",
    "pydantic",
)

BEFORE_EXEC = """
import sys
import ctxwrap.agents.pi.launcher as L

class Started(Exception):
    pass

def run_child(argv, env, on_started=None):
    print(" ".join(sorted(sys.modules)))
    print(" ".join(argv))
    raise Started

L.run_child = run_child
sys.argv = ["ctxwrap", "pi", "-p", "hi"]
import ctxwrap.entry
try:
    ctxwrap.entry.main()
except Started:
    pass
"""


def test_ctxwrap_pi_loads_only_what_it_needs_before_pi_starts(tmp_path: Path) -> None:
    pi = tmp_path / "pi"
    pi.write_text("#!/bin/sh\nexit 0\n")
    pi.chmod(0o755)
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    env = {
        **os.environ,
        "CTXWRAP_PI": str(pi),
        "XDG_RUNTIME_DIR": str(runtime),
        "XDG_STATE_HOME": str(tmp_path / "state"),
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
    }
    out = subprocess.run(
        [sys.executable, "-c", BEFORE_EXEC],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    modules, argv = out.stdout.splitlines()
    assert argv.startswith(f"{pi} -e ") and argv.endswith(" -p hi")  # the bridge, pi's args
    loaded = set(modules.split())
    assert "ctxwrap.agents.pi.launcher" in loaded
    assert sorted(loaded & set(NOT_BEFORE_PI)) == []


def test_the_exit_note_is_a_new_private_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Made as tempfile.mkstemp made it: new (O_EXCL), 0600, in the private runtime dir."""
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    a, b = launcher._exit_note(), launcher._exit_note()
    assert a is not None and b is not None and a != b
    for note in (a, b):
        assert note.parent == tmp_path / "ctxwrap"
        assert note.name.startswith("pi-exit-") and note.suffix == ".json"
        assert stat.S_IMODE(note.stat().st_mode) == 0o600 and note.stat().st_size == 0
    assert stat.S_IMODE((tmp_path / "ctxwrap").stat().st_mode) == 0o700


def test_the_exit_note_fails_open(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "ctxwrap").write_text("not a directory")
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    assert launcher._exit_note() is None


def test_the_exit_line_preload_waits_for_pis_session_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not 2 s after our start (that landed in pi's own start-up under load) but after the
    bridge wrote the exit note, at the session's start."""
    import ctxwrap.launch.listener as listener

    calls: list[float] = []
    monkeypatch.setattr(listener, "preload_exit_line", lambda: calls.append(time.monotonic()))
    note = tmp_path / "note.json"
    note.write_text("")
    waiting = threading.Thread(
        target=launcher.preload_after_session_start, args=(note, threading.Event(), 10.0)
    )
    waiting.start()
    time.sleep(0.5)
    assert calls == []  # pi has not started its session
    written = time.monotonic()
    note.write_text('{"session_id": "s"}')
    waiting.join(5)
    assert not waiting.is_alive() and len(calls) == 1
    assert calls[0] - written < 0.5


def test_no_session_no_preload(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import ctxwrap.launch.listener as listener

    calls: list[int] = []
    monkeypatch.setattr(listener, "preload_exit_line", lambda: calls.append(1))
    note = tmp_path / "note.json"
    note.write_text("")
    t0 = time.monotonic()
    launcher.preload_after_session_start(note, threading.Event(), 0.3)  # no session in the wait
    assert calls == [] and time.monotonic() - t0 < 2
    # pi exited: the line ran
    launcher.preload_after_session_start(tmp_path / "gone.json", threading.Event(), 10.0)
    assert calls == []


def test_a_pi_that_starts_no_session_is_not_kept_waiting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`ctxwrap pi --version`: pi exits at once and writes no exit note; the launcher joins the
    thread that waits for the session, so its wait ends when pi has exited (it held the
    launcher 15 s, the join's bound, after every such run)."""
    import ctxwrap.launch.listener as listener

    calls: list[int] = []
    monkeypatch.setattr(listener, "preload_exit_line", lambda: calls.append(1))
    note = tmp_path / "note.json"
    note.write_text("")
    exited = threading.Event()
    waiting = threading.Thread(
        target=launcher.preload_after_session_start, args=(note, exited, 120.0)
    )
    waiting.start()
    time.sleep(0.2)
    t0 = time.monotonic()
    exited.set()
    waiting.join(5)
    assert not waiting.is_alive() and time.monotonic() - t0 < 1 and calls == []
