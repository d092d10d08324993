"""How long a proxied request may wait for its tail's RETAIN/DROP tags (issue 43).

A request on its way to the model is the agent's turn: it waits for a tag only while the
tagger has been answering within the wait (`tag_wait_ms`), so a fast local tagger still drops
in the tail, and a slow one (a remote small model, ~0.8 s) never holds a turn back. A tag
that comes later is not lost: it is RETAIN now (invariant 4), and a late DROP becomes a history
mask where hiding is paid for anyway (a cold boundary, or a warm rewrite that pays back).

The daemon sends the tagger's latest rounds in earlier sessions at registration (`known`), so a
session starts measured; only when none are known (a first session, another aux runner) may
its first round wait `FIRST_WAIT_S` once. Each round's time is measured whether anyone waited
or not.
"""

from __future__ import annotations

import itertools
import statistics
import threading
import time
from collections import deque

RECENT_ROUNDS = 3
# Before the tagger's pace is known: enough for a local model's answer (tens of ms, more on a
# loaded machine), a small price once per session for a slow one.
FIRST_WAIT_S = 0.25


class TagWait:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._recent: deque[float] = deque(maxlen=RECENT_ROUNDS)
        self._running: dict[int, float] = {}
        self._tokens = itertools.count()

    def known(self, paces_ms: object) -> None:
        """The tagger's latest rounds in earlier sessions (ms, oldest first: the registration
        reply's `tag_pace_ms`), taken while nothing has been measured here; anything else in
        the list ignored."""
        if not isinstance(paces_ms, list):
            return
        seconds = [
            v / 1000
            for v in paces_ms
            if isinstance(v, int | float) and not isinstance(v, bool) and 0 < v < 1e9
        ]
        with self._lock:
            if not self._recent:
                self._recent.extend(seconds[-RECENT_ROUNDS:])

    def begin(self) -> int:
        """A tag round's aux call starts now; `end` with the token when it settled."""
        with self._lock:
            token = next(self._tokens)
            self._running[token] = time.monotonic()
            return token

    def end(self, token: int) -> None:
        with self._lock:
            started = self._running.pop(token, None)
            if started is not None:
                self._recent.append(time.monotonic() - started)

    def allowance(self, budget_s: float) -> float:
        """Seconds this request may wait for pending tags: the budget while the tagger's
        recent rounds fit in it (a round still running past it counting as one that did not),
        else nothing; before any round was measured, `FIRST_WAIT_S` unless a round has run
        longer than that already."""
        if budget_s <= 0:
            return 0.0
        now = time.monotonic()
        with self._lock:
            recent = list(self._recent)
            running = [now - t for t in self._running.values()]
        if not recent:
            first = min(budget_s, FIRST_WAIT_S)
            return 0.0 if any(r > first for r in running) else first
        seen = recent + [r for r in running if r > budget_s]
        return 0.0 if statistics.median(seen[-RECENT_ROUNDS:]) > budget_s else budget_s
