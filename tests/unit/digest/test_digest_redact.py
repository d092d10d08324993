from __future__ import annotations

import pytest

from ctxwrap.digest import digest_bash_output, redact_secrets


@pytest.mark.parametrize(
    ("text", "secret", "kind"),
    [
        ("export OPENAI_API_KEY=sk-proj-abcdefghijklmnopqrstuvwx", "sk-proj-", "api-key"),
        ("aws key AKIAIOSFODNN7EXAMPLE found", "AKIAIOSFODNN7EXAMPLE", "aws-access-key"),
        ("push with ghp_" + "a1" * 18, "ghp_", "github-token"),
        ("slack xoxb-123456789012-abcdefghij", "xoxb-", "slack-token"),
        ("Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.e30.sig", "eyJhbGci", "jwt"),
        ("Authorization: Bearer 0a1b2c3d4e5f6a7b8c9d", "0a1b2c3d4e5f", "bearer-token"),
        ('DB_PASSWORD="hunter22"', "hunter22", "secret"),
        ("GITHUB_TOKEN=abc123def", "abc123def", "secret"),
        ("client_secret: s3cr3t-value", "s3cr3t", "secret"),
        ('{"api_key": "abcd1234"}', "abcd1234", "secret"),
    ],
)
def test_secrets_are_replaced(text: str, secret: str, kind: str) -> None:
    redacted = redact_secrets(text)
    assert secret not in redacted
    assert f"[REDACTED:{kind}]" in redacted


def test_assignment_keeps_the_name() -> None:
    assert redact_secrets("SECRET_KEY = abcdef") == "SECRET_KEY = [REDACTED:secret]"


@pytest.mark.parametrize(
    "text",
    ["max_tokens=100", "key=$HOME", "def f(password=None):", "monkey=banana", "no secrets here"],
)
def test_ordinary_text_is_left_alone(text: str) -> None:
    assert redact_secrets(text) == text


def test_private_key_block_whole_or_cut() -> None:
    key = (
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\nabcd+/==\n-----END RSA PRIVATE KEY-----"
    )
    assert redact_secrets(f"before\n{key}\nafter") == "before\n[REDACTED:private-key]\nafter"
    head_only = "-----BEGIN PRIVATE KEY-----\nMIIEowIBAAKCAQEA\n[… 3 lines omitted …]"
    assert "MIIE" not in redact_secrets(head_only)
    tail_only = "AbCdEfGhIjKlMnOpQrSt\n-----END PRIVATE KEY-----\n"
    assert "AbCd" not in redact_secrets(tail_only)


def test_digests_are_redacted() -> None:
    output = "starting\n" * 50 + "error: auth failed for TOKEN=ghx1234567890secret\n" + "done\n"
    digest = digest_bash_output(output, command="./deploy", exit_code=1)
    assert "ghx1234567890secret" not in digest.text
    assert "error: auth failed for TOKEN=[REDACTED:secret]" in digest.text
