from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from ctxwrap.config import Settings, load_config, render_config_template
from ctxwrap.errors import ConfigError

UPSTREAM_DEFAULTS = {  # the upstream extension's PI_CTX_* reference: same names, same defaults
    "off": False,
    "bash": True,
    "bash_min_tokens": 2000,
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
        == 2000
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
