"""What the daemon keeps, below the mechanisms: the SQLite store, the raw-output store, the
event log, the per-session runtime state and the daemon's pidfile (which the CLI and the views
read to tell whether a daemon runs).

Nothing here imports a mechanism, the daemon service or a view: `mechanisms/` and `daemon/`
build on it, and the read-only views (`stats`, `report`, `replay`) open the store directly.
"""
