"""The overhead bench compiles each tree it times (bench/overhead.py, `fresh_bytecode`): with
PYTHONDONTWRITEBYTECODE set, a tree without current .pyc files paid ~50 ms of compiling in
every wrapped launch, a bias between the trees compared."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_the_bench_compiles_the_tree_it_times(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    overhead = __import__("overhead")
    pkg = tmp_path / "ctxwrap"
    pkg.mkdir()
    (pkg / "mod.py").write_text("X = 1\n")
    overhead.fresh_bytecode(tmp_path)
    cached = Path(importlib.util.cache_from_source(str(pkg / "mod.py")))
    assert cached.is_file()
    assert cached.stat().st_mtime >= (pkg / "mod.py").stat().st_mtime
