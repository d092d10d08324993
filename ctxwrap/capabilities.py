"""Capability catalog for mechanism 3 (lazy skills and tools).

pi lists every skill (and every active tool) in the system prompt up front. ctxwrap strips that
list and lets the model call ``find_capability`` instead; this module is the daemon side of that
tool: a per-session full-text index over tool names/descriptions/parameters and skill
names/descriptions/bodies, ranked with BM25 (SQLite FTS5, ``porter unicode61``).

Also here: the small SKILL.md helpers the daemon needs to hand a skill's body to the model
(frontmatter stripped, relative paths made absolute so the model need not resolve them) and a
debounced watchdog watcher that reports edited SKILL.md files.
"""

from __future__ import annotations

import logging
import os
import re
import sqlite3
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer

log = logging.getLogger(__name__)

__all__ = [
    "SYNONYMS",
    "CapabilityCatalog",
    "CapabilityMatch",
    "SkillDirWatcher",
    "SkillInfo",
    "ToolInfo",
    "parse_skill_frontmatter",
    "read_skill_body",
]


@dataclass(frozen=True)
class ToolInfo:
    name: str
    description: str
    parameters: list[str]


@dataclass(frozen=True)
class SkillInfo:
    name: str
    description: str
    file_path: str
    base_dir: str
    disable_model_invocation: bool = False


@dataclass(frozen=True)
class CapabilityMatch:
    kind: Literal["tool", "skill"]
    name: str
    score: float
    description: str
    file_path: str | None


# --------------------------------------------------------------------------------------------
# SKILL.md helpers
# --------------------------------------------------------------------------------------------

_FRONTMATTER_RE = re.compile(
    r"\A\ufeff?---[ \t]*\r?\n(.*?)(?:\r?\n)?^---[ \t]*(?:\r?\n|\Z)", re.S | re.M
)
_KEY_RE = re.compile(r"^([A-Za-z0-9_-]+)[ \t]*:(?:[ \t]+(.*))?$")


def _split_frontmatter(text: str) -> tuple[str, str]:
    """(frontmatter block, body); an absent or unterminated block means no frontmatter."""
    m = _FRONTMATTER_RE.match(text)
    if not m:
        return "", text.removeprefix("\ufeff")
    return m.group(1), text[m.end() :]


def _unquote(value: str) -> str:
    v = value.strip()
    if len(v) >= 2 and v[0] == v[-1] and v[0] in "\"'":
        inner = v[1:-1]
        # YAML: '' escapes a quote in single-quoted scalars; \" in double-quoted ones.
        return inner.replace("''", "'") if v[0] == "'" else inner.replace('\\"', '"')
    # A trailing " # comment" is a YAML comment on a plain scalar.
    return re.sub(r"\s+#.*$", "", v)


def parse_skill_frontmatter(text: str) -> dict[str, str]:
    """Top-level ``key: value`` pairs of a SKILL.md frontmatter block (keys lower-cased).

    Not a YAML parser: it covers what skills use in practice — plain, quoted, folded (``>``)
    and literal (``|``) scalars and indented continuation lines. Nested mappings (``metadata:``)
    end up as their raw indented text, which ctxwrap never reads. Missing frontmatter → {}.
    """
    block, _ = _split_frontmatter(text)
    out: dict[str, str] = {}
    key: str | None = None
    style = ""  # "", ">" or "|": how continuation lines of the current key are joined
    parts: list[str] = []

    def flush() -> None:
        if key is None:
            return
        if style == "|":
            out[key] = "\n".join(parts).rstrip("\n")
        else:
            out[key] = _unquote(" ".join(p.strip() for p in parts if p.strip()))

    for raw in block.splitlines():
        line = raw.rstrip("\r")
        if not line.strip() or line.lstrip().startswith("#"):
            if style == "|" and key is not None:
                parts.append("")
            continue
        m = _KEY_RE.match(line)
        if m and not line[0].isspace():
            flush()
            key = m.group(1).lower()
            value = (m.group(2) or "").strip()
            if value[:1] in (">", "|") and re.fullmatch(r"[>|][+-]?\d?", value):
                style, parts = value[0], []
            else:
                style, parts = "", [value] if value else []
        elif key is not None:
            parts.append(line.strip() if style != "|" else line)
    flush()
    return out


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("true", "yes", "on", "1")


