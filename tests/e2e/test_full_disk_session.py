"""A state disk that fills while the daemon runs, with real pi: the agent goes on.

The state dir is a small tmpfs (root only; skips otherwise, saying why), filled after the
daemon started. The flood still reaches the model as a digest (not the bridge's tail), the
digest says there is no recall handle, pi exits 0, and `ctxwrap status` / doctor say the
daemon is degraded and why. Freeing space ends the degraded state.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from diskfull import fill, small_fs
from support import PI_VERSIONS, Xdg, ctxwrap, run_ctxwrap_pi, tool_contents

pytestmark = pytest.mark.e2e

SEQ = {"tool_calls": [{"name": "bash", "arguments": {"command": "seq 1 40000"}}]}
READ = {"tool_calls": [{"name": "read", "arguments": {"path": "big.txt"}}]}
DONE = {"text": "done"}


# pi 1.6 only (the suite's time is budgeted): the degraded state and the digest without a recall
# handle are the daemon's; the bridge passes any digest through one code path, which
# tests/e2e/test_bash_digest.py runs under pi 0.73 too.
@pytest.mark.parametrize("pi", PI_VERSIONS[:1])
def test_disk_filling_during_a_session(pi: str, tmp_path: Path, xdg: Xdg) -> None:
    with small_fs(xdg.state, "2m"):
        try:
            started = ctxwrap(xdg, "daemon", "start")
            assert started.returncode == 0, started.stderr
            ballast = fill(xdg.state)
            run = run_ctxwrap_pi(
                pi,
                tmp_path,
                xdg,
                [SEQ, READ, DONE],
                files={"big.txt": "".join(f"line {i} of a big file\n" for i in range(1500))},
            )
            assert run.proc.returncode == 0, run.proc.stderr
            assert run.proc.stdout.strip() == "done"
            bodies = run.main_bodies()
            digest = tool_contents(bodies[1])[0]
            assert " digested by ctxwrap · " in digest.split("\n", 1)[0], digest[:300]
            assert "40,001 lines" in digest or "40,000 lines" in digest
            assert "no recall" in digest and "ctxwrap recall r" not in digest
            assert len(digest) < 8000  # a digest, not the bridge's fallback tail
            # The read result could not be kept for recall, so it stays as it was.
            assert "line 1499 of a big file" in tool_contents(bodies[2])[-1]

            status = ctxwrap(xdg, "status", "--json")
            assert status.returncode == 0, status.stderr  # degraded still serves
            doc = json.loads(status.stdout)
            assert doc["state"] == "degraded", doc
            assert "disk is full" in doc["degraded"] or "No space left" in doc["degraded"]
            assert "0 bytes free" in doc["degraded"]
            human = ctxwrap(xdg, "status")
            assert "daemon: degraded" in human.stdout and "degraded: " in human.stdout
            doctor = ctxwrap(xdg, "doctor", "--json")
            checks = {c["name"]: c for c in json.loads(doctor.stdout)["checks"]}
            assert checks["daemon"]["level"] == "fail"
            assert checks["daemon"]["summary"].startswith("degraded: ")

            ballast.unlink()  # space again: the next write lands and the daemon recovers
            again = run_ctxwrap_pi(pi, tmp_path / "again", xdg, [SEQ, DONE])
            assert again.proc.returncode == 0, again.proc.stderr
            assert "`ctxwrap recall r" in tool_contents(again.main_bodies()[1])[0]
            doc = json.loads(ctxwrap(xdg, "status", "--json").stdout)
            assert doc["state"] == "ready" and doc["degraded"] is None, doc
        finally:
            subprocess.run([*CTXWRAP_STOP], env=xdg.env(), capture_output=True, check=False)
            xdg.kill_daemon()


CTXWRAP_STOP = [sys.executable, "-m", "ctxwrap", "daemon", "stop"]
