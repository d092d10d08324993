"""One adapter package per coding agent; each turns its agent's seams into the same daemon calls.

``pi`` (the launcher; its bridge runs inside pi, from ``ctxwrap/_bridge``), ``claude``
(Anthropic Messages) and ``codex`` (OpenAI Responses), the last two on a loopback proxy built
on ``_proxy`` (what they share). docs/architecture.md has them side by side.
"""