# A path-like token: not glued to a URL, absolute path, env var, home or e-mail before it, and
# not ending in "." so a sentence's full stop stays outside.
_PATH_TOKEN_RE = re.compile(
    r"(?<![\w\-./~$@:%{}])(\.{1,2}/[\w\-./]*[\w\-/]|[\w\-][\w\-./]*[\w\-/])"
)


def _rewrite_relative_paths(body: str, base_dir: Path) -> str:
    """Make the skill's relative references absolute.

    pi tells the model to resolve them against the skill dir itself; models forget and run
    ``./search.js`` from the project cwd. Rewritten: every ``./x`` / ``../x``, and bare tokens with
    a ``/`` or ``.`` in them (``scripts/x.sh``, ``recalc.py``) that exist in the skill dir. Words
    that merely happen to match a file name without looking like a path are left alone.
    """

    def repl(m: re.Match[str]) -> str:
        tok = m.group(1)
        if tok.startswith(("./", "../")):
            return os.path.normpath(base_dir / tok) + ("/" if tok.endswith("/") else "")
        if "/" not in tok and "." not in tok:
            return tok
        if tok.startswith("."):  # dotfiles like .env are more often the project's own
            return tok
        candidate = base_dir / tok
        try:
            exists = candidate.exists()
        except OSError:
            exists = False
        if not exists:
            return tok
        return os.path.normpath(candidate) + ("/" if tok.endswith("/") else "")

    return _PATH_TOKEN_RE.sub(repl, body)


def _truncation_marker(file_path: str | Path, shown: int, total: int) -> str:
    return (
        f"\n\n[… SKILL.md truncated: {shown} of {total} chars shown. "
        f"Read {file_path} for the rest.]"
    )


def read_skill_body(file_path: str | Path, max_chars: int) -> str:
    """SKILL.md as the model should get it from ``find_capability``.

    Frontmatter stripped (the model already saw name/description in the search result),
    relative paths made absolute against the skill dir, and capped at ``max_chars`` (marker
    included) so one skill cannot flood the context.
    """
    path = Path(file_path).resolve()
    text = path.read_text(encoding="utf-8", errors="replace")
    _, body = _split_frontmatter(text)
    body = _rewrite_relative_paths(body.strip("\n"), path.parent)
    if len(body) <= max_chars:
        return body
    total = len(body)
    # shown <= total, so this is the longest the marker can get.
    room = max_chars - len(_truncation_marker(path, total, total))
    if room <= 0:
        return body[: max(max_chars, 0)]
    cut = body[:room]
    nl = cut.rfind("\n")
    if nl >= room * 0.8:  # prefer a line boundary when it costs little
        cut = cut[:nl]
    cut = cut.rstrip()
    return cut + _truncation_marker(path, len(cut), total)


# --------------------------------------------------------------------------------------------
# Ranking
# --------------------------------------------------------------------------------------------

# Column weights for FTS5 bm25(): the name says most about what a capability is for, the
# description is written for routing, parameter names hint at the domain, and the body is long
# and noisy (usage examples mention many unrelated words), so it only breaks ties.
_W_NAME = 10.0
_W_DESC = 4.0
_W_PARAMS = 1.5
_W_BODY = 0.5

_BODY_INDEX_CHARS = 20_000  # a huge SKILL.md should not dominate index size or BM25 length norm

# Words that carry no routing signal in a capability query. Kept short on purpose: BM25's IDF
# already discounts common words; this list only removes pure glue so an OR-query does not
# match every document on "the".
_STOPWORDS = frozenset(
    re.split(
        r"\s+",
        """a an the to of for in on at by with and or but from into onto as is are be been was were
        it its this that these those my me i you your we our us can could would should will shall
        do does did please some any all how what which when where who why just then than so up out
        about over via using use want need help let lets get make s t""",
    )
)

