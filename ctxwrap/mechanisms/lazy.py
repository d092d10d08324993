"""Mechanism 3, lazy skills and tools: the catalog the adapter strips from the system prompt
lives here, searched by `find_capability`.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from ctxwrap import protocol as P

log = logging.getLogger("ctxwrap.daemon")
MAX_WATCHED_SKILL_DIRS = 256  # one inotify watch each; skills beyond are still searchable


class Capabilities:
    """Per-session catalogs of tools and skills; SKILL.md files re-read when they change."""

    def __init__(self) -> None:
        self._catalog: Any = None  # CapabilityCatalog, created on first use (keeps start-up light)
        self._watcher: Any = None
        self._watched_dirs: set[str] = set()
        # Sessions whose catalog arrived: a search for any other is answered "not ready", never
        # "nothing matched" (a restarted daemon, or a search that overtook the registration).
        self._ready: set[str] = set()

    def update(self, req: P.SessionStart | P.CatalogUpdate) -> None:
        try:
            from ctxwrap.capabilities import CapabilityCatalog, SkillInfo, ToolInfo

            if self._catalog is None:
                self._catalog = CapabilityCatalog()
            self._catalog.replace(
                req.session_id,
                [ToolInfo(t.name, t.description, list(t.parameters)) for t in req.tools],
                [
                    SkillInfo(
                        s.name, s.description, s.file_path, s.base_dir, s.disable_model_invocation
                    )
                    for s in req.skills
                ],
            )
            self._ready.add(req.session_id)
            self._watch_skill_dirs({str(Path(s.file_path).parent) for s in req.skills})
        except Exception as exc:  # a broken catalog must not break the session
            log.warning("catalog update failed: %s", exc)

    def _watch_skill_dirs(self, dirs: set[str]) -> None:
        """Watch the directory of each catalogued skill file, not below it: a skill path is
        the adapter's (hostile) data, and a recursive watch of its parent's parent was a walk
        of the whole filesystem for a skill at `/x/SKILL.md`. New skills reach the catalog with
        the adapter's next catalog update; the watch only keeps known ones fresh."""
        dirs -= self._watched_dirs
        if not dirs or len(self._watched_dirs) >= MAX_WATCHED_SKILL_DIRS:
            return
        from ctxwrap.capabilities import SkillDirWatcher

        room = MAX_WATCHED_SKILL_DIRS - len(self._watched_dirs)
        self._watched_dirs |= set(sorted(dirs)[:room])
        if self._watcher is not None:
            self._watcher.stop()
        self._watcher = SkillDirWatcher(
            sorted(self._watched_dirs), self._catalog.refresh_skill, recursive=False
        )
        self._watcher.start()

    def forget(self, session_id: str) -> None:
        self._ready.discard(session_id)
        if self._catalog is not None:
            self._catalog.drop(session_id)

    def search(self, req: P.CapabilitySearch, skill_max_chars: int) -> P.CapabilityReply:
        if self._catalog is None or req.session_id not in self._ready:
            return P.CapabilityReply(matches=[], catalog_ready=False)
        from ctxwrap.capabilities import read_skill_body

        found = self._catalog.search(req.session_id, req.query, limit=4)
        matches = [
            P.CapabilityMatchOut(
                kind=m.kind, name=m.name, score=round(m.score, 3), description=m.description[:300]
            )
            for m in found
        ]
        reply = P.CapabilityReply(matches=matches)
        if found:
            best = found[0]
            if best.kind == "skill" and best.file_path:
                reply.skill_path = best.file_path
                try:
                    reply.skill_body = read_skill_body(best.file_path, skill_max_chars)
                except (OSError, ValueError) as exc:
                    # Catalogued, then moved or deleted: say so rather than fail the tool call.
                    reason = exc.strerror if isinstance(exc, OSError) else "unreadable"
                    reply.skill_body = (
                        f"[ctxwrap: the skill file {best.file_path} can no longer be read "
                        f"({reason or type(exc).__name__}); it was moved or deleted]"
                    )
            elif best.kind == "tool":
                reply.activate_tool = best.name
        return reply

    def stop(self) -> None:
        if self._watcher is not None:
            self._watcher.stop()
