"""One self-contained HTML file: inline CSS and SVG, no script, no font, no URL to fetch.

Light and dark follow `prefers-color-scheme`; print hides nothing but drops the backgrounds;
the charts scale with the page (viewBox), tables scroll sideways on a phone. Every string that
came from a session (commands, paths, labels) is escaped.
"""

from __future__ import annotations

import html
import time

from ctxwrap.report._data import KEPT_PARTS, SENT_PARTS, ReportData

_CSS = """
:root{--bg:#fff;--fg:#1b1f24;--muted:#5b6570;--grid:#d8dde3;--card:#f4f6f8;
--system:#4c6ef5;--tools:#15aabf;--messages:#364fc7;--bash:#f08c00;--amnesia:#ae3ec9;
--writes:#2f9e44;--masking:#e8590c;--skills:#1098ad;--tools-kept:#868e96;--plain:#c92a2a;--ours:#2b8a3e}
@media (prefers-color-scheme:dark){:root{--bg:#16191d;--fg:#e6e9ed;--muted:#9aa4ae;--grid:#3a4048;
--card:#22262b;--system:#748ffc;--tools:#3bc9db;--messages:#91a7ff;--bash:#ffa94d;--amnesia:#da77f2;
--writes:#69db7c;--masking:#ff8787;--skills:#66d9e8;--tools-kept:#adb5bd;--plain:#ff6b6b;--ours:#69db7c}}
*{box-sizing:border-box}
body{margin:0 auto;max-width:1240px;padding:16px;background:var(--bg);color:var(--fg);
font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif}
h1{font-size:1.4em;margin:.2em 0}h2{font-size:1.1em;margin:1.4em 0 .4em}
.muted{color:var(--muted)}
.cards{display:grid;grid-template-columns:repeat(auto-fit,minmax(170px,1fr));gap:10px}
.card{background:var(--card);border-radius:8px;padding:10px 12px}
.card b{display:block;font-size:1.35em;font-variant-numeric:tabular-nums}
svg{width:100%;height:auto;display:block}
svg text{fill:var(--muted);font-size:11px}
.axis{stroke:var(--grid);stroke-width:1}
.seg-system{fill:var(--system)}.seg-tools{fill:var(--tools)}.seg-messages{fill:var(--messages)}
.kept{fill-opacity:.45}
.kept-bash{fill:var(--bash)}.kept-amnesia{fill:var(--amnesia)}.kept-writes{fill:var(--writes)}
.kept-masking{fill:var(--masking)}.kept-skills{fill:var(--skills)}.kept-tools{fill:var(--tools-kept)}
.line-plain{stroke:var(--plain);fill:none;stroke-width:2}.line-ours{stroke:var(--ours);fill:none;stroke-width:2}
.mark-compaction{stroke:var(--fg);stroke-dasharray:4 3;stroke-width:1}
.mark-write{fill:var(--plain)}.mark-read{fill:var(--ours)}
.legend{display:flex;flex-wrap:wrap;gap:6px 14px;margin:6px 0;padding:0;list-style:none}
.legend li::before{content:"";display:inline-block;width:11px;height:11px;border-radius:2px;
margin-right:5px;vertical-align:-1px;background:var(--c)}
.legend .kept::before{opacity:.45}
.scroll{overflow-x:auto}
table{border-collapse:collapse;width:100%;font-variant-numeric:tabular-nums}
th,td{text-align:left;padding:4px 8px;border-bottom:1px solid var(--grid);vertical-align:top}
td.n,th.n{text-align:right;white-space:nowrap}
code{font-size:.92em;word-break:break-all}
.chart{overflow-x:auto}
@media (max-width:640px){body{padding:10px;font-size:13px}.cards{grid-template-columns:1fr 1fr}
.chart svg{min-width:760px}}
@media print{:root{--bg:#fff;--fg:#000;--card:#fff}body{max-width:none}
.card{border:1px solid #999}section{break-inside:avoid}}
"""

_COLORS = {
    "system": "var(--system)",
    "tools": "var(--tools)",
    "messages": "var(--messages)",
}
_KEPT_COLORS = {
    "bash": "var(--bash)",
    "amnesia": "var(--amnesia)",
    "writes": "var(--writes)",
    "masking": "var(--masking)",
    "skills": "var(--skills)",
    "tools": "var(--tools-kept)",
}


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _n(v: float) -> str:
    return f"{v:,.0f}"


def _opt(v: int | None) -> str:
    return "–" if v is None else _n(v)


def _usd(v: float | None) -> str:
    return "–" if v is None else f"${v:,.4f}" if v < 1 else f"${v:,.2f}"


