"""What the daemon keeps, below the mechanisms: the SQLite store, the raw-output store, the
event log and the per-session runtime state.

Nothing here imports a mechanism, the daemon service or a view: `mechanisms/` and `daemon/`
build on it, and the read-only views (`stats`, `report`, `replay`) open the store directly.
"""
