"""Whole scripted sessions at realistic model latency, each agent plain vs under ctxwrap (issue 43).

The scripted server answers the main model after `--ttft` seconds and streams at `--tps`
tokens per second; the aux model (tags, digests, facts) answers after `--aux-ttft`. One session
per agent (pi, Claude Code `-p`, Codex `exec`): six tool rounds (large command outputs, reads,
a listing) and a final answer. Plain and wrapped runs alternate, `--runs` each; printed: the
median wall time of each side and their ratio, measured in the same run, and what the wrapped
run added (median over the pairs, from the scripted server's timestamps): launch → first
main-model request, first → last request (the tool rounds: hooks, digests, tag waits), and last
request → exit (the last answer and the launcher's exit). A benchmark: it prints, it does not
pass or fail.

With `--baseline DIR` (a ctxwrap source tree, e.g. `git worktree add /tmp/base main`), that
tree's ctxwrap runs wrapped too, interleaved (plain, baseline, this tree): a change's before and
after at the same load, each tree with its own daemon and store (kept across its runs, as a
user's daemon keeps its history). The load average is printed per agent (other work on a 2-core machine
slows the wrapped side more: ctxwrap's own CPU competes with the agent's start-up).

    .venv/bin/python bench/overhead.py --realistic [--runs 3] [--ttft 1.5] [--aux-ttft 0.8]
        [--tps 60] [--agents pi,claude,codex] [--baseline DIR] [--launch-only] [--busy N]

`--launch-only`: one answer and no tool round, for the launch alone (quicker, so more runs).
`--busy N`: N busy loops (processes) run beside the whole comparison: a loaded machine, made
on purpose and the same for every side (ctxwrap's CPU beside the agent's start-up costs more
there).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ctxwrap.testing.claude_home import claude_env, claude_print_args, find_claude
from ctxwrap.testing.codex_home import codex_env, codex_exec_args, find_codex
from ctxwrap.testing.model_server import ScriptedModelServer
from ctxwrap.testing.pi_home import find_pi, make_pi_agent_dir, pi_command, pi_env

CTXWRAP = [sys.executable, "-m", "ctxwrap"]
FINAL = "All done."


def _work(root: Path) -> Path:
    work = root / "work"
    work.mkdir(parents=True)
    (work / "notes.txt").write_text("".join(f"- note {i}: parser state\n" for i in range(300)))
    (work / "app.py").write_text(
        "".join(f"def f{i}(x):\n    return x + {i}\n\n" for i in range(300))
    )
    return work


def _script(agent: str, work: Path) -> list[object]:
    """Six tool rounds in each agent's own tool names, then the final answer."""
    commands = ["seq 1 30000", "ls -la", "seq 5 20000 | sed 's/$/ lorem ipsum/'", "wc -l app.py"]
    reads = ["notes.txt", "app.py"]
    calls: list[dict[str, Any]] = []
    for c in commands:
        if agent == "pi":
            calls.append({"name": "bash", "arguments": {"command": c}})
        elif agent == "claude":
            calls.append({"name": "Bash", "arguments": {"command": c}})
        else:
            calls.append({"name": "exec_command", "arguments": {"cmd": c}})
    for r in reads:
        if agent == "pi":
            calls.append({"name": "read", "arguments": {"path": r}})
        elif agent == "claude":
            calls.append({"name": "Read", "arguments": {"file_path": str(work / r)}})
        else:
            calls.append({"name": "exec_command", "arguments": {"cmd": f"cat {r}"}})
    return [{"tool_calls": [c], "text": "Next, I will look at this."} for c in calls] + [
        {"text": FINAL}
    ]


@dataclass(frozen=True)
class Run:
    """One session's wall time and where it went, from the scripted server's timestamps."""

    wall: float  # process start → exit (NaN: the run failed)
    launch: float  # process start → first main-model request
    rounds: float  # first → last main-model request (model time, tools, hooks, tags)
    tail: float  # last main-model request → exit (the last answer, then the launcher's exit)
    aux: int  # aux-model requests (tags, digests, facts)


FAILED = Run(float("nan"), float("nan"), float("nan"), float("nan"), 0)


