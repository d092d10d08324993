"""The tagger's pace is known from the start of a session (issue 43): the daemon's registration
reply carries the latest tag rounds of earlier sessions with the same aux runner
(`tag_pace_ms`), and the proxies' tag wait starts from them instead of a blind first wait
(`FIRST_WAIT_S`, 250 ms once per session with a slow tagger). The bridge's twin:
tests/node/tag_pace.test.ts; the whole path with the real pi: tests/e2e/test_pi_late_tags.py.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ctxwrap import protocol as P
from ctxwrap.agents._proxy.tag_wait import FIRST_WAIT_S, TagWait
from ctxwrap.agents.codex.session import CodexSession
from ctxwrap.config import load_config
from ctxwrap.daemon.service import Daemon


def _daemon(tmp_path: Path, environ: dict[str, str] | None = None) -> Daemon:
    loaded = load_config(tmp_path / "absent.toml", environ=environ or {})
    return Daemon(loaded, socket=tmp_path / "s.sock", state_dir=tmp_path / "state")


def _start(d: Daemon, sid: str, agent: str) -> P.SessionStartReply:
    return d.session_start(P.SessionStart(session_id=sid, cwd="/w", pid=os.getpid(), agent=agent))


def _aux(d: Daemon, sid: str, task: str, elapsed_ms: float, backend: str = "upstream") -> None:
    d.aux.record(sid, task, backend, 100, 5, True, elapsed_ms, None)


def test_the_registration_reply_tells_the_taggers_latest_rounds(tmp_path: Path) -> None:
    d = _daemon(tmp_path)
    assert _start(d, "c1", "claude").tag_pace_ms == []  # nothing known yet
    for ms in (700.0, 810.0, 905.0, 790.0):
        _aux(d, "c1", "tag", ms)
    _aux(d, "c1", "digest", 40.0)  # not a tag round
    # the next Claude Code session: the latest three tag rounds, oldest first
    assert _start(d, "c2", "claude").tag_pace_ms == [810.0, 905.0, 790.0]
    # another agent's upstream is another model; pi runs its tags on its own providers
    assert _start(d, "x1", "codex").tag_pace_ms == []
    assert _start(d, "p1", "pi").tag_pace_ms == []
    _aux(d, "p1", "tag", 60.0, backend="pi")
    assert _start(d, "p2", "pi").tag_pace_ms == [60.0]
    d.store.close()


def test_with_the_daemons_own_aux_backend_every_agent_shares_its_pace(tmp_path: Path) -> None:
    d = _daemon(
        tmp_path,
        {"PI_CTX_AUX_BACKEND": "http", "PI_CTX_AUX_BASE_URL": "http://127.0.0.1:9/v1"},
    )
    assert not d.aux.delegated()
    _start(d, "c1", "claude")
    _aux(d, "c1", "tag", 120.0, backend="http")
    _aux(d, "c1", "tag", 500.0, backend="upstream")  # not the runner the next session uses
    assert _start(d, "p1", "pi").tag_pace_ms == [120.0]
    d.store.close()


def test_a_known_slow_tagger_is_not_waited_for_even_once() -> None:
    blind = TagWait()
    assert blind.allowance(0.4) == FIRST_WAIT_S  # before: 250 ms for a 0.8 s tagger
    wait = TagWait()
    wait.known([800.0, 820.0, 790.0])
    assert wait.allowance(0.4) == 0.0
    fast = TagWait()
    fast.known([40, 55.5])
    assert fast.allowance(0.4) == 0.4  # a fast one: the whole budget from the first round


def test_what_this_session_measured_wins_and_odd_values_are_ignored() -> None:
    wait = TagWait()
    token = wait.begin()
    wait.end(token)  # measured here: instant
    wait.known([900.0, 900.0, 900.0])
    assert wait.allowance(0.4) == 0.4
    for odd in (None, "800", [True, "x", -5, float("inf")], {"ms": 800}):
        w = TagWait()
        w.known(odd)
        assert w.allowance(0.4) == FIRST_WAIT_S


class _Daemon:
    def __init__(self, reply: dict[str, Any]) -> None:
        self.reply = reply
        self.on_unknown_session: Any = None

    def call(self, path: str, body: dict[str, Any], timeout: float = 1.0) -> dict[str, Any]:
        return self.reply


def test_the_proxy_session_takes_the_pace_from_its_registration() -> None:
    for reply, allowance in (
        ({"config": {}, "tag_pace_ms": [800.0, 850.0, 900.0]}, 0.0),
        ({"config": {}}, FIRST_WAIT_S),  # an older daemon: the blind first wait, as before
    ):
        sess = CodexSession(
            "thread-1",
            daemon=_Daemon(reply),  # type: ignore[arg-type]
            state_file=None,
            aux=None,
            start_info={"cwd": "/w", "agent": "codex"},
            provider="openai",
            compact_config={},
        )
        sess.ensure_registered()
        assert sess.tag_wait.allowance(0.4) == allowance
