"""Issue 44 item 5: with XDG_RUNTIME_DIR unset the socket falls back to /tmp, which every HOME
of a user shares. A daemon started for one HOME must not answer for another (its state, its
sessions and its statistics are elsewhere): the fallback directory names the state dir."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

from support import CTXWRAP


def home_env(home: Path) -> dict[str, str]:
    """A user whose only setting is HOME: no XDG variable at all (the /tmp fallback)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PI_CTX_", "CTXWRAP_", "XDG_", "LISTEN_", "NOTIFY_"))
    }
    env.update(HOME=str(home), CTXWRAP_NO_SYSTEMD="1")
    return env


def run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CTXWRAP, *args], env=env, capture_output=True, text=True, timeout=60,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip


def runtime_of(env: dict[str, str]) -> Path:
    code = "from ctxwrap import paths; print(paths.runtime_dir())"
    out = subprocess.run(
        [CTXWRAP[0], "-c", code], env=env, capture_output=True, text=True, check=True
    )
    return Path(out.stdout.strip())


@contextlib.contextmanager
def daemon_for(env: dict[str, str]) -> Iterator[dict[str, object]]:
    started = run(env, "daemon", "start")
    assert started.returncode == 0, started.stdout + started.stderr
    try:
        status = run(env, "status", "--json")
        assert status.returncode == 0, status.stdout + status.stderr
        yield json.loads(status.stdout)
    finally:
        run(env, "daemon", "stop")


def test_two_homes_without_xdg_runtime_dir_get_two_daemons(tmp_path: Path) -> None:
    a, b = home_env(tmp_path / "a"), home_env(tmp_path / "b")
    run_a, run_b = runtime_of(a), runtime_of(b)
    assert run_a != run_b
    assert {run_a.parent, run_b.parent} == {Path("/tmp")}
    assert run_a.name.startswith(f"ctxwrap-{os.getuid()}-")
    assert runtime_of(dict(a, XDG_STATE_HOME=str(tmp_path / "a" / ".local/state"))) == run_a
    try:
        with daemon_for(a) as status_a:
            # B sees no daemon of its own: not A's answering as if it were B's
            idle = run(b, "status")
            assert idle.returncode == 0 and "not running" in idle.stdout, idle.stdout
            checks = {c["name"]: c for c in json.loads(run(b, "doctor", "--json").stdout)["checks"]}
            assert checks["daemon"]["summary"].startswith("not running"), checks["daemon"]
            assert str(run_b) in checks["socket dir"]["summary"]
            assert "this state dir" in checks["socket dir"]["summary"]
            with daemon_for(b) as status_b:
                assert status_a["pid"] != status_b["pid"]
                assert str(run_a) in str(status_a["socket"])
                assert str(run_b) in str(status_b["socket"])
            assert (tmp_path / "a" / ".local/state/ctxwrap").is_dir()
            assert (tmp_path / "b" / ".local/state/ctxwrap").is_dir()
    finally:
        for d in (run_a, run_b):
            with contextlib.suppress(OSError):
                for f in d.iterdir():
                    f.unlink()
                d.rmdir()
