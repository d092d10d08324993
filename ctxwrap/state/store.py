"""SQLite (WAL) store: sessions, per-call accounting, aux calls, tags, edits, facts, raw outputs.

The daemon is the only writer. CLI commands open the file read-only, so `ctxwrap stats`
works from any shell even while the daemon is down. No table ever holds an API key: aux
prompts are not stored, and raw outputs are redacted before they are written.
"""

from __future__ import annotations

import errno
import logging
import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, get_args

log = logging.getLogger("ctxwrap.daemon")

SCHEMA_VERSION = 14

# Append-only: migration N brings a database from version N-1 to N.
MIGRATIONS: list[str] = [
    "",  # version 0: empty file
    """
    CREATE TABLE sessions (
        session_id TEXT PRIMARY KEY,
        session_file TEXT,
        cwd TEXT NOT NULL,
        pid INTEGER NOT NULL,
        pi_version TEXT,
        pi_package TEXT,
        model TEXT,
        started_at REAL NOT NULL,
        ended_at REAL,
        end_reason TEXT
    );
    CREATE TABLE llm_calls (
        id INTEGER PRIMARY KEY,
        session_id TEXT NOT NULL,
        call_index INTEGER NOT NULL,
        ts REAL NOT NULL,
        sent_system INTEGER NOT NULL,
        sent_messages INTEGER NOT NULL,
        sent_tools INTEGER NOT NULL,
        saved_bash INTEGER NOT NULL,
        saved_amnesia INTEGER NOT NULL,
        saved_writes INTEGER NOT NULL,
        saved_skills INTEGER NOT NULL,
        saved_tools INTEGER NOT NULL,
        head_changed INTEGER NOT NULL DEFAULT 0,
        message_count INTEGER NOT NULL DEFAULT 0
    );
    CREATE INDEX llm_calls_session ON llm_calls(session_id, ts);
    CREATE INDEX llm_calls_ts ON llm_calls(ts);
    CREATE TABLE turns (
        id INTEGER PRIMARY KEY,
        session_id TEXT NOT NULL,
        ts REAL NOT NULL,
        turn_index INTEGER NOT NULL,
        input_tokens INTEGER NOT NULL,
        output_tokens INTEGER NOT NULL,
        cache_read_tokens INTEGER NOT NULL,
        cache_write_tokens INTEGER NOT NULL,
        model TEXT
    );
    CREATE INDEX turns_session ON turns(session_id);
    CREATE TABLE aux_calls (
        id INTEGER PRIMARY KEY,
        session_id TEXT NOT NULL,
        ts REAL NOT NULL,
        task TEXT NOT NULL,
        mechanism TEXT NOT NULL,
        backend TEXT NOT NULL,
        input_tokens INTEGER NOT NULL,
        output_tokens INTEGER NOT NULL,
        ok INTEGER NOT NULL,
        elapsed_ms REAL NOT NULL,
        error TEXT
    );
    CREATE INDEX aux_calls_session ON aux_calls(session_id, ts);
    CREATE TABLE tags (
        session_id TEXT NOT NULL,
        tool_call_id TEXT NOT NULL,
        tool_name TEXT NOT NULL,
        decision TEXT NOT NULL,
        chars INTEGER NOT NULL,
        ts REAL NOT NULL,
        PRIMARY KEY (session_id, tool_call_id)
    );
    CREATE TABLE edits (
        session_id TEXT NOT NULL,
        tool_call_id TEXT NOT NULL,
        kind TEXT NOT NULL,
        saved_chars INTEGER NOT NULL,
        ts REAL NOT NULL,
        PRIMARY KEY (session_id, tool_call_id, kind)
    );
    CREATE TABLE facts (
        session_id TEXT NOT NULL,
        tool_call_id TEXT NOT NULL,
        path TEXT NOT NULL,
        text TEXT NOT NULL,
        source TEXT NOT NULL,
        created_at REAL NOT NULL,
        PRIMARY KEY (session_id, tool_call_id)
    );
    CREATE TABLE raw_outputs (
        handle TEXT PRIMARY KEY,
        session_id TEXT NOT NULL,
        tool_call_id TEXT NOT NULL,
        tool_name TEXT NOT NULL,
        command TEXT,
        created_at REAL NOT NULL,
        bytes INTEGER NOT NULL,
        lines INTEGER NOT NULL,
        path TEXT NOT NULL
    );
    CREATE INDEX raw_outputs_created ON raw_outputs(created_at);
    CREATE TABLE digests (
        session_id TEXT NOT NULL,
        tool_call_id TEXT NOT NULL,
        original_chars INTEGER NOT NULL,
        digest_chars INTEGER NOT NULL,
        source TEXT NOT NULL,
        ts REAL NOT NULL,
        PRIMARY KEY (session_id, tool_call_id)
    );
    """,
    # 2: which agent ran the session (pi, claude)
    "ALTER TABLE sessions ADD COLUMN agent TEXT NOT NULL DEFAULT 'pi';",
    # 3: cache-priced, compaction-aware accounting (docs/accounting.md). NULL in the new
    # llm_calls columns = recorded by an older bridge (priced as an append-only list).
    """
    ALTER TABLE llm_calls ADD COLUMN sent_prefix_chars INTEGER;
    ALTER TABLE llm_calls ADD COLUMN plain_prefix_chars INTEGER;
    ALTER TABLE llm_calls ADD COLUMN plain_summary_chars INTEGER;
    ALTER TABLE llm_calls ADD COLUMN prompt_index INTEGER;
    ALTER TABLE llm_calls ADD COLUMN model TEXT;
    ALTER TABLE aux_calls ADD COLUMN model TEXT;
    CREATE TABLE session_models (
        id INTEGER PRIMARY KEY,
        session_id TEXT NOT NULL,
        ts REAL NOT NULL,
        model TEXT NOT NULL,
        api TEXT,
        context_window INTEGER,
        price_input REAL,
        price_output REAL,
        price_cache_read REAL,
        price_cache_write REAL,
        compaction_enabled INTEGER,
        reserve_tokens INTEGER,
        keep_recent_tokens INTEGER
    );
    CREATE INDEX session_models_session ON session_models(session_id, ts);
    CREATE TABLE compactions (
        id INTEGER PRIMARY KEY,
        session_id TEXT NOT NULL,
        ts REAL NOT NULL,
        reason TEXT NOT NULL,
        tokens_before INTEGER NOT NULL,
        summary_chars INTEGER NOT NULL,
        summarized_chars INTEGER,
        from_extension INTEGER NOT NULL DEFAULT 0
    );
    CREATE INDEX compactions_session ON compactions(session_id, ts);
    """,
    # 4: statistics records the agent adapter could not deliver (the daemon was away):
    # non-zero marks the session's figures incomplete in `ctxwrap stats`
    "ALTER TABLE sessions ADD COLUMN undelivered INTEGER NOT NULL DEFAULT 0;",
    # 5: argsSig of every call whose result ctxwrap hid (tombstone, removal, mask), so a repeat
    # of that call stays whole after a daemon restart or a resume too (invariant 5)
    """
    CREATE TABLE hidden_sigs (
        session_id TEXT NOT NULL,
        args_sig TEXT NOT NULL,
        PRIMARY KEY (session_id, args_sig)
    );
    """,
    # 6: a session's cache-priced figures per 15-minute bucket, as last priced by the daemon,
    # with what they were priced from (`key`): `ctxwrap stats` reuses them while the key holds
    # instead of pricing every call of every session again (mechanisms/cost_accounting.py)
    """
    CREATE TABLE cost_cache (
        session_id TEXT PRIMARY KEY,
        key TEXT NOT NULL,
        buckets TEXT NOT NULL
    );
    """,
    # 7 (policies, issue 21): a hidden result the agent asked for again — recalled through its
    # handle, or the same call re-issued (mechanisms/needed_again.py, DESIGN.md invariant 8)
    """
    CREATE TABLE needed_again (
        session_id TEXT NOT NULL,
        tool_call_id TEXT NOT NULL,
        how TEXT NOT NULL,
        ts REAL NOT NULL,
        PRIMARY KEY (session_id, tool_call_id, how)
    );
    """,
    # 8: the prompt-cache lifetime a request asked for, where longer than the default (Claude
    # Code's 1-hour cache under a subscription login): the cost model prices its pauses and
    # writes by it. NULL = the daemon's cache_ttl_s.
    "ALTER TABLE llm_calls ADD COLUMN cache_ttl_s REAL;",
    # 9: a compaction whose summarisation request passed the proxy as an ordinary call
    # (Claude Code's): counted, its cost already priced with the calls
    "ALTER TABLE compactions ADD COLUMN priced_as_call INTEGER NOT NULL DEFAULT 0;",
    # 10: the sender's id of a statistics record: the bridge sends a record again when its
    # answer was lost (a daemon killed after the insert), and it must count once
    """
    ALTER TABLE llm_calls ADD COLUMN record_id TEXT;
    ALTER TABLE turns ADD COLUMN record_id TEXT;
    CREATE UNIQUE INDEX llm_calls_record ON llm_calls(session_id, record_id);
    CREATE UNIQUE INDEX turns_record ON turns(session_id, record_id);
    """,
    # 11: the call a turn's provider usage is of (llm_calls.id; NULL: a side request, or an
    # older adapter): the cost model prices that call on the cache entry the provider read;
    # the call_index a call's prefixes were measured against where not the previous call's
    """
    ALTER TABLE turns ADD COLUMN llm_call_id INTEGER;
    ALTER TABLE llm_calls ADD COLUMN prefix_of INTEGER;
    """,
    # 12: a try the upstream answered with an error status (NULL: no answer at all, the
    # connection failed): the agent tries again, the provider bills nothing, so it is no
    # LLM call and costs nothing (docs/accounting.md)
    """
    CREATE TABLE failed_tries (
        id INTEGER PRIMARY KEY,
        session_id TEXT NOT NULL,
        ts REAL NOT NULL,
        status INTEGER
    );
    CREATE INDEX failed_tries_session ON failed_tries(session_id, ts);
    """,
    # 13: earlier turns' thinking the provider's own edit left out of a request (Claude Code:
    # the old-thinking mechanism), chars: plain carried it; an older reader sums without it
    "ALTER TABLE llm_calls ADD COLUMN saved_thinking INTEGER NOT NULL DEFAULT 0;",
    # 14: history masks apart from the tagger's tombstones (they were in saved_amnesia, and
    # calls recorded before stay so): `ctxwrap stats` names the mechanism that saved
    "ALTER TABLE llm_calls ADD COLUMN saved_masking INTEGER NOT NULL DEFAULT 0;",
]


