"""ctxwrap: keep a terminal coding agent's context small without breaking its prompt cache."""

__version__ = "0.1.0"
# Bumped on any incompatible change of the bridge/CLI <-> daemon messages (see protocol.py).
PROTOCOL_VERSION = 3

__all__ = ["PROTOCOL_VERSION", "__version__"]
