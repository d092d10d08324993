"""Test and demo support, imported by module.

- :mod:`ctxwrap.testing.model_server` — scripted OpenAI-compatible model server on loopback.
- :mod:`ctxwrap.testing.pi_home` — an isolated, offline pi agent dir wired to that server.

Nothing is imported here so ``python -m ctxwrap.testing.model_server`` runs cleanly.
"""
