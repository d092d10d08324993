"""Plain Claude Code's auto-compaction (2.1.197), as the cost model's plain session uses it."""

from __future__ import annotations

import json
from pathlib import Path

from ctxwrap.agents.claude.auto_compact import (
    UserConfig,
    compaction_settings,
    context_window,
    read_user_config,
)

OPUS = "claude-opus-4-8"


def threshold(
    window: int, env: dict[str, str], model: str = OPUS, cfg: UserConfig | None = None
) -> int:
    return window - int(compaction_settings(window, env, model, cfg)["reserve_tokens"])


def test_the_window_follows_the_1m_beta_or_model_suffix() -> None:
    # Claude Code 2.1.197 with an API key sends the context-1m beta; a subscription login not
    betas = "claude-code-20250219,context-1m-2025-08-07,interleaved-thinking-2025-05-14"
    assert context_window("claude-opus-4-8", betas) == 1_000_000
    assert context_window("claude-sonnet-4-5[1m]", "") == 1_000_000
    assert context_window("claude-opus-4-8", "claude-code-20250219,oauth-2025-04-20") == 200_000


def test_without_a_configured_window_it_compacts_only_when_the_provider_refuses() -> None:
    # 2.1.197 skips its threshold check when the window is the model's own ("auto"): it
    # compacts when a request is refused as too long, i.e. at the window itself
    for window in (200_000, 1_000_000):
        assert threshold(window, {}) == window
        assert threshold(window, {}, "claude-sonnet-4-5-20250929") == window
    # the percentage override belongs to the threshold check: no effect here
    assert threshold(200_000, {"CLAUDE_AUTOCOMPACT_PCT_OVERRIDE": "50"}) == 200_000
    s = compaction_settings(200_000, {}, OPUS)
    assert s["enabled"] is True and s["keep_recent_tokens"] == 0


def test_a_configured_window_compacts_ahead_less_output_reserve_and_buffer() -> None:
    env = {"CLAUDE_CODE_AUTO_COMPACT_WINDOW": "150000"}
    assert threshold(200_000, env) == 150_000 - 20_000 - 13_000
    assert threshold(1_000_000, env) == 150_000 - 33_000
    # Claude Code's bounds: at least 100k, at most the model's window
    assert threshold(200_000, {"CLAUDE_CODE_AUTO_COMPACT_WINDOW": "5000"}) == 67_000
    assert threshold(200_000, {"CLAUDE_CODE_AUTO_COMPACT_WINDOW": "900000"}) == 167_000
    for bad in ("0", "-1", "lots"):
        assert threshold(200_000, {"CLAUDE_CODE_AUTO_COMPACT_WINDOW": bad}) == 200_000
    # a smaller max output reserves less; the percentage override only lowers the threshold
    small = {**env, "CLAUDE_CODE_MAX_OUTPUT_TOKENS": "8000"}
    assert threshold(200_000, small) == 150_000 - 8_000 - 13_000
    assert threshold(200_000, {**env, "CLAUDE_AUTOCOMPACT_PCT_OVERRIDE": "50"}) == 65_000
    assert threshold(200_000, {**env, "CLAUDE_AUTOCOMPACT_PCT_OVERRIDE": "99"}) == 117_000
    for bad in ("0", "-5", "150", "half", ""):
        assert threshold(200_000, {**env, "CLAUDE_AUTOCOMPACT_PCT_OVERRIDE": bad}) == 117_000
    # the setting; the env variable wins over it
    cfg = UserConfig(window=120_000)
    assert threshold(1_000_000, {}, OPUS, cfg) == 87_000
    assert threshold(1_000_000, env, OPUS, cfg) == 117_000
    assert threshold(1_000_000, {}, OPUS, UserConfig(window=50_000)) == 1_000_000  # invalid


