from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from ctxwrap.config import Settings, load_config, render_config_template
from ctxwrap.errors import ConfigError

UPSTREAM_DEFAULTS = {  # the upstream extension's PI_CTX_* reference: same names, same defaults
    "off": False,
    "bash": True,
    "bash_max_summary_tokens": 1024,
    "bash_fallback_bytes": 3000,
    "amnesia": True,
    "amnesia_min_tokens": 250,
    "amnesia_max_chars": 6000,
    "tag_max_tokens": 24,
    "lazy": True,
    "lazy_skills": True,
    "skill_max_chars": 8000,
    "aux_model": None,
    "aux_timeout_ms": 20000,
    "stats_widget": True,
    "write_min_bytes": 400,
}


def test_defaults_match_the_upstream_reference(tmp_path: Path) -> None:
    s = load_config(tmp_path / "absent.toml", environ={}).settings
    for key, value in UPSTREAM_DEFAULTS.items():
        assert getattr(s, key) == value, key
    # the one upstream default changed on purpose: real sessions' bash output is small (issue
    # 21, docs/accounting.md "Policies on real sessions"); upstream digests from 2000
    assert s.bash_min_tokens == 500


def test_env_wins_over_file_and_provenance_is_reported(tmp_path: Path) -> None:
    f = tmp_path / "config.toml"
    f.write_text('bash_min_tokens = 500\namnesia_mode = "silent"\n')
    loaded = load_config(f, environ={"PI_CTX_BASH_MIN_TOKENS": "42"})
    assert loaded.settings.bash_min_tokens == 42
    assert loaded.origins["bash_min_tokens"].source == "env"
    assert loaded.settings.amnesia_mode == "silent"
    assert loaded.origins["amnesia_mode"].source == "file"
    assert loaded.origins["amnesia_mode"].detail == str(f)
    assert loaded.origins["lazy"].source == "default"


def test_empty_env_value_counts_as_unset(tmp_path: Path) -> None:
    assert (
        load_config(
            tmp_path / "x.toml", environ={"PI_CTX_BASH_MIN_TOKENS": ""}
        ).settings.bash_min_tokens
        == Settings.model_fields["bash_min_tokens"].default
    )


@pytest.mark.parametrize(
    ("env", "text", "needle"),
    [
        (
            {"PI_CTX_BASH_MIN_TOKENS": "banana"},
            "",
            "bash_min_tokens = 'banana' (from PI_CTX_BASH_MIN_TOKENS)",
        ),
        ({}, 'amnesia_mode = "loud"\n', "amnesia_mode = 'loud' (from {file})"),
        ({}, "bash_min_tokens = -5\n", "bash_min_tokens = -5 (from {file})"),
        ({}, "no_such_key = 1\n", "unknown setting 'no_such_key'"),
        ({}, "bash_min_tokens = \n", "not valid TOML"),
    ],
)
def test_bad_values_name_key_value_and_source(
    tmp_path: Path, env: dict[str, str], text: str, needle: str
) -> None:
    f = tmp_path / "config.toml"
    f.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_config(f, environ=env)
    assert needle.format(file=f) in err.value.message
    assert err.value.exit_code == 78


def test_template_lists_every_setting_and_parses_when_uncommented(tmp_path: Path) -> None:
    text = render_config_template()
    for name in Settings.model_fields:
        assert f"# {name} = " in text
    setting = re.compile(r"^# ([a-z_]+) = (?!\"\"$)")
    uncommented = "\n".join(line[2:] for line in text.splitlines() if setting.match(line))
    f = tmp_path / "c.toml"
    f.write_text(uncommented)
    assert (
        load_config(f, environ={}).settings
        == load_config(tmp_path / "none.toml", environ={}).settings
    )
    assert tomllib.loads(uncommented)


# -- hints that must not hurt: each one is followed as a user would, through the real CLI --------


def _cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PI_CTX_", "XDG_"))}
    env["XDG_CONFIG_HOME"] = str(tmp_path / "cfg")
    return subprocess.run(
        [sys.executable, "-m", "ctxwrap", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


def _config_file(tmp_path: Path, text: str) -> Path:
    f = tmp_path / "cfg" / "ctxwrap" / "config.toml"
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_text(text)
    return f


def test_invalid_toml_hint_keeps_a_backup_where_it_says(tmp_path: Path) -> None:
    mine = "# my tuned settings\nbash_min_tokens = \nwrite_min_bytes = 900\n"
    f = _config_file(tmp_path, mine)
    p = _cli(tmp_path, "config", "show")
    assert p.returncode == 78 and "not valid TOML" in p.stderr
    hint = next(line for line in p.stderr.splitlines() if line.startswith("hint:"))
    assert "config init --force" in hint and f"{f}.bak" in hint
    p = _cli(tmp_path, "config", "init", "--force")  # the hint, followed
    assert p.returncode == 0, p.stderr
    assert f"kept as {f}.bak" in p.stdout
    assert Path(f"{f}.bak").read_text() == mine  # the user's file survives byte for byte
    assert _cli(tmp_path, "config", "show").returncode == 0
    # A second --force keeps the first backup and names a new one.
    p = _cli(tmp_path, "config", "init", "--force")
    assert p.returncode == 0 and f"kept as {f}.bak.1" in p.stdout
    assert Path(f"{f}.bak").read_text() == mine


def test_unknown_key_hint_points_at_something_that_works_on_the_same_file(
    tmp_path: Path,
) -> None:
    _config_file(tmp_path, "bash_min_token = 500\n")
    p = _cli(tmp_path, "config", "show")
    assert p.returncode == 78 and "unknown setting 'bash_min_token'" in p.stderr
    hint = next(line for line in p.stderr.splitlines() if line.startswith("hint:"))
    assert "did you mean 'bash_min_tokens'" in hint
    assert "config show" not in hint  # it fails on this very file
    cmd = re.search(r"`ctxwrap ([^`]+)`", hint)
    assert cmd, hint
    followed = _cli(tmp_path, *cmd.group(1).split())
    assert followed.returncode == 0, followed.stderr
    assert "PI_CTX_BASH_MIN_TOKENS" in followed.stdout


def test_config_init_on_an_existing_valid_file_is_not_a_config_error(tmp_path: Path) -> None:
    f = _config_file(tmp_path, "bash_min_tokens = 500\n")
    p = _cli(tmp_path, "config", "init")
    assert p.returncode == 73, p.stderr  # EX_CANTCREAT, not 78 "configuration invalid"
    assert f"{f} already exists" in p.stderr
    assert "--force" in p.stderr and f"{f}.bak" in p.stderr
    assert f.read_text() == "bash_min_tokens = 500\n"
    assert not Path(f"{f}.bak").exists()


def test_every_setting_an_adapter_reads_reaches_it_in_the_bridge_view() -> None:
    """The proxies see only `bridge_view`: a key they read (`cfg.get`) that the view leaves
    out keeps its default whatever the user set, as `rewrite_within_savings` did for the
    Claude Code proxy's old-thinking clearing."""
    from ctxwrap.config import bridge_view

    root = Path(__file__).parents[2] / "ctxwrap"
    read: set[str] = set()
    for path in (root / "agents").rglob("*.py"):
        read |= set(re.findall(r"\bcfg\.get\(\s*\"([a-z_]+)\"", path.read_text()))
    assert "rewrite_within_savings" in read  # the scan sees what it is for
    settings = Settings(rewrite_within_savings=False)
    view = bridge_view(settings)
    assert read <= set(view), sorted(read - set(view))
    assert view["rewrite_within_savings"] is False
