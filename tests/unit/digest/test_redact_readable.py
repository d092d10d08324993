"""Redaction keeps a log readable: on the real CI logs nothing but a credential is redacted,
and every path, flag, UUID and digest survives; hostile cases keep both precision and recall."""

from __future__ import annotations

import re

import pytest
from realdata_logs import log_params, read_log

from ctxwrap.digest import redact_secrets

# The one credential in the corpus: an env assignment the collector already replaced
# (SOURCES.md: "github-ish token in env: 1"); the name says token, so the value goes.
EXPECTED = {
    "maven__bugswarm-travis-checkstyle-211109560.txt": [
        "$ export READ_ONLY_TOKEN=[REDACTED:secret]"
    ],
}
_MARKED_LINE = re.compile(r"^.*\[REDACTED:[\w-]+\].*$", re.M)
# Path-like tokens: two or more segments joined by / or \ (Unix, Windows, URLs, packages).
_PATH = re.compile(r"[\w.@+~-]*(?:[/\\][\w.@+~-]+){2,}")
_UUID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.I)
_HEX = re.compile(r"\b[0-9a-f]{32,}\b")
_FLAG = re.compile(r"(?<!\S)-{1,2}[A-Za-z][\w,=.+/-]{3,}")


@pytest.mark.parametrize("name", log_params())
def test_only_credentials_are_redacted(name: str) -> None:
    text = read_log(name)
    marked = [line.strip() for line in _MARKED_LINE.findall(redact_secrets(text))]
    assert marked == EXPECTED.get(name, []), marked[:5]


@pytest.mark.parametrize("name", log_params())
def test_paths_flags_uuids_and_digests_survive(name: str) -> None:
    text = read_log(name)
    redacted = redact_secrets(text)
    for pattern in (_PATH, _UUID, _HEX, _FLAG):
        tokens = set(pattern.findall(text))
        lost = sorted(t for t in tokens if t not in redacted)
        assert not lost, (pattern.pattern, lost[:5], len(lost))


@pytest.mark.parametrize(
    ("text", "kept", "secret"),
    [
        (
            "open /home/runner/.config/creds/8ISsWbV9J6Das4VuRAhzjRZlchCl24o2rOugvkZ1/token.json",
            ["open /home/runner/.config/creds/", "/token.json"],
            "8ISsWbV9J6Das4VuRAhzjRZlchCl24o2rOugvkZ1",
        ),
        (
            "cp dump.sql s3://ci-artifacts/backups/wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY/db",
            ["cp dump.sql s3://ci-artifacts/backups/", "/db"],
            "K7MDENG",  # a key holding "/" is judged whole, not segment by segment
        ),
        (
            "src/aws.py:3: AKIAQX7RZ2LK5WNMP4TB /etc/ctxwrap/aws.ini",
            ["src/aws.py:3: ", " /etc/ctxwrap/aws.ini"],
            "AKIAQX7RZ2LK5WNMP4TB",
        ),
        (
            "/srv/app/.env: wJ8rPq2LmZ7xVb3Nc9Yt/Kd4Hs6Fg1Aa5Ee0Ui2Oo (src/Config/AppSettings.cs)",
            ["/srv/app/.env: ", " (src/Config/AppSettings.cs)"],
            "wJ8rPq2LmZ7xVb3Nc9Yt",
        ),
        (
            "auth.py:9 Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJlX2hlcmU /api/v2/me",
            ["auth.py:9 Bearer ", " /api/v2/me"],
            "eyJzdWIiOiIxIn0",
        ),
    ],
    ids=["key-segment", "key-with-slashes", "aws-id", "aws-secret", "jwt"],
)
def test_a_secret_beside_or_inside_a_path_goes_and_the_path_stays(
    text: str, kept: list[str], secret: str
) -> None:
    out = redact_secrets(text)
    assert secret not in out, out
    for piece in kept:
        assert piece in out, out


@pytest.mark.parametrize(
    "line",
    [
        "/builddir/build/BUILD/dolphin-emu-2409-build/dolphin-2409/Source/Core/Common/MsgHandler.h",
        "C:\\Users\\Dev\\AppData\\Roaming\\npm\\node_modules\\@Azure\\CoreHttpCompat\\index.js",
        "/nix/store/5rnfzla9kcx4mj5zdc7nlnv8na1najvg-python3-3.11.9/lib/python3.11/os.py",
        "bazel-out/k8-fastbuild/bin/external/com_google_protobuf/ProtoBufLiteRuntime.jar",
        "target/debug/build/ring-0a1b2c3d4e5f6a7b/out/RingCoreGenerated/AesNiGcmX86_64.o",
        "-DCMAKE_INSTALL_PREFIX:PATH=/usr -DCMAKE_CXX_FLAGS_RELEASE:STRING=-DNDEBUG",
        "-Wl,-z,relro -Wl,--as-needed -specs=/usr/lib/rpm/redhat/redhat-hardened-ld",
        "https://github.com/dolphin-emu/dolphin/blob/5a1e4c0f3b9d/Source/Core/VideoBackends/Vulkan",
        "'/home/runner/work/_temp/17395d71-e2af-4d46-96db-fbc70d69a1e7'",
        '"/var/folders/p4/jlx3pf896blgl6tcj0xbkhvm0000gn/T/TemporaryItems/NSIRDPlugin"',
        "GetCustomRectByIndexWithDefaultAtlasFallbackForImGuiRenderer",
        "sha256:3f4a1c9e2b7d8f6a0c5e1b9d7f3a2c8e6b4d0f9a1c7e5b3d9f2a6c0e8b4d1f7a",
    ],
)
def test_paths_flags_and_identifiers_are_not_secrets(line: str) -> None:
    assert redact_secrets(line) == line


@pytest.mark.parametrize(
    "line",
    [
        "  token: ***",
        "$ export NPM_API_KEY=[secure]",
        "  server-password: GITHUB_TOKEN",
        "      ✓ reset password: invalid token",
        "        grant_token = JWTGrantToken(jwttok)",
    ],
)
def test_masks_variable_names_calls_and_prose_are_not_secrets(line: str) -> None:
    assert redact_secrets(line) == line


@pytest.mark.parametrize(
    "line",
    [
        "  token: ghp_R4nd0mT0k3nV4lu3F0rT3st1ngPurp0s3s",
        "password: invalid",  # a value that ends the line is a value
        "password: hunter2 # set by admin",
        "SERVER_PASSWORD=Correct-Horse-7",
        "api_key = Xy7dbpass9",
    ],
)
def test_values_in_a_secret_place_still_go(line: str) -> None:
    assert "[REDACTED:" in redact_secrets(line)