# Query-side expansion: user phrasing → the words capability descriptions actually use.
# Why a table at all: BM25 has no notion of meaning, and these are the high-traffic gaps
# between how people ask and how skills/tools describe themselves (brand names vs. file
# formats, "google" vs. "web search", "k8s" vs. "kubernetes"). Expansion terms are added as
# extra OR-terms, so they can only add matches, never remove one. Keep entries generic — no
# entry may name a specific skill from the test fixture. Measured effect: see the report in
# tests/unit/test_capabilities.py (accuracy is printed with and without the table).
_SYNONYM_GROUPS: list[tuple[tuple[str, ...], tuple[str, ...]]] = [
    # web
    (("google", "internet", "online", "websearch"), ("web", "search")),
    (("url", "webpage", "website"), ("web", "page")),
    # files and directories (pi's built-in tools describe themselves in these words)
    (("folder", "folders", "dir", "dirs"), ("directory",)),
    (("locate",), ("find", "search")),
    (("show", "view", "display", "cat", "open"), ("read", "contents")),
    (("ts",), ("typescript",)),
    (("js",), ("javascript",)),
    (("py",), ("python",)),
    # media
    (("photo", "photos", "picture", "pictures", "pic", "pics", "png", "jpg", "jpeg"), ("image",)),
    (("shrink", "downscale", "scale", "downsize"), ("resize", "compress")),
    (("cut", "clip", "shorten"), ("trim",)),
    (("mp3", "wav", "m4a", "flac", "recording", "podcast"), ("audio",)),
    (("mp4", "mov", "mkv", "webm"), ("video",)),
    (("aloud", "speak", "voice", "narrate"), ("speech", "audio")),
    (("captions", "subtitles", "subtitle"), ("transcript", "captions")),
    # documents
    (("excel", "spreadsheet", "spreadsheets", "sheet"), ("xlsx", "spreadsheet")),
    (("word",), ("docx", "document")),
    (("powerpoint", "slides", "slide", "deck"), ("pptx", "presentation")),
    # infrastructure and data
    (("k8s", "kubectl"), ("kubernetes",)),
    (("postgres", "psql", "mysql", "sqlite", "db"), ("sql", "database")),
    (("iac",), ("infrastructure", "code")),
    (("container", "containers"), ("docker",)),
    # scheduling
    (
        ("nightly", "night", "daily", "weekly", "hourly", "periodically", "recurring"),
        ("schedule", "recurring"),
    ),
    # collaboration
    (("pr", "prs"), ("pull", "request")),
    (("repo", "repos"), ("repository",)),
    (("tasks", "checklist", "todos"), ("todo",)),
    (("regexp",), ("regex", "regular", "expression")),
]
SYNONYMS: dict[str, tuple[str, ...]] = {
    word: extra for words, extra in _SYNONYM_GROUPS for word in words
}


def _split_identifier(name: str) -> str:
    """``ignoreCase`` / ``web_fetch`` / ``gh-pr-review`` → words, plus the joined form."""
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", name)
    spaced = re.sub(r"[_\-./]+", " ", spaced)
    words = spaced.lower().split()
    joined = "".join(words)
    return " ".join([*words, joined] if len(words) > 1 else words)


def _query_terms(query: str, expand: bool) -> list[str]:
    words = [w for w in re.findall(r"[^\W_]+", _split_identifier(query)) if w]
    terms: list[str] = []
    for w in words:
        if w in _STOPWORDS:
            continue
        terms.append(w)
        if expand:
            terms.extend(SYNONYMS.get(w, ()))
    return list(dict.fromkeys(terms))  # dedupe, keep order


def _fts_query(terms: Iterable[str]) -> str:
    # Each term quoted so FTS5 syntax characters and keywords (AND/OR/NEAR) are literal.
    return " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)


# --------------------------------------------------------------------------------------------
# Catalog
# --------------------------------------------------------------------------------------------

_SCHEMA = """
CREATE VIRTUAL TABLE IF NOT EXISTS caps USING fts5(
    name_text, description, params, body,
    scope UNINDEXED, kind UNINDEXED, name UNINDEXED, file_path UNINDEXED,
    base_dir UNINDEXED, hidden UNINDEXED,
    tokenize = 'porter unicode61'
);
"""


