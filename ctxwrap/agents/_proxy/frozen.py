"""A session's files, the same for every proxy adapter: the frozen edit set (append-only) and
the prompt-cache state of its conversations (replaced whole)."""

from __future__ import annotations

import contextlib
import json
import os
import threading
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
    """Replace the file atomically (0600); a failure keeps the old one."""
    if path is None:
        return
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(dump_states(states), fh)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()
