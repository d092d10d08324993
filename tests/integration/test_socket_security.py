"""Issue 12, finding 2: another local user must not be able to pose as the daemon.

A second uid (65534, via setpriv; CI runs as root) plants the runtime directory — its own
0777 directory with a fake daemon that answers health like ours and records every byte and
connection, or a symlink to it. ctxwrap (CLI and bridge) must send nothing and say why.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from support import CTXWRAP, PI_VERSIONS, Xdg, isolated_env, pi_path, tool_contents

from ctxwrap import PROTOCOL_VERSION, __version__, paths
from ctxwrap.testing.model_server import ScriptedModelServer
from ctxwrap.testing.pi_home import make_pi_agent_dir, pi_command, pi_env

OTHER_UID = 65534
pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None,
    reason="needs root and setpriv to act as a second local user",
)

FAKE_DAEMON = r"""
import json, os, socket, sys
path, log, version, protocol = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
srv.bind(path)
os.chmod(path, 0o777)
srv.listen(16)
body = json.dumps({"status": "ok", "version": version, "protocol": protocol, "pid": os.getpid(),
                   "uptime_s": 1.0, "sessions": 0, "socket": path}).encode()
while True:
    conn, _ = srv.accept()
    with open(log, "ab") as fh:
        fh.write(b"<connect>\n")
    conn.settimeout(2)
    try:
        while True:
            chunk = conn.recv(65536)
            if not chunk:
                break
            with open(log, "ab") as fh:
                fh.write(chunk)
            if b"\r\n\r\n" in chunk:
                conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                             b"content-length: %d\r\n\r\n" % len(body) + body)
                break
    except OSError:
        pass
    conn.close()
"""


def as_other(*argv: str) -> list[str]:
    return ["setpriv", f"--reuid={OTHER_UID}", f"--regid={OTHER_UID}", "--clear-groups", *argv]


@dataclass
class FakeDaemon:
    socket: Path
    log: Path

    def received(self) -> bytes:
        return self.log.read_bytes() if self.log.exists() else b""


@contextlib.contextmanager
def fake_daemon(
    directory: Path, log_dir: Path, *, owner_other: bool = True
) -> Iterator[FakeDaemon]:
    """A daemon impostor listening at directory/daemon.sock, run as the other uid."""
    script = log_dir / "fake_daemon.py"
    script.write_text(FAKE_DAEMON)
    sock, log = directory / "daemon.sock", log_dir / "received.log"
    argv = [
        "/usr/bin/python3",
        str(script),
        str(sock),
        str(log),
        __version__,
        str(PROTOCOL_VERSION),
    ]
    proc = subprocess.Popen(as_other(*argv) if owner_other else argv)
    try:
        end = time.monotonic() + 10
        while not sock.exists():
            assert proc.poll() is None and time.monotonic() < end, "fake daemon did not start"
            time.sleep(0.02)
        yield FakeDaemon(sock, log)
    finally:
        proc.kill()
        proc.wait()


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A world-writable, sticky directory like /tmp, where both users can create things."""
    base = Path(tempfile.mkdtemp(prefix="cws", dir="/tmp"))
    os.chmod(base, 0o1777)
    attacker = base / "attacker"
    subprocess.run(as_other("mkdir", "-m", "0777", str(attacker)), check=True)
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def plant_dir(path: Path) -> None:
    """The other user's own 0777 directory at the path ctxwrap will look at."""
    subprocess.run(as_other("mkdir", "-m", "0777", str(path)), check=True)
    subprocess.run(as_other("chmod", "0777", str(path)), check=True)  # despite its umask


@contextlib.contextmanager
def victim_env(tmp_path: Path, runtime: Path | None) -> Iterator[dict[str, str]]:
    """Our user's environment; runtime None means XDG_RUNTIME_DIR unset (the /tmp fallback)."""
    with isolated_env(tmp_path) as env:
        if runtime is None:
            env.pop("XDG_RUNTIME_DIR")
        else:
            env["XDG_RUNTIME_DIR"] = str(runtime)
        yield env


def ctxwrap_run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CTXWRAP, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


def assert_refused(proc: subprocess.CompletedProcess[str], path: Path) -> None:
    out = proc.stdout + proc.stderr
    assert proc.returncode == 77, out
    assert str(path) in out, out
    assert "hint:" in out, out
    assert "ready" not in proc.stdout.split("\n", 1)[0], out


def test_control_the_recorder_sees_what_ctxwrap_sends(tmp_path: Path) -> None:
    """Without a refusal, the impostor gets the health request: the other tests mean something."""
    rt = Path(tempfile.mkdtemp(prefix="cwc", dir="/tmp"))
    try:
        (rt / "ctxwrap").mkdir(mode=0o700)
        with (
            victim_env(tmp_path, rt) as env,
            fake_daemon(rt / "ctxwrap", tmp_path, owner_other=False) as fake,
        ):
            proc = ctxwrap_run(env, "status")
            assert proc.returncode == 0 and "daemon: ready" in proc.stdout, proc.stdout
            assert b"GET /v1/health" in fake.received()
    finally:
        shutil.rmtree(rt, ignore_errors=True)


