"""Compressed request bodies (agents/_proxy/body_encoding.py): read decoded, written back the
same way; anything it cannot read is left to go upstream as it is."""

from __future__ import annotations

import gzip
import json

import pytest

from ctxwrap.agents._proxy import body_encoding as BE

BODY = json.dumps({"model": "gpt-5.5", "input": [{"type": "message", "text": "x" * 5000}]}).encode()


@pytest.mark.parametrize("encoding", ["zstd", "gzip", "ZSTD ", "identity", ""])
def test_a_body_round_trips_in_its_encoding(encoding: str) -> None:
    sent = BE.encode(BODY, encoding)
    assert BE.decode(sent, encoding) == BODY
    if encoding.strip().lower() in ("zstd", "gzip"):
        assert len(sent) < len(BODY) // 10  # really compressed, not passed through


def test_what_it_cannot_read_is_none() -> None:
    zstd = BE.encode(BODY, "zstd")
    assert BE.decode(BODY, "br") is None  # an encoding it does not know
    assert BE.decode(b"not zstd at all", "zstd") is None
    assert BE.decode(zstd[:-5], "zstd") is None  # cut short
    assert BE.decode(zstd + b"trailing", "zstd") is None
    assert BE.decode(gzip.compress(BODY)[:-3], "gzip") is None
    assert BE.decode(b"\x1f\x8b garbage", "gzip") is None


def test_a_body_past_the_bound_is_not_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(BE, "MAX_DECODED_BYTES", 1000)
    assert BE.decode(BE.encode(BODY, "zstd"), "zstd") is None
    assert BE.decode(BE.encode(BODY, "gzip"), "gzip") is None
    assert BE.decode(BE.encode(BODY[:900], "zstd"), "zstd") == BODY[:900]
