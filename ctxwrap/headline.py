"""The one headline every view shows ("cost −60% · $0.12 saved") and its rounding.

`Headline` is made from a session's figures by `headline_of`; `stats.compute.session_headline` is
the source of one session's: it runs `ctxwrap stats`' compute path (`compute_stats`, which
prices through `mechanisms.cost_accounting` and `engine.cost`) and hands the figures here. This
module only formats (it imports nothing of the compute). `ctxwrap stats` (text and
`--json`), `/ctx-stats`, pi's footer and the shell prompt segment (through the daemon's
`SessionTotals.headline`), `ctxwrap replay` and `ctxwrap report` all print `Headline.short()`
or the numbers behind it, rounded by the functions here, so they agree to the rounding shown.

The headline figure is the whole cost reduction (docs/accounting.md `total_saved_pct`):
requests as sent, plus ctxwrap's own aux calls, plus the summarisation requests of
compactions, against what the plain agent would have paid for the same conversation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from typing import TYPE_CHECKING

from ctxwrap.vocabulary import agent_name

if TYPE_CHECKING:
    from ctxwrap.mechanisms.cost_accounting import CostFigures
    from ctxwrap.stats.compute import Figures

MINUS = "\u2212"  # −, the sign people read in a percentage


def round_half_away(value: float, places: int = 0) -> float:
    """0.5 → 1, −0.5 → −1, 22.5 → 23: the one rounding every view uses, for percentages
    and money alike (Python's round() and f"{x:.0f}" go to even, JS's toFixed differs again;
    one rule here keeps the exit line, the footer, `stats`, `report` and `replay` equal).

    Rounds the decimal the value prints as (`repr`), so 0.125 is 0.13 and 2.675 is 2.68, as a
    person reading the unrounded figure would round it. `places=0` gives an int-valued float;
    use `round_pct` for the integer a percentage shows."""
    if not math.isfinite(value):
        return value
    step = Decimal(1).scaleb(-places)
    return float(Decimal(repr(value)).quantize(step, rounding=ROUND_HALF_UP))


def round_pct(value: float) -> int:
    """The integer a percentage shows: 22.5 → 23, −22.5 → −23."""
    return int(round_half_away(value))


def usd_places(usd: float) -> int:
    """Cents, or tenths of a cent for an amount under one cent."""
    return 3 if 0 < abs(usd) < 0.01 else 2


def usd_shown(usd: float) -> float:
    """The amount `usd_text` prints, as a number: sums of shown amounts add up."""
    return round_half_away(usd, usd_places(usd))


def saved_usd_shown(plain_usd: float, usd: float) -> float:
    """The saving a view prints beside `plain → with`: the difference of the two amounts as
    shown, so `$0.52 → $0.37` says `$0.15 saved`, never the `$0.16` of the unrounded figures."""
    return round(usd_shown(plain_usd) - usd_shown(usd), 3)


def pct_text(saved_pct: float | None) -> str:
    """`−60%` for a saving of 60 %, `+5%` when ctxwrap cost more, `±0%` for none."""
    if saved_pct is None:
        return ""
    n = round_pct(saved_pct)
    if n == 0:
        return "±0%"
    return f"{MINUS}{n}%" if n > 0 else f"+{-n}%"


def usd_text(usd: float | None) -> str:
    """`$0.12`, `$1,204.50`; amounts under a cent as `$0.004`."""
    if usd is None:
        return ""
    places = usd_places(usd)
    a = round_half_away(abs(usd), places)
    body = f"${a:,.{places}f}"
    return ("-" if usd < 0 and a else "") + body


def tokens_text(n: float) -> str:
    """`12.3k`, `2.5M`, `999`: the compact form of a token count."""
    a = abs(n)
    if a >= 999_950:
        s = f"{a / 1e6:.1f}M"
    elif a >= 1000:
        s = f"{a / 1e3:.1f}k"
    else:
        s = f"{a:.0f}"
    return ("-" if n < 0 else "") + s


# -- why a session cost more than plain (DESIGN.md invariant 10: said, not only signed) --------


def carried_text(tokens: int) -> str:
    """The commonest cause, worded once for every view (replay says it the same way): the
    agent under ctxwrap did not compact where plain did, so it carried what plain dropped."""
    return f"carried up to {tokens:,} tokens past plain's compaction"


def why_text(cause: str) -> str:
    """`why: carried up to 40,000 tokens past plain's compaction`: a cause as a view's part."""
    return f"why: {cause}"