def _run(
    agent: str,
    wrapped: bool,
    root: Path,
    xdg_env: dict[str, str],
    opts: Any,
    source: str | None = None,
) -> Run:
    """One session; `source`: a ctxwrap source tree the wrapped run imports instead of this
    one (PYTHONPATH; `--baseline`)."""
    root.mkdir(parents=True)
    work = _work(root)
    # --launch-only: one answer and no tool round: launch → first request, then the exit
    script = [{"text": FINAL}] if getattr(opts, "launch_only", False) else _script(agent, work)
    with ScriptedModelServer(
        script,
        main_delay_s=opts.ttft,
        aux_delay_s=opts.aux_ttft,
        tokens_per_s=opts.tps,
    ) as srv:
        if agent == "pi":
            pi = find_pi("pi")
            assert pi is not None
            env = pi_env(make_pi_agent_dir(root / "home", srv.base_url), root / "home")
            if wrapped:
                env.update(xdg_env, CTXWRAP_PI=str(pi))
            argv = pi_command(pi, "run the session", wrapped=wrapped)
        elif agent == "claude":
            env = claude_env(xdg_env, home=root / "home", base_url=srv.root_url)
            args = claude_print_args("run the session")
            argv = [*CTXWRAP, "claude", *args] if wrapped else [env["CTXWRAP_CLAUDE"], *args]
        else:
            env = codex_env(xdg_env, home=root / "home", base_url=srv.base_url)
            args = codex_exec_args("run the session")
            argv = [*CTXWRAP, "codex", *args] if wrapped else [env["CTXWRAP_CODEX"], *args]
        if source is not None:
            env["PYTHONPATH"] = source
        start_wall = time.time()
        start = time.monotonic()
        proc = subprocess.run(
            argv,
            cwd=work,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=600,
        )
        took = time.monotonic() - start
        end_wall = start_wall + took
        stamps = [r.timestamp for r in srv.main_requests]
        aux = len(srv.aux_requests)
    if proc.returncode != 0 or FINAL not in proc.stdout or not stamps:
        print(f"    {agent} {'wrapped' if wrapped else 'plain'} failed: rc={proc.returncode}")
        return FAILED
    return Run(took, stamps[0] - start_wall, stamps[-1] - stamps[0], end_wall - stamps[-1], aux)


AGENTS: dict[str, Callable[[], object]] = {
    "pi": lambda: find_pi("pi"),
    "claude": find_claude,
    "codex": find_codex,
}


def report(
    agents: Sequence[str],
    runs: int,
    opts: Any,
    xdg_env: dict[str, str],
    baseline_env: dict[str, str] | None = None,
) -> None:
    """`baseline_env`: the baseline tree's own XDG dirs (its own daemon and store)."""
    baseline = getattr(opts, "baseline", None)
    print(
        (
            "launch only (one answer, no tool round)"
            if getattr(opts, "launch_only", False)
            else "whole sessions"
        )
        + f", main model {opts.ttft:.2f} s to first token at {opts.tps:g} tokens/s,"
        f" aux model {opts.aux_ttft:.2f} s; {runs} runs each, alternating"
        + (f" (plain, baseline {baseline}, this tree)" if baseline else "")
        + ":"
    )
    with tempfile.TemporaryDirectory(prefix="ctxwrap-bench-") as tmp:
        for agent in agents:
            if AGENTS[agent]() is None:
                print(f"  {agent:7} not installed, skipped")
                continue
            plain: list[Run] = []
            base: list[Run] = []
            wrapped: list[Run] = []
            for i in range(runs):
                plain.append(_run(agent, False, Path(tmp) / f"{agent}-p{i}", xdg_env, opts))
                if baseline:
                    where = Path(tmp) / f"{agent}-b{i}"
                    base_xdg = baseline_env or xdg_env
                    base.append(_run(agent, True, where, base_xdg, opts, baseline))
                wrapped.append(_run(agent, True, Path(tmp) / f"{agent}-w{i}", xdg_env, opts))
            load = os.getloadavg()[0]  # other work on the machine skews both sides, not alike
            p = _median(plain, "wall")
            print(
                f"  {agent:7} plain {p:6.1f} s  (load average {load:.2f}); launch → first request"
                f" {_median(plain, 'launch'):.2f} s"
            )
            for label, side in (("baseline", base), ("ctxwrap", wrapped)):
                if not side:
                    continue
                w = _median(side, "wall")
                ratio = w / p if p == p and w == w else float("nan")
                # where the difference went: wrapped − plain, median over the pairs
                added = {
                    part: _median_added(plain, side, part) for part in ("launch", "rounds", "tail")
                }
                print(
                    f"          {label:8} {w:6.1f} s  ratio {ratio:.3f}; added: launch → first"
                    " request {launch:+.2f} s, rounds {rounds:+.2f} s, last request → exit"
                    " {tail:+.2f} s".format(**added)
                    + f"; aux requests {statistics.median(r.aux for r in side):.0f}"
                )
                launch_ratio = _median(side, "launch") / _median(plain, "launch")
                print(
                    f"                   launch → first request {_median(side, 'launch'):.2f} s"
                    f" ({launch_ratio:.2f}× plain's)"
                )


def _median(runs: Sequence[Run], part: str) -> float:
    values = [getattr(r, part) for r in runs if r.wall == r.wall]
    return statistics.median(values) if values else float("nan")


def _median_added(plain: Sequence[Run], wrapped: Sequence[Run], part: str) -> float:
    pairs = [
        getattr(w, part) - getattr(p, part)
        for p, w in zip(plain, wrapped, strict=True)
        if p.wall == p.wall and w.wall == w.wall
    ]
    return statistics.median(pairs) if pairs else float("nan")
