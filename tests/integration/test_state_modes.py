"""Issue 12, finding 5: what the daemon keeps is readable by the user alone, whatever the umask.

Real daemon processes started under umask 000; every directory under the state dir must end
0700 and every file 0600 (the SQLite DB and its -wal/-shm, daemon.log, events.jsonl, raw
outputs, the prompt segment). A state dir owned by someone else is refused.
"""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest
from support import CTXWRAP, Xdg, client, wait_ready

BIG_BASH = "".join(f"compiling module_{i:04d}.c ... ok\n" for i in range(3000))


def umask_000() -> None:
    os.umask(0)


def loose_modes(root: Path) -> list[str]:
    """Every path under root whose mode is not 0700 (directories) or 0600 (files)."""
    bad = []
    for p in [root, *root.rglob("*")]:
        st = p.lstat()
        want = 0o700 if stat.S_ISDIR(st.st_mode) else 0o600
        if stat.S_IMODE(st.st_mode) != want:
            bad.append(f"{p.relative_to(root.parent)} {stat.S_IMODE(st.st_mode):04o}")
    return bad


def exercise(xdg: Xdg, tmp_path: Path) -> None:
    """Make the daemon write everything it writes: DB rows, a raw output, events."""
    with client(xdg) as c:
        r = c.post(
            "/v1/sessions/start",
            json={"session_id": "modes", "cwd": str(tmp_path), "pid": os.getpid()},
        )
        assert r.status_code == 200, r.text
        r = c.post(
            "/v1/tool_result",
            json={
                "session_id": "modes",
                "tool_call_id": "call-1",
                "tool_name": "bash",
                "input": {"command": "make"},
                "text": BIG_BASH,
                "exit_code": 0,
            },
        )
        assert r.status_code == 200 and r.json()["action"] == "replace", r.text
        r = c.post("/v1/turn_end", json={"session_id": "modes", "turn_index": 0})
        assert r.status_code == 200, r.text  # writes the prompt segment


def test_existing_loose_state_dir_is_tightened_under_umask_000(tmp_path: Path, xdg: Xdg) -> None:
    state = xdg.state / "ctxwrap"
    state.mkdir(parents=True)
    os.chmod(state, 0o755)
    (state / "raw").mkdir()
    os.chmod(state / "raw", 0o755)
    for name, mode in (("daemon.log", 0o644), ("events.jsonl", 0o666)):
        (state / name).write_text("")
        os.chmod(state / name, mode)
    log = state / "daemon.log"
    proc = subprocess.Popen(
        [*CTXWRAP, "daemon", "run", "--log-file", str(log)],
        env=xdg.env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        preexec_fn=umask_000,
    )
    try:
        wait_ready(xdg)
        exercise(xdg, tmp_path)
        names = {p.name for p in state.rglob("*")}
        want = {"ctxwrap.db", "ctxwrap.db-wal", "ctxwrap.db-shm", "events.jsonl", "prompt-segment"}
        assert want <= names, names
        assert any(p.suffix == ".txt" for p in (state / "raw").iterdir())  # a raw output
        assert loose_modes(state) == []
    finally:
        proc.kill()
        proc.wait(10)
        assert proc.stderr is not None
        proc.stderr.close()


def test_auto_started_daemon_under_umask_000_creates_private_files(
    tmp_path: Path, xdg: Xdg
) -> None:
    r = subprocess.run(
        [*CTXWRAP, "daemon", "start"],
        env=xdg.env(),
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=umask_000,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    exercise(xdg, tmp_path)
    state = xdg.state / "ctxwrap"
    assert (state / "daemon.log").exists() and (state / "ctxwrap.db-wal").exists()
    assert loose_modes(state) == []
    assert loose_modes(xdg.runtime / "ctxwrap") == []  # pidfile, socket, start.lock


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give the dir to another uid")
def test_state_dir_of_another_user_is_refused(tmp_path: Path, xdg: Xdg) -> None:
    state = xdg.state / "ctxwrap"
    state.mkdir(parents=True, mode=0o755)
    os.chown(state, 65534, 65534)
    r = subprocess.run(
        [*CTXWRAP, "daemon", "run"],
        env=xdg.env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 77, r.stdout + r.stderr
    assert f"{state} is owned by uid 65534" in r.stderr, r.stderr
    assert "hint:" in r.stderr
    assert os.stat(state).st_mode & 0o777 == 0o755  # not repaired: not ours to touch
    assert list(state.iterdir()) == []
