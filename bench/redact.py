"""Throughput of secret redaction as the raw store runs it (not part of the test suite).

    .venv/bin/python bench/redact.py [--synthetic-mb 50] [--baseline OLD_REDACT_PY]

Redaction runs over ~64 KB blocks of whole lines (ctxwrap/state/rawstore.py). Prints MB/s on
the captured corpus (tests/fixtures/outputs, which holds no secret: every marker there is a
false positive, counted) and on a synthetic service log.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from digest import corpus, synthetic_log

from ctxwrap.digest import redact_secrets

BLOCK = 1 << 16


def blocks_of(text: str) -> Iterator[str]:
    """~64 KB blocks cut at line ends, like RawStore.put_lines."""
    start = 0
    while start < len(text):
        end = text.find("\n", start + BLOCK)
        end = len(text) if end < 0 else end
        yield text[start:end]
        start = end + 1


def rate(text: str, redact: Callable[[str], str]) -> tuple[float, int, list[str]]:
    """Best of three runs: the machine may be shared."""
    blocks = list(blocks_of(text))
    redact(blocks[0])  # the first call imports detect-secrets
    busy = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        out = [redact(b) for b in blocks]
        busy = min(busy, time.perf_counter() - started)
    markers = [line for b in out for line in b.splitlines() if "[REDACTED:" in line]
    return len(text.encode()) / busy / 1e6, len(text.encode()), markers


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--synthetic-mb", type=int, default=50)
    parser.add_argument("--show", action="store_true", help="print the corpus lines redacted")
    parser.add_argument(
        "--baseline", type=Path, help="another redact.py to time in the same run (e.g. main's)"
    )
    args = parser.parse_args()
    candidates: list[tuple[str, Callable[[str], str]]] = [("current", redact_secrets)]
    if args.baseline:
        spec = importlib.util.spec_from_file_location("baseline_redact", args.baseline)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        candidates.insert(0, ("baseline", module.redact_secrets))
    text = "".join(raw.decode("utf-8", "replace") for _, raw, _ in corpus())
    synthetic = b"".join(synthetic_log(args.synthetic_mb << 20)).decode()
    for label, redact in candidates:
        for name, sample in (("corpus", text), ("synthetic", synthetic)):
            mbs, size, markers = rate(sample, redact)
            print(
                f"{label:9s} {name:10s} {size / 1e6:6.1f} MB {mbs:7.1f} MB/s "
                f"{len(markers)} lines redacted"
            )
            if args.show and name == "corpus":
                for line in markers:
                    print("   ", line[:200])


if __name__ == "__main__":
    main()
