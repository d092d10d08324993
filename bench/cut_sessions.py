"""Whether a session cut short costs more under ctxwrap than plain (issue 41, invariant 10;
docs/accounting.md, "What a rewrite may risk").

Whole corpus sessions hide a class of loss: a saving that is paid for first and pays back
later (a warm cache rewrite, a tool spec in every request) loses money in a session that ends
before it pays back. Sessions outside the corpus end wherever their work ends, so this replays
every session file of the corpus cut after every `--every`th request (a pi assistant message,
a Claude Code message id, a Codex token count: one model request each), with the defaults of
`ctxwrap.config.Settings` or a policy of `bench/real_sessions.py`, and prints each cut point
that costs more than plain (cost saved net of ctxwrap's aux calls, as `real_sessions.py`
prices it) and how many there are. `--turn-ends` cuts instead after every request that ended
the agent's turn (its answer called no tool), where a real session stops.

    .venv/bin/python bench/cut_sessions.py [--corpus DIR] [--every 10 | --turn-ends] [--policy NAME] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from real_sessions import POLICIES, default_corpus, session_row

from ctxwrap.replay import replay_paths, run_json

_CALL_ITEMS = {"function_call", "custom_tool_call", "local_shell_call", "web_search_call"}


def request_ends(path: Path, agent: str) -> list[int]:
    """The line index of each model request's last record in a session file."""
    return [line for line, _ in requests(path, agent)]


def requests(path: Path, agent: str) -> list[tuple[int, bool]]:
    """Each model request's last line and whether it ended the agent's turn: its answer
    called no tool, so the agent stopped and waited for the user. A session ends at such
    a request, unless the user interrupts or the agent crashes."""
    ends: list[int] = []
    calls: list[bool] = []
    pending = False  # Codex: a call item since the last token count
    seen: set[Any] = set()
    for i, line in enumerate(path.read_text(errors="replace").splitlines()):
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if not isinstance(rec, dict):
            continue
        msg = rec.get("message") if isinstance(rec.get("message"), dict) else {}
        payload = rec.get("payload") if isinstance(rec.get("payload"), dict) else {}
        content = msg.get("content") if isinstance(msg.get("content"), list) else []
        uses_tool = any(
            isinstance(b, dict) and b.get("type") in ("toolCall", "tool_use") for b in content
        )
        if agent == "pi":
            if rec.get("type") == "message" and msg.get("role") == "assistant":
                ends.append(i)
                calls.append(uses_tool)
        elif agent == "claude":
            if rec.get("type") == "assistant":
                if msg.get("id") in seen:
                    ends[-1] = i  # a later record of the same streamed message
                    calls[-1] = calls[-1] or uses_tool
                else:
                    seen.add(msg.get("id"))
                    ends.append(i)
                    calls.append(uses_tool)
        elif rec.get("type") == "response_item" and payload.get("type") in _CALL_ITEMS:
            pending = True
        elif rec.get("type") == "event_msg" and payload.get("type") == "token_count":
            ends.append(i)
            calls.append(pending)
            pending = False
    return [
        (e, not c or k == len(ends) - 1) for k, (e, c) in enumerate(zip(ends, calls, strict=True))
    ]


def replay_cut(job: tuple[str, str, int, int, str]) -> dict[str, Any]:
    file, agent, requests, last_line, policy = job
    src = Path(file)
    lines = src.read_text(errors="replace").splitlines(keepends=True)[: last_line + 1]
    with tempfile.TemporaryDirectory() as tmp:
        cut = Path(tmp) / agent / src.name  # the reader knows the format by its content
        cut.parent.mkdir()
        cut.write_text("".join(lines))
        doc = run_json(replay_paths([cut], thresholds=POLICIES[policy](), workers=1))
    row = session_row(doc["groups"][0]) if doc["groups"] else None
    return {
        "agent": agent,
        "session": src.name,
        "cut_at": requests,
        "llm_calls": row["calls"] if row else 0,
        "cost_saved_pct": row["cost_saved_pct"] if row else None,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", type=Path, default=None)
    ap.add_argument("--every", type=int, default=10, help="cut after every Nth request")
    ap.add_argument(
        "--turn-ends",
        action="store_true",
        help="cut after every request that ended the agent's turn, where sessions end",
    )
    ap.add_argument("--policy", choices=sorted(POLICIES), default="default")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    corpus = a.corpus or default_corpus()
    if corpus is None or not corpus.is_dir():
        print("no corpus: pass --corpus DIR (../shared/realdata not found)", file=sys.stderr)
        return 2
    jobs = []
    for agent in ("claude", "pi", "codex"):
        for f in sorted((corpus / agent).glob("*.jsonl")):
            reqs = requests(f, agent)
            cuts = (
                [k for k in range(1, len(reqs)) if reqs[k - 1][1]]
                if a.turn_ends
                else list(range(a.every, len(reqs), a.every))
            )
            jobs += [(str(f), agent, k, reqs[k - 1][0], a.policy) for k in cuts]
    with ProcessPoolExecutor() as pool:
        points = list(pool.map(replay_cut, jobs, chunksize=4))
    known = [p for p in points if p["cost_saved_pct"] is not None]
    losing = sorted(
        (p for p in known if p["cost_saved_pct"] < 0), key=lambda p: p["cost_saved_pct"]
    )
    if a.json:
        cut = "turn-ends" if a.turn_ends else a.every
        print(json.dumps({"policy": a.policy, "every": cut, "points": points}, indent=1))
        return 0
    for p in losing:
        print(
            f"{p['agent']:6} {p['session'][:52]:52} cut at {p['cut_at']:4} requests"
            f" ({p['llm_calls']} calls): {p['cost_saved_pct']:+.1f} %"
        )
    by_agent = {ag: [p for p in known if p["agent"] == ag] for ag in ("claude", "pi", "codex")}
    parts = ", ".join(
        f"{ag} {sum(1 for p in ps if p['cost_saved_pct'] < 0)} of {len(ps)}"
        for ag, ps in by_agent.items()
    )
    worst = min((p["cost_saved_pct"] for p in known), default=0.0)
    print(
        f"policy {a.policy}: {len(losing)} of {len(known)} cut points cost more than plain"
        f" ({parts}); worst {worst:+.1f} %"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
