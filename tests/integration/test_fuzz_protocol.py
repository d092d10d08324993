"""Mutated protocol frames against a real daemon process: no input gives a 5xx.

The golden frames (tests/fixtures/frames/) are mutated with a seeded generator — numbers at
and past the SQLite / JavaScript limits, NaN and infinities, JSON nested a thousand deep,
wrong types, dropped and unknown keys, session ids the daemon never registered, recall
patterns RE2 cannot run, broken bytes — and sent over one keep-alive connection. Every answer
must be below 500, health must keep answering, unknown session ids must not become live
sessions, and the daemon's RSS must stay under a ceiling.

A second test stores a large output and runs a catastrophic recall pattern over it while
another client probes health: each probe must answer within 100 ms.
"""

from __future__ import annotations

import contextlib
import copy
import json
import random
import shutil
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support import CTXWRAP, Xdg, client, make_xdg, wait_ready

FRAMES = Path(__file__).resolve().parents[1] / "fixtures" / "frames"
SESSION = "fuzz-session-0001"
REQUESTS = 3200
# Measured: ~60 MB after warm-up, flat over 6,000 requests once the fixes are in. The ceiling
# leaves room for allocator noise, not for per-request growth.
RSS_CEILING_MB = 110
RSS_GROWTH_MB = 25
CATASTROPHIC = "(a+)+$"
BAD_PATTERNS = ["(", CATASTROPHIC, r"(a)\1", "(?=x)", "[", "*", "a{100000}{100000}", "(?<!x)y"]


class Daemon:
    def __init__(self, xdg: Xdg, proc: subprocess.Popen[bytes]) -> None:
        self.xdg, self.proc = xdg, proc
        self.pid = int(wait_ready(xdg)["pid"])

    def rss_mb(self) -> float:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        raise AssertionError("no VmRSS")


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    xdg = make_xdg(tmp_path_factory.mktemp("fuzz"))
    proc = subprocess.Popen(
        [*CTXWRAP, "daemon", "run"],
        env=xdg.env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield Daemon(xdg, proc)
    finally:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGCONT)
            proc.kill()
        proc.wait(10)
        xdg.kill_daemon()
        shutil.rmtree(xdg.runtime, ignore_errors=True)


def golden_requests() -> list[dict[str, Any]]:
    docs = [json.loads(p.read_text()) | {"name": p.stem} for p in sorted(FRAMES.glob("*.json"))]
    return [d for d in docs if d["direction"] == "bridge->daemon"]


def register(c: Any, tmp: Path, frames: list[dict[str, Any]]) -> str:
    """Register SESSION with a skill whose SKILL.md is deleted afterwards; store one output."""
    start = copy.deepcopy(next(d for d in frames if d["name"] == "session_start")["frame"])
    skill = tmp / "skills" / "pdf-tools" / "SKILL.md"
    skill.parent.mkdir(parents=True)
    skill.write_text("---\nname: pdf-tools\ndescription: extract text from pdf\n---\nbody\n")
    start |= {
        "session_id": SESSION,
        "pid": 0,
        "skills": [
            {
                "name": "pdf-tools",
                "description": "Extract text from PDF files and fill PDF forms.",
                "file_path": str(skill),
                "base_dir": str(skill.parent),
            }
        ],
    }
    assert c.post("/v1/sessions/start", json=start).status_code == 200
    skill.unlink()  # catalogued, then gone: find_capability must still answer
    r = c.post("/v1/capabilities/search", json={"session_id": SESSION, "query": "pdf text"})
    assert r.status_code == 200, r.text
    assert "can no longer be read" in (r.json()["skill_body"] or "")
    text = "\n".join(["a" * 34 + "!"] * 400 + [f"line {i} " + "x" * 20 for i in range(400)])
    r = c.post(
        "/v1/tool_result",
        json={
            "session_id": SESSION,
            "tool_call_id": "fuzz-bash",
            "tool_name": "bash",
            "input": {"command": "make"},
            "text": text,
        },
    )
    assert r.status_code == 200 and r.json()["handle"], r.text
    return str(r.json()["handle"])


# -- mutations ----------------------------------------------------------------------------------


def deep(n: int) -> Any:
    value: Any = 1
    for _ in range(n):
        value = [value]
    return value