def _bars(data: ReportData) -> str:
    calls = data.calls
    width, height, left, bottom, top = 1200, 320, 56, 24, 10
    plot_w, plot_h = width - left - 8, height - bottom - top
    peak = max((c.sent_total + sum(max(0, v) for v in c.kept.values()) for c in calls), default=1)
    peak = max(peak, 1)
    step = plot_w / max(len(calls), 1)
    bar_w = max(step * 0.8, 0.5)
    out = [
        f'<svg id="per-call" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="Tokens per call: sent, and kept out by each mechanism">'
    ]
    for frac in (0, 0.25, 0.5, 0.75, 1):
        y = top + plot_h * (1 - frac)
        out.append(f'<line class="axis" x1="{left}" x2="{width - 8}" y1="{y:.1f}" y2="{y:.1f}"/>')
        out.append(
            f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{_n(peak * frac)}</text>'
        )
    for k, c in enumerate(calls):
        x = left + k * step + (step - bar_w) / 2
        y = top + plot_h
        kept_total = sum(c.kept.values())
        tip = [f"call {c.index + 1}: sent {_n(c.sent_total)} tokens"]
        parts = []
        for part in SENT_PARTS:
            v = c.sent.get(part, 0)
            if v <= 0:
                continue
            h = plot_h * v / peak
            y -= h
            parts.append(
                f'<rect class="seg seg-{part}" x="{x:.2f}" y="{y:.2f}" width="{bar_w:.2f}" height="{h:.2f}"/>'
            )
        for mech in KEPT_PARTS:
            v = c.kept.get(mech, 0)
            if v:
                tip.append(f"{mech} {'kept out' if v > 0 else 'added'} {_n(abs(v))}")
            if v <= 0:
                continue
            h = plot_h * v / peak
            y -= h
            parts.append(
                f'<rect class="seg kept kept-{mech}" x="{x:.2f}" y="{y:.2f}" width="{bar_w:.2f}" height="{h:.2f}"/>'
            )
        if c.compaction:
            tip.append("compaction / head change")
        out.append(
            f'<g class="call" data-call="{c.index}" data-sent="{c.sent_total}" '
            f'data-kept="{kept_total}"><title>{_e("; ".join(tip))}</title>{"".join(parts)}</g>'
        )
    label_every = max(1, len(calls) // 12)
    for k in range(0, len(calls), label_every):
        x = left + k * step + step / 2
        out.append(f'<text x="{x:.1f}" y="{height - 6}" text-anchor="middle">{k + 1}</text>')
    out.append("</svg>")
    return "".join(out)


def _cost_chart(data: ReportData) -> str:
    calls = data.calls
    width, height, left, bottom, top = 1200, 260, 64, 24, 10
    plot_w, plot_h = width - left - 8, height - bottom - top
    cum_p, cum_o = [], []
    sp = so = 0.0
    for c in calls:
        sp += c.cost_plain
        so += c.cost_ctxwrap
        cum_p.append(sp)
        cum_o.append(so)
    peak = max(max(cum_p, default=1), max(cum_o, default=1), 1)
    n = max(len(calls) - 1, 1)

    def pt(k: int, v: float) -> str:
        return f"{left + plot_w * k / n:.1f},{top + plot_h * (1 - v / peak):.1f}"

    out = [
        f'<svg id="cost" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="Cumulative cost, plain versus ctxwrap">'
    ]
    for frac in (0, 0.5, 1):
        y = top + plot_h * (1 - frac)
        out.append(f'<line class="axis" x1="{left}" x2="{width - 8}" y1="{y:.1f}" y2="{y:.1f}"/>')
        out.append(
            f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{_n(peak * frac)}</text>'
        )
    for k, c in enumerate(calls):
        if c.compaction or c.masked:
            x = left + plot_w * k / n
            kind = "compaction" if c.compaction else "masking pass"
            out.append(
                f'<line class="mark-compaction" data-mark="{kind}" x1="{x:.1f}" x2="{x:.1f}" y1="{top}" '
                f'y2="{top + plot_h}"><title>call {c.index + 1}: {kind}</title></line>'
            )
    out.append(
        f'<polyline class="line-plain" points="{" ".join(pt(k, v) for k, v in enumerate(cum_p))}"/>'
    )
    out.append(
        f'<polyline class="line-ours" points="{" ".join(pt(k, v) for k, v in enumerate(cum_o))}"/>'
    )
    for k, c in enumerate(calls):
        # a cache write of most of the request: the prefix was (re)written
        if c.cache_write and c.cache_write >= c.cache_read:
            cx, cy = pt(k, cum_o[k]).split(",")
            out.append(
                f'<circle class="mark-write" cx="{cx}" cy="{cy}" r="3.5"><title>call {c.index + 1}: '
                f"cache write {_n(c.cache_write)}, read {_n(c.cache_read)}</title></circle>"
            )
    out.append("</svg>")
    return "".join(out)


def _legend(items: list[tuple[str, str, bool]]) -> str:
    lis = "".join(
        f'<li class="{"kept" if kept else ""}" style="--c:{color}">{_e(name)}</li>'
        for name, color, kept in items
    )
    return f'<ul class="legend">{lis}</ul>'


def render_html(data: ReportData) -> str:
    saved = data.plain_tokens - data.sent_tokens
    pct = f"{100 * saved / data.plain_tokens:.1f}%" if data.plain_tokens else "–"
    usd_p = [c.usd_plain for c in data.calls]
    usd_o = [c.usd_ctxwrap for c in data.calls]
    money_p = None if any(v is None for v in usd_p) else sum(v for v in usd_p if v is not None)
    money_o = None if any(v is None for v in usd_o) else sum(v for v in usd_o if v is not None)
    started = (
        time.strftime("%Y-%m-%d %H:%M", time.localtime(data.started_at)) if data.started_at else "–"
    )
    cards = [
        ("llm-calls", "LLM calls", _n(len(data.calls)), len(data.calls)),
        ("plain-tokens", "plain would send (tokens)", _n(data.plain_tokens), data.plain_tokens),
        ("sent-tokens", "sent with ctxwrap (tokens)", _n(data.sent_tokens), data.sent_tokens),
        ("saved-tokens", f"kept out ({pct})", _n(saved), saved),
        (
            "aux-tokens",
            "aux model tokens" + (" (est.)" if any(a.estimated for a in data.aux) else ""),
            _n(data.aux_tokens),
            data.aux_tokens,
        ),
        (
            "cost-plain",
            "cost plain (input-eq. tokens)",
            _n(data.cost_plain),
            round(data.cost_plain, 1),
        ),
        ("cost-ctxwrap", "cost with ctxwrap", _n(data.cost_ctxwrap), round(data.cost_ctxwrap, 1)),
        ("usd", "USD plain → ctxwrap", f"{_usd(money_p)} → {_usd(money_o)}", ""),
    ]
    card_html = "".join(
        f'<div class="card" id="{cid}" data-value="{_e(val)}"><span class="muted">{_e(label)}</span><b>{_e(text)}</b></div>'
        for cid, label, text, val in cards
    )
    rows = []
    for i in data.interventions:
        call = "–" if i.call_index is None else str(i.call_index + 1)
        handle = f"<code>{_e(i.handle)}</code>" if i.handle else "–"
        rows.append(
            f'<tr class="intervention" data-kind="{_e(i.kind)}"><td>{_e(i.kind)}</td><td class="n">{call}</td>'
            f"<td><code>{_e(i.label)}</code>{'<br><span class=muted>' + _e(i.note) + '</span>' if i.note else ''}</td>"
            f'<td class="n">{_opt(i.original_tokens)}</td><td class="n">{_opt(i.replacement_tokens)}</td>'
            f'<td class="n">{_n(i.kept_out)}</td>'
            f"<td>{handle}</td></tr>"
        )
    interventions = (
        '<div class="scroll"><table id="interventions"><thead><tr><th>kind</th><th class="n">call</th>'
        '<th>what</th><th class="n">tokens before</th><th class="n">after</th><th class="n">kept out</th><th>recall handle</th>'
        f"</tr></thead><tbody>{''.join(rows)}</tbody></table></div>"
        if rows
        else '<p class="muted" id="interventions">No intervention.</p>'
    )
    aux_rows = "".join(
        f'<tr class="aux"><td>{_e(a.task)}</td><td>{_e(a.mechanism)}</td><td class="n">{_n(a.input_tokens)}</td>'
        f'<td class="n">{_n(a.output_tokens)}</td><td>{"ok" if a.ok else "failed"}</td></tr>'
        for a in data.aux
    )
    aux = (
        '<div class="scroll"><table id="aux"><thead><tr><th>task</th><th>mechanism</th>'
        '<th class="n">input tokens</th><th class="n">output</th><th>result</th></tr></thead>'
        f"<tbody>{aux_rows}</tbody></table></div>"
        if aux_rows
        else '<p class="muted" id="aux">No aux model call.</p>'
    )
    legend_bars = _legend(
        [(p, _COLORS[p], False) for p in SENT_PARTS]
        + [(f"{m} kept out", _KEPT_COLORS[m], True) for m in KEPT_PARTS]
    )
    legend_cost = _legend([("plain", "var(--plain)", False), ("ctxwrap", "var(--ours)", False)])
    notes = "".join(f"<p class=muted>{_e(n)}</p>" for n in data.notes)
    return (
        "<!doctype html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        '<meta name="color-scheme" content="light dark">'
        f"<title>ctxwrap report — {_e(data.title)}</title><style>{_CSS}</style></head><body>"
        f"<header><h1>ctxwrap report</h1><p class=muted>{_e(data.source)} · {_e(data.title)} · "
        f"model {_e(data.model or '–')} · started {_e(started)}</p></header>"
        f'<section class="cards">{card_html}</section>'
        f"<section><h2>Per call: what was sent and what ctxwrap kept out (tokens)</h2>{legend_bars}<div class='chart'>{_bars(data)}</div></section>"
        f"<section><h2>Cumulative cost, plain vs ctxwrap (input-equivalent tokens)</h2>{legend_cost}"
        "<p class=muted>Dashed lines: compactions and other head changes (masking passes in a replay); "
        f"dots: calls that (re)wrote the cached prefix.</p><div class='chart'>{_cost_chart(data)}</div></section>"
        f"<section><h2>Interventions</h2>{interventions}</section>"
        f"<section><h2>Aux model calls</h2>{aux}</section>"
        f"<section><h2>Notes</h2>{notes}<p class=muted>Cost model: {_e(data.cost_model)}. "
        "Tokens are characters / 4.</p></section>"
        "</body></html>\n"
    )
