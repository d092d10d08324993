"""ctxwrap: keep a terminal coding agent's context small without breaking its prompt cache."""

__version__ = "0.1.0"

__all__ = ["__version__"]