def agent_of(row: dict[str, Any]) -> str:
    """The session's agent: SessionStart.agent when the caller passes it, else from the package."""
    from ctxwrap.protocol import Agent  # pydantic: not on the read-only views' import path

    agent = row.get("agent")
    if agent in get_args(Agent):
        return str(agent)
    return "claude" if "claude-code" in str(row.get("pi_package") or "") else "pi"


class SchemaTooNew(RuntimeError):
    pass


# SQLite primary result codes that mean "the disk does not take writes" (sqlite3.h).
_SQLITE_READONLY, _SQLITE_IOERR, _SQLITE_FULL = 8, 10, 13
_DISK_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EROFS}


def disk_write_failure(exc: BaseException) -> str | None:
    """A short cause when ``exc`` means the disk refuses writes (full, quota, I/O error,
    read-only), else None. Such failures degrade the daemon; anything else is a bug."""
    if isinstance(exc, sqlite3.OperationalError):
        code = getattr(exc, "sqlite_errorcode", None)
        primary = code & 0xFF if isinstance(code, int) else None
        text = str(exc)
        if primary in (_SQLITE_READONLY, _SQLITE_IOERR, _SQLITE_FULL) or any(
            m in text for m in ("disk is full", "disk I/O error", "readonly database")
        ):
            return text
        return None
    if isinstance(exc, OSError) and exc.errno in _DISK_ERRNOS:
        return os.strerror(exc.errno)
    return None


