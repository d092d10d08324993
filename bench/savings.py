"""What ctxwrap saves, side by side with plain pi on the same scripts (the yardstick of the
savings work; docs/accounting.md).

Each scenario runs once with plain `pi -p` and once with `ctxwrap pi -p`, against a scripted
model server that simulates an automatic prefix cache, and is recounted from what the server
received (ctxwrap/testing/recount.py):

- chars: characters of every main request (what reached the model), plain vs ctxwrap, and
  net of aux: ctxwrap's main requests plus its aux requests, against plain pi's;
- cost: cache-priced input-equivalent tokens (cache read 0.1×, fresh 1×; idle gaps longer than
  the TTL re-send everything), pi's summarisation requests and ctxwrap's aux calls included;
- aux share: ctxwrap's aux calls as a share of its own total;
- compactions: pi's compactions in each run (from the session files);
- reported: the cost reduction `ctxwrap stats --json` claimed (totals.cost.total_saved_pct),
  next to the recounted one.

Scenarios:
- single: one task, 16 calls over real source files, test output, two writes;
- multi: three tasks in one session with idle gaps past the cache TTL between them (the TTL is
  shortened to PI_CTX_CACHE_TTL_S=2 s and the gaps are 3 s, so the run stays short);
- compaction: five tasks in a small effective window (pi's reserveTokens raised) where pi
  compacts.

    .venv/bin/python bench/savings.py [--versions pi,pi-0.73] [--scenarios single,multi,compaction]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from overhead import isolated_xdg  # bench/ is on sys.path when run as a script

from ctxwrap.testing.model_server import ScriptedModelServer
from ctxwrap.testing.pi_home import find_pi, make_pi_agent_dir, pi_command, pi_env
from ctxwrap.testing.recount import Recount, recount, reduction_pct

CTXWRAP = [sys.executable, "-m", "ctxwrap"]
RULES = [{"task": "tag", "match": "vendored license", "answer": '{"decision": "DROP"}'}]


def bash(command: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "bash", "arguments": {"command": command}}]}


def read(path: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "read", "arguments": {"path": path}}]}


def write(path: str, content: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "write", "arguments": {"path": path, "content": content}}]}


TEST_LOG = (
    "".join(
        f"tests/test_mod{i // 20}.py::test_case_{i} PASSED [{i % 100:3d}%]\n" for i in range(900)
    )
    + "FAILED tests/test_mod3.py::test_case_77 - AssertionError: 3 != 4\n1 failed, 899 passed\n"
)
LICENSE = "".join(
    f"irrelevant line {i} of a vendored license, nothing to see\n" for i in range(300)
)


FIXTURES = Path(__file__).resolve().parent / "fixtures" / "savings"


def source_files() -> dict[str, str]:
    """Real source files (four of this repository's modules, frozen at 4a1567b in
    bench/fixtures/savings/ so the yardstick does not move when the code does), copied into
    the work dir."""
    out = {f"src/{p.stem}": p.read_text() for p in sorted(FIXTURES.glob("*.py.txt"))}
    out["test.log"] = TEST_LOG
    out["VENDOR_LICENSE"] = LICENSE
    return out


def single_task() -> list[dict[str, Any]]:
    return [
        bash("ls -la src"),
        read("src/cost.py"),
        read("VENDOR_LICENSE"),
        read("src/stats.py"),
        bash("cat test.log"),
        read("src/config.py"),
        bash("grep -n 'def ' src/cost.py"),
        write("src/fix.py", "".join(f"value_{i} = {i}\n" for i in range(200))),
        bash("cat test.log"),
        read("src/paths.py"),
        bash("seq 1 20000"),
        write("NOTES.md", "".join(f"- note {i}: checked\n" for i in range(60))),
        bash("echo ok"),
        read("src/cost.py"),
        bash("wc -l src/*.py"),
        {"text": "done"},
    ]


def multi_task() -> tuple[list[dict[str, Any]], list[str]]:
    steps: list[dict[str, Any]] = []
    for i, (src, cmd) in enumerate(
        [
            ("src/cost.py", "cat test.log"),
            ("src/stats.py", "seq 1 20000"),
            ("src/config.py", "cat test.log"),
        ]
    ):
        steps += [
            bash(cmd),
            read("VENDOR_LICENSE"),
            read(src),
            {"text": f"task {i} done", "delay_s": 3.0},
        ]
    return steps, ["task 0", "task 1", "task 2"]


def compaction_heavy() -> tuple[list[dict[str, Any]], list[str]]:
    steps: list[dict[str, Any]] = []
    srcs = ["src/cost.py", "src/stats.py", "src/config.py", "src/paths.py", "src/cost.py"]
    for i, src in enumerate(srcs):
        steps += [
            bash(f"seq 1 {3000 + i}"),
            read("VENDOR_LICENSE"),
            read(src),
            {"text": f"task {i} done"},
        ]
    return steps, [f"task {i}" for i in range(len(srcs))]


@dataclass
class Scenario:
    name: str
    steps: list[dict[str, Any]]
    prompts: list[str]
    pi_settings: dict[str, Any] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    ttl_s: float = 300.0


def scenarios() -> dict[str, Scenario]:
    multi, multi_prompts = multi_task()
    heavy, heavy_prompts = compaction_heavy()
    return {
        "single": Scenario("single", single_task(), ["fix the failing test"]),
        "multi": Scenario(
            "multi", multi, multi_prompts, env={"PI_CTX_CACHE_TTL_S": "2"}, ttl_s=2.0
        ),
        "compaction": Scenario(
            "compaction",
            heavy,
            heavy_prompts,
            # threshold 128000 - 112000 = 16000 tokens; pi keeps 4000 recent
            pi_settings={"compaction": {"reserveTokens": 112000, "keepRecentTokens": 4000}},
        ),
    }


@dataclass
class Outcome:
    recount: Recount
    compactions: int
    reported: dict[str, Any] | None = None


def run(pi: Path, sc: Scenario, root: Path, xdg: dict[str, str] | None) -> Outcome:
    home = Path(tempfile.mkdtemp(prefix=f"{sc.name}-", dir=root))
    work = home / "work"
    for rel, text in source_files().items():
        (work / rel).parent.mkdir(parents=True, exist_ok=True)
        (work / rel).write_text(text)
    with ScriptedModelServer(sc.steps, aux_rules=RULES, cache_simulation=True) as srv:
        agent_dir = make_pi_agent_dir(home, srv.base_url, settings=sc.pi_settings)
        env = pi_env(agent_dir, home)
        *first, last = sc.prompts
        if xdg is None:
            cmd = pi_command(pi, last, *first)
        else:
            env.update(xdg, CTXWRAP_PI=str(pi), **sc.env)
            cmd = pi_command(pi, last, *first, wrapped=True)
        proc = subprocess.run(
            cmd,
            env=env,
            cwd=work,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=600,
        )
        if proc.returncode != 0:
            raise RuntimeError(
                f"{sc.name}: {' '.join(cmd[:3])} exited {proc.returncode}: {proc.stderr[-500:]}"
            )
        requests = srv.requests
        summary_text = srv.summary_text
    compactions = 0
    for path in (agent_dir / "sessions").rglob("*.jsonl"):
        for line in path.read_text(errors="replace").splitlines():
            with contextlib.suppress(ValueError):
                compactions += json.loads(line).get("type") == "compaction"
    out = Outcome(recount(requests, summary_text=summary_text, ttl_s=sc.ttl_s), compactions)
    if xdg is not None:
        env_cli = {**os.environ, **xdg, **sc.env}
        sessions = json.loads(
            subprocess.run(
                [*CTXWRAP, "sessions", "--all", "--json"],
                env=env_cli,
                capture_output=True,
                text=True,
            ).stdout
        )["sessions"]
        newest = max(sessions, key=lambda s: s.get("started_at") or 0)["session_id"]
        stats = subprocess.run(
            [*CTXWRAP, "stats", "--session", newest, "--json"],
            env=env_cli,
            capture_output=True,
            text=True,
        )
        out.reported = json.loads(stats.stdout)["totals"]["cost"]
    return out


def pct(new: float, old: float) -> str:
    return f"{100.0 * (new - old) / old:+.0f}%" if old else "-"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--versions", default="pi,pi-0.73")
    ap.add_argument("--scenarios", default="single,multi,compaction")
    args = ap.parse_args(argv)
    table = scenarios()
    rows = []
    with tempfile.TemporaryDirectory(prefix="cw-savings-") as tmp:
        root = Path(tmp)
        for version in args.versions.split(","):
            pi = find_pi(version)
            if pi is None:
                print(f"{version}: not installed, skipped")
                continue
            for name in args.scenarios.split(","):
                sc = table[name]
                # A daemon per scenario: PI_CTX_* settings are the daemon's, so a scenario's
                # own (the multi one's short cache TTL) must not meet a daemon started by another.
                scenario_root = root / f"{version}-{name}"
                scenario_root.mkdir()
                with isolated_xdg(scenario_root) as xdg:
                    t0 = time.monotonic()
                    plain = run(pi, sc, scenario_root, None)
                    wrapped = run(pi, sc, scenario_root, xdg)
                    rows.append((version, sc, plain, wrapped, time.monotonic() - t0))
    print()
    print(
        f"{'pi':8} {'scenario':11} {'chars plain':>12} {'ctxwrap':>9} {'+aux':>7} {'Δ net':>6}"
        f" {'aux/plain':>9} {'cost plain':>11} {'ctxwrap':>9} {'Δ':>6} {'aux':>5}"
        f" {'compactions':>12} {'reported':>9}"
    )
    for version, sc, plain, wrapped, _elapsed in rows:
        p, w = plain.recount, wrapped.recount
        reported = (wrapped.reported or {}).get("total_saved_pct")
        rep = "-" if reported is None else f"{-reported:+.0f}%"
        net = w.main_chars + w.aux_chars
        aux_of_plain = 100.0 * w.aux_chars / p.main_chars if p.main_chars else 0.0
        print(
            f"{version:8} {sc.name:11} {p.main_chars:>12,} {w.main_chars:>9,} {w.aux_chars:>7,}"
            f" {pct(net, p.main_chars):>6} {aux_of_plain:>8.1f}%"
            f" {round(p.total):>11,} {round(w.total):>9,} {-reduction_pct(p, w):>+5.0f}%"
            f" {w.aux_share_pct:>4.0f}% {plain.compactions:>5} → {wrapped.compactions:<4} {rep:>9}"
        )
    print(
        "\nchars: every main request; +aux: chars of ctxwrap's aux requests; Δ net: ctxwrap's"
        "\nmain + aux chars against plain pi's; aux/plain: aux chars as a share of plain pi's;"
        "\ncost: cache-priced input-equivalent tokens incl. pi's summarisation and ctxwrap's aux"
        "\ncalls; aux: aux share of ctxwrap's cost; compactions: plain pi → ctxwrap; reported:"
        "\nthe cost reduction `ctxwrap stats --json` claimed."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
