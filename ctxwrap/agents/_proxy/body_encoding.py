"""Request bodies an agent sends compressed, read and written back the same way.

Codex 0.171 with a ChatGPT login compresses every request body with zstd (its
`enable_request_compression` feature, on by default; seen against the scripted server:
`content-encoding: zstd`). The proxy decodes a body to read and edit it and encodes an edited
one as it came. An encoding it does not know, or a body that does not decode within the bound,
goes upstream as it is (no edit, no stats), as before.
"""

from __future__ import annotations

import gzip
import json
import zlib
from types import ModuleType
from typing import Any

try:  # 3x faster to parse, 20x to write a request body than the standard library (bench:
    import orjson  # bench/proxy_latency.py); optional: without it the standard library
except ImportError:  # pragma: no cover
    orjson = None  # type: ignore[assignment]

# Far past any request an agent sends (a full 1M-token context is a few MB of JSON): a body
# that decodes to more is not read.
MAX_DECODED_BYTES = 256 * 1024 * 1024
IDENTITY = ("", "identity")


def _zstd() -> ModuleType:
    try:
        from compression import zstd  # type: ignore[import-not-found,unused-ignore]
    except ImportError:  # before Python 3.14: its backport (a dependency)
        from backports import zstd  # type: ignore[no-redef,unused-ignore]
    return zstd  # type: ignore[no-any-return,unused-ignore]


def decode(raw: bytes, encoding: str) -> bytes | None:
    """The body as JSON bytes, or None where it cannot be read here."""
    enc = encoding.strip().lower()
    if enc in IDENTITY:
        return raw
    try:
        if enc == "zstd":
            zstd = _zstd()
            dec = zstd.ZstdDecompressor()
            out: bytes = dec.decompress(raw, max_length=MAX_DECODED_BYTES)
            # one whole frame, nothing after it, within the bound
            return out if dec.eof and not dec.unused_data else None
        if enc == "gzip":
            gz = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
            out = gz.decompress(raw, MAX_DECODED_BYTES)
            return out if gz.eof and not gz.unconsumed_tail and not gz.unused_data else None
    except Exception:  # a malformed body: forwarded as it is
        return None
    return None


def encode(body: bytes, encoding: str) -> bytes:
    """`body` encoded as the agent sent it (`decode` accepted `encoding`)."""
    enc = encoding.strip().lower()
    if enc == "zstd":
        compressed: bytes = _zstd().compress(body)
        return compressed
    if enc == "gzip":
        return gzip.compress(body)
    return body


def parse_json(raw: bytes) -> Any:
    """A request body's JSON (ValueError when it is none). orjson where it accepts the text;
    what it refuses (lone surrogate escapes, integers past 64 bits, NaN) the standard library
    reads as before."""
    if orjson is not None:
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            pass
    return json.loads(raw)


def compact_json(body: Any) -> bytes:
    """`body` as compact UTF-8 JSON, non-ASCII unescaped (the agents' own shape: JSON.stringify,
    serde_json). orjson writes it byte for byte as the standard library does for every string,
    integer and structure, and floats in the shortest form as the agents do (`1e-7`, where the
    standard library writes `1e-07`); lone surrogates and big integers go the old way."""
    if orjson is not None:
        try:
            return bytes(orjson.dumps(body))
        except TypeError:
            pass
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode(
        "utf-8", "surrogatepass"
    )
