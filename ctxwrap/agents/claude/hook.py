"""`ctxwrap hook claude`: Claude Code's PostToolUse / PostToolUseFailure command hook.

A thin client, standard library only (it starts once per tool call): it hands the event to the
proxy of its `ctxwrap claude` launch (``CTXWRAP_CLAUDE_HOOK``) and prints the answer. Any
failure — no proxy, a deadline, garbage — prints nothing and exits 0: Claude Code then keeps
the tool's original output (fail open).
"""

from __future__ import annotations

import http.client
import json
import os
import sys
from typing import IO
from urllib.parse import urlsplit

HOOK_ENV = "CTXWRAP_CLAUDE_HOOK"
# The proxy's own bash deadline is 15 s; Claude Code's hook timeout (settings) is 30 s.
DEADLINE_S = {"Bash": 20.0, "Write": 22.0}
DEFAULT_DEADLINE_S = 3.0
MAX_EVENT_BYTES = 64 << 20


def run_hook(stdin: IO[bytes], stdout: IO[str], env: dict[str, str] | None = None) -> int:
    env = dict(os.environ) if env is None else env
    url = env.get(HOOK_ENV, "")
    try:
        raw = stdin.read(MAX_EVENT_BYTES)
        if not url:
            return 0
        event = json.loads(raw)
        tool = event.get("tool_name") if isinstance(event, dict) else None
        deadline = DEADLINE_S.get(tool, DEFAULT_DEADLINE_S) if isinstance(tool, str) else 1.0
        parts = urlsplit(url)
        if parts.hostname != "127.0.0.1" or parts.port is None:
            return 0  # never send a tool's output anywhere but our own loopback proxy
        conn = http.client.HTTPConnection("127.0.0.1", parts.port, timeout=deadline)
        try:
            conn.request("POST", parts.path, body=raw, headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            data = resp.read()
        finally:
            conn.close()
        if resp.status != 200:
            return 0
        answer = json.loads(data)
        if isinstance(answer, dict) and answer:
            stdout.write(json.dumps(answer))
            stdout.flush()
    except Exception:
        pass
    return 0


def main() -> int:
    return run_hook(sys.stdin.buffer, sys.stdout)
