"""Throughput and reduction of the extractive digester (not part of the test suite).

    .venv/bin/python bench/digest.py [--synthetic-mb 200]

Prints MB/s on the captured corpus concatenated and on a synthetic log, and the median
size reduction over corpus outputs larger than 2000 tokens (chars/4), next to the targets.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Iterator
from pathlib import Path

from ctxwrap.digest import StreamingDigester, digest_bash_output

CORPUS = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "outputs"
TARGET_MB_PER_S = 50.0
TARGET_REDUCTION = 0.90
CHUNK = 1 << 16


def synthetic_log(total_bytes: int) -> Iterator[bytes]:
    """A service log: timestamps, levels, ids, now and then a warning, error or traceback."""
    line_no = 0
    produced = 0
    while produced < total_bytes:
        lines = []
        for _ in range(1000):
            line_no += 1
            ms = line_no % 1000
            if line_no % 997 == 0:
                lines.append(
                    f"2026-01-01 12:00:{line_no % 60:02d}.{ms:03d} ERROR worker-{line_no % 8} request {line_no} failed: upstream timed out after 30s (attempt 3)"
                )
            elif line_no % 211 == 0:
                lines.append(
                    f"2026-01-01 12:00:{line_no % 60:02d}.{ms:03d} WARN  worker-{line_no % 8} slow query took {line_no % 5000}ms on table events"
                )
            elif line_no % 4999 == 0:
                lines.append(
                    'Traceback (most recent call last):\n  File "/srv/app/handlers.py", line 88, in handle\n    result = process(payload)\nValueError: bad payload'
                )
            else:
                lines.append(
                    f"2026-01-01 12:00:{line_no % 60:02d}.{ms:03d} INFO  worker-{line_no % 8} GET /api/v1/items/{line_no} 200 in {line_no % 97}ms bytes={line_no * 7 % 100000}"
                )
        chunk = ("\n".join(lines) + "\n").encode()
        produced += len(chunk)
        yield chunk


def corpus() -> list[tuple[str, bytes, dict[str, object]]]:
    items = []
    for folder in sorted(p for p in CORPUS.iterdir() if (p / "meta.json").exists()):
        meta = json.loads((folder / "meta.json").read_text())
        items.append((folder.name, (folder / "output.txt").read_bytes(), meta))
    return items


def stream_rate(chunks: Iterator[bytes], *, command: str) -> tuple[float, int, int]:
    """MB/s of the digester alone: producing the chunks is not timed."""
    digester = StreamingDigester(command=command, exit_code=1)
    total = 0
    busy = 0.0
    for chunk in chunks:
        total += len(chunk)
        started = time.perf_counter()
        digester.feed(chunk)
        busy += time.perf_counter() - started
    started = time.perf_counter()
    digest = digester.finish()
    busy += time.perf_counter() - started
    return total / busy / 1e6, total, len(digest.text)


def cycled(pool: list[bytes], total_bytes: int) -> Iterator[bytes]:
    produced = 0
    while produced < total_bytes:
        for chunk in pool:
            produced += len(chunk)
            yield chunk
            if produced >= total_bytes:
                return


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--synthetic-mb", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=20, help="corpus passes for the rate")
    options = parser.parse_args()

    items = corpus()
    reductions = []
    print(f"{'fixture':28} {'family':11} {'chars':>9} {'digest':>7} {'reduction':>9}")
    for name, raw, meta in items:
        digest = digest_bash_output(raw, command=str(meta["command"]), exit_code=meta["exit_code"])  # type: ignore[arg-type]
        reduction = 1 - len(digest.text) / max(1, digest.original_chars)
        if digest.original_chars / 4 > 2000:
            reductions.append(reduction)
        print(
            f"{name:28} {digest.family:11} {digest.original_chars:>9,} {len(digest.text):>7,} {reduction:>9.1%}"
        )

    # The corpus as one stream per family is too small to time once; digest it repeatedly.
    total = 0
    started = time.perf_counter()
    for _ in range(options.repeat):
        for _name, raw, meta in items:
            digester = StreamingDigester(command=str(meta["command"]), exit_code=1)
            for offset in range(0, len(raw), CHUNK):
                digester.feed(raw[offset : offset + CHUNK])
            digester.finish()
            total += len(raw)
    corpus_rate = total / (time.perf_counter() - started) / 1e6
    concatenated = b"".join(raw for _name, raw, _meta in items) * options.repeat
    joined_rate, _, _ = stream_rate(
        (concatenated[i : i + CHUNK] for i in range(0, len(concatenated), CHUNK)),
        command="sh run-all.sh",
    )
    # A 16 MB pool of distinct chunks, cycled: generating 200 MB of text would take longer
    # than digesting it.
    pool = list(synthetic_log(16_000_000))
    synthetic_rate, synthetic_bytes, synthetic_digest = stream_rate(
        cycled(pool, options.synthetic_mb * 1_000_000), command="./server --verbose"
    )

    median = statistics.median(reductions) if reductions else 0.0
    print()
    print(f"corpus, per fixture ({options.repeat} passes): {corpus_rate:8.1f} MB/s")
    print(f"corpus concatenated, one stream:       {joined_rate:8.1f} MB/s")
    print(
        f"synthetic log {synthetic_bytes / 1e6:,.0f} MB:               {synthetic_rate:8.1f} MB/s  (digest {synthetic_digest:,} chars)"
    )
    print(f"target throughput:                      {TARGET_MB_PER_S:8.1f} MB/s")
    print(
        f"median reduction, {len(reductions)} outputs over 2000 tokens: {median:.1%}  (target {TARGET_REDUCTION:.0%})"
    )


if __name__ == "__main__":
    main()
