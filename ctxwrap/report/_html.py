"""One self-contained HTML file: inline CSS and SVG, no script, no font, no URL to fetch.

The first screenful answers "how much, and why": a hero sentence ($, or cost units when no
price is known, and %), the mechanisms that did most, and a per-mechanism table. Then the
charts: cumulative cost and tokens per call, each drawn twice (a wide and a phone layout, one
shown by a media query) with round k/M ticks, an x axis in calls, and markers for compactions
and masking passes that differ by shape, line and label. Colours are Okabe-Ito (plain orange,
ctxwrap blue: never red against green); light and dark follow `prefers-color-scheme`; tables
become cards on a narrow screen. Every string that came from a session is escaped.
"""

from __future__ import annotations

import html
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ctxwrap.headline import pct_text, tokens_text, usd_text
from ctxwrap.report._data import KEPT_PARTS, MechanismRow, ReportData, Totals, top_mechanisms
from ctxwrap.report._words import COST_UNITS, COST_UNITS_EXPLAIN, kind_words, words
from ctxwrap.vocabulary import plain_agent

# Okabe & Ito (2008), "Color Universal Design": distinguishable with every common colour
# vision deficiency. Plain is orange, ctxwrap blue, in both themes.
PLAIN_LIGHT, OURS_LIGHT = "#e69f00", "#0072b2"
PLAIN_DARK, OURS_DARK = "#e69f00", "#56b4e9"

_CSS = (
    """
:root{--bg:#fff;--fg:#1b1f24;--muted:#56606b;--grid:#dfe3e8;--axis:#8a939c;--card:#f3f5f7;
--plain:@PLAIN_LIGHT@;--ours:@OURS_LIGHT@;--system:#a7b0b9;--messages:@OURS_LIGHT@;
--bash:#cc79a7;--amnesia:#56b4e9;--dedup:#c7b300;--writes:#009e73;--masking:#d55e00;--skills:#3b3b3b;
--tools-kept:#6b7280;--thinking:#8c6bb1;--mark:#1b1f24;--good:#005a8c}
@media (prefers-color-scheme:dark){:root{--bg:#15181c;--fg:#e6e9ed;--muted:#a3adb8;
--grid:#30363d;--axis:#6b7480;--card:#22272e;--plain:@PLAIN_DARK@;--ours:@OURS_DARK@;--system:#5c6670;
--messages:@OURS_DARK@;--bash:#e08fc0;--amnesia:#f0e442;--dedup:#c9a0dc;--writes:#2ec4a0;--masking:#ff8a3d;
--skills:#d0d0d0;--tools-kept:#9aa3ad;--thinking:#b79fd6;--mark:#e6e9ed;--good:#8fd0f5}}
*{box-sizing:border-box}
body{margin:0 auto;max-width:1240px;padding:16px 20px;background:var(--bg);color:var(--fg);
font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif}
h1{font-size:2em;line-height:1.15;margin:.15em 0 .25em}h2{font-size:1.15em;margin:1.5em 0 .4em}
.muted{color:var(--muted)}.small{font-size:.88em}
.lead{font-size:1.15em;margin:.2em 0 .5em;max-width:60em}
.hero-amount{color:var(--good)}
.lead.why{font-size:1em}
.range{background:var(--card);border-radius:8px;padding:8px 12px;margin:.6em 0;max-width:60em}
svg{width:100%;height:auto;display:block}
svg text{fill:var(--muted);font-size:12px}
svg .label{fill:var(--fg);font-weight:600}
.grid{stroke:var(--grid);stroke-width:1}.axis{stroke:var(--axis);stroke-width:1}
.seg-system{fill:var(--system)}.seg-messages{fill:var(--messages)}
.kept{fill-opacity:.6}
.kept-bash{fill:var(--bash)}.kept-amnesia{fill:var(--amnesia)}.kept-dedup{fill:var(--dedup)}.kept-writes{fill:var(--writes)}
.kept-masking{fill:var(--masking)}.kept-skills{fill:var(--skills)}.kept-tools{fill:var(--tools-kept)}.kept-thinking{fill:var(--thinking)}
.line-plain{stroke:var(--plain);fill:none;stroke-width:3;stroke-dasharray:9 4}
.line-ours{stroke:var(--ours);fill:none;stroke-width:3}
.end-plain{fill:var(--plain);font-weight:600}.end-ours{fill:var(--ours);font-weight:600}
.mark-compaction{stroke:var(--mark);stroke-width:1.5;stroke-opacity:.75}
.mark-masking{stroke:var(--mark);stroke-width:1.5;stroke-dasharray:2 3;stroke-opacity:.75}
.sym{fill:var(--mark)}.sym-write{fill:var(--bg);stroke:var(--ours);stroke-width:2}
.legend{display:flex;flex-wrap:wrap;gap:6px 16px;margin:6px 0;padding:0;list-style:none}
.legend li{display:flex;align-items:center;gap:6px}
.legend svg{width:22px;height:14px;display:inline-block;flex:none}
.sw{display:inline-block;width:12px;height:12px;border-radius:2px;background:var(--c);flex:none}
.sw.kept{opacity:.6}
.sw.carried{background:repeating-linear-gradient(45deg,var(--plain) 0 3px,transparent 3px 5px);
box-shadow:inset 0 0 0 1px var(--plain)}
.carried-bg{fill:var(--plain);fill-opacity:.3}.carried-stripe{fill:var(--plain)}
table{border-collapse:collapse;width:100%;font-variant-numeric:tabular-nums}
th,td{text-align:left;padding:5px 8px;border-bottom:1px solid var(--grid);vertical-align:top}
th{font-weight:600}td.n,th.n{text-align:right}td.n{white-space:nowrap}
td .name{display:block;font-size:.85em;color:var(--muted);white-space:normal}
td,dd,li,p,h1{overflow-wrap:anywhere}
.scroll{overflow-x:auto;max-width:100%}
tr.total td{font-weight:600;border-top:2px solid var(--axis)}
code{font-size:.92em;word-break:break-all}
.range code,.lead code,code.handle{white-space:nowrap;word-break:normal}
.chart .narrow{display:none}
.hint{display:none}
dl.figures{display:grid;grid-template-columns:repeat(auto-fit,minmax(210px,1fr));gap:8px;margin:0}
dl.figures div{background:var(--card);border-radius:8px;padding:8px 12px}
dl.figures dt{color:var(--muted);font-size:.9em}dl.figures dd{margin:0;font-weight:600;
font-variant-numeric:tabular-nums}
details summary{cursor:pointer;color:var(--muted)}
@media (max-width:640px){body{padding:10px 12px;font-size:14px}h1{font-size:1.55em}
.chart .wide{display:none}.chart .narrow{display:block}
table.cards,table.cards tbody{display:block;width:100%}
table.cards thead{display:none}
table.cards tr{display:block;background:var(--card);border-radius:8px;margin:0 0 8px;padding:6px 10px}
table.cards td{display:flex;flex-wrap:wrap;justify-content:flex-end;gap:0 12px;border:0;
padding:2px 0;text-align:right;min-width:0}
table.cards td>*{min-width:0}
table.cards td::before{content:attr(data-label);color:var(--muted);text-align:left;flex:none;
margin-right:auto}
.range code,.lead code{white-space:normal;overflow-wrap:anywhere}
table.cards td.what{display:block;text-align:left;font-weight:600}
table.cards td.what::before{content:none}
table.cards tr.total{border:2px solid var(--axis)}
table.cards tr.total td{border:0}}
@media print{:root{--bg:#fff;--fg:#000;--card:#fff}body{max-width:none}
section{break-inside:avoid}}
""".replace("@PLAIN_LIGHT@", PLAIN_LIGHT)
    .replace("@OURS_LIGHT@", OURS_LIGHT)
    .replace("@PLAIN_DARK@", PLAIN_DARK)
    .replace("@OURS_DARK@", OURS_DARK)
)

