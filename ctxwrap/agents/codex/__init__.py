"""The Codex CLI adapter: launcher + loopback Responses proxy (docs/architecture.md, "Codex CLI").

Codex's hooks cannot replace a tool's output, so every mechanism runs in the proxy, on the
request that first carries an output; no command is ever rewritten.
"""
