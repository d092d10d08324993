"""What `ctxwrap pi` costs in wall time over plain `pi` (target: median ratio <= 1.15).

One scripted session of 22 tool calls (bash with large outputs such as `seq 1 30000`, read,
ls/find through bash, write) runs against an instant in-process ScriptedModelServer, with
plain `pi -p` and with `ctxwrap pi -p`, alternating (plain, ctxwrap, plain, …), N runs each,
for every installed pi version. Each run gets a fresh pi home and work dir; the ctxwrap runs
share one isolated XDG dir, so one daemon serves them all.

Figures printed:
- median wall time of each side and their ratio (the target);
- cold start: one extra `ctxwrap pi` run before the series, with no daemon yet (auto-start);
- per-event bridge latency: for each tool round k, the gap between LLM request k and k+1 as
  the scripted server timestamps them (tool execution + pi + the bridge's hooks); ctxwrap's
  gap minus plain pi's gap for the same round of the paired run gives the latency the bridge
  adds per event. p50/p99 over all rounds and pairs; the slowest rounds are listed by command.
  Launch-to-first-request is reported the same way (extension load, session start, daemon
  handshake);
- aux-model requests the bridge made (they reach the same scripted server);
- the launcher's fixed cost: `ctxwrap pi --version` vs `pi --version`.

    .venv/bin/python bench/overhead.py [--runs 5] [--versions pi,pi-0.73]

Two more modes (issue 43): ``--proxy`` prints the Claude proxy's added time to the first byte
by request size, p50/p95 (bench/proxy_latency.py); ``--realistic`` runs whole sessions of pi,
Claude Code and Codex at a realistic model latency (``--ttft``, ``--aux-ttft``, ``--tps``),
plain vs wrapped in the same run, and prints each wall-time ratio and where the difference went
(launch → first request, the tool rounds, last request → exit; bench/realistic_latency.py).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ctxwrap.testing.model_server import ScriptedModelServer
from ctxwrap.testing.pi_home import find_pi, make_pi_agent_dir, pi_command, pi_env

TARGET_RATIO = 1.15
CTXWRAP = [sys.executable, "-m", "ctxwrap"]


def bash(command: str) -> dict[str, Any]:
    return {"name": "bash", "arguments": {"command": command}}


def read(path: str) -> dict[str, Any]:
    return {"name": "read", "arguments": {"path": path}}


def write(path: str, content: str) -> dict[str, Any]:
    return {"name": "write", "arguments": {"path": path, "content": content}}


NOTES = "\n".join(f"- note {i}: the parser keeps state in module globals" for i in range(60)) + "\n"

# 20 steps, 22 tool calls (steps 8 and 14 call two tools in parallel).
STEPS: list[list[dict[str, Any]]] = [
    [bash("seq 1 30000")],
    [read("a.txt")],
    [bash("ls -la")],
    [bash("find . -name '*.txt' | sort")],
    [write("notes.md", NOTES)],
    [bash("seq 1 20000 | sed 's/$/ lorem ipsum dolor/'")],
    [read("b.py")],
    [read("a.txt"), read("c.txt")],
    [bash("cat big.log")],
    [write("out/result.txt", "result: 42\n" * 40)],
    [bash("grep -n ERROR big.log | head -50")],
    [bash("echo small output")],
    [read("big.log")],
    [bash("wc -l big.log"), bash("find . -type f | sort")],
    [write("data.json", json.dumps({"k": list(range(300))}))],
    [bash("seq 1 30000")],
    [read("notes.md")],
    [bash("ls -R")],
    [bash("yes 'progress 50% ====>' | head -20000")],
    [write("final.txt", "done\n")],
]
SCRIPT: list[object] = [{"tool_calls": calls} for calls in STEPS] + [{"text": "All done."}]
N_CALLS = sum(len(s) for s in STEPS)


def make_work(work: Path) -> None:
    work.mkdir(parents=True)
    (work / "a.txt").write_text("alpha\n" * 50)
    (work / "c.txt").write_text("gamma\n" * 50)
    (work / "b.py").write_text("".join(f"def f{i}(x):\n    return x + {i}\n\n" for i in range(150)))
    lines = [
        f"2026-01-01 12:{i // 60 % 60:02d}:{i % 60:02d} {'ERROR boom' if i % 97 == 0 else 'INFO ok'} item={i}"
        for i in range(6000)
    ]
    (work / "big.log").write_text("\n".join(lines) + "\n")


@dataclass
class Run:
    wall: float
    launch_to_first: float  # process start → first LLM request
    gaps: list[float]  # LLM request k → k+1
    aux: dict[str, int]
    ok: bool
    err: str = ""


def run_once(pi: Path, root: Path, xdg_env: dict[str, str] | None, label: str) -> Run:
    """One scripted session; xdg_env None runs plain pi, else ctxwrap pi with that env."""
    home = Path(tempfile.mkdtemp(prefix=f"{label}-", dir=root))
    work = home / "work"
    make_work(work)
    with ScriptedModelServer(SCRIPT) as srv:
        env = pi_env(make_pi_agent_dir(home, srv.base_url), home)
        if xdg_env is None:
            cmd = pi_command(pi, "run the scripted session")
        else:
            env.update(xdg_env, CTXWRAP_PI=str(pi))
            cmd = pi_command(pi, "run the scripted session", wrapped=True)
        start_wall = time.time()
        t0 = time.monotonic()
        proc = subprocess.run(
            cmd,
            env=env,
            cwd=work,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=600,
        )
        wall = time.monotonic() - t0
        mains = srv.main_requests
        aux: dict[str, int] = defaultdict(int)
        for r in srv.aux_requests:
            aux[r.aux_task or "?"] += 1
    ok = proc.returncode == 0 and proc.stdout.strip() == "All done." and len(mains) == len(SCRIPT)
    ts = [r.timestamp for r in mains]
    shutil.rmtree(home, ignore_errors=True)
    return Run(
        wall,
        ts[0] - start_wall if ts else float("nan"),
        [b - a for a, b in itertools.pairwise(ts)],
        dict(aux),
        ok,
        ""
        if ok
        else f"rc={proc.returncode} stdout={proc.stdout[-300:]!r} stderr={proc.stderr[-600:]!r}",
    )


def pct(values: Sequence[float], q: float) -> float:
    s = sorted(values)
    if not s:
        return float("nan")
    return s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))]


def timed_interleaved(
    cmds: dict[str, list[str]], env: dict[str, str], n: int = 7
) -> dict[str, float]:
    """Median wall time of each command, run round-robin so load drift hits all alike."""
    times: dict[str, list[float]] = defaultdict(list)
    for _ in range(n):
        for label, cmd in cmds.items():
            t0 = time.monotonic()
            subprocess.run(cmd, env=env, stdin=subprocess.DEVNULL, capture_output=True, timeout=120)
            times[label].append(time.monotonic() - t0)
    return {label: statistics.median(v) for label, v in times.items()}


@contextlib.contextmanager
def isolated_xdg(root: Path) -> Iterator[dict[str, str]]:
    runtime = Path(tempfile.mkdtemp(prefix="cwb", dir="/tmp"))  # short: socket path limit
    env = {
        "XDG_RUNTIME_DIR": str(runtime),
        "XDG_STATE_HOME": str(root / "state"),
        "XDG_CONFIG_HOME": str(root / "config"),
        "CTXWRAP_NO_SYSTEMD": "1",
    }
    try:
        yield env
    finally:
        pidfile = runtime / "ctxwrap" / "daemon.pid"
        with contextlib.suppress(OSError, ValueError, IndexError, ProcessLookupError):
            os.kill(int(pidfile.read_text().split()[0]), signal.SIGTERM)
        shutil.rmtree(runtime, ignore_errors=True)


def fresh_bytecode(tree: Path) -> None:
    """Compile `tree`'s ctxwrap package before timing it. Where PYTHONDONTWRITEBYTECODE is set
    (as in the helpers' environment), a tree without current .pyc files (a fresh worktree, or
    modules edited since) compiles them in every wrapped launch: ~50 ms of each `ctxwrap
    codex` or `ctxwrap pi` start, charged to that tree alone. py_compile writes regardless."""
    import compileall

    compileall.compile_dir(str(tree / "ctxwrap"), quiet=1)


@contextlib.contextmanager
def busy_loops(n: int) -> Iterator[None]:
    """N processes spinning on a core each while the comparison runs (--busy): load on purpose."""
    spinning = [
        subprocess.Popen([sys.executable, "-c", "while 1: pass"], stdin=subprocess.DEVNULL)
        for _ in range(n)
    ]
    if n:
        print(f"{n} busy loops beside every run")
    try:
        yield
    finally:
        for proc in spinning:
            proc.kill()
            proc.wait()


def bench_version(name: str, runs: int) -> dict[str, Any] | None:
    pi = find_pi(name)
    if pi is None:
        print(f"\n== {name}: not installed, skipped")
        return None
    got = subprocess.run([str(pi), "--version"], capture_output=True, text=True)
    version = (got.stdout + got.stderr).strip() or "?"  # 0.73 prints it on stderr
    print(
        f"\n== {name} {version}: {N_CALLS} tool calls in {len(STEPS)} steps, {runs} runs each side"
    )
    root = Path(tempfile.mkdtemp(prefix="ctxwrap-overhead-"))
    try:
        with isolated_xdg(root) as xdg_env:
            cold = run_once(pi, root, xdg_env, "cold")
            plain_runs: list[Run] = []
            wrapped_runs: list[Run] = []
            for i in range(runs):
                plain_runs.append(run_once(pi, root, None, "plain"))
                wrapped_runs.append(run_once(pi, root, xdg_env, "ctxwrap"))
                print(
                    f"  run {i + 1}: plain {plain_runs[-1].wall:6.2f}s   ctxwrap {wrapped_runs[-1].wall:6.2f}s",
                    flush=True,
                )
            env_base = {**pi_env(root / ".pi" / "agent", root), **xdg_env, "CTXWRAP_PI": str(pi)}
            fixed = timed_interleaved(
                {
                    "pi --version": [str(pi), "--version"],
                    "ctxwrap pi --version (daemon up)": [*CTXWRAP, "pi", "--version"],
                    "ctxwrap pi --ctxwrap-off --version": [
                        *CTXWRAP,
                        "pi",
                        "--ctxwrap-off",
                        "--version",
                    ],
                    "ctxwrap --version": [*CTXWRAP, "--version"],
                    "ensure_running() alone (daemon up)": [
                        sys.executable,
                        "-c",
                        "from ctxwrap.client import ensure_running; ensure_running()",
                    ],
                },
                env_base,
            )
            events = root / "state" / "ctxwrap" / "events.jsonl"
            event_counts: dict[str, int] = defaultdict(int)
            if events.is_file():
                for line in events.read_text().splitlines():
                    with contextlib.suppress(ValueError):
                        event_counts[json.loads(line).get("event", "?")] += 1
    finally:
        shutil.rmtree(root, ignore_errors=True)

    bad = [r for r in [cold, *plain_runs, *wrapped_runs] if not r.ok]
    for r in bad:
        print(f"  ! a run did not finish the script: {r.err}")
    p_med = statistics.median(r.wall for r in plain_runs)
    c_med = statistics.median(r.wall for r in wrapped_runs)
    ratio = c_med / p_med
    print(
        f"  wall time, median: plain {p_med:.2f}s, ctxwrap {c_med:.2f}s -> ratio {ratio:.3f} "
        f"(target <= {TARGET_RATIO}: {'met' if ratio <= TARGET_RATIO else 'MISSED'})"
    )
    print(
        f"  cold start (daemon auto-started by this run): ctxwrap {cold.wall:.2f}s "
        f"= {cold.wall / p_med:.2f}x plain median"
    )

    added: list[float] = []
    per_step: dict[int, list[float]] = defaultdict(list)
    for p, c in zip(plain_runs, wrapped_runs, strict=True):
        for k, (gp, gc) in enumerate(zip(p.gaps, c.gaps, strict=False)):
            added.append(gc - gp)
            per_step[k].append(gc - gp)
    first_added = [
        c.launch_to_first - p.launch_to_first for p, c in zip(plain_runs, wrapped_runs, strict=True)
    ]
    print(
        "  per-event bridge latency (scripted-server timestamps; ctxwrap gap - plain gap, same round):"
    )
    print(
        f"    tool round -> next LLM request: p50 {pct(added, 0.5) * 1000:7.1f} ms   "
        f"p99 {pct(added, 0.99) * 1000:7.1f} ms   ({len(added)} rounds)"
    )
    print(
        f"    launch -> first LLM request:    median {statistics.median(first_added) * 1000:7.1f} ms "
        f"(plain {statistics.median(p.launch_to_first for p in plain_runs) * 1000:.0f} ms)"
    )
    slow = sorted(per_step.items(), key=lambda kv: -statistics.median(kv[1]))[:5]
    print("    slowest rounds (median added):")
    for k, vals in slow:
        what = ", ".join(
            f"{c['name']} {c['arguments'].get('command') or c['arguments'].get('path')}"
            for c in STEPS[k]
        )
        print(f"      step {k:2d} {statistics.median(vals) * 1000:7.1f} ms  {what}")
    aux_total: dict[str, int] = defaultdict(int)
    for r in wrapped_runs:
        for task, n in r.aux.items():
            aux_total[task] += n
    print(
        f"  aux-model requests per ctxwrap run: "
        f"{ {k: round(v / len(wrapped_runs), 1) for k, v in sorted(aux_total.items())} or 'none' }"
    )
    print(f"  daemon events (all runs): {dict(sorted(event_counts.items()))}")
    print("  launcher fixed cost (median of 7, interleaved):")
    for label, t in fixed.items():
        print(f"    {label:36} {t * 1000:6.0f} ms")
    return {"name": name, "ratio": ratio, "plain": p_med, "ctxwrap": c_med, "failed": len(bad)}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--versions", default="pi,pi-0.73")
    ap.add_argument("--proxy", action="store_true", help="the proxy's added time to first byte")
    ap.add_argument("--pairs", type=int, default=30, help="--proxy: request pairs per row")
    ap.add_argument("--sizes", default="15000,100000,200000", help="--proxy: request tokens")
    ap.add_argument("--realistic", action="store_true", help="whole sessions, realistic latency")
    ap.add_argument("--agents", default="pi,claude,codex", help="--realistic: which agents")
    ap.add_argument("--ttft", type=float, default=1.5, help="--realistic: main model, s")
    ap.add_argument("--aux-ttft", type=float, default=0.8, help="--realistic: aux model, s")
    ap.add_argument("--tps", type=float, default=60.0, help="--realistic: tokens per second")
    ap.add_argument(
        "--launch-only", action="store_true", help="--realistic: one answer, no tool round"
    )
    ap.add_argument("--busy", type=int, default=0, help="--realistic: N busy loops beside")
    ap.add_argument(
        "--baseline",
        help="--realistic: also run a ctxwrap source tree (e.g. a worktree of main) wrapped, "
        "interleaved with plain and this tree",
    )
    args = ap.parse_args(argv)
    print(f"load average at start: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    sys.path.insert(0, str(Path(__file__).parent))
    if args.proxy:
        import proxy_latency

        proxy_latency.report([int(x) for x in args.sizes.split(",")], args.pairs)
        return 0
    if args.realistic:
        import realistic_latency

        for tree in [
            Path(__file__).resolve().parents[1],
            *([Path(args.baseline)] if args.baseline else []),
        ]:
            fresh_bytecode(tree)
        # Each tree its own daemon and store (a shared one would be whichever tree started it
        # first); each keeps its store across its runs, as a user's daemon does.
        with (
            isolated_xdg(Path(tempfile.mkdtemp(prefix="ctxwrap-real-"))) as xdg_env,
            isolated_xdg(Path(tempfile.mkdtemp(prefix="ctxwrap-base-"))) as base_env,
            busy_loops(args.busy),
        ):
            env = {**os.environ, **xdg_env}
            realistic_latency.report(
                args.agents.split(","), args.runs, args, env, {**os.environ, **base_env}
            )
        return 0
    results = [r for n in args.versions.split(",") if (r := bench_version(n, args.runs))]
    print("\nsummary:")
    for r in results:
        print(
            f"  {r['name']:8} ratio {r['ratio']:.3f}  plain {r['plain']:.2f}s  ctxwrap {r['ctxwrap']:.2f}s"
            f"{'  (' + str(r['failed']) + ' runs failed)' if r['failed'] else ''}"
        )
    return 0 if results and all(r["ratio"] <= TARGET_RATIO for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
