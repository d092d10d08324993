"""Daemon round-trip latency and idle memory (targets: p50 ≤ 1 ms, p99 ≤ 5 ms, RSS ≤ 80 MB).

Starts a real `ctxwrap daemon run` under temp XDG dirs, then over one keep-alive connection:

- GET /v1/health and POST /v1/turn_end (a real fire-and-forget event: one SQLite insert),
  each with an httpx client (what the CLI uses) and with a raw socket client that sends
  prebuilt bytes (closest to the bridge's node http agent; no client-side overhead);
- idle RSS from /proc/<pid>/status (VmRSS, and VmHWM = peak) after start-up, and again after
  the round trips;
- time from spawn to the first health answer, and what `import ctxwrap.daemon.lifecycle`
  (the start-up import of `ctxwrap daemon run`) spends its time on (-X importtime, top 12).

Not a test: prints figures next to the targets.

    .venv/bin/python bench/daemon_roundtrip.py [--iterations 5000] [--warmup 500]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx

TARGET_P50_MS = 1.0
TARGET_P99_MS = 5.0
TARGET_RSS_MB = 80.0
SESSION = "bench-roundtrip"


def proc_status(pid: int) -> dict[str, str]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        out[key] = value.strip()
    return out


def mb(kb_field: str) -> float:
    return int(kb_field.split()[0]) / 1024


class RawClient:
    """HTTP/1.1 over one kept-alive Unix socket, requests prebuilt: measures the daemon only."""

    def __init__(self, path: str) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(path)
        self.buf = b""

    def roundtrip(self, request: bytes) -> bytes:
        self.sock.sendall(request)
        while True:
            head_end = self.buf.find(b"\r\n\r\n")
            if head_end >= 0:
                head = self.buf[:head_end].lower()
                i = head.find(b"content-length:")
                length = int(head[i + 15 :].split(b"\r\n", 1)[0]) if i >= 0 else 0
                total = head_end + 4 + length
                if len(self.buf) >= total:
                    resp, self.buf = self.buf[:total], self.buf[total:]
                    if not resp.startswith(b"HTTP/1.1 200"):
                        raise RuntimeError(resp[:200])
                    return resp
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("daemon closed the connection")
            self.buf += chunk

    def close(self) -> None:
        self.sock.close()


def request_bytes(method: str, path: str, body: dict[str, object] | None = None) -> bytes:
    data = json.dumps(body).encode() if body is not None else b""
    head = f"{method} {path} HTTP/1.1\r\nHost: ctxwrap\r\n"
    if body is not None:
        head += f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n"
    return (head + "\r\n").encode() + data


def interleaved(
    cases: dict[str, Callable[[], object]], warmup: int, iterations: int
) -> dict[str, list[float]]:
    """Round-robin over the cases, so a busy machine slows each of them alike."""
    for fn in cases.values():
        for _ in range(warmup):
            fn()
    out: dict[str, list[float]] = {name: [] for name in cases}
    clock = time.perf_counter_ns
    for _ in range(iterations):
        for name, fn in cases.items():
            t = clock()
            fn()
            out[name].append((clock() - t) / 1e6)
    return out


def pct(samples: list[float], q: float) -> float:
    s = sorted(samples)
    return s[min(len(s) - 1, round(q / 100 * (len(s) - 1)))]


def verdict(value: float, target: float) -> str:
    return "ok  " if value <= target else "MISS"


def import_profile(env: dict[str, str], top: int) -> list[tuple[float, str]]:
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import ctxwrap.daemon.lifecycle"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    rows = []
    for line in proc.stderr.splitlines():
        parts = line.split("|")
        if not line.startswith("import time:") or len(parts) != 3 or "cumulative" in line:
            continue
        name = parts[2].strip()
        # packages (no dot) and ctxwrap's own modules: what start-up pays for, by cumulative time
        if "." not in name or name.startswith("ctxwrap."):
            rows.append((int(parts[1]) / 1000, name))
    return sorted(rows, reverse=True)[:top]


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--iterations", type=int, default=5000)
    ap.add_argument("--warmup", type=int, default=500)
    ap.add_argument("--top-imports", type=int, default=12)
    args = ap.parse_args()

    root = Path(tempfile.mkdtemp(prefix="cwb"))
    runtime = Path(tempfile.mkdtemp(prefix="cwb", dir="/tmp"))  # socket paths max 107 bytes
    env = {k: v for k, v in os.environ.items() if not k.startswith("PI_CTX_")}
    env.update(
        XDG_RUNTIME_DIR=str(runtime),
        XDG_STATE_HOME=str(root / "state"),
        XDG_CONFIG_HOME=str(root / "config"),
        CTXWRAP_NO_SYSTEMD="1",
    )
    sock = runtime / "ctxwrap" / "daemon.sock"
    spawned = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "ctxwrap", "daemon", "run"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        transport = httpx.HTTPTransport(uds=str(sock))
        with httpx.Client(transport=transport, base_url="http://ctxwrap", timeout=5) as c:
            while True:
                if proc.poll() is not None:
                    raise SystemExit(f"daemon exited with {proc.returncode}")
                with contextlib.suppress(httpx.HTTPError):
                    if c.get("/v1/health").status_code == 200:
                        break
                time.sleep(0.01)
            ready_s = time.perf_counter() - spawned
            time.sleep(1.0)  # let start-up settle (watchdog thread, first GC)
            idle = proc_status(proc.pid)

            c.post(
                "/v1/sessions/start",
                json={"session_id": SESSION, "cwd": str(root), "pid": os.getpid()},
            ).raise_for_status()
            turn = {"session_id": SESSION, "turn_index": 1, "input_tokens": 10, "output_tokens": 2}
            raw = RawClient(str(sock))
            health, event = (
                request_bytes("GET", "/v1/health"),
                request_bytes("POST", "/v1/turn_end", turn),
            )
            cases: dict[str, Callable[[], object]] = {
                "httpx   GET  /v1/health": lambda: c.get("/v1/health").raise_for_status(),
                "httpx   POST /v1/turn_end": lambda: c.post(
                    "/v1/turn_end", json=turn
                ).raise_for_status(),
                "raw     GET  /v1/health": lambda: raw.roundtrip(health),
                "raw     POST /v1/turn_end": lambda: raw.roundtrip(event),
            }
            try:
                results = interleaved(cases, args.warmup, args.iterations)
            finally:
                raw.close()
        after = proc_status(proc.pid)
    finally:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(runtime, ignore_errors=True)

    print(
        f"ctxwrap daemon round trip — {args.iterations} iterations after {args.warmup} warm-up, one keep-alive connection"
    )
    print(
        f"python {sys.version.split()[0]}, load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs\n"
    )
    print(
        f"{'':28} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8} {'max ms':>8}   target p50 ≤ {TARGET_P50_MS} / p99 ≤ {TARGET_P99_MS}"
    )
    for name, s in results.items():
        p50, p90, p99 = pct(s, 50), pct(s, 90), pct(s, 99)
        print(
            f"{name:28} {p50:8.3f} {p90:8.3f} {p99:8.3f} {max(s):8.3f}   "
            f"{verdict(p50, TARGET_P50_MS)} {verdict(p99, TARGET_P99_MS)}  (mean {statistics.fmean(s):.3f})"
        )
    rss_idle, rss_after = mb(idle["VmRSS"]), mb(after["VmRSS"])
    print(
        f"\nidle RSS after start-up     {rss_idle:8.1f} MB   target ≤ {TARGET_RSS_MB:.0f} MB  {verdict(rss_idle, TARGET_RSS_MB)}"
    )
    print(
        f"RSS after the round trips   {rss_after:8.1f} MB   (peak VmHWM {mb(after['VmHWM']):.1f} MB, threads {after['Threads']})"
    )
    print(f"spawn → first health answer {ready_s * 1000:8.0f} ms")

    print(
        f"\nwhere `import ctxwrap.daemon.lifecycle` spends its time (-X importtime, cumulative, top {args.top_imports}):"
    )
    for ms, name in import_profile(env, args.top_imports):
        print(f"  {ms:8.1f} ms  {name.strip()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