SENT_SERIES = (
    ("system", "sent: system prompt + tools"),
    ("messages", "sent: conversation"),
    ("carried", "sent: carried past plain's compaction (plain had dropped it)"),
)


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _n(v: float) -> str:
    return f"{v:,.0f}"


def _opt(v: int | None) -> str:
    return "–" if v is None else _n(v)


def short(v: float) -> str:
    """A round figure with k/M: 950, 1.5k, 34k, 1.2M."""
    a = abs(v)
    if a >= 1_000_000:
        s = f"{v / 1_000_000:.1f}".rstrip("0").rstrip(".") + "M"
    elif a >= 1_000:
        s = f"{v / 1_000:.1f}".rstrip("0").rstrip(".") + "k" if a < 10_000 else f"{v / 1000:.0f}k"
    else:
        s = f"{v:.0f}" if a >= 1 or v == 0 else f"{v:.2g}"
    return s


def money(v: float) -> str:
    a = abs(v)
    sign = "−" if v < 0 else ""
    if a >= 100:
        return f"{sign}${a:,.0f}"
    if a >= 0.095 or a == 0:
        return f"{sign}${a:,.2f}"
    return f"{sign}${a:.2g}"


def nice_ticks(peak: float, count: int = 4) -> list[float]:
    """0 and round steps (1, 2, 2.5, 5 × 10^n) up to the first at or above `peak`."""
    if peak <= 0:
        return [0.0, 1.0]
    raw = peak / count
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    n = math.ceil(peak / step - 1e-9)
    return [round(k * step, 10) for k in range(n + 1)]


def _tick_label(v: float, step: float, usd: bool) -> str:
    if not usd:
        return short(v)
    if step >= 1 or v == 0:
        return f"${v:,.0f}"
    decimals = min(4, max(2, -math.floor(math.log10(step))))
    return f"${v:.{decimals}f}"