def free_space(path: Path) -> str:
    """'N bytes free' (or why that is unknown) for the filesystem holding ``path``."""
    import shutil

    for candidate in (path, *path.parents):
        try:
            return f"{shutil.disk_usage(candidate).free:,} bytes free"
        except OSError:
            continue
    return "free space unknown"


class WriteHealth:
    """What failed to reach the disk, per component, until a later write there succeeds.

    Writes that fail because the disk is full must not fail requests (the model still needs
    its digest); they are recorded here so /v1/health can say the daemon is degraded and why.
    """

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self._failing: dict[str, tuple[str, float]] = {}
        self.lost_writes = 0

    def failed(self, component: str, cause: str) -> None:
        self.lost_writes += 1
        if component not in self._failing:
            log.error("%s: writes fail (%s): %s", component, free_space(self.state_dir), cause)
            self._failing[component] = (cause, time.time())

    def ok(self, component: str) -> None:
        if self._failing.pop(component, None) is not None:
            log.warning("%s: writes succeed again", component)

    @property
    def degraded(self) -> str | None:
        """One line for health/status/doctor, or None when every write lands."""
        if not self._failing:
            return None
        parts = [
            f"{component} writes fail since {time.strftime('%H:%M:%S', time.localtime(since))}"
            f" ({cause})"
            for component, (cause, since) in sorted(self._failing.items())
        ]
        return (
            f"{'; '.join(parts)}; {self.lost_writes} write(s) lost; state dir "
            f"{self.state_dir}: {free_space(self.state_dir)}"
        )


_WRITE_VERBS = ("INSERT", "UPDATE", "DELETE", "REPLACE")


