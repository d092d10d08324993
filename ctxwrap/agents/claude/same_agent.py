"""Behind the loopback proxy, Claude Code stays the agent it is at Anthropic's endpoint.

Claude Code 2.1.197 switches some of its behaviour off when ANTHROPIC_BASE_URL is not
Anthropic's host (docs/research/claude-code-base-url.md). Three of them cost the user; each is
restored here by a documented switch, or, where none exists, said at launch and in `doctor`:

- side requests (titles, summaries: its `qw()`): the main model instead of Haiku for every
  login but an `sk-ant-api…` key → ``ANTHROPIC_SMALL_FAST_MODEL`` = the model plain Claude
  Code picks (its catalog's `haiku` alias, first-party id, through the user's
  ``modelOverrides``); that variable is read by `qw()` only, so nothing else changes;
- an explicitly named native-1M model (`--model opus`, `claude-opus-4-8`, ANTHROPIC_MODEL, the
  settings' `model`) gets a 200k window → the same model with the `[1m]` suffix, the form
  Claude Code itself gives its default model;
- organization policy limits and remote managed settings are neither fetched nor read from
  their cache (both at `api.anthropic.com`, whatever the base URL, and gated on the base URL
  being Anthropic's): no supported switch restores them. Where plain Claude Code would fetch
  them and its last fetch found restrictions, `ctxwrap claude` runs plain Claude Code; where
  nothing is known, it says so at launch.

The facts come from the pinned binary's model catalog (`CATALOG`, checked against the binary by
tests/unit/test_claude_launch_same_agent.py); another version's binary is read once and cached.
"""

from __future__ import annotations

import contextlib
import json
import mmap
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SIDE_MODEL_VARS = ("ANTHROPIC_SMALL_FAST_MODEL", "ANTHROPIC_DEFAULT_HAIKU_MODEL")
ONE_M = "[1m]"


@dataclass(frozen=True)
class Catalog:
    """What a Claude Code version's model catalog says, for first-party use."""

    side_model: str  # the `haiku` alias's first-party id: qw() at Anthropic's endpoint
    aliases: dict[str, str]  # alias → catalog id (first-party)
    native_1m: frozenset[str]  # catalog ids (= first-party ids) with a native 1M window


CATALOG = {
    "2.1.197": Catalog(
        side_model="claude-haiku-4-5-20251001",
        aliases={
            "opus": "claude-opus-4-8",
            "sonnet": "claude-sonnet-5",
            "haiku": "claude-haiku-4-5",
            "fable": "claude-fable-5",
        },
        native_1m=frozenset(
            {"claude-sonnet-5", "claude-opus-4-7", "claude-opus-4-8", "claude-fable-5"}
        ),
    )
}


def catalog_from_binary(data: bytes | mmap.mmap) -> Catalog | None:
    """The catalog as the binary embeds it (`aliases:{…}` after `models:[…]`)."""
    end = data.find(b"latest_per_family:{")
    start = data.rfind(b"aliases:{", 0, end) if end >= 0 else -1
    models_at = data.rfind(b"models:[", 0, start) if start >= 0 else -1
    if models_at < 0 or end - start > 4000 or start - models_at > 200_000:
        return None
    aliases_text = bytes(data[start:end]).decode("utf-8", "replace")
    models_text = bytes(data[models_at:start]).decode("utf-8", "replace")
    aliases = dict(re.findall(r'(\w+):\{default:"([\w.-]+)"', aliases_text))
    entries = re.split(r'(?=\{id:")', models_text)
    ids: dict[str, str] = {}
    native: set[str] = set()
    for entry in entries:
        m = re.match(r'\{id:"([\w.-]+)"', entry)
        first = re.search(r'first_party:"([\w.-]+)"', entry)
        if not m or not first:
            continue
        ids[m.group(1)] = first.group(1)
        if "native_1m:!0" in entry:
            native.add(m.group(1))
    haiku = aliases.get("haiku")
    if haiku is None or haiku not in ids:
        return None
    return Catalog(ids[haiku], aliases, frozenset(native))