def call_ticks(n_calls: int, room: int) -> list[int]:
    """Call numbers (1-based) for the x axis: 1, then round steps, at most `room` of them."""
    if n_calls <= 0:
        return []
    step = 1
    for m in (1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000, 2000, 5000):
        step = m
        if n_calls / m <= room:
            break
    ticks = [1] + [k for k in range(step, n_calls + 1, step) if k > 1]
    return ticks


@dataclass(frozen=True)
class Layout:
    name: str  # "wide" | "narrow"
    width: int
    height: int
    left: int
    right: int
    top: int
    bottom: int
    x_room: int  # how many x tick labels fit
    y_ticks: int

    @property
    def plot_w(self) -> float:
        return self.width - self.left - self.right

    @property
    def plot_h(self) -> float:
        return self.height - self.top - self.bottom


WIDE = Layout("wide", 1200, 330, 70, 120, 36, 42, 14, 5)
NARROW = Layout("narrow", 370, 300, 52, 12, 36, 42, 5, 4)


def _frame(
    lay: Layout,
    peak: float,
    n_calls: int,
    x_of: Callable[[int], float],
    fmt: Callable[[float, float], str],
    y_title: str,
) -> tuple[list[str], float]:
    """Grid, y ticks, x axis with call ticks and its title; returns the parts and the y top."""
    ticks = nice_ticks(peak, lay.y_ticks)
    top_v = ticks[-1] or 1.0
    step = ticks[1] - ticks[0] if len(ticks) > 1 else 1.0
    base = lay.top + lay.plot_h
    out = []
    for v in ticks:
        y = base - lay.plot_h * v / top_v
        cls = "axis" if v == 0 else "grid"
        out.append(
            f'<line class="{cls}" x1="{lay.left}" x2="{lay.width - lay.right}" '
            f'y1="{y:.1f}" y2="{y:.1f}"/>'
            f'<text class="ytick" x="{lay.left - 6}" y="{y + 4:.1f}" text-anchor="end">'
            f"{_e(fmt(v, step))}</text>"
        )
    for k in call_ticks(n_calls, lay.x_room):
        x = x_of(k - 1)
        out.append(
            f'<line class="axis" x1="{x:.1f}" x2="{x:.1f}" y1="{base}" y2="{base + 5}"/>'
            f'<text class="xtick" x="{x:.1f}" y="{base + 18}" text-anchor="middle">{k}</text>'
        )
    out.append(
        f'<text class="xtitle" x="{lay.left + lay.plot_w / 2:.1f}" y="{lay.height - 4}" '
        f'text-anchor="middle">call (1 = the first request to the model)</text>'
        f'<text class="ytitle" x="2" y="13">{_e(y_title)}</text>'
    )
    return out, top_v


def _markers(data: ReportData, lay: Layout, x_of: Callable[[int], float], tag: bool) -> list[str]:
    """Compactions (solid line, ▼ "C") and masking passes (dotted line, ◆ "M")."""
    out = []
    base = lay.top + lay.plot_h
    last_label = -1e9  # a letter only where it does not run into the previous one
    for k, c in enumerate(data.calls):
        for kind, on in (("compaction", c.compaction), ("masking", c.masked)):
            if not on:
                continue
            x = x_of(k)
            y0 = lay.top - 2
            what = (
                "compaction: the agent summarised its context"
                if kind == "compaction"
                else "masking pass: old results replaced by stubs"
            )
            attr = f' data-mark="{kind}"' if tag else ""
            if kind == "compaction":
                sym = f'<path class="sym" d="M{x - 6:.1f},{y0 - 10:.1f}h12l-6,10z"/>'
                letter = "C"
            else:
                sym = f'<path class="sym" d="M{x:.1f},{y0 - 12:.1f}l6,6l-6,6l-6,-6z"/>'
                letter = "M"
            label = ""
            if x - last_label >= 24:
                label = f'<text class="label" x="{x + 8:.1f}" y="{y0 - 2:.1f}">{letter}</text>'
                last_label = x
            out.append(
                f'<g class="marker"{attr}><title>call {c.index + 1}: {what}</title>'
                f'<line class="mark-{kind}" x1="{x:.1f}" x2="{x:.1f}" y1="{y0}" y2="{base}"/>'
                f"{sym}{label}</g>"
            )
    return out


def _x_of(lay: Layout, n: int, centred: bool) -> Callable[[int], float]:
    if centred:
        step = lay.plot_w / max(n, 1)
        return lambda k: lay.left + k * step + step / 2
    span = max(n - 1, 1)
    return lambda k: lay.left + lay.plot_w * k / span