class GuardedConnection(sqlite3.Connection):
    """A connection whose autocommit writes survive a full disk.

    Every single-statement write (INSERT/UPDATE/DELETE/REPLACE outside an explicit
    transaction) that fails with a disk error is recorded in ``health`` and dropped: the
    statement rolled itself back, and the request that made it goes on. Reads, transaction
    control and writes inside a transaction raise as usual (their caller must roll back).
    """

    health: WriteHealth | None = None

    def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor:
        guarded = (
            self.health is not None
            and not self.in_transaction
            and sql.lstrip()[:7].upper().startswith(_WRITE_VERBS)
        )
        if not guarded:
            return super().execute(sql, parameters)
        assert self.health is not None
        try:
            cur = super().execute(sql, parameters)
        except sqlite3.OperationalError as exc:
            cause = disk_write_failure(exc)
            if cause is None:
                raise
            self.health.failed("database", cause)
            return super().execute("SELECT 1 WHERE 0")  # an empty cursor: nothing was written
        self.health.ok("database")
        return cur


def connect(path: Path, *, readonly: bool = False) -> sqlite3.Connection:
    if readonly:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5.0)
    else:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        # Created 0600 whatever the umask; SQLite gives -wal/-shm the database file's mode.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            if os.fstat(fd).st_mode & 0o077:  # left readable by an older version
                os.fchmod(fd, 0o600)
        finally:
            os.close(fd)
        # check_same_thread=False: large spill files are digested in a worker thread; SQLite is
        # compiled serialized (threadsafety 3) and every write is one autocommit statement.
        conn = sqlite3.connect(
            path,
            timeout=5.0,
            isolation_level=None,
            check_same_thread=False,
            factory=GuardedConnection,
        )
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
    conn.row_factory = sqlite3.Row
    return conn


def migrate(conn: sqlite3.Connection) -> int:
    version = int(conn.execute("PRAGMA user_version").fetchone()[0])
    if version > SCHEMA_VERSION:
        raise SchemaTooNew(
            f"database schema {version} is newer than this ctxwrap ({SCHEMA_VERSION})"
        )
    for target in range(version + 1, SCHEMA_VERSION + 1):
        conn.execute("BEGIN")
        for stmt in filter(None, (s.strip() for s in MIGRATIONS[target].split(";"))):
            conn.execute(stmt)
        conn.execute(f"PRAGMA user_version = {target}")
        conn.execute("COMMIT")
    return SCHEMA_VERSION


class Store:
    """Thin typed access; every write is one short statement (the daemon is single-threaded)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.conn = connect(path)
        migrate(self.conn)
        # Only after the migration: a disk that is full at start-up must fail start-up loudly.
        self.health = WriteHealth(path.parent)
        if isinstance(self.conn, GuardedConnection):
            self.conn.health = self.health

    @property
    def degraded(self) -> str | None:
        """Why state writes are being lost (disk full, I/O error), or None."""
        return self.health.degraded

    def close(self) -> None:
        self.conn.close()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        self.conn.execute("BEGIN")
        try:
            yield self.conn
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")

    def insert(
        self, table: str, row: dict[str, Any], *, replace: bool = False, ignore: bool = False
    ) -> bool:
        """Whether a row was written (`ignore`: not when it repeats a unique key)."""
        cols = ", ".join(row)
        marks = ", ".join("?" for _ in row)
        verb = "INSERT OR REPLACE" if replace else "INSERT OR IGNORE" if ignore else "INSERT"
        cur = self.conn.execute(
            f"{verb} INTO {table} ({cols}) VALUES ({marks})", tuple(row.values())
        )
        return cur.rowcount != 0

    def upsert_session(self, row: dict[str, Any]) -> None:
        # A resumed session keeps its first start time and its history.
        row = {**row, "agent": agent_of(row)}
        self.conn.execute(
            """INSERT INTO sessions (session_id, session_file, cwd, pid, pi_version, pi_package, model, started_at, agent)
               VALUES (:session_id, :session_file, :cwd, :pid, :pi_version, :pi_package, :model, :started_at, :agent)
               ON CONFLICT(session_id) DO UPDATE SET session_file=excluded.session_file, cwd=excluded.cwd,
                 pid=excluded.pid, pi_version=excluded.pi_version, pi_package=excluded.pi_package,
                 model=excluded.model, agent=excluded.agent, ended_at=NULL, end_reason=NULL""",
            row,
        )

    def end_session(
        self, session_id: str, reason: str, at: float | None = None, *, undelivered: int = 0
    ) -> None:
        self.conn.execute(
            "UPDATE sessions SET ended_at=?, end_reason=?, undelivered=undelivered+?"
            " WHERE session_id=? AND ended_at IS NULL",
            (at or time.time(), reason, undelivered, session_id),
        )

    def query(self, sql: str, params: tuple[Any, ...] | dict[str, Any] = ()) -> list[sqlite3.Row]:
        return list(self.conn.execute(sql, params))
