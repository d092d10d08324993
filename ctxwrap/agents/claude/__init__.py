"""Claude Code adapter: launcher, PostToolUse hook, loopback Anthropic Messages proxy.

- ``launcher``: ``ctxwrap claude`` — the proxy in this process, a per-launch settings layer
  that adds the hook, Claude Code under a PTY.
- ``hook``: ``ctxwrap hook claude`` — a thin, standard-library client that hands a tool's
  output to the proxy and prints what Claude Code should use instead (fail open).
- ``proxy``: the Claude Code adapter of the shared loopback proxy (``agents/_proxy``: 127.0.0.1,
  a per-launch secret path, forwarding to the real upstream): the bodies it edits, the hook.
- ``anthropic_wire``: the Messages wire format only (no decisions), so another API can sit
  beside it; ``session``: the frozen edit set and the daemon calls (no wire format).
"""
