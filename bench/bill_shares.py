"""Where plain's recorded bill goes, per agent: what a history mechanism can reach at all
(issue 41's savings targets; docs/accounting.md, "Where plain's bill goes").

Every figure ctxwrap reports is of the input side of the bill, cache-priced (`ctxwrap replay`'s
`weighted_tokens`: fresh input at 1, a cache read at 0.1, a 5-minute write at 1.25, a 1-hour
write at 2). Per session of at least `--min-calls` requests this splits plain's (each recorded
request as billed) into:

- cache writes: every new token is written once when it is first sent (nothing hides content
  the agent already read before it is written, but a digest does before its first send);
- the fixed prefix read again: the system prompt and tools at every request
  (`fixed_prefix_tokens`), which the agent owns;
- history read again: every earlier message at every later request — the only part that
  masking, the tagger, the strips and old thinking take from, and each warm take costs its
  suffix written again;
- fresh input: what no cache served (under OpenAI, every new token, with no write premium).

Then the median of each share per agent. Nothing is copied out of the transcripts.

    .venv/bin/python bench/bill_shares.py [--corpus DIR] [--min-calls 40] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

from ctxwrap.replay import replay_paths, run_json

ROOT = Path(__file__).resolve().parents[1]
AGENTS = ("claude", "pi", "codex")
SHARES = ("writes", "prefix", "history", "fresh")


def default_corpus() -> Path | None:
    """`../shared/realdata` relative to the repository (a worktree sits one deeper)."""
    for base in (ROOT.parent, ROOT.parent.parent):
        if (base / "shared" / "realdata").is_dir():
            return base / "shared" / "realdata"
    return None


def shares(group: dict[str, Any]) -> dict[str, float] | None:
    """A session's plain bill, input side, split into SHARES (fractions of its total)."""
    cost = group["cost"]["plain"]
    total = float(cost["weighted_tokens"])
    if total <= 0:
        return None
    reads = 0.1 * cost["cache_read_tokens"]
    fresh = float(cost["uncached_input_tokens"])
    prefix_tokens = group["plain_source"].get("fixed_prefix_tokens") or 0
    prefix = min(reads, 0.1 * prefix_tokens * group["llm_calls"])
    return {
        "writes": max(0.0, total - reads - fresh) / total,
        "prefix": prefix / total,
        "history": (reads - prefix) / total,
        "fresh": fresh / total,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", type=Path, default=default_corpus())
    ap.add_argument("--min-calls", type=int, default=40)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if args.corpus is None or not args.corpus.is_dir():
        print("no corpus: give --corpus DIR (../shared/realdata)", file=sys.stderr)
        return 2
    out: dict[str, Any] = {}
    for agent in AGENTS:
        files = sorted((args.corpus / agent).glob("*.jsonl"))
        rows = []
        for f in files:
            for g in run_json(replay_paths([f]))["groups"]:
                s = shares(g) if g["llm_calls"] >= args.min_calls else None
                if s is not None:
                    rows.append(s)
        if rows:
            out[agent] = {
                "sessions": len(rows),
                **{k: round(100 * statistics.median(r[k] for r in rows), 1) for k in SHARES},
            }
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    print(
        f"plain's recorded bill, input side, median share per session of ≥ {args.min_calls} calls"
    )
    print(f"{'agent':8} {'sessions':>8} {'writes':>7} {'prefix':>7} {'history':>8} {'fresh':>7}")
    for agent, row in out.items():
        print(
            f"{agent:8} {row['sessions']:>8} {row['writes']:>6.0f}% {row['prefix']:>6.0f}%"
            f" {row['history']:>7.0f}% {row['fresh']:>6.0f}%"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
