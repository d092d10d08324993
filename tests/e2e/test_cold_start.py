"""A slow daemon start costs the session nothing: pi starts at once, savings from the first
tool round on (issue 15, "lower overhead").

The daemon is made slow to start from outside the product: a `sitecustomize` on PYTHONPATH
sleeps in any Python process whose command line is `… ctxwrap daemon run …`, so the real
launcher, bridge and daemon run unchanged.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from support import Xdg, ctxwrap, run_ctxwrap_pi, tool_contents

pytestmark = [pytest.mark.e2e, pytest.mark.serial]  # pi must start within DELAY_S

DELAY_S = 5.0  # longer than pi takes to start on a loaded machine; under the 5 s bash revive wait after it
SLOW_DAEMON = f"""
import os, time
try:
    with open("/proc/self/cmdline", "rb") as fh:
        argv = fh.read().split(b"\\0")
except OSError:
    argv = []
if b"daemon" in argv and b"run" in argv:
    time.sleep({DELAY_S})
    with open(os.environ["SLOW_DAEMON_MARK"], "a") as fh:
        fh.write(f"{{time.time()}}\\n")
"""


# pi 1.6 only: the bridge's own wait, the same under 0.73; the serial pass's time is budgeted
@pytest.mark.parametrize("pi", ["pi"])
def test_slow_daemon_start_keeps_the_first_rounds_savings(
    pi: str, tmp_path: Path, xdg: Xdg
) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SLOW_DAEMON)
    script = [
        {"tool_calls": [{"name": "bash", "arguments": {"command": "seq 1 30000"}}]},
        {"text": "done"},
    ]
    assert not xdg.socket.exists()  # no daemon yet: this run starts it
    mark = tmp_path / "daemon-began"
    env = {"PYTHONPATH": str(site), "SLOW_DAEMON_MARK": str(mark)}
    run = run_ctxwrap_pi(pi, tmp_path, xdg, script, extra_env=env)
    assert run.proc.returncode == 0, run.proc.stderr
    assert run.proc.stdout.strip() == "done"  # pi finished the session (it once quit mid-way)
    first, second = run.server.main_requests
    # pi did not wait for the daemon: its first request went out before the daemon even began.
    began = min(float(t) for t in mark.read_text().split())
    assert first.timestamp < began, (first.timestamp, began)
    # The first tool round was digested all the same (the bridge waited for the daemon there).
    (result,) = [c for c in tool_contents(second.body) if "30000" in c or "ctxwrap" in c]
    assert re.match(r"\$ .* · 30,000 lines \(", result), result[:200]
    assert "29999" not in result
    # ... and the session and both LLM calls reached the statistics.
    sessions = json.loads(ctxwrap(xdg, "sessions", "--all", "--json").stdout)["sessions"]
    assert len(sessions) == 1
    stats = json.loads(
        ctxwrap(xdg, "stats", "--session", sessions[0]["session_id"], "--json").stdout
    )
    assert stats["totals"]["llm_calls"] == 2, stats["totals"]
