"""The daemon and replay drive the same mechanism objects (issue 42): swap one mechanism's
class and both change, by construction — replay's savings figures cannot drift from what the
daemon does."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from ctxwrap import protocol as P
from ctxwrap.config import load_config
from ctxwrap.daemon.service import Daemon
from ctxwrap.mechanisms.amnesia import Amnesia
from ctxwrap.mechanisms.chain import Mechanisms, default_mechanisms
from ctxwrap.mechanisms.digest import BashDigest
from ctxwrap.replay._events import Header, Message, ToolCall
from ctxwrap.replay._sim import SessionSimulator, Thresholds

# A build log: long, varied, with the failure a digest keeps — what BashDigest digests.
LOG = "\n".join(
    [f"[{i:04d}] compiling module_{i}.c ... ok ({i % 7} warnings)" for i in range(900)]
    + ["error: undefined reference to `frobnicate'", "make: *** [all] Error 1"]
)


class NeverDigest(BashDigest):
    """A digest policy that keeps every output whole."""

    def wants(self, s: Any, text: str, command: str) -> bool:
        return False


@pytest.fixture
def daemon_for(tmp_path: Path) -> Iterator[Any]:
    made: list[Daemon] = []

    def make(mechanisms: Mechanisms) -> Daemon:
        loaded = load_config(tmp_path / "absent.toml", environ={"CTXWRAP_AUX_BACKEND": "none"})
        d = Daemon(
            loaded,
            socket=tmp_path / "s.sock",
            state_dir=tmp_path / f"state{len(made)}",
            mechanisms=mechanisms,
        )
        made.append(d)
        return d

    yield make
    for d in made:
        d.store.close()


def _live(d: Daemon) -> P.ToolResultReply:
    d.session_start(P.SessionStart(session_id="s1", cwd="/w", pid=0, agent="pi"))
    req = P.ToolResult(
        session_id="s1",
        tool_call_id="c1",
        tool_name="bash",
        input={"command": "make"},
        text=LOG,
        is_error=True,
        exit_code=2,
    )
    return asyncio.run(d.tool_result(req))


def _replay(mechanisms: Mechanisms, fmt: str = "pi") -> Any:
    call = ToolCall("c1", "bash", {"command": "make"}, 30)
    sim = SessionSimulator("s", Thresholds(), mechanisms=mechanisms)
    sim.feed(
        [
            Header(fmt, "s", "/w", 0.0),
            Message("u1", None, "user", 1.0, 20),
            Message("a1", None, "assistant", 2.0, 40, [call], request_key="q1"),
            Message("t1", None, "tool_result", 3.0, len(LOG), [], "c1", "bash", LOG, True),
            Message("a2", None, "assistant", 4.0, 40, [], request_key="q2"),
        ]
    )
    return sim.finish()


def _replayed(mechanisms: Mechanisms) -> list[str]:
    return [i.kind for i in _replay(mechanisms).interventions]


def test_the_default_chain_digests_the_log_live_and_in_replay(daemon_for: Any) -> None:
    reply = _live(daemon_for(default_mechanisms()))
    assert reply.action == "replace" and reply.text is not None and len(reply.text) < len(LOG)
    assert _replayed(default_mechanisms()) == ["digest"]


def test_swapping_one_mechanism_changes_the_daemon_and_replay_alike(daemon_for: Any) -> None:
    chain = replace(default_mechanisms(), digest=NeverDigest())
    assert _live(daemon_for(chain)).action != "replace"
    assert "digest" not in _replayed(chain)


def test_replay_words_the_digest_header_as_the_daemon_does_for_that_agent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The header replay counts is the one the daemon writes for the session's agent profile:
    here a pi that recalls with our tool (pi without bash), Claude Code and Codex with the CLI
    (Codex's by this install's path)."""
    from ctxwrap import protocol as P
    from ctxwrap.protocol import profile_of
    from ctxwrap.state.session import recall_call

    monkeypatch.setitem(P.PROFILES, "pi", P.PROFILES["pi"].model_copy(update={"recall_tool": True}))

    sizes = {
        fmt: next(i for i in _replay(default_mechanisms(), fmt).interventions).replacement_chars
        for fmt in ("pi", "claude", "codex")
    }
    for fmt in ("claude", "codex"):
        longer = len(recall_call(profile_of(fmt), "h")) - len(recall_call(profile_of("pi"), "h"))
        assert sizes[fmt] - sizes["pi"] == longer > 0, fmt
    assert sizes["codex"] > sizes["claude"]


def test_the_chain_is_one_list_in_the_order_a_result_meets_it() -> None:
    chain = default_mechanisms()
    names = [m.name for m in chain]
    assert names == ["bash", "rereads", "amnesia", "writes", "edits", "masking", "thinking"]
    assert names.index("rereads") < names.index("amnesia")  # a repeat is never tagged
    # each names the setting that turns it on and the slice it reads, all real settings
    from ctxwrap.config import Settings

    for m in chain:
        assert m.switch in Settings.model_fields, m.name
        assert set(m.settings) <= set(Settings.model_fields), m.name
    assert chain.aux_task("tag") is chain.amnesia and chain.aux_task("nope") is None


class NeverTag(Amnesia):
    """A tag policy that asks about nothing."""

    def wants(self, s: Any, chars: int) -> bool:
        return False


NOTES = "".join(f"line {i}: a note the agent read once\n" for i in range(400))


def test_swapping_the_tagger_changes_what_the_daemon_asks_and_replay_bounds(
    daemon_for: Any,
) -> None:
    def live(chain: Mechanisms) -> P.ToolResultReply:
        d = daemon_for(chain)
        d.session_start(P.SessionStart(session_id="s1", cwd="/w", pid=0, agent="pi"))
        read = P.ToolResult(
            session_id="s1",
            tool_call_id="r1",
            tool_name="read",
            input={"path": "notes.md"},
            text=NOTES,
        )
        return asyncio.run(d.tool_result(read))

    def bounded(chain: Mechanisms) -> list[str]:
        call = ToolCall("r1", "read", {"path": "notes.md"}, 30)
        sim = SessionSimulator("s", Thresholds(), mechanisms=chain)
        sim.feed(
            [
                Header("pi", "s", "/w", 0.0),
                Message("u1", None, "user", 1.0, 20),
                Message("a1", None, "assistant", 2.0, 40, [call], request_key="q1"),
                Message("t1", None, "tool_result", 3.0, len(NOTES), [], "r1", "read", NOTES),
                Message("a2", None, "assistant", 4.0, 40, [], request_key="q2"),
            ]
        )
        return [i.kind for i in sim.finish().interventions]

    assert live(default_mechanisms()).handle is not None  # kept for recall, a tag asked
    assert bounded(default_mechanisms()) == ["tombstone-bound"]
    chain = replace(default_mechanisms(), amnesia=NeverTag())
    assert live(chain).handle is None
    assert bounded(chain) == []
