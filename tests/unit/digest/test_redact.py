"""redact_secrets against a corpus of fake secrets, text that must survive, and properties."""

from __future__ import annotations

import json
import random
import string
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxwrap.digest import redact as redact_module
from ctxwrap.digest import redact_secrets
from ctxwrap.digest.redact import is_high_entropy_token

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
CORPUS = json.loads((FIXTURES / "secrets" / "corpus.json").read_text())["secrets"]
KEEP = (FIXTURES / "secrets" / "keep.txt").read_text().splitlines()
B64 = string.ascii_letters + string.digits + "+/"


def leaked(entry: dict[str, str], text: str) -> list[str]:
    return [line for line in entry["secret"].splitlines() if line and line in text]


@pytest.mark.parametrize("entry", CORPUS, ids=[e["kind"] for e in CORPUS])
def test_corpus_secret_is_redacted(entry: dict[str, str]) -> None:
    out = redact_secrets(entry["text"])
    assert not leaked(entry, out), out
    assert "[REDACTED:" in out


@pytest.mark.parametrize("entry", CORPUS, ids=[e["kind"] for e in CORPUS])
def test_corpus_secret_is_redacted_inside_a_large_block(entry: dict[str, str]) -> None:
    # As the raw store sees it: a 64 KB block, non-ASCII before the secret on its own line
    # (byte and character offsets differ), ordinary lines around it.
    noise = "".join(
        f"2026-01-01 INFO worker-{i % 8} GET /api/items/{i} 200 é漢\n" for i in range(900)
    )
    block = noise + "ünïcode → " + entry["text"] + "\n" + noise
    out = redact_secrets(block)
    assert not leaked(entry, out)
    assert out.count("\n") == block.count("\n") - entry["text"].count("\n") * (
        "PRIVATE KEY" in entry["text"]
    )
    assert out.startswith(noise) and out.endswith(noise)


@pytest.mark.parametrize("line", KEEP)
def test_ordinary_text_survives(line: str) -> None:
    assert redact_secrets(line) == line


def test_captured_outputs_have_nothing_redacted() -> None:
    """The digester corpus holds no secret: every marker there would be a false positive."""
    outputs = sorted((FIXTURES / "outputs").glob("*/output.txt"))
    assert len(outputs) > 20
    for path in outputs:
        text = path.read_text(errors="replace")
        assert redact_secrets(text) == text, path.parent.name


def test_git_log_keeps_every_sha() -> None:
    log = (FIXTURES / "outputs" / "git_log" / "output.txt").read_text(errors="replace")
    assert redact_secrets(log) == log
    rng = random.Random(7)
    for _ in range(2000):
        sha = "".join(rng.choice("0123456789abcdef") for _ in range(40))
        assert redact_secrets(f"commit {sha}\n{sha[:12]} fix") == f"commit {sha}\n{sha[:12]} fix"


@pytest.mark.parametrize("length", [32, 40, 64, 88])
def test_random_bare_keys_are_caught(length: int) -> None:
    """The bare-token rule on keys shaped like AWS secret access keys (and longer)."""
    rng = random.Random(length)
    keys = ["".join(rng.choice(B64) for _ in range(length)) for _ in range(3000)]
    missed = [k for k in keys if k in redact_secrets(f"value: {k}\n")]
    assert len(missed) / len(keys) < 0.01, missed[:5]


@pytest.mark.parametrize(
    "token",
    [
        "findVisualStudio2019OrNewerFromSpecifiedLocation",
        "NFCISO15693ReadMultipleBlocksConfiguration",
        "tests/wpt/blob/7b0ebaccc62b566a1965396e5be7bb2bc06f841f/File",
        "US/FlashPlatform/reference/actionscript/3/index",
        "9598e5c7ef72696063ce02a3a89471a49c1ba6f5",
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdef",  # no digit
    ],
)
def test_bare_rule_spares_identifiers_paths_and_hashes(token: str) -> None:
    assert not is_high_entropy_token(token)
    assert redact_secrets(f"see {token} here") == f"see {token} here"


def test_pem_block_cut_by_a_block_boundary() -> None:
    entry = next(e for e in CORPUS if e["kind"] == "pem-rsa")
    lines = entry["text"].splitlines()
    head, tail = "\n".join(lines[:4]), "\n".join(lines[4:])
    for part in (head, tail):
        out = redact_secrets("log line\n" + part + "\nafter")
        assert not leaked(entry, out), out


def test_group_less_matches_keep_their_delimiters() -> None:
    text = 'artifactory: "AKCp' + "x1Y2z3" * 12 + '" ok'
    assert redact_secrets(text) == 'artifactory: "[REDACTED:artifactory-token]" ok'


def test_only_detect_secrets_plugins_named_with_a_gate_run() -> None:
    plugins = redact_module._plugins()
    for name in (*redact_module._PLUGIN_GATES, *redact_module._LINE_PLUGINS):
        assert name in plugins, name
        assert plugins[name].denylist, name


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_redaction_is_idempotent_and_keeps_lines(text: str) -> None:
    once = redact_secrets(text)
    assert redact_secrets(once) == once
    if "PRIVATE KEY" not in text:
        assert once.count("\n") == text.count("\n")


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.sampled_from([e["text"] for e in CORPUS]), min_size=1, max_size=5),
    st.text(alphabet=string.printable, max_size=80),
)
def test_secrets_among_arbitrary_text(texts: list[str], filler: str) -> None:
    # The filler is arbitrary, but it does not glue itself onto a secret's first or last char.
    out = redact_secrets(f" \n{filler}\n ".join(texts))
    for entry in CORPUS:
        if entry["text"] in texts:
            assert not [s for s in leaked(entry, out) if len(s) > 12], entry["kind"]


@pytest.mark.parametrize(
    "hostile",
    [
        "eyJ" * 22_000,  # detect-secrets' JWT regex from every "eyJ": ~7 s before the fix
        "password " * 7_000,
        'password="' + "a" * 64_000,
        "api_key=" * 8_000,
        "\n".join(["token=abc"] * 6_000),
        "A1b2+/" * 11_000,
    ],
    ids=["jwt-starts", "keywords", "unclosed-quote", "assignments", "keyword-lines", "b64-run"],
)
def test_hostile_blocks_cost_bounded_time(hostile: str) -> None:
    """Tool output is hostile: one 64 KB block must not stall the daemon (regex backtracking)."""
    redact_module.load_patterns()
    started = time.process_time()
    redact_secrets(hostile)
    assert time.process_time() - started < 2.0


@pytest.mark.parametrize("prefix", ["sk_live_", "rk_live_", "sk_test_"])
def test_a_stripe_key_of_todays_length_leaves_no_part_of_itself(prefix: str) -> None:
    """detect-secrets' Stripe rule takes 24 characters after the prefix; keys issued today run
    to 99 or more, and the rest of one stayed in the text (a `cat .env` is stored)."""
    body = "51HqLyjWDarjtT1zdp7dc" + "AbCd3fGh1jKlMnOpQrStUvWxYz0123456789" * 2
    line = f"curl https://api.stripe.com/v1/charges -u {prefix}{body}: -d amount=2000"
    out = redact_secrets(line)
    assert out == "curl https://api.stripe.com/v1/charges -u [REDACTED:stripe-key]: -d amount=2000"
    assert not any(body[i : i + 8] in out for i in range(len(body) - 8))
    # words that only look like the prefix stay
    assert (
        redact_secrets("task_live_status and desk_test_run") == "task_live_status and desk_test_run"
    )