def _bars(data: ReportData, lay: Layout) -> str:
    calls = data.calls
    tag = lay is WIDE
    peak = max((c.sent_total + sum(max(0, v) for v in c.kept.values()) for c in calls), default=1)
    step = lay.plot_w / max(len(calls), 1)
    bar_w = max(step * (0.8 if step > 3 else 1.0), 0.6)
    x_of = _x_of(lay, len(calls), centred=True)
    frame, top_v = _frame(lay, peak, len(calls), x_of, lambda v, _s: short(v), "tokens per request")
    out = [
        f'<svg class="{lay.name}" id="per-call{"" if tag else "-narrow"}" '
        f'viewBox="0 0 {lay.width} {lay.height}" role="img" '
        'aria-label="Tokens per call: what was sent, and what each mechanism kept out">',
        *frame,
    ]
    base = lay.top + lay.plot_h
    hatch = f"carried-{lay.name}"
    if any(c.sent.get("carried", 0) > 0 for c in calls):
        # what the session carried past plain's compaction: plain's colour, hatched
        out.append(
            f'<defs><pattern id="{hatch}" width="6" height="6" patternUnits="userSpaceOnUse" '
            'patternTransform="rotate(45)"><rect class="carried-bg" width="6" height="6"/>'
            '<rect class="carried-stripe" width="3" height="6"/></pattern></defs>'
        )
    for k, c in enumerate(calls):
        x = lay.left + k * step + (step - bar_w) / 2
        y = float(base)
        tip = [f"call {c.index + 1}: sent {_n(c.sent_total)} tokens"]
        carried = c.sent.get("carried", 0)
        if carried > 0:
            tip.append(f"of them carried past plain's compaction: {_n(carried)}")
        parts = []
        sent = (
            ("system", c.sent.get("system", 0) + c.sent.get("tools", 0)),
            ("messages", c.sent.get("messages", 0)),
            ("carried", carried),
        )
        for part, v in sent:
            if v <= 0:
                continue
            h = lay.plot_h * v / top_v
            y -= h
            fill = f' fill="url(#{hatch})"' if part == "carried" else ""
            parts.append(
                f'<rect class="seg-{part}"{fill} x="{x:.2f}" y="{y:.2f}" '
                f'width="{bar_w:.2f}" height="{h:.2f}"/>'
            )
        for mech in KEPT_PARTS:
            v = c.kept.get(mech, 0)
            if v:
                w = words(mech).user
                tip.append(f"{w}: {'kept out' if v > 0 else 'added'} {_n(abs(v))}")
            if v <= 0:
                continue
            h = lay.plot_h * v / top_v
            y -= h
            parts.append(
                f'<rect class="kept kept-{mech}" x="{x:.2f}" y="{y:.2f}" '
                f'width="{bar_w:.2f}" height="{h:.2f}"/>'
            )
        if tag:
            out.append(
                f'<g class="call" data-call="{c.index}" data-sent="{c.sent_total}" '
                f'data-carried="{carried}" '
                f'data-kept="{sum(c.kept.values())}"><title>{_e("; ".join(tip))}</title>'
                f"{''.join(parts)}</g>"
            )
        else:
            out.append(f'<g class="bar">{"".join(parts)}</g>')
    out.extend(_markers(data, lay, x_of, tag=False))
    out.append("</svg>")
    return "".join(out)


def chart_in_usd(data: ReportData) -> bool:
    return data.totals.usd_known and all(
        c.usd_plain is not None and c.usd_ctxwrap is not None for c in data.calls
    )


def _cumulative(data: ReportData) -> tuple[list[float], list[float]]:
    usd = chart_in_usd(data)
    cum_p, cum_o = [], []
    sp = so = 0.0
    for c in data.calls:
        sp += (c.usd_plain or 0.0) if usd else c.cost_plain
        so += (c.usd_ctxwrap or 0.0) if usd else c.cost_ctxwrap
        cum_p.append(sp)
        cum_o.append(so)
    return cum_p, cum_o


def _cost_chart(data: ReportData, lay: Layout) -> str:
    calls = data.calls
    tag = lay is WIDE
    usd = chart_in_usd(data)
    cum_p, cum_o = _cumulative(data)
    peak = max(max(cum_p, default=0), max(cum_o, default=0), 1e-9)
    x_of = _x_of(lay, len(calls), centred=False)
    frame, top_v = _frame(
        lay,
        peak,
        len(calls),
        x_of,
        lambda v, s: _tick_label(v, s, usd),
        "cost so far, $" if usd else f"cost so far, {COST_UNITS}",
    )
    base = lay.top + lay.plot_h

    def pt(k: int, v: float) -> str:
        return f"{x_of(k):.1f},{base - lay.plot_h * v / top_v:.1f}"

    ends = (
        f'data-end-plain="{cum_p[-1]:.6f}" data-end-ours="{cum_o[-1]:.6f}" '
        f'data-unit="{"usd" if usd else "units"}" '
        if calls
        else ""
    )
    out = [
        f'<svg class="{lay.name}" id="cost{"" if tag else "-narrow"}" {ends}'
        f'viewBox="0 0 {lay.width} {lay.height}" role="img" '
        'aria-label="Cost so far, without ctxwrap versus with ctxwrap">',
        *frame,
        *_markers(data, lay, x_of, tag=tag),
        f'<polyline class="line-plain" points="{" ".join(pt(k, v) for k, v in enumerate(cum_p))}"/>',
        f'<polyline class="line-ours" points="{" ".join(pt(k, v) for k, v in enumerate(cum_o))}"/>',
    ]
    for k, c in enumerate(calls):
        # most of the request written to the cache: the cached prefix was (re)written
        if c.cache_write and c.cache_write >= c.cache_read and k:
            cx, cy = pt(k, cum_o[k]).split(",")
            out.append(
                f'<circle class="sym-write" cx="{cx}" cy="{cy}" r="4"><title>call {c.index + 1}: '
                f"cache written afresh ({_n(c.cache_write)} tokens), read "
                f"{_n(c.cache_read)}</title></circle>"
            )
    if calls and lay.right >= 80:
        fmt = usd_text if usd else short
        yp = base - lay.plot_h * cum_p[-1] / top_v
        yo = base - lay.plot_h * cum_o[-1] / top_v
        if abs(yp - yo) < 16:  # keep the two end labels apart
            yp, yo = (yp - 8, yo + 8) if yp <= yo else (yp + 8, yo - 8)
        xe = x_of(len(calls) - 1) + 8
        out.append(
            f'<text class="end-plain" x="{xe:.1f}" y="{yp + 4:.1f}">plain {_e(fmt(cum_p[-1]))}</text>'
            f'<text class="end-ours" x="{xe:.1f}" y="{yo + 4:.1f}">with {_e(fmt(cum_o[-1]))}</text>'
        )
    out.append("</svg>")
    return "".join(out)