NASTY_VALUES: list[Any] = [
    2**63,
    2**64 + 7,
    -(2**63) - 1,
    10**30,
    -1,
    0,
    float("nan"),
    float("inf"),
    float("-inf"),
    1e308,
    "",
    "x" * 5000,
    "\u0000\x1b[31m",
    "\ud800",
    None,
    True,
    [],
    {},
    [1, "a", None],
    {"k": {"k": {"k": 1}}},
]


def paths_of(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    if len(prefix) > 12:  # a nesting bomb planted by an earlier mutation: not worth walking
        return
    if isinstance(value, dict):
        for k, v in value.items():
            yield (*prefix, k)
            yield from paths_of(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value[:4]):
            yield (*prefix, i)
            yield from paths_of(v, (*prefix, i))


def set_at(doc: Any, path: tuple[Any, ...], value: Any, *, delete: bool = False) -> None:
    for key in path[:-1]:
        doc = doc[key]
    if delete:
        del doc[path[-1]]
    else:
        doc[path[-1]] = value


def mutate(rng: random.Random, frame: dict[str, Any], handle: str) -> dict[str, Any] | list[Any]:
    doc = copy.deepcopy(frame)
    if "session_id" in doc:
        # Mostly the registered session (so handlers run), sometimes ids never registered.
        doc["session_id"] = SESSION if rng.random() < 0.7 else f"ghost-{rng.randrange(10**9)}"
    if "handle" in doc:
        doc["handle"] = handle if rng.random() < 0.7 else f"r{rng.randrange(2**32):08x}"
    if "pattern" in doc and rng.random() < 0.6:
        doc["pattern"] = rng.choice(BAD_PATTERNS)
    # A third keep every value (handlers run on ids, handles and patterns alone).
    for _ in range(rng.choice([0, 1, 1, 2, 3])):
        paths = list(paths_of(doc))
        roll = rng.random()
        if roll < 0.08:
            return deep(rng.choice([100, 1000, 5000]))
        if not paths:
            break
        path = rng.choice(paths)
        if roll < 0.7:
            set_at(doc, path, rng.choice([*NASTY_VALUES, deep(rng.choice([70, 1000]))]))
        elif roll < 0.85:
            with contextlib.suppress(KeyError, IndexError, TypeError):
                set_at(doc, path, None, delete=True)
        else:
            doc[f"extra_{rng.randrange(100)}"] = rng.choice(NASTY_VALUES)
    return doc


def encode(rng: random.Random, doc: Any) -> bytes:
    try:
        body = json.dumps(doc, allow_nan=True).encode()  # NaN/Infinity as Python would send
    except (ValueError, RecursionError):
        body = b"[" * 5000 + b"]" * 5000
    roll = rng.random()
    if roll < 0.05 and len(body) > 2:
        return body[: rng.randrange(1, len(body))]  # truncated JSON
    if roll < 0.08:
        i = rng.randrange(len(body))
        return body[:i] + bytes([rng.randrange(256)]) + body[i + 1 :]
    return body


def get_request(rng: random.Random) -> str:
    width = rng.choice(["abc", "-5", "0", "10", "90", "99999999999999999999", "", "1e3", "٣"])
    session = rng.choice([SESSION, "ghost", "", "%00", "a" * 300])
    return rng.choice(
        [
            f"/v1/stats?session={session}&width={width}",
            f"/v1/stats?width={width}",
            f"/v1/facts?session={session}",
            "/v1/sessions",
            "/v1/health",
        ]
    )


# -- the tests ----------------------------------------------------------------------------------


def test_mutated_frames_never_get_a_5xx(daemon: Daemon, tmp_path: Path) -> None:
    frames = golden_requests()
    assert len(frames) >= 10
    rng = random.Random(20261130)
    statuses: Counter[int] = Counter()
    failures: list[str] = []
    started = time.monotonic()
    registered = {SESSION}  # ids a session_start was accepted for
    with client(daemon.xdg, timeout=30) as c:
        handle = register(c, tmp_path, frames)
        rss_start = 0.0
        for i in range(REQUESTS):
            if i == 300:
                rss_start = daemon.rss_mb()  # after warm-up: imports, caches, catalog
            if rng.random() < 0.1:
                path = get_request(rng)
                r = c.get(path)
                what = f"GET {path}"
            else:
                d = rng.choice(frames)
                method, path = d["route"].split(" ", 1)
                body = encode(rng, mutate(rng, d["frame"], handle))
                r = c.request(
                    method, path, content=body, headers={"content-type": "application/json"}
                )
                if path == "/v1/sessions/start" and r.status_code == 200:
                    registered.add(json.loads(body)["session_id"])
                what = f"{d['name']}: {body[:160]!r}"
            statuses[r.status_code] += 1
            if r.status_code >= 500 or not r.headers.get("content-type", "").startswith(
                "application/json"
            ):
                failures.append(f"{r.status_code} {what} -> {r.text[:200]}")
            if i % 250 == 0:
                h = c.get("/v1/health")
                assert h.status_code == 200, h.text
        live = {s["session_id"] for s in c.get("/v1/sessions").json()["sessions"] if s["live"]}
        rss_end = daemon.rss_mb()
    elapsed = time.monotonic() - started
    print(f"\nfuzz: {REQUESTS} requests in {elapsed:.1f}s; statuses {dict(statuses)}")
    print(f"fuzz: RSS {rss_start:.1f} MB after warm-up -> {rss_end:.1f} MB")
    assert not failures, f"{len(failures)} bad answers, first: " + "\n".join(failures[:10])
    assert daemon.proc.poll() is None
    # Hundreds of ghost ids were used: only ids a session_start registered can be live (the
    # mutated starts name a dead pid, so housekeeping ends those again).
    assert live <= registered, live - registered
    assert len(live) <= 2, live
    assert statuses[409] > 50 and statuses[422] > 300 and statuses[200] > 500, statuses
    assert rss_end < RSS_CEILING_MB, (rss_start, rss_end)
    assert rss_end - rss_start < RSS_GROWTH_MB, (rss_start, rss_end)


@pytest.mark.serial
def test_catastrophic_recall_does_not_block_health(daemon: Daemon) -> None:
    """(a+)+$ over lines of 34 a's and a '!' backtracks 2^34 steps per line in a backtracking
    engine; here it must neither freeze the daemon nor hold the event loop while it scans."""
    with client(daemon.xdg, timeout=60) as c:
        start = {"session_id": "recall-bomb", "cwd": "/", "pid": 0}
        assert c.post("/v1/sessions/start", json=start).status_code == 200
        text = "\n".join(["a" * 34 + "!"] * 300_000)  # 10.5 MB, one stored output
        r = c.post(
            "/v1/tool_result",
            json={
                "session_id": "recall-bomb",
                "tool_call_id": "c1",
                "tool_name": "bash",
                "input": {"command": "yes"},
                "text": text,
            },
        )
        assert r.status_code == 200, r.text
        handle = r.json()["handle"]
        bad = c.post("/v1/recall", json={"handle": handle, "pattern": "("})
        assert bad.status_code == 422 and bad.json()["error"] == "invalid pattern", bad.text

    result: dict[str, Any] = {}

    def recall() -> None:
        with client(daemon.xdg, timeout=60) as rc:
            t = time.monotonic()
            r = rc.post("/v1/recall", json={"handle": handle, "pattern": CATASTROPHIC})
            result.update(status=r.status_code, body=r.json(), took=time.monotonic() - t)

    worker = threading.Thread(target=recall)
    latencies: list[float] = []
    with client(daemon.xdg, timeout=5) as probe:
        probe.get("/v1/health")  # connect before the clock starts
        worker.start()
        while worker.is_alive() or not latencies:
            t = time.monotonic()
            assert probe.get("/v1/health").status_code == 200
            latencies.append(time.monotonic() - t)
            time.sleep(0.01)
    worker.join(60)
    print(
        f"\nrecall took {result.get('took', 0):.2f}s; {len(latencies)} health probes,"
        f" slowest {max(latencies) * 1000:.0f} ms"
    )
    assert result["status"] == 200, result
    assert result["body"]["total_lines"] == 300_000 and result["body"]["matched_lines"] == 0
    assert max(latencies) < 0.1, sorted(latencies)[-5:]
