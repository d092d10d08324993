"""How much of plain's recorded bill is thinking carried from earlier responses (issue 41,
item 3; docs/accounting.md, "Old thinking").

Claude Code 2.1.1xx writes a thinking block with its text empty and only a `signature`, so
the thinking is not in the transcript, but it is in the bill: the provider counted it as the
response's output, and then, where the API keeps earlier thinking in the context, as input of
every later request. Per Claude Code session this prints:

- model, Claude Code version, requests with usage, responses that thought;
- the session's tokens per character (`replay/_calibrate.py`: fitted on its own usage);
- thinking written: per response that holds a thinking block, its recorded output tokens less
  its visible text and tool calls at the session's rate (a response without thinking shows
  what that estimate leaves over: `resid`, the median of output − rate × visible);
- whether the API kept it: at each new human prompt, the context's recorded growth less the
  previous response's output and the new content, against the previous turn's thinking
  (`kept`: 1.0 the thinking stayed in the context, 0.0 the API dropped it);
- carried thinking: per request, the thinking of earlier responses of the same context that
  is in it (all of it where kept; the current tool loop's only where the API drops earlier
  turns'), summed over requests, and its price at what that request paid for that part of its
  prompt (cache read first: old thinking sits early in the prefix), as a share of the
  session's recorded input bill (input + cache reads + cache writes, weighted tokens, as
  `ctxwrap replay` prices the bill) and of its money with output;
- of that, earlier turns: the thinking of turns before the last human prompt, which the
  provider's `clear_thinking_20251015` can leave out server-side; and what each clearing rule
  (RULES) would leave out, net of the cache rewrite each clearing causes (everything after the
  first cleared block written again where the request had read it), as a share of the same
  bill. A rule is asked at every request that has earlier thinking to leave out: the edit's
  `keep` is at least 1, so the latest turn that thought keeps its thinking and a clearing
  reaches the previous turn only once the current one has thought. `every` clears whenever
  it can, `cold` only at requests that read no more than the fixed prefix anyway, `payback`
  where the saving per later request times the requests the context is expected to have
  left (as many as it has had, at least 10, and no more than until the agent's compaction)
  pays the rewrite, `oracle` the same with the requests really left.

Then the median and the worst over sessions of at least `--min-calls` requests. Nothing is
copied out of the transcripts; they are read in place.

    .venv/bin/python bench/thinking_share.py [FILES or DIRS ...] [--min-calls 40] [--json]
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ctxwrap.mechanisms.thinking import ClearingChoice, OldThinking
from ctxwrap.replay._calibrate import calibrate
from ctxwrap.replay._events import Compaction, Event, Header, Message, ReadStats
from ctxwrap.replay._pricing import default_prices, price_recorded
from ctxwrap.replay._read import read_session

ROOT = Path(__file__).resolve().parents[1]
MIN_TURN_THINKING = 500  # a boundary tells kept from dropped when the turn thought this much
COLD_READ_SHARE = 0.5  # a request that read less than this share of the previous one: cold


def default_corpus() -> Path | None:
    """`../shared/realdata/claude` relative to the repository (a worktree sits one deeper)."""
    for base in (ROOT.parent, ROOT.parent.parent):
        p = base / "shared" / "realdata" / "claude"
        if p.is_dir():
            return p
    return None


@dataclass
class Response:
    """One provider request of the session and the response it produced."""

    key: str
    turn: int  # human prompts (and compactions) before it
    context: int  # compactions before it
    visible_chars: int = 0  # text and tool calls, as the provider sees them
    thinking: bool = False
    prompt: int | None = None  # recorded input + cache read + cache write
    uncached: int = 0
    read: int = 0
    write: int = 0
    write_1h: int = 0
    output: int = 0
    new_chars_before: int = 0  # user, tool-result and attachment chars since the previous one
    signature_chars: int = 0
    thinking_chars: int = 0  # thinking text the transcript kept (2.0.x; empty in 2.1.1xx)
    thinking_tokens: float = 0.0  # estimated: output less the visible part at the rate


@dataclass
class SessionShare:
    file: str
    session: str
    source: str
    model: str | None
    version: str | None
    calls: int  # responses with recorded usage
    thinking_responses: int
    rate: float
    rate_source: str
    visible_residual: float | None  # median output − rate × visible, responses without thinking
    kept: float | None  # median share of a turn's thinking the next prompt's context kept
    boundaries: int  # boundaries that measured it
    thinking_written: int  # Σ estimated thinking tokens
    signature_chars: int
    signature_chars_per_token: float | None
    carried_tokens: int  # Σ over requests of the earlier thinking each carried
    earlier_tokens: int  # … of which from turns before the last human prompt
    bill_weighted: float
    bill_usd: float | None
    carried_weighted: float
    carried_usd: float | None
    earlier_weighted: float
    # per clearing rule (RULES): (weighted tokens it leaves out, weighted cost of the cache
    # rewrites it causes, clearings)
    policies: dict[str, tuple[float, float, int]]
    share_pct: float | None = None
    share_usd_pct: float | None = None
    earlier_pct: float | None = None
    net_pct: dict[str, float | None] = field(default_factory=dict)  # per rule: net share
    notes: list[str] = field(default_factory=list)

    def finish(self) -> SessionShare:
        def pct(x: float) -> float | None:
            return round(100.0 * x / self.bill_weighted, 2) if self.bill_weighted else None

        self.share_pct = pct(self.carried_weighted)
        self.earlier_pct = pct(self.earlier_weighted)
        self.net_pct = {k: pct(saved - cost) for k, (saved, cost, _) in self.policies.items()}
        if self.bill_usd and self.carried_usd is not None:
            self.share_usd_pct = round(100.0 * self.carried_usd / self.bill_usd, 2)
        return self


# -- reading ------------------------------------------------------------------------------------


def split_sessions(path: Path) -> Iterator[tuple[Header, list[Event]]]:
    """The sessions of one transcript file (several joined in one, inline sub-agents), each
    with its events, as replay reads them."""
    stats = ReadStats()
    header: Header | None = None
    events: list[Event] = []
    for ev in read_session(path, stats, known_sessions=frozenset()):
        if isinstance(ev, Header):
            if header is not None:
                yield header, events
            header, events = ev, []
        else:
            events.append(ev)
    if header is not None:
        yield header, events


def thinking_chars(path: Path) -> dict[str, tuple[int, int]]:
    """(signature chars, thinking text chars) per response (message id): `_read.py` keeps
    neither apart (it counts a thinking block's text with the visible text)."""
    out: dict[str, tuple[int, int]] = {}
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            if '"signature"' not in line:
                continue
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            msg = entry.get("message") if isinstance(entry, dict) else None
            if not isinstance(msg, dict) or not isinstance(msg.get("content"), list):
                continue
            blocks = [
                b
                for b in msg["content"]
                if isinstance(b, dict) and b.get("type") in ("thinking", "redacted_thinking")
            ]
            sig = sum(len(b["signature"]) for b in blocks if isinstance(b.get("signature"), str))
            # the text where kept, and a redacted block's data: both counted as visible there
            text = sum(
                len(b.get("thinking") or b.get("data") or "")
                for b in blocks
                if isinstance(b.get("thinking") or b.get("data") or "", str)
            )
            key = str(msg.get("id") or entry.get("requestId") or entry.get("uuid", ""))
            old = out.get(key, (0, 0))
            out[key] = (old[0] + sig, old[1] + text)
    return out


def responses(events: Iterable[Event]) -> list[Response]:
    """The session's provider requests in order, one per response (Claude Code writes one
    entry per content block; the last entry carries the response's usage)."""
    out: list[Response] = []
    by_key: dict[str, Response] = {}
    turn = context = 0
    pending = 0
    for ev in events:
        if isinstance(ev, Compaction):
            context += 1
            turn += 1
            pending = ev.summary_chars
            continue
        if not isinstance(ev, Message):
            continue
        if ev.role != "assistant":
            if ev.role == "user":
                turn += 1
            pending += ev.chars
            continue
        key = ev.request_key or ev.entry_id
        r = by_key.get(key)
        if r is None:
            r = by_key[key] = Response(key, turn, context, new_chars_before=pending)
            out.append(r)
            pending = 0
        r.visible_chars += ev.chars
        r.thinking = r.thinking or ev.thinking
        if ev.usage_prompt_tokens is not None:
            r.prompt = ev.usage_prompt_tokens
            r.uncached = ev.usage_input_tokens or 0
            r.read = ev.usage_cache_read_tokens or 0
            r.write = ev.usage_cache_write_tokens or 0
            r.write_1h = ev.usage_cache_write_1h_tokens or 0
            r.output = ev.output_tokens
    return out


# -- the estimate -------------------------------------------------------------------------------


def estimate_thinking(rs: Sequence[Response], rate: float) -> float | None:
    """Set each response's thinking tokens; return the median residual of the responses that
    did not think (how well the rate explains visible output: ~0 when it does)."""
    resid: list[float] = []
    for r in rs:
        if r.prompt is None:
            continue
        left = r.output - rate * r.visible_chars
        if r.thinking:
            r.thinking_tokens = max(0.0, left)
        else:
            resid.append(left)
    return round(statistics.median(resid), 1) if resid else None


def kept_share(rs: Sequence[Response], rate: float) -> tuple[float | None, int]:
    """The median share of a turn's thinking still in the context after the next human
    prompt: 1.0 the API kept it, 0.0 it dropped it (docs: Opus 4.1 and Sonnet 4.5 and
    earlier keep only the current turn's thinking, later models all of it)."""
    shares: list[float] = []
    turn_thinking: dict[tuple[int, int], float] = {}
    for r in rs:
        k = (r.context, r.turn)
        turn_thinking[k] = turn_thinking.get(k, 0.0) + r.thinking_tokens
    for prev, cur in itertools.pairwise(rs):
        if cur.context != prev.context or cur.turn == prev.turn:
            continue
        if prev.prompt is None or cur.prompt is None:
            continue
        thought = turn_thinking.get((prev.context, prev.turn), 0.0)
        if thought < MIN_TURN_THINKING:
            continue
        resid = cur.prompt - prev.prompt - prev.output - rate * cur.new_chars_before
        shares.append(min(1.0, max(0.0, 1.0 + resid / thought)))
    return (round(statistics.median(shares), 2) if shares else None), len(shares)


def _slice_cost(r: Response, tokens: float, prices: Any) -> tuple[float, float | None]:
    """What `tokens` of `r`'s prompt cost, taken from its cache read first and the rest from
    its writes and uncached input in their recorded proportion: (weighted, usd)."""
    x = min(float(tokens), float(r.prompt or 0))
    if x <= 0:
        return 0.0, 0.0
    xr = min(x, float(r.read))
    rest = x - xr
    other = r.uncached + r.write
    f = rest / other if other else 0.0
    c = price_recorded(
        prices,
        uncached=round(r.uncached * f),
        read=round(xr),
        write=round(r.write * f),
        write_1h=round(r.write_1h * f),
        output=0,
    )
    return c.weighted_tokens, c.input_usd


def measure(
    path: Path, header: Header, events: list[Event], sigs: dict[str, tuple[int, int]]
) -> SessionShare:
    rs = responses(events)
    cal = calibrate(events)
    for r in rs:
        r.signature_chars, r.thinking_chars = sigs.get(r.key, (0, 0))
        r.visible_chars = max(0, r.visible_chars - r.thinking_chars)
    resid = estimate_thinking(rs, cal.rate)
    kept, boundaries = kept_share(rs, cal.rate)
    keep_earlier = kept is None or kept >= 0.5
    model = next((r for r in (_model(e) for e in events) if r), None)
    prices = default_prices(model)
    bill_w = 0.0
    bill_usd: float | None = 0.0
    carried_w = earlier_w = 0.0
    carried_usd: float | None = 0.0
    carried_tokens = earlier_tokens = 0.0
    by_turn: dict[int, float] = {}  # thinking of the current context, per turn
    context = -1
    for r in rs:
        if r.context != context:
            context, by_turn = r.context, {}
        if r.prompt is not None:
            bill = price_recorded(
                prices,
                uncached=r.uncached,
                read=r.read,
                write=r.write,
                write_1h=r.write_1h,
                output=r.output,
            )
            bill_w += bill.weighted_tokens
            bill_usd = None if bill_usd is None or bill.usd is None else bill_usd + bill.usd
            this_turn = by_turn.get(r.turn, 0.0)
            earlier = sum(v for t, v in by_turn.items() if t < r.turn) if keep_earlier else 0.0
            carried_tokens += this_turn + earlier
            earlier_tokens += earlier
            w, usd = _slice_cost(r, this_turn + earlier, prices)
            carried_w += w
            carried_usd = None if carried_usd is None or usd is None else carried_usd + usd
            earlier_w += _slice_cost(r, earlier, prices)[0]
        by_turn[r.turn] = by_turn.get(r.turn, 0.0) + r.thinking_tokens
    policies = {
        name: simulate_clearing(rs, prices, rule) if keep_earlier else (0.0, 0.0, 0)
        for name, rule in RULES.items()
    }
    with_usage = [r for r in rs if r.prompt is not None]
    thinkers = [r for r in with_usage if r.thinking]
    sig_total = sum(r.signature_chars for r in thinkers)
    written = sum(r.thinking_tokens for r in thinkers)
    notes = []
    if cal.source != "fitted":
        notes.append(f"rate of the provider family ({cal.pairs} clean pairs)")
    return SessionShare(
        file=path.name,
        session=header.session_id,
        source=header.source or "",
        model=model,
        version=header.version,
        calls=len(with_usage),
        thinking_responses=len(thinkers),
        rate=cal.rate,
        rate_source=cal.source,
        visible_residual=resid,
        kept=kept,
        boundaries=boundaries,
        thinking_written=round(written),
        signature_chars=sig_total,
        signature_chars_per_token=round(sig_total / written, 2) if written >= 1000 else None,
        carried_tokens=round(carried_tokens),
        earlier_tokens=round(earlier_tokens),
        bill_weighted=round(bill_w, 1),
        bill_usd=None if bill_usd is None else round(bill_usd, 4),
        carried_weighted=round(carried_w, 1),
        carried_usd=None if carried_usd is None else round(carried_usd, 4),
        earlier_weighted=round(earlier_w, 1),
        policies={k: (round(a, 1), round(b, 1), n) for k, (a, b, n) in policies.items()},
        notes=notes,
    ).finish()


def _rewrite_cost(r: Response, tokens: float, prices: Any) -> float:
    """`tokens` of `r`'s prompt written to the cache (at its own write rate: 1-hour where its
    writes were) instead of read: the weighted cost a clearing adds."""
    if tokens <= 0:
        return 0.0
    n = round(tokens)
    one_hour = r.write > 0 and 2 * r.write_1h >= r.write
    wrote = price_recorded(
        prices, uncached=0, read=0, write=n, write_1h=n if one_hour else 0, output=0
    )
    read = price_recorded(prices, uncached=0, read=n, write=0, write_1h=0, output=0)
    return wrote.weighted_tokens - read.weighted_tokens


@dataclass(frozen=True)
class Decision:
    """What a clearing rule is asked at each request that has earlier thinking to leave out."""

    per_request: float  # weighted tokens clearing saves on each later request
    rewrite: float  # weighted cost of the cache rewrite it causes (0 when cold)
    cold: bool  # the request read no more than the fixed prefix anyway
    so_far: int  # requests of this context before this one
    remaining: int  # requests of this context from this one on (hindsight: `oracle` only)
    to_compaction: float  # requests until the context, growing as it has, reaches the
    # agent's compaction threshold (after which no earlier thinking is carried anyway)


# When to clear earlier turns' thinking (the provider's clear_thinking_20251015, keep = the
# turns since the last clearing).
Rule = Callable[[Decision], bool]


def _payback(d: Decision) -> bool:
    """The product's own rule (`mechanisms/thinking.OldThinking.pays`)."""
    choice = ClearingChoice(d.per_request, d.rewrite, d.cold, d.so_far, d.to_compaction)
    return OldThinking().pays(choice)


RULES: dict[str, Rule] = {
    # whenever there is earlier thinking to leave out (keep = the last thinking turn)
    "every": lambda d: True,
    # only where the cache is cold anyway
    "cold": lambda d: d.cold,
    # where it pays back within half as many later requests as the context has had (at least
    # 10), and before the agent's compaction drops the thinking anyway: the proxy's rule
    "payback": _payback,
    # with hindsight: where it pays back over the requests the context really had left
    "oracle": lambda d: d.cold or d.per_request * d.remaining >= d.rewrite,
}


def simulate_clearing(rs: Sequence[Response], prices: Any, rule: Rule) -> tuple[float, float, int]:
    """(weighted tokens of earlier thinking left out, weighted cost of the cache rewrites,
    clearings) under `rule`, where the API keeps earlier turns' thinking. A clearing leaves
    out every earlier turn's thinking and rewrites the cache from its first cleared block on
    (the tokens after it that the request had read: written now, at the write rate)."""
    saved = cost = 0.0
    clears = 0
    sizes: dict[int, int] = {}
    for r in rs:
        if r.prompt is not None:
            sizes[r.context] = sizes.get(r.context, 0) + 1
    # Claude Code's compaction threshold (agents/claude/auto_compact.py): its window less
    # 20,000 output and 13,000 buffer; a session whose context went past 200k had the 1M one
    window = 1_000_000 if max((r.prompt or 0) for r in rs) > 200_000 else 200_000
    threshold = window - 33_000
    so_far = 0
    first = 0
    context = -1
    by_turn: dict[int, float] = {}
    turn_start: dict[int, int] = {}  # turn → prompt size of its first request
    cleared_below = -1  # turns before this one have their thinking cleared
    prev: Response | None = None
    for r in rs:
        if r.context != context:
            context, by_turn, turn_start, cleared_below, prev = r.context, {}, {}, -1, None
            so_far = 0
        if r.prompt is not None:
            turn_start.setdefault(r.turn, r.prompt)
            first = r.prompt if so_far == 0 else first
            cold = prev is not None and r.read < COLD_READ_SHARE * (prev.prompt or 0)
            if prev is not None:
                # keep >= 1: the latest turn that thought keeps its thinking (the API counts
                # turns that thought), so a clearing leaves out the turns before it: the
                # previous turn's once the current one has thought
                thought = [t for t, v in by_turn.items() if t <= r.turn and v > 0]
                latest = max(thought, default=cleared_below)
                pending = sorted(t for t in thought if cleared_below <= t < latest)
                if pending:
                    gone = sum(by_turn[t] for t in pending)
                    span = r.prompt - turn_start.get(pending[0], r.prompt) - gone
                    span = 0.0 if cold else min(float(r.read), max(0.0, span))
                    rewrite = _rewrite_cost(r, span, prices)
                    per_request = _slice_cost(r, gone, prices)[0]
                    left = sizes[context] - so_far
                    growth = max(1.0, (r.prompt - first) / max(1, so_far))
                    to_compaction = max(0.0, (threshold - r.prompt) / growth)
                    decision = Decision(per_request, rewrite, cold, so_far, left, to_compaction)
                    if rule(decision):
                        cost += rewrite
                        cleared_below = latest
                        clears += 1
            left_out = sum(v for t, v in by_turn.items() if t < cleared_below)
            saved += _slice_cost(r, left_out, prices)[0]
            prev = r
            so_far += 1
        by_turn[r.turn] = by_turn.get(r.turn, 0.0) + r.thinking_tokens
    return saved, cost, clears


def _model(ev: Event) -> str | None:
    if isinstance(ev, Message) and ev.role == "assistant" and ev.model:
        return ev.model
    return None


def measure_file(path: Path) -> list[SessionShare]:
    sigs = thinking_chars(path)
    return [measure(path, h, evs, sigs) for h, evs in split_sessions(path)]


# -- the command --------------------------------------------------------------------------------


def _files(args: Sequence[str]) -> list[Path]:
    if not args:
        corpus = default_corpus()
        return sorted(corpus.glob("*.jsonl")) if corpus else []
    out: list[Path] = []
    for a in args:
        p = Path(a)
        out += sorted(p.glob("*.jsonl")) if p.is_dir() else [p]
    return out


def summarise(rows: Sequence[SessionShare], min_calls: int) -> dict[str, Any]:
    big = [r for r in rows if r.calls >= min_calls and r.share_pct is not None]

    def med(key: str) -> float | None:
        vals = [getattr(r, key) for r in big if getattr(r, key) is not None]
        return round(statistics.median(vals), 2) if vals else None

    worst = max(big, key=lambda r: r.share_pct or 0.0, default=None)
    # the sessions a policy could act on: the API kept earlier turns' thinking
    kept = [r.share_pct for r in big if r.kept is not None and r.kept >= 0.5]
    return {
        "min_calls": min_calls,
        "sessions": len(big),
        "kept_sessions": len(kept),
        "median_share_kept_pct": round(statistics.median(kept), 2) if kept else None,
        "median_share_pct": med("share_pct"),
        "median_share_usd_pct": med("share_usd_pct"),
        "median_earlier_pct": med("earlier_pct"),
        "median_net_pct": {k: _median([r.net_pct.get(k) for r in big]) for k in RULES},
        "worst": None
        if worst is None
        else {"file": worst.file, "session": worst.session, "share_pct": worst.share_pct},
    }


def _median(vals: Sequence[float | None]) -> float | None:
    known = [v for v in vals if v is not None]
    return round(statistics.median(known), 2) if known else None


def render(rows: Sequence[SessionShare], summary: dict[str, Any]) -> str:
    head = (
        f"{'session':<34} {'model':<26} {'ver':<8} {'calls':>5} {'think':>5} {'rate':>5} "
        f"{'resid':>6} {'kept':>5} {'written':>8} {'carried':>10} {'share':>6} {'$share':>6} "
        f"{'earlier':>7}" + "".join(f" {k:>7}" for k in RULES)
    )
    lines = [head]

    def f(x: float | None, spec: str = ".1f") -> str:
        return "-" if x is None else format(x, spec)

    for r in rows:
        name = (r.file.split("__", 1)[-1][:22] + ":" + r.session[:10])[:34]
        lines.append(
            f"{name:<34} {str(r.model)[:26]:<26} {str(r.version)[:8]:<8} {r.calls:>5} "
            f"{r.thinking_responses:>5} {r.rate:>5.2f} {f(r.visible_residual, '.0f'):>6} "
            f"{f(r.kept, '.2f'):>5} {r.thinking_written:>8,} {r.carried_tokens:>10,} "
            f"{f(r.share_pct):>5}% {f(r.share_usd_pct):>5}% {f(r.earlier_pct):>6}% "
            + "".join(f" {f(r.net_pct.get(k)):>6}%" for k in RULES)
        )
    s = summary
    lines.append(
        f"sessions of >= {s['min_calls']} calls: {s['sessions']}; median share of the input "
        f"bill {f(s['median_share_pct'])}% (money with output {f(s['median_share_usd_pct'])}%); "
        f"earlier turns {f(s['median_earlier_pct'])}%; left out, net of the rewrites: "
        + ", ".join(f"{k} {f(v)}%" for k, v in s["median_net_pct"].items())
    )
    lines.append(
        f"of them where the API kept earlier turns' thinking: {s['kept_sessions']}, median "
        f"share {f(s['median_share_kept_pct'])}%"
    )
    if s["worst"]:
        w = s["worst"]
        lines.append(f"worst: {w['file']} {w['session'][:12]}: {w['share_pct']}%")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    ap.add_argument("paths", nargs="*", help="Claude Code transcripts or directories of them")
    ap.add_argument("--min-calls", type=int, default=40)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    files = _files(args.paths)
    if not files:
        print("thinking_share: no transcripts (give files, or ../shared/realdata)", file=sys.stderr)
        return 2
    rows = [row for p in files for row in measure_file(p)]
    summary = summarise(rows, args.min_calls)
    if args.json:
        print(json.dumps({"sessions": [asdict(r) for r in rows], "summary": summary}, indent=1))
    else:
        print(render(rows, summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
