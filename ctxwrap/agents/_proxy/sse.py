"""A response's JSON events as its bytes pass through a proxy: SSE `data:` frames when
streaming, else one JSON body (bounded), gzip tolerated, other encodings passed by unread.
Each agent's wire module reads its own event shapes from it (usage, tool calls)."""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any


def frame_events(frame: bytes) -> Iterator[dict[str, Any]]:
    """The JSON objects of one SSE frame's `data:` lines (others, and bad JSON, skipped)."""
    for line in frame.split(b"\n"):
        if not line.startswith(b"data:"):
            continue
        try:
            data = json.loads(line[5:])
        except ValueError:
            continue
        if isinstance(data, dict):
            yield data


def stream_events(raw: bytes) -> Iterator[dict[str, Any]]:
    """Every event of a whole SSE body (CR LF line ends too)."""
    for frame in raw.replace(b"\r", b"").split(b"\n\n"):
        yield from frame_events(frame)


@dataclass
class JsonEventStream:
    streaming: bool
    encoding: str = ""
    _buf: bytearray = field(default_factory=bytearray)
    _inflate: Any = None
    _limit: int = 8 << 20  # a JSON body larger than this is not parsed

    def __post_init__(self) -> None:
        if self.encoding == "gzip":
            self._inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)

    def feed(self, chunk: bytes) -> None:
        if self.encoding not in ("", "identity", "gzip"):
            return  # zstd and others: not read (the stream still passes through)
        if self._inflate is not None:
            try:
                chunk = self._inflate.decompress(chunk)
            except zlib.error:
                self.encoding = "broken"
                return
        if not self.streaming:
            if len(self._buf) < self._limit:
                self._buf += chunk
            return
        # CR LF line ends too (SSE allows them): raw CRs cannot be inside a JSON text
        self._buf += chunk.replace(b"\r", b"")
        while True:
            cut = self._buf.find(b"\n\n")
            if cut < 0:
                break
            frame, self._buf = bytes(self._buf[:cut]), self._buf[cut + 2 :]
            for data in frame_events(frame):
                self._event(data)

    def _event(self, data: dict[str, Any]) -> None:
        """One streamed JSON event (an agent's wire module reads its shapes)."""

    def body(self) -> dict[str, Any] | None:
        """The whole JSON body of a non-streamed response; None when streamed or unreadable."""
        if self.streaming or not self._buf:
            return None
        try:
            data = json.loads(bytes(self._buf))
        except ValueError:
            return None
        return data if isinstance(data, dict) else None
