"""Where plain Codex 0.171 compacts on its own: the cost model's plain session compacts there.

Checked on the real 0.171.0 against the scripted server (docs/research/codex-0.171.md): Codex
compacts before a request once its own count of the context (the last reply's usage plus
what was added since) reaches the auto-compaction limit — 90 % of the model's window, or
``model_auto_compact_token_limit`` when that is lower (a higher one is capped at the 90 %).
The window is ``model_context_window`` where the config sets it, else the model's entry in
the catalog bundled with 0.171 (a model it does not list: unknown, and no threshold is
modelled — plain then compacts with the session's own compactions only).

Under ctxwrap Codex counts what ctxwrap sent, so it compacts later than plain Codex would;
this threshold is what lets the plain side compact where it would have.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# Context windows of the models in Codex 0.171.0's bundled catalog (`context_window`; none
# sets `auto_compact_token_limit`).
CATALOG_WINDOWS: dict[str, int] = {
    "gpt-5.5": 272_000,
    "gpt-5.6-sol": 272_000,
    "gpt-5.6-terra": 272_000,
    "gpt-5.6-luna": 272_000,
    "gpt-6-sol": 272_000,
    "gpt-6-luna": 272_000,
    "gpt-6-astra": 272_000,
    "gpt-6.1-sol": 500_000,
    "gpt-6.1-terra": 500_000,
    "gpt-6.2-sol": 500_000,
    "gpt-6.2-astra": 272_000,
    "codex-auto-review": 272_000,
}
# The share of the window at which Codex compacts by default, and the cap of a configured limit.
LIMIT_SHARE = 0.9
# What the cost model reads of the user's config (launcher.effective_config).
CONFIG_KEYS = ("model_context_window", "model_auto_compact_token_limit")


def _positive_int(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return None


def context_window(model: str, config: Mapping[str, Any]) -> int | None:
    """The model's window as Codex takes it: the config's `model_context_window`, else the
    catalog's; None for a model the catalog does not list."""
    return _positive_int(config.get("model_context_window")) or CATALOG_WINDOWS.get(model)


def compaction_limit(window: int, config: Mapping[str, Any]) -> int:
    """Where Codex compacts: 90 % of the window, or the configured limit when lower."""
    limit = int(window * LIMIT_SHARE)
    configured = _positive_int(config.get("model_auto_compact_token_limit"))
    return min(limit, configured) if configured is not None else limit


def compaction_settings(window: int, config: Mapping[str, Any]) -> dict[str, Any]:
    """The daemon's `CompactionSettings`: plain compacts at window − reserve, keeping none of
    the conversation (Codex keeps only recent user messages)."""
    return {
        "enabled": True,
        "reserve_tokens": window - compaction_limit(window, config),
        "keep_recent_tokens": 0,
    }