def _legend_items(items: Sequence[tuple[str, str]]) -> str:
    return '<ul class="legend">' + "".join(f"<li>{sw}{_e(t)}</li>" for sw, t in items) + "</ul>"


def _swatch(var: str, kept: bool = False) -> str:
    return f'<span class="sw{" kept" if kept else ""}" style="--c:var(--{var})"></span>'


def _line_swatch(cls: str) -> str:
    return f'<svg viewBox="0 0 22 14" aria-hidden="true"><line class="{cls}" x1="1" x2="21" y1="7" y2="7"/></svg>'


def _marker_legend(data: ReportData) -> list[tuple[str, str]]:
    items = []
    if any(c.compaction for c in data.calls):
        items.append(
            (
                '<svg viewBox="0 0 22 14" aria-hidden="true"><path class="sym" d="M5,1h12l-6,10z"/></svg>',
                "C: compaction (the agent summarised its context)",
            )
        )
    if any(c.masked for c in data.calls):
        items.append(
            (
                '<svg viewBox="0 0 22 14" aria-hidden="true"><path class="sym" d="M11,1l6,6l-6,6l-6,-6z"/></svg>',
                "M: masking pass (old results replaced by stubs)",
            )
        )
    return items


def _fmt_cost(v: float, usd: bool) -> str:
    return usd_text(v) if usd else f"{tokens_text(v)} {COST_UNITS}"


def _join(parts: list[str]) -> str:
    if len(parts) <= 1:
        return "".join(parts)
    return ", ".join(parts[:-1]) + " and " + parts[-1]


def hero(data: ReportData) -> tuple[str, str]:
    """The headline (amount, and the % as every view prints it: `cost −16%`) and the sentence
    under it (what did most, then from → to)."""
    t: Totals = data.totals
    usd = t.usd_known
    saved = t.saved_usd if usd and t.saved_usd is not None else t.saved_weighted
    would = data.source == "replay"
    amount = usd_text(abs(saved)) if usd else f"{tokens_text(abs(saved))} {COST_UNITS}"
    pct = f' <span class="hero-pct">(cost {_e(pct_text(t.saved_pct))})</span>'
    if saved >= 0:
        verb = "Would have saved" if would else "Saved"
        head = f'{verb} <span class="hero-amount">{_e(amount)}</span>{pct}'
    else:
        verb = "Would have cost" if would else "Cost"
        head = f"{verb} {_e(amount)} more{pct}"
    top = top_mechanisms(data)
    total_net = sum(m.net_tokens for m in data.mechanisms if m.net_tokens > 0) or 1
    why = [f"{_e(words(m.key).doing)} ({100 * m.net_tokens / total_net:.0f} %)" for m in top]
    plain = t.plain_usd if usd and t.plain_usd is not None else t.plain_weighted
    ours = t.ours_usd if usd and t.ours_usd is not None else t.ours_weighted
    who = plain_agent([data.agent]) if data.agent else "without ctxwrap"
    lead = (
        (f"Mostly by {_join(why)}. " if why and saved > 0 else "")
        + f"{_e(who[0].upper() + who[1:])} {_e(_fmt_cost(plain, usd))} → with ctxwrap "
        f"{_e(_fmt_cost(ours, usd))}, over {len(data.calls):,} calls"
        + (f" to {_e(data.model)}" if data.model else "")
        + "."
        + ("" if usd else f' <span class="muted small" id="units">{_e(COST_UNITS_EXPLAIN)}</span>')
    )
    return head, lead