@pytest.mark.parametrize("command", [["status"], ["daemon", "status"], ["daemon", "start"]])
def test_other_users_directory_with_a_fake_daemon(
    command: list[str], tmp_path: Path, shared_tmp: Path
) -> None:
    planted = shared_tmp / "ctxwrap"
    plant_dir(planted)
    with (
        victim_env(tmp_path, shared_tmp) as env,
        fake_daemon(planted, shared_tmp / "attacker") as fake,
    ):
        proc = ctxwrap_run(env, *command)
        assert_refused(proc, planted)
        assert f"owned by uid {OTHER_UID}" in proc.stdout + proc.stderr
        assert fake.received() == b"", "ctxwrap talked to the impostor"


def test_symlink_to_other_users_directory(tmp_path: Path, shared_tmp: Path) -> None:
    target = shared_tmp / "attacker" / "rt"
    plant_dir(target)
    link = shared_tmp / "ctxwrap"
    subprocess.run(as_other("ln", "-s", str(target), str(link)), check=True)
    with (
        victim_env(tmp_path, shared_tmp) as env,
        fake_daemon(target, shared_tmp / "attacker") as fake,
    ):
        for command in (["status"], ["daemon", "start"], ["daemon", "stop"]):
            proc = ctxwrap_run(env, *command)
            assert_refused(proc, link)
            assert "symlink" in proc.stdout + proc.stderr
        assert fake.received() == b""


def test_own_directory_opened_to_others_is_not_trusted(tmp_path: Path, shared_tmp: Path) -> None:
    """Our directory, but 0777: the socket in it was planted by the other user."""
    rt = Path(tempfile.mkdtemp(prefix="cwo", dir="/tmp"))
    os.chmod(rt, 0o755)  # like /tmp around /tmp/ctxwrap-<uid>: the other user can reach in
    try:
        (rt / "ctxwrap").mkdir()
        os.chmod(rt / "ctxwrap", 0o777)
        with (
            victim_env(tmp_path, rt) as env,
            fake_daemon(rt / "ctxwrap", shared_tmp / "attacker") as fake,
        ):
            proc = ctxwrap_run(env, "status")
            assert_refused(proc, rt / "ctxwrap")
            assert "mode 0777" in proc.stdout
            assert fake.received() == b""
    finally:
        shutil.rmtree(rt, ignore_errors=True)


