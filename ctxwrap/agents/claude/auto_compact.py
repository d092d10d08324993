"""When plain Claude Code compacts on its own, for the cost model's plain counterfactual.

Under ctxwrap the context Claude Code measures is smaller, so it compacts later than it would
without ctxwrap; `ctxwrap stats` prices the plain session as compacting where plain Claude
Code would have (docs/accounting.md, "Compaction timing"). The proxy reports the model's
context window and this threshold as the session's compaction settings (`ModelSelect`), in
the shape the pricer takes for pi: it compacts when its context exceeds the window less
`reserve_tokens`, keeping no recent messages (Claude Code replaces the conversation by a
summary).

Claude Code 2.1.197's rule (read from its bundle, checked against the real binary):
- The model's window is 1M tokens where the request carries the `context-1m` beta (or the
  model id ends in `[1m]`), else 200k.
- It compacts *ahead* of the limit only where a compaction window is configured:
  `CLAUDE_CODE_AUTO_COMPACT_WINDOW`, the `autoCompactWindow` setting, a server-side experiment
  (read from the feature values Claude Code caches in ~/.claude.json; interactive sessions of
  claude-opus-4-8 only) or a model default (claude-sonnet-4-6 / claude-opus-4-6 on a 200k
  window: 200k; claude-sonnet-5: 967k). Then the threshold is that window less
  min(max output tokens, 20,000) less 13,000, or `CLAUDE_AUTOCOMPACT_PCT_OVERRIDE` percent of
  the former when lower.
- Otherwise it compacts only *reactively*, when the provider refuses a request as longer than
  the model's window: the plain session compacts at the window itself.
- `DISABLE_COMPACT`, `DISABLE_AUTO_COMPACT` or `autoCompactEnabled: false` turn it off.
Server-side client data can also set a window; the proxy cannot see it (docs/accounting.md).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

WINDOW = 200_000
WINDOW_1M = 1_000_000
MAX_OUTPUT_RESERVE = 20_000  # min(the model's max output tokens, this)
BUFFER = 13_000
MIN_CONFIGURED, MAX_CONFIGURED = 100_000, 1_000_000  # Claude Code's bounds on a set window
# Compaction windows Claude Code 2.1.197 sets per model (its `model-default` source).
MODEL_DEFAULT_200K = frozenset({"claude-sonnet-4-6", "claude-opus-4-6"})
MODEL_WINDOWS = {"claude-sonnet-5": 967_000}
EXPERIMENT_MODEL = "claude-opus-4-8"
EXPERIMENT_FLAGS = ("tengu_amber_redwood2", "tengu_amber_redwood3")
_DATE_SUFFIX = re.compile(r"-\d{8}$")


@dataclass(frozen=True)
class UserConfig:
    """What the user's Claude Code configuration says about compaction (read at launch)."""

    auto_compact: bool | None = None  # `autoCompactEnabled`; None = not set (on)
    window: int | None = None  # `autoCompactWindow`
    flags: Mapping[str, Any] = field(default_factory=dict)  # cached feature values
    interactive: bool = True  # not `-p` / `--print`: the experiment applies


def context_window(model: str, betas: str) -> int:
    """The model's window as Claude Code sees it: the request's `anthropic-beta` header and
    model id say whether it is the 1M one."""
    if "context-1m" in betas or model.lower().endswith("[1m]"):
        return WINDOW_1M
    return WINDOW


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def _canonical(model: str) -> str:
    name = model.lower().removesuffix("[1m]")
    return _DATE_SUFFIX.sub("", name)


def _window_words(text: str) -> int | None:
    """The experiment's value as Claude Code reads it: "400k", "1m", 100–1000 (thousands)."""
    t = text.strip().lower()
    try:
        if t.endswith("m"):
            n = float(t[:-1]) * 1e6
        elif t.endswith("k"):
            n = float(t[:-1]) * 1e3
        else:
            n = int(t)
            n = n * 1000 if 100 <= n <= 1000 else n
    except ValueError:
        return None
    if not math.isfinite(n) or not MIN_CONFIGURED <= n <= MAX_CONFIGURED:
        return None
    return round(n)


def _configured_window(
    model: str, window: int, env: Mapping[str, str], cfg: UserConfig
) -> int | None:
    """The compaction window Claude Code would set itself, or None (it compacts reactively)."""
    raw = env.get("CLAUDE_CODE_AUTO_COMPACT_WINDOW", "").strip()
    if raw:
        with contextlib.suppress(ValueError):
            n = int(raw)
            if n > 0:
                return min(window, max(MIN_CONFIGURED, min(n, MAX_CONFIGURED)))
    if cfg.window is not None and MIN_CONFIGURED <= cfg.window <= MAX_CONFIGURED:
        return min(window, cfg.window)
    name = _canonical(model)
    if cfg.interactive and name == EXPERIMENT_MODEL:
        for flag in EXPERIMENT_FLAGS:
            value = cfg.flags.get(flag)
            if isinstance(value, str) and value:
                words = _window_words(value)
                if words is not None:
                    return min(window, words)
                break  # Claude Code reads the first flag set, valid or not
    if window < WINDOW_1M and name in MODEL_DEFAULT_200K:
        return min(window, WINDOW)
    if name in MODEL_WINDOWS:
        return min(window, MODEL_WINDOWS[name])
    return None


