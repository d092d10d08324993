"""The `context` edit step on a 1,000-message, 5 MB session: p99 ≤ 5 ms end to end (issue 5).

Starts a real `ctxwrap daemon run` under temp XDG dirs, opens a session, then runs
bench/prune_node.ts under the pinned node: per LLM call it does the bridge's own work
(describeTail + tailIds, POST /v1/context over the Unix socket with a keep-alive agent,
applyEdits with ~50 frozen edits, the bridge's size `measure`, the fire-and-forget llm_call)
and times each part. Prints p50/p99 per part and the total against the target, and what is
shipped to the daemon per call next to the size of the conversation.

Not a test: prints figures next to the target.

    .venv/bin/python bench/prune.py [--iterations 2000] [--warmup 200] [--node PATH]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parent.parent
TARGET_P99_MS = 5.0
SESSION = "bench-prune"
PARTS = [
    ("describe", "describeTail + tailIds"),
    ("daemon", "POST /v1/context round trip"),
    ("apply", "applyEdits (frozen set)"),
    ("measure", "measure (sent / saved chars)"),
    ("notify", "llm_call notify (sync part)"),
    ("total", "whole edit step"),
]


@contextlib.contextmanager
def daemon(root: Path) -> Iterator[Path]:
    runtime = Path(tempfile.mkdtemp(prefix="cwbp", dir="/tmp"))  # short: socket path limit
    env = {k: v for k, v in os.environ.items() if not k.startswith("PI_CTX_")}
    env.update(
        XDG_RUNTIME_DIR=str(runtime),
        XDG_STATE_HOME=str(root / "state"),
        XDG_CONFIG_HOME=str(root / "config"),
        CTXWRAP_NO_SYSTEMD="1",
    )
    sock = runtime / "ctxwrap" / "daemon.sock"
    proc = subprocess.Popen(
        [sys.executable, "-m", "ctxwrap", "daemon", "run"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        end = time.monotonic() + 30
        while True:
            try:
                with httpx.Client(
                    transport=httpx.HTTPTransport(uds=str(sock)), base_url="http://d", timeout=1
                ) as c:
                    c.get("/v1/health").raise_for_status()
                break
            except (httpx.HTTPError, OSError):
                if time.monotonic() > end or proc.poll() is not None:
                    raise SystemExit("the daemon did not come up") from None
                time.sleep(0.05)
        yield sock
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(runtime, ignore_errors=True)


def find_node(explicit: str | None) -> str:
    for cand in (explicit, str(REPO / ".tools" / "bin" / "node"), shutil.which("node")):
        if cand and Path(cand).is_file():
            return cand
    raise SystemExit("node not found: pass --node or run scripts/install-tools.sh")


def fmt_bytes(n: float) -> str:
    return f"{n / 1e6:.2f} MB" if n >= 1e6 else f"{n / 1e3:.1f} kB" if n >= 1e3 else f"{n:.0f} B"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--iterations", type=int, default=2000)
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--messages", type=int, default=1000)
    ap.add_argument("--bytes", type=int, default=5_000_000)
    ap.add_argument("--edits", type=int, default=50)
    ap.add_argument("--node")
    a = ap.parse_args()
    node = find_node(a.node)
    with (
        tempfile.TemporaryDirectory(prefix="ctxwrap-bench-prune-") as tmp,
        daemon(Path(tmp)) as sock,
    ):
        with httpx.Client(
            transport=httpx.HTTPTransport(uds=str(sock)), base_url="http://d", timeout=5
        ) as c:
            r = c.post(
                "/v1/sessions/start",
                json={"session_id": SESSION, "cwd": str(REPO), "pid": os.getpid()},
            )
            r.raise_for_status()
        out = subprocess.run(
            [
                node,
                str(REPO / "bench" / "prune_node.ts"),
                *("--socket", str(sock), "--session", SESSION),
                *("--iterations", str(a.iterations), "--warmup", str(a.warmup)),
                *("--messages", str(a.messages), "--bytes", str(a.bytes), "--edits", str(a.edits)),
            ],
            capture_output=True,
            text=True,
            timeout=600,
        )
        if out.returncode != 0:
            sys.stderr.write(out.stderr)
            return 1
    res: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    load = os.getloadavg()[0]
    ms = res["ms"]
    print(
        f"bridge `context` edit step — up to {res['messages']:,} messages, "
        f"{fmt_bytes(res['conversation_bytes'])} conversation, {res['frozen_edits']} frozen edits "
        f"({res['removed_messages']} messages removed by them), "
        f"{res['iterations']:,} calls, node {res['node']}, load {load:.1f} on {os.cpu_count()} CPUs"
    )
    print(f"  {'part':34} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}")
    for key, label in PARTS:
        s = ms[key]
        print(f"  {label:34} {s['p50']:8.3f} {s['p99']:8.3f} {s['max']:8.3f}")
    total_p99 = ms["total"]["p99"]
    verdict = "OK" if total_p99 <= TARGET_P99_MS else "OVER"
    print(f"  target: whole step p99 ≤ {TARGET_P99_MS} ms → {total_p99:.3f} ms  {verdict}")
    req = res["context_request_bytes"]
    print(
        f"  sent to the daemon per call: POST /v1/context {fmt_bytes(req['p50'])} p50, "
        f"{fmt_bytes(req['max'])} max (tail of {res['tail_messages']['p50']} messages, "
        f"descriptors only) vs the {fmt_bytes(res['conversation_bytes'])} conversation — "
        f"{res['conversation_bytes'] / max(req['max'], 1):,.0f}× smaller; no transcript is shipped"
    )
    return 0 if total_p99 <= TARGET_P99_MS else 2


if __name__ == "__main__":
    raise SystemExit(main())
