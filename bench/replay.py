"""`ctxwrap replay` throughput on a generated corpus (target: 1 GB in ≤ 60 s, i.e. ≥ 17 MB/s).

Writes a corpus of pi 1.x session files and Claude Code transcripts into a temp dir (deleted
afterwards): per session an initial prompt, then rounds of bash outputs (test-runner logs with
failures, most over the digest threshold), file reads, writes and short commands, in the
proportions a coding session has. Then replays it in-process as `ctxwrap replay --json` does
and prints the throughput. Not a test: prints figures next to the target; exit 1 on a miss.

    .venv/bin/python bench/replay.py [--mb 1024] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ctxwrap.replay import replay_paths, run_json

TARGET_S_PER_GB = 60.0


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat().replace("+00:00", "Z")


def _pytest_log(rng: random.Random, lines: int) -> str:
    out = ["============================= test session starts =============================="]
    for i in range(lines):
        mod = f"tests/test_mod{rng.randrange(40)}.py"
        if rng.random() < 0.02:
            out.append(f"{mod}::test_case_{i} FAILED")
            out += [
                "    def test_case():",
                f">       assert compute({i}) == {i + 1}",
                f"E       AssertionError: assert {i} == {i + 1}",
                f"{mod}:{rng.randrange(500)}: AssertionError",
            ]
        else:
            out.append(
                f"{mod}::test_case_{i} PASSED{' ' * rng.randrange(8)}[{i * 100 // lines:3d}%]"
            )
    out.append(f"==== {lines // 50} failed, {lines} passed in {rng.random() * 90:.2f}s ====")
    return "\n".join(out) + "\n"


def _source(rng: random.Random, lines: int) -> str:
    words = ["value", "result", "config", "handler", "session", "request", "cache", "index"]
    out = ['"""A generated module for the replay benchmark."""', "", "import os", ""]
    for i in range(lines):
        w = rng.choice(words)
        if i % 12 == 0:
            out.append(f"def {w}_{i}(arg, other=None):")
        out.append(f"    {w}_{i % 7} = compute_{w}(arg, {i}) + len(str(other or ''))  # step {i}")
    return "\n".join(out) + "\n"


OUTPUTS = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "outputs"
PI_MAX_BYTES = 50 * 1024  # pi keeps the last 2000 lines or 50 KB of a bash output


def _as_pi_saw_it(text: str, n: int) -> str:
    """The tail pi keeps of an output, with its truncation note when it cut."""
    lines = text.splitlines(keepends=True)
    tail = lines[-2000:]
    while sum(len(x) for x in tail) > PI_MAX_BYTES:
        tail = tail[1:]
    if len(tail) == len(lines):
        return text
    first = len(lines) - len(tail) + 1
    return (
        "".join(tail)
        + f"\n\n[Showing lines {first}-{len(lines)} of {len(lines)}. Full output: /tmp/pi-bash-{n:016x}.log]"
    )


class Pool:
    """Contents reused across sessions (generating text is not what is measured). Bash
    outputs are the digester's captured real outputs (tests/fixtures/outputs) and generated
    verbose test-runner logs, as pi shows them."""

    def __init__(self, rng: random.Random) -> None:
        real = [p.read_text(errors="replace") for p in sorted(OUTPUTS.glob("*/output.txt"))]
        generated = [_pytest_log(rng, rng.randrange(300, 1400)) for _ in range(6)]
        self.logs = [_as_pi_saw_it(t, i) for i, t in enumerate(real + generated)]
        self.sources = [_source(rng, rng.randrange(80, 500)) for _ in range(24)]
        self.writes = [_source(rng, rng.randrange(40, 200)) for _ in range(12)]


def pi_session(rng: random.Random, pool: Pool, sid: str, rounds: int) -> list[dict[str, Any]]:
    t = 1.79e9 + rng.random() * 1e6
    entries: list[dict[str, Any]] = [
        {"type": "session", "version": 3, "id": sid, "timestamp": _iso(t), "cwd": "/work/p"}
    ]
    parent: str | None = None
    n = 0

    def add(message: dict[str, Any], dt: float) -> None:
        nonlocal parent, n, t
        t += dt
        n += 1
        eid = f"{sid[:6]}{n:06d}"
        entries.append(
            {
                "type": "message",
                "id": eid,
                "parentId": parent,
                "timestamp": _iso(t),
                "message": message,
            }
        )
        parent = eid

    add(
        {
            "role": "system",
            "content": "",
            "sections": {"preamble": "You are a coding assistant. " * 40, "cwd": "/work/p"},
            "toolsAdded": [
                {
                    "name": name,
                    "description": f"The {name} tool. " * 10,
                    "parameters": {"type": "object"},
                }
                for name in ("read", "bash", "edit", "write")
            ],
        },
        0,
    )
    for r in range(rounds):
        if r % 15 == 0:
            add(
                {"role": "user", "content": [{"type": "text", "text": f"task {r}: fix the tests"}]},
                rng.choice([5, 30, 900]),
            )
        kind = rng.random()
        calls: list[tuple[str, str, dict[str, Any], str]] = []
        if kind < 0.35:
            calls.append(("bash", f"c{r}", {"command": "pytest -q"}, rng.choice(pool.logs)))
        elif kind < 0.7:
            path = f"src/mod{rng.randrange(30)}.py"
            calls.append(("read", f"c{r}", {"path": path}, rng.choice(pool.sources)))
            if rng.random() < 0.3:
                calls.append(("read", f"c{r}b", {"path": "README.md"}, rng.choice(pool.sources)))
        elif kind < 0.85:
            body = rng.choice(pool.writes)
            calls.append(
                (
                    "write",
                    f"c{r}",
                    {"path": f"src/new{r}.py", "content": body},
                    f"Successfully wrote {len(body)} bytes",
                )
            )
        else:
            calls.append(
                ("bash", f"c{r}", {"command": "git status --short"}, " M src/a.py\n?? src/b.py\n")
            )
        add(
            {
                "role": "assistant",
                "content": [{"type": "text", "text": "Let me look."}]
                + [
                    {"type": "toolCall", "id": cid, "name": name, "arguments": args}
                    for name, cid, args, _ in calls
                ],
                "usage": {"input": 1000 * r, "output": 40, "cacheRead": 0, "cacheWrite": 0},
                "model": "claude-sonnet-4-5",
                "stopReason": "toolUse",
            },
            rng.random() * 20,
        )
        for name, cid, _, text in calls:
            add(
                {
                    "role": "toolResult",
                    "toolCallId": cid,
                    "toolName": name,
                    "content": [{"type": "text", "text": text}],
                    "isError": False,
                },
                rng.random() * 5,
            )
    return entries


def claude_session(rng: random.Random, pool: Pool, sid: str, rounds: int) -> list[dict[str, Any]]:
    t = 1.79e9 + rng.random() * 1e6
    entries: list[dict[str, Any]] = []
    parent: str | None = None
    n = 0

    def add(kind: str, message: dict[str, Any], dt: float) -> None:
        nonlocal parent, n, t
        t += dt
        n += 1
        uid = f"{sid[:8]}-{n:08d}"
        entries.append(
            {
                "type": kind,
                "uuid": uid,
                "parentUuid": parent,
                "timestamp": _iso(t),
                "sessionId": sid,
                "cwd": "/work/p",
                "isSidechain": False,
                "message": message,
            }
        )
        parent = uid

    add("user", {"role": "user", "content": "fix the failing tests"}, 0)
    for r in range(rounds):
        if rng.random() < 0.5:
            name, args, text = "Bash", {"command": "pytest -q"}, rng.choice(pool.logs)[:30000]
        else:
            name, args, text = (
                "Read",
                {"file_path": f"/work/p/src/m{r}.py"},
                rng.choice(pool.sources),
            )
        add(
            "assistant",
            {
                "id": f"msg_{sid[:6]}_{r}",
                "role": "assistant",
                "model": "claude-sonnet-4-5",
                "content": [{"type": "tool_use", "id": f"tu{r}", "name": name, "input": args}],
                "usage": {
                    "input_tokens": 3,
                    "cache_read_input_tokens": 900 * r,
                    "cache_creation_input_tokens": 500,
                    "output_tokens": 30,
                },
            },
            rng.random() * 20,
        )
        add(
            "user",
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": f"tu{r}", "content": text}],
            },
            rng.random() * 5,
        )
    return entries


def make_corpus(root: Path, mb: int, seed: int = 16) -> tuple[int, int]:
    rng = random.Random(seed)
    pool = Pool(rng)
    total = files = 0
    limit = mb * 1_000_000
    while total < limit:
        sid = f"{rng.getrandbits(64):016x}-bench-{files}"
        if files % 5 == 4:
            entries = claude_session(rng, pool, sid, rng.randrange(40, 160))
            path = root / ".claude" / "projects" / f"-work-p{files % 7}" / f"{sid}.jsonl"
        else:
            entries = pi_session(rng, pool, sid, rng.randrange(60, 240))
            path = root / ".pi" / "agent" / "sessions" / f"--work-p{files % 7}--" / f"{sid}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        data = "".join(json.dumps(e, ensure_ascii=False) + "\n" for e in entries).encode()
        path.write_bytes(data)
        total += len(data)
        files += 1
    return files, total


def _cpu_s() -> float:
    me, kids = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=1024, help="corpus size in MB (default 1024)")
    ap.add_argument("--keep", type=Path, help="write the corpus here and keep it")
    ap.add_argument("--workers", type=int, help="worker processes (default: one per core)")
    args = ap.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="ctxwrap-replay-bench-"))
    try:
        t0 = time.monotonic()
        files, size = make_corpus(root, args.mb)
        gen_s = time.monotonic() - t0
        load = os.getloadavg()[0]
        print(f"corpus: {files:,} session files, {size / 1e6:,.0f} MB in {gen_s:.1f} s ({root})")
        t0 = time.monotonic()
        cpu0 = _cpu_s()
        doc = run_json(replay_paths([root / ".pi", root / ".claude"], workers=args.workers))
        elapsed = time.monotonic() - t0
        cpu = _cpu_s() - cpu0
        t = doc["totals"]
        mbps = size / 1e6 / elapsed
        per_gb = elapsed * 1e9 / size
        print(
            f"replay: {doc['sessions']:,} sessions, {t['llm_calls']:,} calls, saved {t['saved_pct']}%"
            f" in {elapsed:.1f} s = {mbps:,.1f} MB/s ({per_gb:.1f} s per GB; target ≤ {TARGET_S_PER_GB:.0f} s)"
        )
        print(
            f"cpu: {cpu:.1f} s in this process and its workers ({cpu * 1e9 / size:.1f} cpu-s per GB);"
            f" load average before: {load:.1f} on {os.cpu_count()} cores"
        )
        if doc["skipped_files"] or doc["skipped_entries"]:
            print(f"skipped: {doc['skipped_files']} {doc['skipped_entries']}")
        return 0 if per_gb <= TARGET_S_PER_GB else 1
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