def fallback_scenario(home: str, old_tmp: str, keep: list[str]) -> None:
    """Run inside a private mount namespace with its own empty /tmp (the test below).

    What the run needs from the real /tmp (a checkout or venv there, pytest's tmp dir) is bound
    back into the new one, through `old_tmp`, a mount point outside /tmp.
    """
    subprocess.run(["mount", "--make-rprivate", "/"], check=True)
    subprocess.run(["mount", "--bind", "/tmp", old_tmp], check=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=1777", "tmpfs", "/tmp"], check=True)
    for path in keep:
        rel = os.path.relpath(path, "/tmp")
        if rel.startswith(".."):
            continue  # not under /tmp: still there
        os.makedirs(path, exist_ok=True)
        subprocess.run(["mount", "--bind", os.path.join(old_tmp, rel), path], check=True)
    logs = Path("/tmp/attacker")
    subprocess.run(as_other("mkdir", "-m", "0777", str(logs)), check=True)
    with victim_env(Path(home), None) as env:
        # the fallback names the victim's state dir, which an attacker can work out as well
        os.environ["XDG_STATE_HOME"] = env["XDG_STATE_HOME"]
        planted = paths.fallback_runtime_dir()
    plant_dir(planted)
    with victim_env(Path(home), None) as env, fake_daemon(planted, logs) as fake:
        proc = ctxwrap_run(env, "status")
        result = {
            "planted": str(planted),
            "returncode": proc.returncode,
            "stdout": proc.stdout,
            "stderr": proc.stderr,
            "received": fake.received().decode("utf-8", "replace"),
        }
    print(json.dumps(result))


def test_planted_fallback_directory_without_xdg_runtime_dir(tmp_path: Path) -> None:
    """The real fallback path, /tmp/ctxwrap-<uid>-<hash>, pre-created by the other user.

    In a private mount namespace with a fresh /tmp: the host's /tmp/ctxwrap-<uid> may be a
    real daemon's, and is left alone.
    """
    here = Path(__file__).parent
    # The checkout, its venv and pytest's tmp dir may all live under /tmp (CI clones anywhere).
    keep = sorted({str(here.parent.parent), sys.prefix, str(tmp_path)})
    old_tmp = tempfile.mkdtemp(prefix="ctxwrap-oldtmp-", dir="/var/tmp")
    code = (
        f"import sys; sys.path[:0] = [{str(here)!r}, {str(here.parent)!r}]; "
        f"import test_socket_security as t; "
        f"t.fallback_scenario({str(tmp_path)!r}, {old_tmp!r}, {keep!r})"
    )
    if shutil.which("unshare") is None:
        pytest.skip("unshare (util-linux) is not installed")
    try:
        proc = subprocess.run(
            ["unshare", "--mount", sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=60,
            cwd="/",
        )
    finally:
        os.rmdir(old_tmp)
    if proc.returncode != 0 and "unshare failed" in proc.stderr:
        pytest.skip(f"no mount namespace here: {proc.stderr.strip()}")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    out = result["stdout"] + result["stderr"]
    assert result["returncode"] == 77, out
    assert result["planted"] in out and "hint:" in out, out
    assert f"owned by uid {OTHER_UID}" in out, out
    assert result["received"] == "", "ctxwrap talked to the impostor"


BASH_FLOOD = {"tool_calls": [{"name": "bash", "arguments": {"command": "seq 1 40000"}}]}


def xdg_at(tmp_path: Path, runtime: Path) -> Xdg:
    return Xdg(tmp_path, runtime, tmp_path / "state", tmp_path / "config")


@pytest.mark.parametrize("pi", PI_VERSIONS)
def test_ctxwrap_pi_warns_once_and_runs_plain_pi(pi: str, tmp_path: Path, shared_tmp: Path) -> None:
    pi_bin = pi_path(pi)
    planted = shared_tmp / "ctxwrap"
    plant_dir(planted)
    home = tmp_path / "home"
    (home / "work").mkdir(parents=True)
    with (
        fake_daemon(planted, shared_tmp / "attacker") as fake,
        ScriptedModelServer([BASH_FLOOD, {"text": "done"}]) as srv,
    ):
        agent_dir = make_pi_agent_dir(home, srv.base_url)
        env = xdg_at(tmp_path, shared_tmp).env(pi_env(agent_dir, home))
        env["CTXWRAP_PI"] = str(pi_bin)
        proc = subprocess.run(
            pi_command(pi_bin, "go", wrapped=True),
            env=env,
            cwd=home / "work",
            capture_output=True,
            text=True,
            timeout=120,
            stdin=subprocess.DEVNULL,
        )
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip() == "done"
        warnings = [ln for ln in proc.stderr.splitlines() if ln.startswith("ctxwrap: warning:")]
        assert len(warnings) == 1, proc.stderr
        assert str(planted) in warnings[0] and "without savings" in warnings[0]
        # Plain pi: pi's own truncated output, no ctxwrap digest, no ctxwrap tools.
        (content,) = tool_contents(srv.main_requests[1].body)
        assert "ctxwrap" not in content and "40000" in content
        assert fake.received() == b"", "ctxwrap pi talked to the impostor"


@pytest.mark.parametrize("pi", PI_VERSIONS)
def test_bridge_refuses_a_planted_socket(pi: str, tmp_path: Path, shared_tmp: Path) -> None:
    """pi with the bridge loaded directly, pointed at the impostor: not a byte, pi unharmed."""
    from ctxwrap.agents.pi.launcher import bridge_path

    pi_bin = pi_path(pi)
    planted = shared_tmp / "ctxwrap"
    plant_dir(planted)
    home = tmp_path / "home"
    (home / "work").mkdir(parents=True)
    trace = tmp_path / "bridge.log"
    with (
        fake_daemon(planted, shared_tmp / "attacker") as fake,
        ScriptedModelServer([BASH_FLOOD, {"text": "done"}]) as srv,
    ):
        agent_dir = make_pi_agent_dir(home, srv.base_url)
        env = xdg_at(tmp_path, shared_tmp).env(pi_env(agent_dir, home))
        env["CTXWRAP_BRIDGE_LOG"] = str(trace)
        argv = pi_command(pi_bin, "go", "-e", str(bridge_path()))
        proc = subprocess.run(
            argv,
            env=env,
            cwd=home / "work",
            capture_output=True,
            text=True,
            timeout=120,
            stdin=subprocess.DEVNULL,
        )
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip() == "done"
        assert proc.stderr.strip() == ""  # silent: the refusal is only traced
        assert len(srv.main_requests) == 2
        # Fail open, with invariant 1's one exception: the flood is still cut to a tail.
        (content,) = tool_contents(srv.main_requests[1].body)
        assert content.startswith("[ctxwrap: output too large"), content[:200]
        assert fake.received() == b"", "the bridge talked to the impostor"
        log = trace.read_text()
        assert f"refusing the daemon socket: {planted} is owned by uid {OTHER_UID}" in log, log
        assert log.count("refusing the daemon socket") == 1, log  # traced once, not per call
