"""One adapter package per coding agent; each turns its agent's seams into the same daemon calls.

``claude`` (Anthropic Messages) and ``codex`` (OpenAI Responses) run a loopback proxy built on
``_proxy`` (what they share); pi's adapter is the TypeScript bridge in ``ctxwrap/_bridge`` with
its launcher in ``ctxwrap/launch/pi.py``. docs/architecture.md has them side by side.
"""