class CapabilityCatalog:
    """Per-session (``scope``) searchable catalog of pi's tools and skills.

    Thread-safe: the daemon's event loop and the SkillDirWatcher thread both call in.
    BM25 statistics are global to the database, so a scope's scores depend slightly on the
    other scopes' documents; ranking within a scope is what matters and sessions of one user
    mostly share the same catalog anyway. Call :meth:`drop` when a session ends.
    """

    def __init__(self, db_path: str | Path = ":memory:", *, expand_synonyms: bool = True) -> None:
        self._lock = threading.RLock()
        self._expand = expand_synonyms
        self._db = sqlite3.connect(str(db_path), check_same_thread=False, isolation_level=None)
        try:
            self._db.executescript(_SCHEMA)
        except sqlite3.OperationalError as e:  # pragma: no cover - every mainstream build has it
            raise RuntimeError(f"SQLite without FTS5 ({sqlite3.sqlite_version}): {e}") from e

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # -- writes ------------------------------------------------------------------------------

    def replace(self, scope: str, tools: Sequence[ToolInfo], skills: Sequence[SkillInfo]) -> None:
        """Make ``scope``'s catalog exactly ``tools`` + ``skills``.

        Names and descriptions come from pi (it already applied its own rules, e.g. name
        collisions); only the body is read here. An unreadable SKILL.md still gets indexed by
        name and description — it is better found than silently missing.
        """
        rows: list[tuple[str, ...]] = []
        for t in tools:
            rows.append(
                self._row(scope, "tool", t.name, t.description, t.parameters, "", "", "", False)
            )
        for s in skills:
            body = _index_body(s.file_path)
            rows.append(
                self._row(
                    scope,
                    "skill",
                    s.name,
                    s.description,
                    [],
                    body,
                    s.file_path,
                    s.base_dir,
                    s.disable_model_invocation,
                )
            )
        with self._lock:
            self._db.execute("BEGIN")
            try:
                self._db.execute("DELETE FROM caps WHERE scope = ?", (scope,))
                self._db.executemany(
                    "INSERT INTO caps (name_text, description, params, body, scope, kind,"
                    " name, file_path, base_dir, hidden) VALUES (?,?,?,?,?,?,?,?,?,?)",
                    rows,
                )
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    def drop(self, scope: str) -> None:
        with self._lock:
            self._db.execute("DELETE FROM caps WHERE scope = ?", (scope,))

    def refresh_skill(self, file_path: str) -> None:
        """Re-read one SKILL.md in every scope that holds it (after the watcher saw a change).

        Deleted file, or no description (pi would not load it) → the skill leaves the catalog.
        Name, description and the disable flag are taken from the new frontmatter.
        """
        fp = str(file_path)
        try:
            text = Path(fp).read_text(encoding="utf-8", errors="replace")
        except OSError:
            text = None
        with self._lock:
            scopes = [
                r[0]
                for r in self._db.execute(
                    "SELECT scope FROM caps WHERE kind = 'skill' AND file_path = ?", (fp,)
                )
            ]
            if not scopes:
                return
            fm = parse_skill_frontmatter(text) if text is not None else {}
            desc = fm.get("description", "").strip()
            self._db.execute("BEGIN")
            try:
                if text is None or not desc:
                    self._db.execute(
                        "DELETE FROM caps WHERE kind = 'skill' AND file_path = ?", (fp,)
                    )
                else:
                    name = fm.get("name") or Path(fp).parent.name
                    body = _split_frontmatter(text)[1][:_BODY_INDEX_CHARS]
                    hidden = _truthy(fm.get("disable-model-invocation"))
                    self._db.execute(
                        "UPDATE caps SET name_text = ?, description = ?, body = ?,"
                        " name = ?, hidden = ? WHERE kind = 'skill' AND file_path = ?",
                        (_split_identifier(name), desc, body, name, str(int(hidden)), fp),
                    )
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    @staticmethod
    def _row(
        scope: str,
        kind: str,
        name: str,
        description: str,
        params: Sequence[str],
        body: str,
        file_path: str,
        base_dir: str,
        hidden: bool,
    ) -> tuple[str, ...]:
        param_text = " ".join(_split_identifier(p) for p in params)
        return (
            _split_identifier(name),
            description,
            param_text,
            body,
            scope,
            kind,
            name,
            file_path,
            base_dir,
            str(int(hidden)),
        )

    # -- reads -------------------------------------------------------------------------------

    def search(self, scope: str, query: str, limit: int = 5) -> list[CapabilityMatch]:
        """Best matches first; ``score`` is -bm25 (higher is better), comparable within a query."""
        terms = _query_terms(query, self._expand)
        if not terms or limit <= 0:
            return []
        sql = (
            "SELECT kind, name, description, file_path, -bm25(caps, ?, ?, ?, ?) AS score"
            " FROM caps WHERE caps MATCH ? AND scope = ? AND hidden = '0'"
            " ORDER BY score DESC, name LIMIT ?"
        )
        # Fetch extra rows: the coverage tie-break below may reorder them.
        args = (_W_NAME, _W_DESC, _W_PARAMS, _W_BODY, _fts_query(terms), scope, max(limit * 4, 12))
        with self._lock:
            rows = self._db.execute(sql, args).fetchall()
        # With a handful of tools (a real pi session has 7-12), BM25's IDF is ~0 for words
        # several tools share, so scores tie. Break ties by how many of the user's words the
        # name and description contain (5-letter stems, enough for contents/content).
        words = {w[:5] for w in re.findall(r"[a-z0-9]+", query.lower()) if len(w) > 2}

        def coverage(name: str, desc: str) -> int:
            have = {w[:5] for w in re.findall(r"[a-z0-9]+", f"{name} {desc}".lower())}
            return len(words & have)

        rows = sorted(
            rows, key=lambda r: (-(float(r[4]) + _COVERAGE_WEIGHT * coverage(r[1], r[2])), r[1])
        )
        rows = rows[:limit]
        return [
            CapabilityMatch(
                kind="skill" if kind == "skill" else "tool",
                name=name,
                score=float(score),
                description=desc,
                file_path=fp or None,
            )
            for kind, name, desc, fp, score in rows
        ]