def costs_more(data: ReportData) -> str:
    """Why the session cost more than plain, in words, under the hero (DESIGN.md invariant 10:
    said, not only signed); "" when it did not. The per-call chart draws the carried part."""
    why = data.costs_more_because
    if not why:
        return ""
    verb = "would have cost" if data.source == "replay" else "cost"
    drawn = (
        " The chart of each request draws what it carried, hatched."
        if any(c.sent.get("carried", 0) > 0 for c in data.calls)
        else ""
    )
    return (
        f'<p class="lead why" id="costs-more">Why it {verb} more than '
        f"{_e(plain_agent([data.agent]) if data.agent else 'without ctxwrap')}: "
        f"{_e(why)}.{drawn}</p>"
    )


def _tagger_range(data: ReportData) -> str:
    m = next((m for m in data.mechanisms if not m.aux_counted), None)
    if m is None:
        return ""
    t = data.totals
    usd = t.usd_known
    cost = (
        _fmt_cost(t.uncounted_aux_usd, True)
        if usd and t.uncounted_aux_usd is not None
        else _fmt_cost(t.uncounted_aux_weighted, False)
    )
    pct = (
        f" (up to {100 * m.bound_tokens / data.plain_tokens:.0f} % of the context sent)"
        if data.plain_tokens
        else ""
    )
    return (
        f'<p class="range" id="tagger-range" data-low="0" data-high="{m.bound_tokens}" '
        f'data-aux="{m.aux_tokens}"><b>Not counted above:</b> {_e(words("amnesia").user)} '
        f'<span class="muted">(tagger)</span> could keep out <b>0 … '
        f"{_e(short(m.bound_tokens))} tokens</b> more{_e(pct)}, for ≈{_e(short(m.aux_tokens))} "
        f"aux-model tokens ({_e(cost)}). This replay did not ask the aux model; "
        "<code>ctxwrap replay --tag</code> does.</p>"
    )


def _needed(n: tuple[int, int] | None) -> str:
    """`2 of 9 (22 %)`: of a mechanism's interventions, those needed again later."""
    if n is None or not n[1]:
        return "–"
    return f"{n[0]:,} of {n[1]:,} ({100 * n[0] / n[1]:.0f} %)"


def _mech_table(data: ReportData) -> str:
    rows = [m for m in data.mechanisms if m.saved_tokens or m.aux_tokens or m.bound_tokens]
    if not rows:
        return '<p class="muted" id="mechanisms">Nothing kept out in this session.</p>'
    needed = any(m.needed_again is not None and m.needed_again[1] for m in rows)
    rows.sort(key=lambda m: m.net_tokens, reverse=True)

    def tr(m: MechanismRow) -> str:
        w = words(m.key)
        if m.key == "tools" and m.saved_tokens < 0:  # nothing lazy-loaded: ctxwrap's own tool
            w = w._replace(user="ctxwrap's own recall tool (added to each request)")
        saved = _n(m.saved_tokens)
        if m.bound_tokens:
            saved = f"{_n(m.saved_tokens)} … {_n(m.saved_tokens + m.bound_tokens)}"
        aux = _n(m.aux_tokens) + ("" if m.aux_counted else " (not counted)")
        net = (
            _n(m.net_tokens)
            if not m.bound_tokens
            # the tagger costs its aux calls whatever it decides: net from −aux to bound − aux
            else f"{_n(m.saved_tokens - m.aux_tokens)} … "
            f"{_n(m.saved_tokens + m.bound_tokens - m.aux_tokens)}"
        )
        cells = [
            f'<td class="what" data-label="what"><span title="{_e(w.explain)}">{_e(w.user)}</span>'
            f'<span class="name">{_e(w.name)}</span></td>',
            f'<td class="n" data-label="tokens kept out">{saved}</td>',
            f'<td class="n" data-label="aux model tokens">{aux}</td>',
            f'<td class="n" data-label="net">{net}</td>',
        ]
        if needed:
            # a row of two mechanisms shows each: the write strip's share would hide in the
            # edit strip's
            apart = f'<span class="name">{_e(m.needed_parts)}</span>' if m.needed_parts else ""
            cells.append(
                f'<td class="n" data-label="needed again">{_needed(m.needed_again)}{apart}</td>'
            )
        return (
            f'<tr class="mechanism" data-mechanism="{_e(m.key)}" data-saved="{m.saved_tokens}" '
            f'data-aux="{m.aux_tokens}" data-net="{m.net_tokens}">{"".join(cells)}</tr>'
        )

    counted = [m for m in rows if m.aux_counted]
    tot_saved = sum(m.saved_tokens for m in rows)
    tot_aux = sum(m.aux_tokens for m in counted)
    total = (
        '<tr class="total"><td class="what" data-label="what">total counted</td>'
        f'<td class="n" data-label="tokens kept out">{_n(tot_saved)}</td>'
        f'<td class="n" data-label="aux model tokens">{_n(tot_aux)}</td>'
        f'<td class="n" data-label="net">{_n(tot_saved - tot_aux)}</td>'
        + ('<td class="n" data-label="needed again"></td>' if needed else "")
        + "</tr>"
    )
    head = (
        '<tr><th>what ctxwrap did</th><th class="n">tokens kept out</th>'
        '<th class="n">aux model tokens</th><th class="n">net</th>'
        + ('<th class="n">needed again</th>' if needed else "")
        + "</tr>"
    )
    return (
        f'<div class="scroll"><table class="cards" id="mechanisms"><thead>{head}</thead>'
        f"<tbody>{''.join(tr(m) for m in rows)}{total}</tbody></table></div>"
        '<p class="muted small">Tokens kept out are summed over every request that would have '
        "carried them. The aux model is the small model ctxwrap asks to summarise outputs, "
        "describe written files and tag reads; its tokens are what those calls cost."
        + (
            " Needed again: of what a mechanism hid or shortened, how many results the agent "
            "asked for again later (recalled, read again, or copied from): a high share means "
            "it hid too much."
            if needed
            else ""
        )
        + "</p>"
    )


