"""The response reader both proxies share (agents/_proxy/sse.py): hostile bytes from an
upstream never raise and never grow it past its bound."""

from __future__ import annotations

import gzip
import json
from typing import Any

from ctxwrap.agents._proxy.sse import JsonEventStream


class Events(JsonEventStream):
    def __post_init__(self) -> None:
        super().__post_init__()
        self.seen: list[dict[str, Any]] = []

    def _event(self, data: dict[str, Any]) -> None:
        self.seen.append(data)


def test_frames_split_anywhere_give_each_json_event_once() -> None:
    raw = b'event: x\ndata: {"a": 1}\n\ndata: [1, 2]\n\ndata: not json\n\r\ndata: {"b": 2}\r\n\r\n'
    r = Events(streaming=True)
    for i in range(len(raw)):
        r.feed(raw[i : i + 1])
    assert r.seen == [{"a": 1}, {"b": 2}]  # lists and garbage are skipped, not raised on
    assert r.body() is None


def test_gzip_body_is_read_and_broken_gzip_stops_reading() -> None:
    r = Events(streaming=False, encoding="gzip")
    r.feed(gzip.compress(json.dumps({"object": "response"}).encode()))
    assert r.body() == {"object": "response"}
    bad = Events(streaming=True, encoding="gzip")
    bad.feed(b"\x1f\x8b not gzip at all")
    bad.feed(b'data: {"a": 1}\n\n')
    assert bad.encoding == "broken" and bad.seen == []


def test_unknown_encoding_and_oversized_body_are_not_parsed() -> None:
    z = Events(streaming=True, encoding="zstd")
    z.feed(b'data: {"a": 1}\n\n')
    assert z.seen == []
    big = Events(streaming=False, _limit=64)
    for _ in range(10):
        big.feed(b" " * 40)
    assert len(big._buf) < 64 + 40
    big.feed(b"{}")
    assert big.body() is None  # cut off: not valid JSON, and never read whole
