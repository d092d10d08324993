"""A session's files, the same for every proxy adapter: the frozen edit set (append-only) and
the prompt-cache state of its conversations (replaced whole)."""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import threading
import time
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ctxwrap.agents._proxy.cache_state import CacheState, dump_states, load_states
from ctxwrap.engine.edits import Edit, edit_from_json, edit_to_json

JsonDict = dict[str, Any]


@dataclass
class FrozenEdits:
    """A session's frozen edit set and its append-only file (0600; a torn line loses itself).

    Lines: ``{"edit": …}`` (an edit, as the engine serialises it) or ``{"digest": [id, plain
    chars, digest chars]}`` (what a digest kept out, for the stats).
    """

    path: Path | None
    edits: dict[str, list[Edit]] = field(default_factory=dict)
    digests: dict[str, tuple[int, int]] = field(default_factory=dict)
    _keys: set[tuple[str, str]] = field(default_factory=set)

    def load(self) -> None:
        if self.path is None or not self.path.is_file():
            return
        try:
            lines = self.path.read_text(encoding="utf-8").splitlines()
        except OSError:
            return
        for line in lines:
            try:
                item = json.loads(line)
            except ValueError:
                continue
            if not isinstance(item, dict):
                continue
            if "edit" in item:
                edit = edit_from_json(item["edit"])
                if edit is not None:
                    self.freeze(edit)
            elif isinstance(item.get("digest"), list) and len(item["digest"]) == 3:
                cid, plain, digest = item["digest"]
                if isinstance(cid, str) and isinstance(plain, int) and isinstance(digest, int):
                    self.digests[cid] = (plain, digest)

    def freeze(self, edit: Edit) -> bool:
        """Add an edit (False: one of its kind exists for that call; the first stays)."""
        key = (edit.kind, edit.toolCallId)
        if key in self._keys:
            return False
        self._keys.add(key)
        self.edits.setdefault(edit.toolCallId, []).append(edit)
        return True

    def persist(self, new: list[Edit]) -> None:
        """Append the new edits (and what a digest among them kept out) to the file."""
        items: list[JsonDict] = [{"edit": edit_to_json(e)} for e in new]
        items += [
            {"digest": [e.toolCallId, *self.digests[e.toolCallId]]}
            for e in new
            if e.toolCallId in self.digests
        ]
        self._append(items)

    def note_digest(self, call_id: str, plain: int, digest: int) -> None:
        """A digest decided before its edit is frozen (a hook): kept and written at once."""
        self.digests[call_id] = (plain, digest)
        self._append([{"digest": [call_id, plain, digest]}])

    def _append(self, items: list[JsonDict]) -> None:
        if self.path is None or not items:
            return
        try:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            with os.fdopen(fd, "a", encoding="utf-8") as fh:
                fh.write("".join(json.dumps(i, ensure_ascii=False) + "\n" for i in items))
        except OSError:
            pass  # the in-memory set still replays for this process

    def result_edited(self, kinds: Collection[str] = ("tombstone", "mask")) -> set[str]:
        """Ids whose result has a replacement (tombstone or mask): the first one stays."""
        return {cid for cid, edits in self.edits.items() if any(e.kind in kinds for e in edits)}

    def __iter__(self) -> Iterator[Edit]:
        for edits in self.edits.values():
            yield from edits


def load_cache_states(path: Path | None) -> dict[str, CacheState]:
    """The conversations' cache state; none yet (or torn): empty, the first gap is unknown."""
    if path is None:
        return {}
    with contextlib.suppress(OSError, ValueError):
        return load_states(json.loads(path.read_text(encoding="utf-8")))
    return {}


def save_cache_states(path: Path | None, states: dict[str, CacheState]) -> None:
    """Replace the file atomically (0600) soon, off the request path (a write and a rename
    cost milliseconds a request would wait for); the latest states of a path win."""
    if path is None:
        return
    if not path.exists():  # a conversation's first request: the file is there when it returns
        _write_states(path, dump_states(states))
        return
    _cache_writer.put(path, dump_states(states))


def flush_cache_states() -> None:
    """Write what is pending now (the proxy's close, the process's exit)."""
    _cache_writer.flush()


def _write_states(path: Path, data: Any) -> None:
    """Replace the file atomically (0600); a failure keeps the old one."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()


WRITE_DELAY_S = 0.5


class _CacheStateWriter:
    """One thread writing each path's latest states; `flush` writes the rest at once."""

    def __init__(self) -> None:
        self._pending: dict[Path, Any] = {}
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._writing = 0

    def put(self, path: Path, data: Any) -> None:
        with self._cond:
            self._pending[path] = data
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="ctxwrap-cache-states", daemon=True
                )
                self._thread.start()
            self._cond.notify_all()

    def _take(self) -> tuple[Path, Any] | None:
        with self._cond:
            if not self._pending:
                return None
            path = next(iter(self._pending))
            self._writing += 1
            return path, self._pending.pop(path)

    def _done(self) -> None:
        with self._cond:
            self._writing -= 1
            self._cond.notify_all()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._pending:
                    self._cond.wait()
            # after the request it came with has gone upstream (not beside it, for the GIL),
            # and one write for a burst of requests
            time.sleep(WRITE_DELAY_S)
            item = self._take()
            if item is not None:
                try:
                    _write_states(*item)
                finally:
                    self._done()

    def flush(self) -> None:
        while (item := self._take()) is not None:
            try:
                _write_states(*item)
            finally:
                self._done()
        with self._cond:  # one the thread took is on disk before this returns
            self._cond.wait_for(lambda: self._writing == 0, timeout=5.0)


_cache_writer = _CacheStateWriter()
atexit.register(flush_cache_states)
