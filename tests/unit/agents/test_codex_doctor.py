"""`ctxwrap doctor`'s Codex lines: found or not, the provider `ctxwrap codex` can redirect."""

from __future__ import annotations

from pathlib import Path

import pytest

from ctxwrap.agents.codex.doctor_check import check_codex, check_provider
from ctxwrap.testing.codex_home import find_codex


def test_a_missing_codex_is_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CTXWRAP_CODEX", "/nonexistent/codex")
    [missing] = check_codex()
    assert (missing.name, missing.level) == ("codex", "warn")
    assert "ctxwrap codex" in missing.summary and missing.fix


def test_the_installed_codex_passes(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    real = find_codex()
    if real is None:
        pytest.skip("codex not installed")
    monkeypatch.setenv("CTXWRAP_CODEX", str(real))
    monkeypatch.setenv("CODEX_HOME", str(tmp_path))  # no config: the built-in openai provider
    checks = check_codex()
    assert [(c.name, c.level) for c in checks] == [
        ("codex", "ok"),
        ("codex config", "ok"),
        ("codex proxy", "ok"),
    ]
    assert "0.171" in checks[0].summary


@pytest.mark.parametrize(
    ("config", "level", "words"),
    [
        ("", "ok", "-c openai_base_url"),
        ('openai_base_url = "http://127.0.0.1:8/v1"\n', "ok", "http://127.0.0.1:8/v1"),
        (
            'model_provider = "mine"\n[model_providers.mine]\nbase_url = "http://h/v1"\n'
            'wire_api = "responses"\n',
            "ok",
            "-c model_providers.mine.base_url",
        ),
        (
            'model_provider = "mine"\n[model_providers.mine]\nbase_url = "http://h/v1"\n'
            'wire_api = "chat"\n',
            "warn",
            "does not speak the Responses API",
        ),
        ('model_provider = "ollama"\n', "warn", "only openai is proxied"),
        ("model_provider = \n", "warn", "unreadable"),
    ],
)
def test_the_provider_line_says_whether_it_can_be_redirected(
    tmp_path: Path, config: str, level: str, words: str
) -> None:
    (tmp_path / "config.toml").write_text(config, encoding="utf-8")
    check = check_provider({"CODEX_HOME": str(tmp_path)})
    assert (check.name, check.level) == ("codex config", level)
    assert words in check.summary