@dataclass(frozen=True)
class Headline:
    """A session's (or any set of calls') figures as people see them."""

    agent: str | None  # "pi", "claude", …; None for figures over several agents
    llm_calls: int
    cost: float  # ctxwrap's session: requests + aux + summaries, input-equivalent tokens
    plain_cost: float  # the plain agent's, same unit
    saved_pct: float | None  # (plain − cost) / plain × 100; None when nothing was priced
    usd: float | None  # money, None when a price is unknown
    plain_usd: float | None
    saved_usd: float | None
    kept_out_tokens: int  # estimated (chars/4): context the mechanisms kept out, all requests
    aux_tokens: int  # the aux model's own tokens, as its backend reported them
    net_tokens: int  # kept_out − aux
    sent_tokens: int  # estimated (chars/4)
    provider_input_tokens: int  # what the provider counted (0 when it reported nothing)
    compactions: int
    plain_compactions: int
    # mechanisms that kept out most, net of their aux tokens (ids, largest first; only > 0)
    top_mechanisms: tuple[str, ...] = ()

    @property
    def agent_name(self) -> str:
        return agent_name(self.agent)

    @property
    def plain_name(self) -> str:
        return f"plain {agent_name(self.agent)}" if self.agent else "without ctxwrap"

    @property
    def pct(self) -> int | None:
        """The percentage shown, as an integer: 60 for `−60%`."""
        return None if self.saved_pct is None else round_pct(self.saved_pct)

    @property
    def saved_usd_shown(self) -> float | None:
        """The saving as shown: plain's amount as shown minus ctxwrap's as shown (the two
        figures `sentence()` prints), so the three amounts a person reads add up."""
        if self.saved_usd is None or not self.plain_usd:
            return None
        if self.usd is None:
            return usd_shown(self.saved_usd)
        return saved_usd_shown(self.plain_usd, self.usd)

    def money(self) -> str:
        """`$0.12 saved`, `$0.03 more`, or "" when a price is unknown."""
        saved = self.saved_usd_shown
        if saved is None:
            return ""
        if saved < 0:
            return f"{usd_text(-saved)} more"
        return f"{usd_text(saved)} saved"

    def short(self) -> str:
        """The headline: `cost −60% · $0.12 saved` (or `cost −60%` without prices, or "")."""
        if self.llm_calls == 0 or self.saved_pct is None:
            return ""
        money = self.money()
        return f"cost {pct_text(self.saved_pct)}" + (f" · {money}" if money else "")

    def sentence(self) -> str:
        """One sentence a person reads in ten seconds."""
        if self.llm_calls == 0 or self.saved_pct is None:
            return "nothing sent yet"
        if self.plain_usd and self.usd is not None and self.saved_usd is not None:
            what = f"{usd_text(self.plain_usd)}; with ctxwrap {usd_text(self.usd)}"
        else:
            what = (
                f"{self.plain_cost:,.0f} cost units; with ctxwrap {self.cost:,.0f}"
                " (input-token equivalents: a model without a known price)"
            )
        who = self.plain_name if self.agent else "without ctxwrap it"
        return f"{who} would have cost {what} — {self.short()}"

    def mostly(self) -> str:
        """`mostly by big outputs summarised and old results masked` ("" when none saved)."""
        from ctxwrap.vocabulary import MECHANISM_WORDS

        words = [MECHANISM_WORDS.get(m, (m, m))[0] for m in self.top_mechanisms]
        if not words:
            return ""
        if len(words) == 1:
            return f"mostly by {words[0]}"
        return f"mostly by {', '.join(words[:-1])} and {words[-1]}"

    def token_line(self) -> str:
        """Estimated sizes, labelled as estimates, beside the provider's own count."""
        text = f"≈{self.sent_tokens:,} tokens sent (estimated, chars/4)"
        if self.provider_input_tokens:
            text += f"; the provider counted {self.provider_input_tokens:,} input tokens"
        return text


def headline_of(figures: Figures, agent: str | None) -> Headline:
    """The headline of a `stats.Figures` (a session, a day, an agent, or the total)."""
    c = figures.cost
    return Headline(
        agent=agent,
        llm_calls=figures.llm_calls,
        cost=c.total_weighted,
        plain_cost=c.total_plain_weighted,
        saved_pct=c.total_saved_pct if c.calls else None,
        usd=total_usd(c),
        plain_usd=total_plain_usd(c),
        saved_usd=c.total_saved_usd,
        kept_out_tokens=figures.saved_tokens,
        aux_tokens=figures.aux_tokens,
        net_tokens=figures.net_tokens,
        sent_tokens=figures.sent_tokens,
        provider_input_tokens=figures.provider.input_tokens
        + figures.provider.cache_read_tokens
        + figures.provider.cache_write_tokens,
        compactions=c.compactions,
        plain_compactions=c.plain_compactions,
        top_mechanisms=top_mechanisms(figures),
    )


def top_mechanisms(figures: Figures, n: int = 2) -> tuple[str, ...]:
    """The `n` mechanisms with the largest positive net (tokens kept out − their aux tokens)."""
    ranked = sorted(
        (m for m in figures.mechanisms if m.net_tokens > 0), key=lambda m: -m.net_tokens
    )
    return tuple(m.mechanism for m in ranked[:n])


def total_usd(c: CostFigures) -> float | None:
    """What ctxwrap's session cost in money: requests + aux + its compactions' summaries."""
    parts = (c.sent_usd, c.aux_usd, c.compaction_usd)
    return None if any(p is None for p in parts) else sum(p or 0.0 for p in parts)


def total_plain_usd(c: CostFigures) -> float | None:
    parts = (c.plain_usd, c.plain_compaction_usd)
    return None if any(p is None for p in parts) else sum(p or 0.0 for p in parts)