def render_html(data: ReportData) -> str:
    t = data.totals
    started = (
        " · started " + time.strftime("%Y-%m-%d %H:%M", time.localtime(data.started_at))
        if data.started_at
        else ""
    )
    head, lead = hero(data)
    usd = t.usd_known
    saved_val = t.saved_usd if usd and t.saved_usd is not None else t.saved_weighted
    hero_html = (
        f'<h1 id="hero" data-saved="{saved_val:.6f}" data-pct="{(t.saved_pct or 0):.2f}" '
        f'data-unit="{"usd" if usd else "units"}">{head}</h1>'
        f'<p class="lead" id="why" data-top="{" ".join(m.key for m in top_mechanisms(data))}">'
        f"{lead}</p>" + costs_more(data)
    )
    # the mechanisms' sum (the table's total), as replay and stats print it: plain − sent
    # can differ by a token of rounding
    saved_tokens = (
        data.saved_total if data.saved_total is not None else data.plain_tokens - data.sent_tokens
    )
    tok_pct = f" ({100 * saved_tokens / data.plain_tokens:.1f} %)" if data.plain_tokens else ""
    figures = [
        ("llm-calls", "requests to the model", _n(len(data.calls)), len(data.calls)),
        ("plain-tokens", "tokens without ctxwrap", _n(data.plain_tokens), data.plain_tokens),
        ("sent-tokens", "tokens with ctxwrap", _n(data.sent_tokens), data.sent_tokens),
        ("saved-tokens", f"tokens kept out{tok_pct}", _n(saved_tokens), saved_tokens),
        (
            "aux-tokens",
            "aux model tokens" + (" (estimated)" if any(a.estimated for a in data.aux) else ""),
            _n(data.aux_tokens),
            data.aux_tokens,
        ),
        (
            "cost-plain",
            "requests' cost without ctxwrap, cost units",
            _n(data.cost_plain),
            round(data.cost_plain, 1),
        ),
        (
            "cost-ctxwrap",
            "requests' cost with ctxwrap, cost units",
            _n(data.cost_ctxwrap),
            round(data.cost_ctxwrap, 1),
        ),
    ]
    fig_html = "".join(
        f'<div id="{cid}" data-value="{_e(val)}"><dt>{_e(label)}</dt><dd>{_e(text)}</dd></div>'
        for cid, label, text, val in figures
    )
    rows = []
    for i in data.interventions:
        call = "–" if i.call_index is None else str(i.call_index + 1)
        handle = f'<code class="handle">{_e(i.handle)}</code>' if i.handle else "–"
        user, name = kind_words(i.kind)
        note = f'<br><span class="muted">{_e(i.note)}</span>' if i.note else ""
        rows.append(
            f'<tr class="intervention" data-kind="{_e(i.kind)}">'
            f'<td class="what" data-label="what">{_e(user)}<span class="name">{_e(name)}</span></td>'
            f'<td class="n" data-label="call">{call}</td>'
            f'<td data-label="of"><code>{_e(i.label)}</code>{note}</td>'
            f'<td class="n" data-label="tokens before">{_opt(i.original_tokens)}</td>'
            f'<td class="n" data-label="after">{_opt(i.replacement_tokens)}</td>'
            f'<td class="n" data-label="kept out per request">{_n(i.kept_out)}</td>'
            f'<td data-label="recall handle">{handle}</td></tr>'
        )
    interventions = (
        '<div class="scroll"><table class="cards" id="interventions"><thead><tr>'
        '<th>what happened</th><th class="n">call</th><th>to</th><th class="n">tokens before</th>'
        '<th class="n">after</th><th class="n">kept out per request</th><th>recall handle</th>'
        f"</tr></thead><tbody>{''.join(rows)}</tbody></table></div>"
        '<p class="muted small">A recall handle brings the full text back: '
        "<code>ctxwrap show HANDLE</code>.</p>"
        if rows
        else '<p class="muted" id="interventions">No intervention.</p>'
    )
    aux_rows = "".join(
        f'<tr class="aux"><td data-label="task">{_e(a.task)}</td>'
        f'<td data-label="for">{_e(words(a.mechanism).user)}'
        f'<span class="name">{_e(words(a.mechanism).name)}</span></td>'
        f'<td class="n" data-label="input tokens">{_n(a.input_tokens)}</td>'
        f'<td class="n" data-label="output tokens">{_n(a.output_tokens)}</td>'
        f'<td data-label="result">{"ok" if a.ok else "failed"}</td></tr>'
        for a in data.aux
    )
    aux = (
        '<div class="scroll"><table class="cards" id="aux"><thead><tr><th>task</th><th>for</th>'
        '<th class="n">input tokens</th><th class="n">output</th><th>result</th></tr></thead>'
        f"<tbody>{aux_rows}</tbody></table></div>"
        if aux_rows
        else '<p class="muted" id="aux">No aux model call.</p>'
    )
    kept_present = [m for m in KEPT_PARTS if any(c.kept.get(m, 0) > 0 for c in data.calls)]
    sent_present = [
        (part, label)
        for part, label in SENT_SERIES
        if any(
            (
                c.sent.get("system", 0) + c.sent.get("tools", 0)
                if part == "system"
                else c.sent.get(part, 0)
            )
            > 0
            for c in data.calls
        )
    ]
    legend_bars = _legend_items(
        [
            ('<span class="sw carried"></span>' if p == "carried" else _swatch(p), label)
            for p, label in sent_present
        ]
        + [
            (_swatch("tools-kept" if m == "tools" else m, kept=True), f"kept out: {words(m).user}")
            for m in kept_present
        ]
        + _marker_legend(data)
    )
    who = plain_agent([data.agent]) if data.agent else "without ctxwrap"
    cost_items = [
        (_line_swatch("line-plain"), f"{who} (dashed)"),
        (_line_swatch("line-ours"), "with ctxwrap"),
    ]
    if any(c.cache_write and c.cache_write >= c.cache_read and k for k, c in enumerate(data.calls)):
        cost_items.append(
            (
                '<svg viewBox="0 0 22 14" aria-hidden="true"><circle class="sym-write" cx="11" cy="7" r="4"/></svg>',
                "with ctxwrap, the provider's cache was written afresh (costs more that call)",
            )
        )
    legend_cost = _legend_items(cost_items + _marker_legend(data))
    aux_note = ""
    if data.source != "replay":
        aux_note = (
            " Aux model calls and compactions are on it too, at the request after them: it "
            "ends at the figures above."
        )
    elif t.aux_weighted:
        aux_cost = (
            usd_text(t.aux_usd)
            if usd and t.aux_usd is not None
            else f"{short(t.aux_weighted)} {COST_UNITS}"
        )
        aux_note = (
            f" Requests only, as in <code>ctxwrap replay</code>: the aux model's estimated "
            f"calls (≈{_e(aux_cost)} at this model's rate) are in the table above."
        )
    notes = "".join(f"<p class=muted>{_e(n)}</p>" for n in data.notes)
    glossary = (
        "<details><summary>Words used here</summary><dl class='muted small'>"
        "<dt>cost units</dt><dd>Cost in input-equivalent tokens: one fresh input token is 1, a "
        "token read from the provider's cache about 0.1, one written to it about 1.25.</dd>"
        "<dt>compaction</dt><dd>The agent summarised its own context to make room; the "
        "request after it starts afresh.</dd>"
        "<dt>head change</dt><dd>A request whose beginning differs from the previous one (a "
        "compaction, a masking pass): the provider's cache is written again.</dd>"
        "<dt>amnesia / tagger</dt><dd>The mechanism that hides reads the task no longer "
        "needs, as decided by a small aux model.</dd></dl></details>"
    )
    return (
        "<!doctype html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        '<meta name="color-scheme" content="light dark">'
        f"<title>ctxwrap report — {_e(data.title)}</title><style>{_CSS}</style></head><body>"
        f"<header><p class='muted small'>ctxwrap report · {_e(data.title)}"
        f"{started}</p>{hero_html}{_tagger_range(data)}</header>"
        f"<section id='what'><h2>What did it</h2>{_mech_table(data)}</section>"
        f"<section id='cost-section'><h2>Cost so far, without and with ctxwrap</h2>{legend_cost}"
        f"<div class='chart'>{_cost_chart(data, WIDE)}{_cost_chart(data, NARROW)}</div>"
        f"<p class='muted small'>Each request priced with the provider's caching rules.{aux_note}</p></section>"
        "<section id='per-call-section'><h2>Each request: what was sent, and what ctxwrap kept out (tokens)</h2>"
        f"{legend_bars}<div class='chart'>{_bars(data, WIDE)}{_bars(data, NARROW)}</div></section>"
        f"<section><h2>Figures</h2><dl class='figures'>{fig_html}</dl></section>"
        f"<section><h2>Every intervention</h2>{interventions}</section>"
        f"<section><h2>Aux model calls</h2>{aux}</section>"
        f"<section><h2>Notes</h2>{notes}<p class=muted>Cost model: {_e(data.cost_model)}. "
        f"Tokens are characters / 4.</p>{glossary}</section>"
        "</body></html>\n"
    )
