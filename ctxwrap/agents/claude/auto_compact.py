"""When plain Claude Code compacts on its own, for the cost model's plain counterfactual.

Under ctxwrap the context Claude Code measures is smaller, so it compacts later than it would
without ctxwrap; `ctxwrap stats` prices the plain session as compacting where plain Claude
Code would have (docs/accounting.md, "Compaction timing"). The proxy reports the model's
context window and this threshold as the session's compaction settings (`ModelSelect`), in
the shape the pricer takes for pi: it compacts when its context exceeds the window less
`reserve_tokens`, keeping no recent messages (Claude Code replaces the conversation by a
summary).

Claude Code 2.1.197's rule (read from its bundle): the window is 1M tokens where the request
carries the `context-1m` beta (or the model id ends in `[1m]`), else 200k; the effective window
is that less min(max output tokens, 20,000); it compacts at the effective window less 13,000,
or at `CLAUDE_AUTOCOMPACT_PCT_OVERRIDE` percent of it when that is lower; `DISABLE_COMPACT` or
`DISABLE_AUTO_COMPACT` turns it off. (Its `autoCompactEnabled` setting in ~/.claude.json is not
read here: with it off, the figure past the threshold is conservative.)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

WINDOW = 200_000
WINDOW_1M = 1_000_000
MAX_OUTPUT_RESERVE = 20_000  # min(the model's max output tokens, this)
BUFFER = 13_000


def context_window(model: str, betas: str) -> int:
    """The window plain Claude Code compacts against: the request's `anthropic-beta` header
    and model id say whether it is the 1M one."""
    if "context-1m" in betas or model.lower().endswith("[1m]"):
        return WINDOW_1M
    return WINDOW


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def compaction_settings(window: int, env: Mapping[str, str]) -> dict[str, Any]:
    """`CompactionSettings` (protocol) for plain Claude Code on this window."""
    reserve_out = MAX_OUTPUT_RESERVE
    raw_out = env.get("CLAUDE_CODE_MAX_OUTPUT_TOKENS", "").strip()
    if raw_out.isdigit() and int(raw_out) > 0:
        reserve_out = min(int(raw_out), MAX_OUTPUT_RESERVE)
    effective = window - reserve_out
    threshold = effective - BUFFER
    try:
        pct = float(env.get("CLAUDE_AUTOCOMPACT_PCT_OVERRIDE", "") or "nan")
    except ValueError:
        pct = math.nan
    if 0 < pct <= 100:
        threshold = min(math.floor(effective * pct / 100), threshold)
    enabled = not (_truthy(env.get("DISABLE_COMPACT")) or _truthy(env.get("DISABLE_AUTO_COMPACT")))
    return {
        "enabled": enabled,
        "reserve_tokens": max(0, window - max(threshold, 0)),
        "keep_recent_tokens": 0,
    }