def binary_of(launcher_path: str) -> Path | None:
    """The native binary behind `claude`: itself, or the one its wrapper script execs."""
    with contextlib.suppress(OSError):
        path = Path(os.path.realpath(launcher_path))
        if path.stat().st_size > 10 << 20:
            return path
        head = path.read_bytes()[:4096].decode("utf-8", "replace")
        for quoted in re.findall(r'"(/[^"\n]+)"', head):
            target = Path(quoted)
            if target.is_file() and target.stat().st_size > 10 << 20:
                return target
    return None


def version_beside(binary: Path) -> str | None:
    """The version without running the binary: its npm package's package.json, or the
    native installer's file name (…/versions/2.1.197)."""
    if re.fullmatch(r"\d+\.\d+\.\d+", binary.name):
        return binary.name
    with contextlib.suppress(OSError, ValueError):
        doc = json.loads((binary.parent.parent / "package.json").read_text())
        if isinstance(doc, dict) and doc.get("name") == "@anthropic-ai/claude-code":
            version = doc.get("version")
            return version if isinstance(version, str) else None
    return None


def catalog_for(version: str | None, launcher_path: str, cache_dir: Path | None) -> Catalog | None:
    """The pinned table for a known version, else the binary's own catalog (cached per file).
    `version` None: found beside the binary where it can be."""
    if version in CATALOG:
        return CATALOG[version]
    binary = binary_of(launcher_path)
    if binary is None:
        return None
    if version is None and version_beside(binary) in CATALOG:
        return CATALOG[str(version_beside(binary))]
    st = binary.stat()
    key = f"{binary}:{st.st_size}:{st.st_mtime_ns}"
    cache = cache_dir / "claude-catalog.json" if cache_dir is not None else None
    if cache is not None:
        with contextlib.suppress(OSError, ValueError, TypeError, KeyError):
            saved = json.loads(cache.read_text())
            if saved["key"] == key:
                c = saved["catalog"]
                return Catalog(c["side_model"], dict(c["aliases"]), frozenset(c["native_1m"]))
    try:
        with binary.open("rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as data:
            found = catalog_from_binary(data)
    except (OSError, ValueError):
        return None
    if found is not None and cache is not None:
        doc = {
            "key": key,
            "catalog": {
                "side_model": found.side_model,
                "aliases": found.aliases,
                "native_1m": sorted(found.native_1m),
            },
        }
        with contextlib.suppress(OSError):
            cache.write_text(json.dumps(doc))
    return found


def _layer_env(layers: list[Any]) -> dict[str, str]:
    out: dict[str, str] = {}
    for layer in layers:
        env = layer.get("env") if isinstance(layer, dict) else None
        if isinstance(env, dict):
            out.update({k: str(v) for k, v in env.items() if isinstance(k, str)})
    return out


def _model_overrides(layers: list[Any]) -> dict[str, str]:
    out: dict[str, str] = {}
    for layer in layers:
        over = layer.get("modelOverrides") if isinstance(layer, dict) else None
        if isinstance(over, dict):
            out.update({k: v for k, v in over.items() if isinstance(v, str) and v})
    return out


def side_model_env(env: dict[str, str], layers: list[Any], catalog: Catalog) -> dict[str, str]:
    """ANTHROPIC_SMALL_FAST_MODEL = plain Claude Code's side model, unless the user chose one
    (either variable, in the environment or a settings layer's `env`: then Claude Code picks
    exactly as at Anthropic's endpoint already)."""
    if any(env.get(v) or _layer_env(layers).get(v) for v in SIDE_MODEL_VARS):
        return {}
    model = _model_overrides(layers).get(catalog.side_model, catalog.side_model)
    return {"ANTHROPIC_SMALL_FAST_MODEL": model}


def _native_1m(name: str, catalog: Catalog) -> bool:
    if ONE_M in name.lower():
        return False
    key = name.strip().lower()
    return catalog.aliases.get(key, key) in catalog.native_1m


def one_m_model(
    args: list[str], env: dict[str, str], layers: list[Any], catalog: Catalog
) -> tuple[list[str], dict[str, str]]:
    """The explicitly named model with `[1m]` where it has a native 1M window (Claude Code
    grants it only at Anthropic's endpoint, or to a name with the suffix): the arguments and
    the variables to pass. Claude Code's order: --model, ANTHROPIC_MODEL, the settings."""
    if (env.get("CLAUDE_CODE_DISABLE_1M_CONTEXT") or "").strip() not in ("", "0", "false"):
        return args, {}
    out = list(args)
    for i, a in enumerate(out):
        if a == "--":
            break
        if a == "--model" and i + 1 < len(out):
            if _native_1m(out[i + 1], catalog):
                out[i + 1] += ONE_M
            return out, {}
        if a.startswith("--model="):
            if _native_1m(a.split("=", 1)[1], catalog):
                out[i] = a + ONE_M
            return out, {}
    named = env.get("ANTHROPIC_MODEL")
    if named:
        return out, ({"ANTHROPIC_MODEL": named + ONE_M} if _native_1m(named, catalog) else {})
    models = [layer["model"] for layer in layers if isinstance(layer, dict) and layer.get("model")]
    if models and isinstance(models[-1], str) and _native_1m(models[-1], catalog):
        return out, {"ANTHROPIC_MODEL": models[-1] + ONE_M}
    return out, {}


# -- organization policy: fetched only at Anthropic's endpoint, no switch restores it ---------


@dataclass(frozen=True)
class OrgPolicy:
    """What plain Claude Code would fetch, and what its last fetch found."""

    eligible: bool  # plain Claude Code would fetch policy limits / remote managed settings
    restricted: bool  # its cached answer holds restrictions or settings
    known: bool  # a cached answer exists

    def launch_line(self) -> str | None:
        if not self.eligible:
            return None
        if self.restricted:
            return (
                "ctxwrap: your organization's Claude Code policy (policy limits or managed "
                "settings from Anthropic) applies only when Claude Code talks to "
                "api.anthropic.com itself; running plain claude, without ctxwrap's savings "
                "(`ctxwrap doctor` explains)\n"
            )
        if not self.known:
            return (
                "ctxwrap: note: behind ctxwrap's proxy Claude Code does not fetch your "
                "organization's policy limits or managed settings, and none are known from "
                "an earlier plain `claude` run; an organization's restrictions would not apply "
                "here (`ctxwrap doctor` explains)\n"
            )
        return None


def _nonempty(value: Any) -> bool:
    return isinstance(value, (dict, list)) and bool(value)


def org_policy(env: dict[str, str], config_dir: Path) -> OrgPolicy:
    """Plain Claude Code 2.1.197 fetches them (its `$Bt`, `ZJ`) for an API key (not one from
    apiKeyHelper), and for an OAuth login of a Team or Enterprise plan or of no known plan;
    it caches the answers in policy-limits.json and remote-settings.json of its config dir."""
    eligible = bool(env.get("ANTHROPIC_API_KEY"))
    for state_file in (config_dir.parent / ".claude.json", config_dir / ".claude.json"):
        with contextlib.suppress(OSError, ValueError):
            state = json.loads(state_file.read_text())
            eligible = eligible or bool(isinstance(state, dict) and state.get("primaryApiKey"))
    if env.get("CLAUDE_CODE_OAUTH_TOKEN"):
        eligible = True  # a token from the environment has no known plan
    with contextlib.suppress(OSError, ValueError):
        creds = json.loads((config_dir / ".credentials.json").read_text())
        oauth = creds.get("claudeAiOauth") if isinstance(creds, dict) else None
        if isinstance(oauth, dict) and oauth.get("accessToken"):
            plan = oauth.get("subscriptionType")
            eligible = eligible or plan in (None, "team", "enterprise")
    restricted = known = False
    with contextlib.suppress(OSError, ValueError):
        limits = json.loads((config_dir / "policy-limits.json").read_text())
        known = True
        if isinstance(limits, dict):
            rules = limits.get("restrictions")
            denied = isinstance(rules, dict) and any(
                isinstance(r, dict) and r.get("allowed") is False for r in rules.values()
            )
            restricted = denied or _nonempty(limits.get("compliance_taints"))
    with contextlib.suppress(OSError, ValueError):
        remote = json.loads((config_dir / "remote-settings.json").read_text())
        known = True
        restricted = restricted or _nonempty(remote)
    return OrgPolicy(eligible, restricted, known)
