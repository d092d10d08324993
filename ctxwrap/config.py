"""Effective configuration: PI_CTX_* environment variables over config.toml over defaults.

The names and defaults of the upstream extension's PI_CTX_* reference are kept as they are, so
a user's existing exports keep working; ctxwrap's own settings use the same prefix. In the
file a setting is written without the prefix, in lower case: `bash_min_tokens = 2000`.
"""

from __future__ import annotations

import difflib
import os
import shutil
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from ctxwrap import paths
from ctxwrap.errors import ConfigError, ConfigExists

ENV_PREFIX = "PI_CTX_"


# aux_backend's value for "the agent's adapter runs aux calls" (pi's providers, the proxies'
# upstream): named after pi, where it began; users' config files keep that name
AUX_BY_AGENT = "pi"


# what pydantic reads as a boolean, and "auto" (a switch whose default depends on the agent)
_SWITCH_WORDS = frozenset(
    {"auto", "true", "false", "1", "0", "yes", "no", "on", "off", "t", "f", "y", "n"}
)


class Settings(BaseSettings):
    """Every setting, with its default and a one-line meaning (shown by `config show`)."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="forbid", frozen=True)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # load_config() merges env over file itself so it can say where each value came from
        return (init_settings,)

    # -- upstream reference (same names and defaults) --
    off: bool = Field(False, description="Master switch: 1 runs plain pi.")
    bash: bool = Field(True, description="Digest large bash output.")
    bash_min_tokens: int = Field(
        500,
        ge=0,
        description="Digest bash output above this many tokens (chars/4). 500: real sessions' bash output is small (median 215 chars); from 500 tokens the digest pays and is rarely needed again (docs/accounting.md).",
    )
    bash_max_summary_tokens: int = Field(1024, ge=16, description="Output cap of the digest.")
    bash_aux_min_chars: int = Field(
        2000,
        ge=0,
        description="Ask the aux model to condense the extractive digest only when it is at least this long (a short extract is already what the model needs; condensing it costs more than it saves).",
    )
    bash_fallback_bytes: int = Field(
        3000, ge=256, description="Tail the bridge keeps itself when the daemon is unreachable."
    )
    amnesia: bool = Field(
        True, description="Tag read/grep/find/ls results RETAIN/DROP and prune drops from the tail."
    )
    amnesia_min_tokens: int = Field(
        250, ge=0, description="Tag only results at least this large (tokens)."
    )
    amnesia_max_chars: int = Field(
        6000, ge=200, description="How much of a result the tagger sees."
    )
    tag_max_tokens: int = Field(24, ge=4, description="Tagger output cap.")
    tag_within_savings: bool = Field(
        True,
        description="The tagger spends only what ctxwrap has already saved in the session: a tag call goes out while the session is ahead of plain by at least the call's cost, so a session in which nothing else saves never pays for tags (invariant 10; docs/accounting.md, the tagger's budget).",
    )
    rewrite_within_savings: bool = Field(
        True,
        description="A cache rewrite while the cache is warm (masking a result the model has seen, leaving old thinking out) goes out when the session's savings so far cover it, or as a bounded bet: it pays back within 30 requests and puts at risk at most a tenth of what plain has cost so far, so a session that ends soon after a rewrite does not cost more than plain (invariant 10; docs/accounting.md, what a rewrite may risk).",
    )
    dedup: bool = Field(
        True,
        description="A file read again with identical content points at the earlier result instead of repeating it.",
    )
    tag_view_chars: int = Field(
        1500,
        ge=200,
        description="What the tagger sees of a result: head, outline and tail within this many chars.",
    )
    lazy: bool = Field(True, description="Lazy tool loading via find_capability.")
    lazy_skills: bool = Field(True, description="Strip the skills catalog from the system prompt.")
    skill_max_chars: int = Field(
        8000, ge=200, description="Cap on SKILL.md content returned by find_capability."
    )
    aux_model: str | None = Field(
        None, description="Aux model as provider/id (default: the active model)."
    )
    aux_timeout_ms: int = Field(20000, ge=100, description="Timeout of one aux model call.")
    stats_widget: bool = Field(
        True,
        description="Show the savings status line in pi, and in Claude Code under `ctxwrap claude` (unless it has a statusLine of its own).",
    )
    log_file: Path | None = Field(
        None, description="JSONL event log (default: state dir/events.jsonl)."
    )
    # -- writes (upstream mechanism 4) --
    write: bool | Literal["auto"] = Field(
        "auto",
        description="Strip large write bodies and keep a one-line fact: true, false, or auto (on for an agent whose real sessions need at most one stripped body in ten again: none today, so off under Claude Code, pi and Codex, where the agent edits what it just wrote in more than one write of two; docs/accounting.md).",
    )
    write_min_bytes: int = Field(
        400, ge=0, description="Strip write content of at least this many bytes."
    )

    @field_validator("write", mode="before")
    @classmethod
    def _write_switch(cls, v: object) -> object:
        # one clear message for the three values (the union's own names only the boolean)
        if isinstance(v, str) and v.strip().lower() not in _SWITCH_WORDS:
            raise ValueError("expected true, false or auto")
        return v.strip().lower() if isinstance(v, str) else v

    edit_strip: bool = Field(
        True,
        description="Leave an applied edit's replaced text (old_string / oldText) out of later requests; its new text stays (docs/accounting.md, edit strip).",
    )
    edit_min_chars: int = Field(
        300,
        ge=200,
        description="Strip an edit's replaced text of at least this many chars (the marker is about 110).",
    )
    write_fact_max_tokens: int = Field(
        60, ge=8, description="Cap of the fact the aux model writes."
    )
    write_max_content_chars: int = Field(
        6000, ge=200, description="How much of the file the fact writer sees."
    )
    # -- ctxwrap's own --
    amnesia_mode: Literal["tombstone", "silent"] = Field(
        "tombstone",
        description="tombstone leaves a one-line note; silent removes a dropped round only where that cannot repeat the previous request (with pi: tombstones, see docs/architecture.md).",
    )
    aux_backend: Literal["pi", "http", "none"] = Field(
        "pi", description="Who runs aux calls: pi's own provider code, an HTTP endpoint, or nobody."
    )
    aux_base_url: str | None = Field(
        None, description="http backend: base URL (e.g. http://127.0.0.1:11434/v1)."
    )
    aux_api: Literal["openai", "anthropic"] = Field(
        "openai", description="http backend: chat-completions or Messages API."
    )
    aux_api_key_env: str | None = Field(
        None, description="http backend: name of the env var holding the key."
    )
    bridge_timeout_ms: int = Field(
        1500, ge=50, description="Deadline of one bridge→daemon decision call."
    )
    tag_wait_ms: int = Field(
        400, ge=0, description="How long the context step waits for pending tags before RETAIN."
    )
    mask: bool = Field(
        True,
        description="Mask older tool results (superseded, late DROP, earlier tasks) when the prompt cache is cold anyway.",
    )
    cache_ttl_s: float = Field(
        300.0,
        ge=0,
        description="Provider prompt-cache lifetime: a gap longer than this makes the next request cold (the cost model prices it as a write; masking may rewrite history then). A request that asks the provider for a longer one (Claude Code's 1-hour cache, pi's PI_CACHE_RETENTION=long) is judged and priced by that.",
    )
    mask_keep_rounds: int = Field(
        2, ge=1, description="The current task's last rounds are never masked."
    )
    mask_min_chars: int = Field(
        500,
        ge=0,
        description="Results smaller than this are never masked (measured on real sessions: docs/accounting.md).",
    )
    mask_warm: bool = Field(
        True,
        description="Also mask while the cache is warm when the cost model says the rewrite pays back over the calls expected to follow (measured on real sessions: docs/accounting.md).",
    )
    compact_in_step: bool = Field(
        True,
        description="Claude Code and Codex: near the agent's own auto-compact threshold, while ctxwrap's smaller request is under it, the proxy reports in the response's usage the size the agent's unedited request would have had, so the agent compacts where it would have without ctxwrap instead of carrying what plain's compaction dropped (docs/accounting.md, compaction timing).",
    )
    clear_old_thinking: bool = Field(
        True,
        description="Claude Code: where it asks the API to keep every earlier turn's thinking (clear_thinking_20251015, keep all), leave the thinking of turns before a clearing point out of later requests by that same edit, moving the point only where the cache is cold anyway or the rewrite pays back; the agent's messages are never touched (docs/accounting.md, old thinking).",
    )
    compact_like_plain: bool = Field(
        True,
        description="pi: when plain pi would have compacted by now but ctxwrap's smaller context has not reached pi's threshold, ask pi to compact when the run ends (interactive sessions) or before the next print run of the session (`pi -p --continue`), so a session compacts about when it would without ctxwrap instead of carrying a larger context than plain pi (docs/accounting.md, compaction timing).",
    )
    # -- masking policies (issue 21; docs/accounting.md "Policies on real sessions") --
    mask_earlier_tasks: bool = Field(
        False,
        description="Mask results of earlier user prompts (off: on real sessions the next prompt mostly continues the same work, and those results were needed again).",
    )
    mask_stale_reads: bool = Field(
        False,
        description="Mask a read of a file written or edited since, not only one read again (off: the agent copies from the old read).",
    )
    mask_older_rounds: int = Field(
        1,
        ge=0,
        description="Mask a result other than a read (bash output, a search) once it is this many rounds old (0 = off).",
    )
    mask_read_idle_rounds: int = Field(
        10,
        ge=0,
        description="Mask a read once no call has read, written or edited its file for this many rounds (0 = off).",
    )
    mask_reference_reads: int = Field(
        5,
        ge=0,
        description="A file read this many times is a reference the agent keeps coming back to: its reads are masked only once superseded, never for being idle (0 = off; measured on real sessions: docs/accounting.md).",
    )
    recall_max_tokens: int = Field(
        2000, ge=100, description="Cap of one recall answer (`ctxwrap recall`, pi's ctx_recall)."
    )
    raw_store_max_mb: int = Field(512, ge=1, description="Size cap of the raw-output store.")
    raw_retention_days: int = Field(
        14,
        ge=0,
        description="Raw outputs older than this are deleted (0 = keep until the size cap).",
    )
    idle_exit_s: int = Field(
        0, ge=0, description="Daemon exits after this long without live sessions (0 = never)."
    )
    event_log_max_mb: int = Field(20, ge=1, description="Rotate the event log past this size.")
    # -- accounting (docs/accounting.md); cache_ttl_s above serves the cost model too --
    prices: str | None = Field(
        None,
        description="Price overrides, USD per million tokens: 'glob=input,output,cache_read,cache_write[,explicit|automatic|none]; ...'.",
    )
    # -- lifecycle of the wrappers (ctxwrap/launch/exit_line.py) --
    exit_line: bool = Field(
        True,
        description="On exit, `ctxwrap pi`, `ctxwrap claude` and `ctxwrap codex` print one line on stderr: what the session saved, how to resume it through ctxwrap, its stats command (`--ctxwrap-quiet` for one run).",
    )


@dataclass(frozen=True)
class Origin:
    source: Literal["default", "env", "file"]
    detail: str  # env var name or file path


@dataclass(frozen=True)
class LoadedConfig:
    settings: Settings
    origins: dict[str, Origin]
    file: Path


def _read_file(path: Path) -> dict[str, Any]:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from exc
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(
            f"{path}: not valid TOML: {exc}",
            hint=f"fix it there, or run `ctxwrap config init --force` for a fresh file "
            f"(your file is kept as {next_backup_path(path)})",
        ) from exc
    unknown = sorted(k for k in data if k not in Settings.model_fields)
    if unknown:
        # The hint must not send the user to `config show`: it reads this same file and fails.
        close = difflib.get_close_matches(unknown[0], list(Settings.model_fields), n=1)
        guess = f"did you mean {close[0]!r}? " if close else ""
        raise ConfigError(
            f"{path}: unknown setting {unknown[0]!r}",
            hint=f"{guess}rename or remove it in {path}; `ctxwrap help --man` lists every "
            "setting (ENVIRONMENT: PI_CTX_<NAME> is <name> in the file)",
        ) from None
    return data


def next_backup_path(path: Path) -> Path:
    """Where `config init --force` keeps the file it replaces: PATH.bak, else PATH.bak.N."""
    candidate = path.with_name(path.name + ".bak")
    n = 1
    while candidate.exists() or candidate.is_symlink():
        candidate = path.with_name(f"{path.name}.bak.{n}")
        n += 1
    return candidate


def write_config_template(path: Path, *, force: bool) -> Path | None:
    """Write the commented template to ``path``; return where the replaced file was kept.

    An existing file is never lost: without ``force`` it is left alone (ConfigExists), with it
    a copy is kept at next_backup_path() before the template is written.
    """
    backup: Path | None = None
    if path.exists():
        if not force:
            raise ConfigExists(
                f"{path} already exists",
                hint="`ctxwrap config init --force` replaces it and keeps your file as "
                f"{next_backup_path(path)}",
            )
        backup = next_backup_path(path)
        try:
            with path.open("rb") as src, backup.open("xb") as dst:
                shutil.copyfileobj(src, dst)
            shutil.copymode(path, backup)
        except OSError as exc:
            raise ConfigError(
                f"cannot keep a backup of {path} at {backup}: {exc.strerror}; nothing was changed"
            ) from exc
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_config_template())
    return backup


def load_config(path: Path | None = None, environ: dict[str, str] | None = None) -> LoadedConfig:
    """Load the effective config; a bad value raises ConfigError naming key, value and source."""
    path = path or paths.config_file()
    env = os.environ if environ is None else environ
    file_values = _read_file(path)
    env_values: dict[str, str] = {}
    origins: dict[str, Origin] = {}
    for name in Settings.model_fields:
        var = ENV_PREFIX + name.upper()
        if var in env and env[var] != "":
            env_values[name] = env[var]
            origins[name] = Origin("env", var)
        elif name in file_values:
            origins[name] = Origin("file", str(path))
        else:
            origins[name] = Origin("default", "")
    merged: dict[str, Any] = {**file_values, **env_values}
    try:
        settings = Settings(**merged)
    except ValidationError as exc:
        err = exc.errors()[0]
        key = str(err["loc"][0]) if err["loc"] else "?"
        origin = origins.get(key, Origin("default", ""))
        where = origin.detail if origin.source != "default" else "defaults"
        value = merged.get(key)
        raise ConfigError(
            f"invalid value for {key} = {value!r} (from {where}): {err['msg']}",
            hint=f"fix {where}, or unset it to use the default",
        ) from exc
    return LoadedConfig(settings=settings, origins=origins, file=path)


def render_config_template() -> str:
    """A commented config.toml listing every setting at its default."""
    lines = [
        "# ctxwrap configuration. Environment variables PI_CTX_<NAME> override these values.",
        "# Uncomment a line to change it. `ctxwrap config show` prints the effective values.",
        "",
    ]
    for name, field in Settings.model_fields.items():
        default = field.default
        lines.append(f"# {field.description}")
        if default is None:
            lines.append(f'# {name} = ""')
        elif isinstance(default, bool):
            lines.append(f"# {name} = {'true' if default else 'false'}")
        elif isinstance(default, str):
            lines.append(f'# {name} = "{default}"')
        else:
            lines.append(f"# {name} = {default}")
        lines.append("")
    return "\n".join(lines)


def bridge_view(settings: Settings) -> dict[str, Any]:
    """The subset the bridge needs to act on its own (fail-open thresholds, switches)."""
    keys = [
        "off",
        "bash",
        "bash_min_tokens",
        "bash_fallback_bytes",
        "amnesia",
        "amnesia_min_tokens",
        "amnesia_mode",
        "lazy",
        "lazy_skills",
        "skill_max_chars",
        "aux_backend",
        "aux_model",
        "aux_timeout_ms",
        "stats_widget",
        "write",
        "write_min_bytes",
        "bridge_timeout_ms",
        "tag_wait_ms",
        "tag_max_tokens",
        "mask",
        "mask_warm",
        "mask_min_chars",
        "cache_ttl_s",
        "compact_like_plain",
        "compact_in_step",
        "clear_old_thinking",
        "rewrite_within_savings",
    ]
    return {k: getattr(settings, k) for k in keys}