_COVERAGE_WEIGHT = 0.5


def _index_body(file_path: str) -> str:
    try:
        text = Path(file_path).read_text(encoding="utf-8", errors="replace")
    except OSError as e:
        log.debug("skill body unreadable: %s: %s", file_path, e)
        return ""
    return _split_frontmatter(text)[1][:_BODY_INDEX_CHARS]


# --------------------------------------------------------------------------------------------
# Watcher
# --------------------------------------------------------------------------------------------

SKILL_FILE = "SKILL.md"


class _Handler(FileSystemEventHandler):
    def __init__(self, on_path: Callable[[str], None]) -> None:
        self._on_path = on_path

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.event_type not in ("created", "modified", "deleted", "moved", "closed"):
            return
        # Editors save via temp file + rename, so the interesting path may be the destination;
        # a rename away from SKILL.md is a deletion of the source.
        for p in (event.src_path, getattr(event, "dest_path", "")):
            path = os.fsdecode(p) if p else ""
            if path and os.path.basename(path) == SKILL_FILE:
                self._on_path(path)


class SkillDirWatcher:
    """Watch skill directories recursively; call ``callback(file_path)`` for changed SKILL.md.

    Debounced per path: an editor's save is several events (truncate, write, close, rename);
    the callback runs once, ``debounce`` seconds after the last of them, on a timer thread.
    Directories that do not exist at :meth:`start` are skipped (pi only scans existing ones too).
    """

    def __init__(
        self,
        dirs: Iterable[str | Path],
        callback: Callable[[str], None],
        debounce: float = 0.3,
        *,
        recursive: bool = True,
    ) -> None:
        self._dirs = [Path(d) for d in dirs]
        self._recursive = recursive
        self._callback = callback
        self._debounce = debounce
        self._timers: dict[str, threading.Timer] = {}
        self._lock = threading.Lock()
        self._observer: Observer | None = None  # type: ignore[valid-type]
        self._stopped = False

    def start(self) -> None:
        obs = Observer()
        handler = _Handler(self._schedule)
        seen: set[Path] = set()
        for d in self._dirs:
            try:
                rd = d.resolve()
            except OSError:
                continue
            if rd in seen or not rd.is_dir():
                continue
            seen.add(rd)
            obs.schedule(handler, str(rd), recursive=self._recursive)
        obs.daemon = True
        obs.start()
        self._observer = obs

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            timers = list(self._timers.values())
            self._timers.clear()
        for t in timers:
            t.cancel()
        obs = self._observer
        self._observer = None
        if obs is not None:
            obs.stop()
            obs.join(timeout=5)

    def __enter__(self) -> SkillDirWatcher:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _schedule(self, path: str) -> None:
        with self._lock:
            if self._stopped:
                return
            old = self._timers.pop(path, None)
            if old is not None:
                old.cancel()
            t = threading.Timer(self._debounce, self._fire, args=(path,))
            t.daemon = True
            self._timers[path] = t
            t.start()

    def _fire(self, path: str) -> None:
        with self._lock:
            if self._stopped:
                return
            self._timers.pop(path, None)
        try:
            self._callback(path)
        except Exception:  # the watcher must survive a failing callback
            log.exception("skill watcher callback failed for %s", path)
