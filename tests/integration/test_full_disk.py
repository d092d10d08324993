"""A full disk, for real: the state dir lives on a small tmpfs that the test fills.

Full before start: the daemon's start-up failure (SQLite's "database or disk is full") reaches
whoever launched it at once, with the cause, instead of a 10-15 s wait blamed on a timeout.
Filling while running: state writes that fail are recorded (the store says why it is degraded)
instead of failing the request; the raw store says "not stored" and leaves nothing half-written.

Mounting needs root (CI runs as root); elsewhere these tests skip and say so.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from diskfull import fill, small_fs
from support import CTXWRAP, Xdg, client, ctxwrap, daemon_process, make_xdg, pi_path

from ctxwrap.state.rawstore import RawStore
from ctxwrap.state.store import Store
from ctxwrap.testing.model_server import ScriptedModelServer
from ctxwrap.testing.pi_home import make_pi_agent_dir, pi_command, pi_env


@pytest.fixture
def xdg_small_state(tmp_path: Path) -> Iterator[Xdg]:
    xdg = make_xdg(tmp_path)
    with small_fs(xdg.state):
        try:
            yield xdg
        finally:
            xdg.kill_daemon()
            _kill_daemons_of(xdg)
            import shutil

            shutil.rmtree(xdg.runtime, ignore_errors=True)


def _kill_daemons_of(xdg: Xdg) -> None:
    """A daemon the bridge revived during the test may hold no pidfile yet: find it by its log
    path (inside this test's state dir) so no daemon outlives the test."""
    import contextlib
    import os
    import signal

    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            argv = (proc / "cmdline").read_bytes().split(b"\0")
            if b"daemon" in argv and any(str(xdg.state).encode() in a for a in argv):
                os.kill(int(proc.name), signal.SIGKILL)


# -- full before start --------------------------------------------------------------------------


@pytest.mark.serial
def test_full_disk_at_start_is_reported_at_once_with_the_cause(xdg_small_state: Xdg) -> None:
    xdg = xdg_small_state
    fill(xdg.state)
    start = time.monotonic()
    p = ctxwrap(xdg, "daemon", "start", timeout=30)
    elapsed = time.monotonic() - start
    assert p.returncode == 74, p.stderr  # EX_IOERR, the daemon's own verdict
    assert "could not start" in p.stderr and "disk is full" in p.stderr, p.stderr
    assert str(xdg.state) in p.stderr and "0 bytes free" in p.stderr
    assert "did not become ready" not in p.stderr  # not blamed on a timeout
    assert elapsed < 8, elapsed  # the start deadline is 15 s; the cause came first
    assert not xdg.socket.exists()  # nothing left for the next probe to stumble on


def test_full_disk_at_start_in_the_foreground_says_why(xdg_small_state: Xdg) -> None:
    xdg = xdg_small_state
    fill(xdg.state)
    p = ctxwrap(xdg, "daemon", "run", timeout=30)
    assert p.returncode == 74
    assert "cannot write the state directory" in p.stderr and "disk is full" in p.stderr
    assert "internal error" not in p.stderr


@pytest.mark.serial
def test_a_start_up_failure_reaches_the_log_and_the_launcher(tmp_path: Path, xdg: Xdg) -> None:
    """Not a disk problem: the database path is a directory. The log is writable here."""
    (xdg.state / "ctxwrap" / "ctxwrap.db").mkdir(parents=True)
    start = time.monotonic()
    p = ctxwrap(xdg, "daemon", "start", timeout=30)
    assert time.monotonic() - start < 8
    assert p.returncode == 69 and "could not start" in p.stderr, p.stderr
    where = str(xdg.state / "ctxwrap")
    assert "start-up failed" in p.stderr and where in p.stderr  # the cause, and where
    log = (xdg.state / "ctxwrap" / "daemon.log").read_text()
    assert "start-up failed" in log and where in log


# -- filling while running ----------------------------------------------------------------------


def test_store_writes_on_a_full_disk_are_recorded_not_raised(tmp_path: Path) -> None:
    with small_fs(tmp_path / "fs", "1m") as fs:
        store = Store(fs / "ctxwrap" / "ctxwrap.db")
        try:
            row = {"session_id": "s", "tool_call_id": "c", "kind": "k", "saved_chars": 1}
            store.insert("edits", {**row, "ts": 1.0})
            assert store.degraded is None
            ballast = fill(fs)
            big = "x" * 200_000  # more than any page the WAL still has room for
            for i in range(20):
                store.insert("facts", _fact(f"c{i}", big))
            reason = store.degraded
            assert reason is not None and "database writes fail" in reason, reason
            assert "disk is full" in reason and "0 bytes free" in reason
            # Reads still work, and what was written before is still there.
            assert store.query("SELECT COUNT(*) n FROM edits")[0]["n"] == 1
            ballast.unlink()
            store.insert("facts", _fact("after", "small"))
            assert store.degraded is None  # writes land again: no longer degraded
            assert store.query("SELECT text FROM facts WHERE tool_call_id='after'")
        finally:
            store.close()


def test_raw_store_on_a_full_disk_stores_nothing_and_says_so(tmp_path: Path) -> None:
    with small_fs(tmp_path / "fs", "1m") as fs:
        store = Store(fs / "ctxwrap" / "ctxwrap.db")
        raw = RawStore(fs / "ctxwrap" / "raw", store, max_bytes=50 << 20, retention_days=0)
        try:
            meta = {"session_id": "s", "tool_call_id": "c", "tool_name": "bash", "command": "x"}
            assert raw.try_put_text("fits\n", **meta) is not None
            fill(fs)
            before = sorted(p.name for p in (fs / "ctxwrap" / "raw").iterdir())
            seen: list[str] = []

            def lines() -> Iterator[str]:
                for i in range(200_000):
                    seen.append(str(i))
                    yield f"line {i} " + "y" * 40

            assert raw.try_put_lines(lines(), **meta) is None
            assert len(seen) == 200_000  # a digester on the same stream still saw all of it
            after = sorted(p.name for p in (fs / "ctxwrap" / "raw").iterdir())
            assert after == before  # no partial file left behind
            assert store.query("SELECT COUNT(*) n FROM raw_outputs")[0]["n"] == 1
            assert store.degraded is not None and "raw store writes fail" in store.degraded
            with pytest.raises(OSError):  # the raising variant, for callers without a fallback
                raw.put_text("z" * 300_000, **meta)
        finally:
            store.close()


def _fact(call: str, text: str) -> dict[str, object]:
    return {
        "session_id": "s",
        "tool_call_id": call,
        "path": "/x",
        "text": text,
        "source": "aux",
        "created_at": 1.0,
    }


def test_start_failure_record_is_private_and_names_the_pid(xdg_small_state: Xdg) -> None:
    xdg = xdg_small_state
    fill(xdg.state)
    proc = subprocess.run(
        [*CTXWRAP, "daemon", "run"], env=xdg.env(), capture_output=True, text=True, timeout=30
    )
    assert proc.returncode == 74
    record_path = xdg.runtime / "ctxwrap" / "start-failure.json"
    record = json.loads(record_path.read_text())
    assert record["exit_code"] == 74 and "disk is full" in record["message"]
    assert isinstance(record["pid"], int)
    assert record_path.stat().st_mode & 0o077 == 0


@pytest.mark.serial
@pytest.mark.e2e
def test_ctxwrap_pi_on_a_full_disk_warns_with_the_cause_and_runs_pi(
    xdg_small_state: Xdg, tmp_path: Path
) -> None:
    xdg = xdg_small_state
    fill(xdg.state)
    home, pi = tmp_path / "home", pi_path("pi")
    (home / "work").mkdir(parents=True)
    with ScriptedModelServer([{"text": "done"}]) as server:
        env = xdg.env(pi_env(make_pi_agent_dir(home, server.base_url), home))
        env["CTXWRAP_PI"] = str(pi)
        start = time.monotonic()
        proc = subprocess.Popen(
            pi_command(pi, "go", wrapped=True),
            env=env,
            cwd=home / "work",
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert proc.stderr is not None
        warning = proc.stderr.readline()
        warned_after = time.monotonic() - start
        out, rest = proc.communicate(timeout=120)
    assert proc.returncode == 0, warning + rest
    assert out.strip() == "done"
    assert warning.startswith("ctxwrap: warning: the daemon could not start"), warning + rest
    assert "disk is full" in warning and "running pi without savings" in warning
    # The cause, as soon as the daemon gave up; not ensure_running's 10 s deadline.
    assert warned_after < 8, warned_after


FRAMES = Path(__file__).resolve().parents[1] / "fixtures" / "frames"


def test_stat_writes_on_a_full_disk_do_not_fail_requests(xdg_small_state: Xdg) -> None:
    """The real daemon, its state disk filled after start: accounting frames still get 200."""
    xdg = xdg_small_state
    frames = {
        name: json.loads((FRAMES / f"{name}.json").read_text())
        for name in ("session_start", "prompt", "llm_call", "turn_end", "model_select")
    }
    with daemon_process(xdg) as proc, client(xdg) as c:
        start = frames["session_start"]["frame"] | {"skills": []}
        assert c.post("/v1/sessions/start", json=start).status_code == 200
        fill(xdg.state)
        for i in range(30):  # enough rows that SQLite's WAL has to grow on the full disk
            for name in ("prompt", "llm_call", "turn_end", "model_select"):
                frame = frames[name]
                method, route = frame["route"].split(" ", 1)
                body = dict(frame["frame"])
                body.update({"call_index": i} if name == "llm_call" else {})
                r = c.request(method, route, json=body)
                assert r.status_code == 200, (name, i, r.text)
        assert c.get("/v1/health").status_code == 200
        assert proc.poll() is None
    db = Store(xdg.db)  # what did land is intact and readable
    try:
        assert db.query("SELECT COUNT(*) n FROM sessions")[0]["n"] == 1
    finally:
        db.close()