def compaction_settings(
    window: int,
    env: Mapping[str, str],
    model: str = "",
    cfg: UserConfig | None = None,
) -> dict[str, Any]:
    """`CompactionSettings` (protocol) for plain Claude Code on this model and window."""
    cfg = cfg or UserConfig()
    enabled = not (_truthy(env.get("DISABLE_COMPACT")) or _truthy(env.get("DISABLE_AUTO_COMPACT")))
    enabled = enabled and cfg.auto_compact is not False
    configured = _configured_window(model, window, env, cfg)
    if configured is None:  # reactive: when the provider refuses a request past the window
        return {"enabled": enabled, "reserve_tokens": 0, "keep_recent_tokens": 0}
    reserve_out = MAX_OUTPUT_RESERVE
    raw_out = env.get("CLAUDE_CODE_MAX_OUTPUT_TOKENS", "").strip()
    if raw_out.isdigit() and int(raw_out) > 0:
        reserve_out = min(int(raw_out), MAX_OUTPUT_RESERVE)
    effective = configured - reserve_out
    threshold = effective - BUFFER
    try:
        pct = float(env.get("CLAUDE_AUTOCOMPACT_PCT_OVERRIDE", "") or "nan")
    except ValueError:
        pct = math.nan
    if 0 < pct <= 100:
        threshold = min(math.floor(effective * pct / 100), threshold)
    return {
        "enabled": enabled,
        "reserve_tokens": max(0, window - max(threshold, 0)),
        "keep_recent_tokens": 0,
    }


# -- the user's configuration ------------------------------------------------------------------


def _load(source: str | Path) -> dict[str, Any]:
    """A settings object from JSON text or a file; {} for anything unreadable."""
    try:
        text = source if isinstance(source, str) and source.lstrip().startswith("{") else None
        data = json.loads(text if text is not None else Path(source).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def settings_sources(
    user_settings: str | None, cwd: Path, config_dir: Path
) -> list[dict[str, Any]]:
    """Claude Code's settings, highest precedence first: managed, `--settings`, the project's
    local and shared files (nearest directory first, up to the repository root), the user's."""
    project: list[Path] = []
    for d in (cwd, *cwd.parents):
        project += [d / ".claude" / "settings.local.json", d / ".claude" / "settings.json"]
        if (d / ".git").exists():
            break
    out = [_load(Path("/etc/claude-code/managed-settings.json"))]
    if user_settings is not None:
        out.append(_load(user_settings))
    out += [_load(p) for p in project if p.is_file()]
    out.append(_load(config_dir / "settings.json"))
    return out


def _first(sources: Iterable[Mapping[str, Any]], key: str, kind: type) -> Any:
    for s in sources:
        value = s.get(key)
        if isinstance(value, kind) and not (kind is int and isinstance(value, bool)):
            return value
    return None


def read_user_config(
    user_settings: str | None,
    args: Iterable[str] = (),
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> UserConfig:
    """The compaction-related configuration a `claude` launch with these arguments reads."""
    env = os.environ if env is None else env
    config_dir = Path(
        env.get("CLAUDE_CONFIG_DIR") or Path(env.get("HOME") or Path.home()) / ".claude"
    )
    sources = settings_sources(user_settings, (cwd or Path.cwd()).resolve(), config_dir)
    # the global config (~/.claude.json, or .claude.json in CLAUDE_CONFIG_DIR): the legacy
    # place of autoCompactEnabled (read only when it differs from the default) and the cache
    # of the server-side feature values
    global_file = (
        Path(env["CLAUDE_CONFIG_DIR"]) / ".claude.json"
        if env.get("CLAUDE_CONFIG_DIR")
        else Path(env.get("HOME") or Path.home()) / ".claude.json"
    )
    legacy = _load(global_file)
    enabled = _first(sources, "autoCompactEnabled", bool)
    if enabled is None and legacy.get("autoCompactEnabled") is False:
        enabled = False
    flags = legacy.get("cachedGrowthBookFeatures")
    argv = list(args)
    return UserConfig(
        auto_compact=enabled,
        window=_first(sources, "autoCompactWindow", int),
        flags=flags if isinstance(flags, dict) else {},
        interactive=not ({"-p", "--print"} & set(argv)),
    )
