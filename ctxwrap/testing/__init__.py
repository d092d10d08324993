"""Test and demo support: a scripted model server and an isolated pi home wired to it."""

from ctxwrap.testing.model_server import EXHAUSTED_TEXT, RecordedRequest, ScriptedModelServer
from ctxwrap.testing.pi_home import find_pi, make_pi_agent_dir, pi_command, pi_env

__all__ = [
    "EXHAUSTED_TEXT",
    "RecordedRequest",
    "ScriptedModelServer",
    "find_pi",
    "make_pi_agent_dir",
    "pi_command",
    "pi_env",
]