def test_model_defaults_and_the_opus_experiment() -> None:
    # claude-sonnet-4-6 / claude-opus-4-6 on the 200k window; claude-sonnet-5 at 967k
    assert threshold(200_000, {}, "claude-sonnet-4-6") == 167_000
    assert threshold(200_000, {}, "claude-opus-4-6-20260101") == 167_000
    assert threshold(1_000_000, {}, "claude-sonnet-4-6") == 1_000_000
    assert threshold(1_000_000, {}, "claude-sonnet-5") == 934_000
    # the server-side experiment, from the feature values Claude Code caches: interactive
    # sessions of claude-opus-4-8 only, in its "400k" / "1m" / thousands forms
    flags = {"tengu_amber_redwood2": "400k"}
    assert threshold(1_000_000, {}, OPUS, UserConfig(flags=flags)) == 367_000
    assert threshold(1_000_000, {}, "claude-opus-4-8[1m]", UserConfig(flags=flags)) == 367_000
    assert threshold(1_000_000, {}, OPUS, UserConfig(flags={"tengu_amber_redwood3": "500"})) == (
        467_000
    )
    assert threshold(1_000_000, {}, OPUS, UserConfig(flags=flags, interactive=False)) == 1_000_000
    assert threshold(1_000_000, {}, "claude-sonnet-5", UserConfig(flags=flags)) == 934_000
    auto = {"tengu_amber_redwood2": "auto", "tengu_amber_redwood3": "400k"}
    assert threshold(1_000_000, {}, OPUS, UserConfig(flags=auto)) == 1_000_000


def test_compaction_turned_off() -> None:
    for var in ("DISABLE_COMPACT", "DISABLE_AUTO_COMPACT"):
        assert compaction_settings(200_000, {var: "1"}, OPUS)["enabled"] is False
        assert compaction_settings(200_000, {var: "0"}, OPUS)["enabled"] is True
    off = UserConfig(auto_compact=False)
    assert compaction_settings(200_000, {}, OPUS, off)["enabled"] is False


def test_the_users_configuration_is_read_as_claude_code_reads_it(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".claude").mkdir(parents=True)
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / ".claude").mkdir()
    work = repo / "sub"
    work.mkdir()
    env = {"HOME": str(home)}

    def write(path: Path, data: object) -> None:
        path.write_text(json.dumps(data))

    assert read_user_config(None, cwd=work, env=env) == UserConfig()
    write(home / ".claude" / "settings.json", {"autoCompactWindow": 300_000})
    write(
        home / ".claude.json", {"autoCompactEnabled": False, "cachedGrowthBookFeatures": {"f": 1}}
    )
    cfg = read_user_config(None, ["-p", "hi"], cwd=work, env=env)
    assert cfg == UserConfig(auto_compact=False, window=300_000, flags={"f": 1}, interactive=False)
    # the project's files over the user's, the local one over the shared one, --settings over
    # both; a settings value over the legacy global one
    write(
        repo / ".claude" / "settings.json",
        {"autoCompactWindow": 400_000, "autoCompactEnabled": True},
    )
    assert read_user_config(None, cwd=work, env=env).window == 400_000
    assert read_user_config(None, cwd=work, env=env).auto_compact is True
    write(repo / ".claude" / "settings.local.json", {"autoCompactWindow": 500_000})
    assert read_user_config(None, cwd=work, env=env).window == 500_000
    flag = tmp_path / "flag.json"
    write(flag, {"autoCompactWindow": 600_000})
    assert read_user_config(str(flag), cwd=work, env=env).window == 600_000
    assert read_user_config('{"autoCompactWindow": 700000}', cwd=work, env=env).window == 700_000
    # garbage anywhere is no setting, never an error
    (repo / ".claude" / "settings.local.json").write_text("{not json")
    write(repo / ".claude" / "settings.json", ["a list"])
    assert read_user_config("{nope", cwd=work, env=env).window == 300_000
    # CLAUDE_CONFIG_DIR holds both the settings and the global file
    conf = tmp_path / "conf"
    conf.mkdir()
    write(conf / "settings.json", {"autoCompactWindow": 250_000})
    write(conf / ".claude.json", {})
    cfg = read_user_config(None, cwd=work, env={**env, "CLAUDE_CONFIG_DIR": str(conf)})
    assert cfg.window == 250_000 and cfg.auto_compact is None
