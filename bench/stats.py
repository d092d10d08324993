"""How fast `ctxwrap stats` answers with 10,000 recorded LLM calls (target: 300 ms).

Fills a fresh store in a temp XDG_STATE_HOME with 10,000 llm_calls over 50 ended sessions (plus
aux calls and provider turns), times `compute_stats` with an empty cost cache (every call
priced), prices each session into the cache as the daemon does when a session ends, then times
`ctxwrap stats` and `ctxwrap stats --json` as subprocesses (median of N runs) and
`compute_stats` alone. Plain `ctxwrap --version` is timed in the same run as the floor every
command pays (interpreter + click start-up).

    .venv/bin/python bench/stats.py [--calls 10000] [--sessions 50] [--runs 7]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ctxwrap import protocol as P
from ctxwrap.config import Settings
from ctxwrap.mechanisms.cost_accounting import (
    PricedSession,
    fill_cost_totals,
    record_session_model,
    refresh_cost_cache,
)
from ctxwrap.state.store import Store, connect
from ctxwrap.stats.compute import compute_stats

TARGET_MS = 300.0


def fill(db: Path, calls: int, sessions: int, seed: int = 7) -> None:
    rng = random.Random(seed)
    store = Store(db)
    start = time.time() - 30 * 86400  # a month of history, so --by day has rows
    per = calls // sessions
    with store.transaction() as conn:
        for s in range(sessions):
            sid = f"{s:08x}-bench-{rng.getrandbits(32):08x}"
            t0 = start + s * (30 * 86400 / sessions)
            conn.execute(
                "INSERT INTO sessions (session_id, cwd, pid, model, started_at, ended_at, end_reason)"
                " VALUES (?, '/tmp', 1, 'bench/model', ?, ?, 'quit')",
                (sid, t0, t0 + per * 20),
            )
            msgs = 0
            for i in range(per):
                msgs += 2
                head = rng.random() < 0.01
                if head:
                    msgs = 4
                conn.execute(
                    "INSERT INTO llm_calls (session_id, call_index, ts, sent_system, sent_messages,"
                    " sent_tools, saved_bash, saved_amnesia, saved_writes, saved_skills, saved_tools,"
                    " head_changed, message_count) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                    (
                        sid,
                        i,
                        t0 + i * 20,
                        8000,
                        rng.randint(1000, 400_000),
                        12_000,
                        rng.randint(0, 40_000),
                        rng.randint(0, 20_000),
                        rng.randint(-200, 5_000),
                        6_000,
                        3_000,
                        int(head),
                        msgs,
                    ),
                )
                if i % 3 == 0:
                    task, mech = rng.choice(
                        [("digest", "bash"), ("tag", "amnesia"), ("fact", "writes")]
                    )
                    conn.execute(
                        "INSERT INTO aux_calls (session_id, ts, task, mechanism, backend,"
                        " input_tokens, output_tokens, ok, elapsed_ms) VALUES (?,?,?,?,?,?,?,?,?)",
                        (sid, t0 + i * 20, task, mech, "pi", rng.randint(200, 3000), 60, 1, 900.0),
                    )
                conn.execute(
                    "INSERT INTO turns (session_id, ts, turn_index, input_tokens, output_tokens,"
                    " cache_read_tokens, cache_write_tokens) VALUES (?,?,?,?,?,?,?)",
                    (sid, t0 + i * 20, i, 500, 300, 20_000, 1_000),
                )
    store.close()


def compute_runs(conn: sqlite3.Connection, runs: int) -> float:
    """Median ms of `compute_stats` over the three groupings."""
    samples = []
    for by in ("mechanism", "session", "day") * runs:
        t = time.perf_counter()
        compute_stats(conn, by=by)
        samples.append((time.perf_counter() - t) * 1000)
    return statistics.median(samples)


def turn_end_ms(db: Path, calls: int, seed: int = 5) -> tuple[float, float]:
    """One live session growing to `calls` calls; at each of its last 50 turn_ends, the
    median ms of the daemon's turn_end cost figures (incremental) and of pricing the whole
    session again (what turn_end did before)."""
    rng = random.Random(seed)
    store = Store(db)
    sid = "live-bench-session"
    t0 = time.time() - calls * 20
    store.upsert_session(
        {
            "session_id": sid,
            "session_file": None,
            "cwd": "/tmp",
            "pid": 1,
            "pi_version": "1.6.0",
            "pi_package": "pi",
            "model": "anthropic/claude-sonnet-4-5",
            "started_at": t0,
        }
    )
    model = P.ModelRef(provider="anthropic", id="claude-sonnet-4-5", context_window=200_000)
    record_session_model(store, sid, model, None)
    cfg = Settings()
    incremental: list[float] = []
    whole: list[float] = []
    sent = 0
    for i in range(calls):
        sent = sent + rng.randint(500, 8000) if sent < 600_000 else 40_000
        store.insert(
            "llm_calls",
            {
                "session_id": sid,
                "call_index": i,
                "ts": t0 + i * 20,
                "sent_system": 8000,
                "sent_messages": sent,
                "sent_tools": 12_000,
                "saved_bash": rng.randint(0, 40_000),
                "saved_amnesia": rng.randint(0, 20_000),
                "saved_writes": 0,
                "saved_skills": 6000,
                "saved_tools": 3000,
                "head_changed": 0,
                "message_count": 2 + i,
                "sent_prefix_chars": sent - 2000,
                "plain_prefix_chars": sent + 40_000,
                "plain_summary_chars": sent // 3,
                "prompt_index": i // 10,
                "model": "anthropic/claude-sonnet-4-5",
            },
        )
        store.insert(
            "turns",
            {
                "session_id": sid,
                "ts": t0 + i * 20 + 5,
                "turn_index": i,
                "input_tokens": 300,
                "output_tokens": 200,
                "cache_read_tokens": sent // 4,
                "cache_write_tokens": 500,
            },
        )
        t = time.perf_counter()
        fill_cost_totals(store.conn, P.SessionTotals(), sid, cfg)
        if i >= calls - 50:
            incremental.append((time.perf_counter() - t) * 1000)
            t = time.perf_counter()
            session = PricedSession(sid, cfg.cache_ttl_s, None)
            session.refresh(store.conn)
            session.buckets()
            whole.append((time.perf_counter() - t) * 1000)
    store.close()
    return statistics.median(incremental), statistics.median(whole)


def time_cmd(argv: list[str], env: dict[str, str], runs: int) -> float:
    samples = []
    for _ in range(runs):
        t = time.perf_counter()
        subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL)
        samples.append((time.perf_counter() - t) * 1000)
    return statistics.median(samples)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=10_000)
    ap.add_argument("--sessions", type=int, default=50)
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--live-calls", type=int, default=2000)
    args = ap.parse_args()
    exe = shutil.which("ctxwrap", path=str(Path(sys.executable).parent)) or "ctxwrap"
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "XDG_STATE_HOME": tmp}
        db = Path(tmp) / "ctxwrap" / "ctxwrap.db"
        t = time.perf_counter()
        fill(db, args.calls, args.sessions)
        print(
            f"filled {args.calls} calls / {args.sessions} sessions in {time.perf_counter() - t:.1f}s"
        )

        conn = connect(db, readonly=True)
        uncached = compute_runs(conn, args.runs)
        # what the daemon does when a session ends: price it once into the cost cache
        t = time.perf_counter()
        writer = connect(db)
        for (sid,) in writer.execute("SELECT session_id FROM sessions").fetchall():
            refresh_cost_cache(writer, sid, Settings())
        writer.close()
        print(
            f"priced {args.sessions} ended sessions into the cache in {time.perf_counter() - t:.2f}s"
        )
        cached = compute_runs(conn, args.runs)
        conn.close()
        rows = [
            ("ctxwrap --version (floor)", time_cmd([exe, "--version"], env, args.runs)),
            ("compute_stats, no cache", uncached),
            ("compute_stats alone", cached),
            ("ctxwrap stats", time_cmd([exe, "stats"], env, args.runs)),
            ("ctxwrap stats --json", time_cmd([exe, "stats", "--json"], env, args.runs)),
            (
                "ctxwrap stats --by session",
                time_cmd([exe, "stats", "--by", "session"], env, args.runs),
            ),
            ("ctxwrap stats --by day", time_cmd([exe, "stats", "--by", "day"], env, args.runs)),
        ]
        live_ms, whole_ms = turn_end_ms(Path(tmp) / "live.db", args.live_calls)
    print(
        f"turn_end cost figures of a {args.live_calls}-call live session (median of its last"
        f" 50): {live_ms:.2f} ms incremental, {whole_ms:.2f} ms pricing it whole"
    )
    print(f"median of {args.runs} runs, target {TARGET_MS:.0f} ms; nproc {os.cpu_count()},")
    print(f"load average {os.getloadavg()[0]:.2f} (a loaded machine slows the floor too)")
    floor = rows[0][1]
    for name, ms in rows:
        verdict = (
            ""
            if name.startswith(("compute", "ctxwrap --version"))
            else ("ok" if ms <= TARGET_MS else "OVER")
        )
        over_floor = f"(+{ms - floor:6.1f} over the floor)" if verdict else ""
        print(f"  {name:28} {ms:8.1f} ms  {ms / TARGET_MS:5.2f}× target  {verdict:4} {over_floor}")


if __name__ == "__main__":
    main()
