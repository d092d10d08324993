"""Config hot reload against a real daemon: config.toml edits take effect without a restart,
a broken edit keeps the last good config in force and is reported, fixing it clears the report.

The daemon watches `$XDG_CONFIG_HOME/ctxwrap/config.toml` with watchdog (lifecycle.ConfigWatcher).
Every file write here is atomic (temp file + rename, as most editors save), so the watcher never
reads a half-written file.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from itertools import count
from pathlib import Path
from typing import Any

import httpx
from support import Xdg, client, ctxwrap, daemon_process

SESSION = "reload-session"
BIG_BASH = "\n".join(f"line {i:05d}: compiling module_{i % 97} ... ok" for i in range(1100))
_ids = count()


def _config_file(xdg: Xdg) -> Path:
    return xdg.config / "ctxwrap" / "config.toml"


def _write_config(xdg: Xdg, text: str) -> None:
    target = _config_file(xdg)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(".config.toml.tmp")
    tmp.write_text(text)
    os.replace(tmp, target)


def _start_session(c: httpx.Client, tmp_path: Path) -> dict[str, Any]:
    r = c.post(
        "/v1/sessions/start",
        json={"session_id": SESSION, "cwd": str(tmp_path), "pid": os.getpid()},
    )
    assert r.status_code == 200, r.text
    return dict(r.json())


def _bash_action(c: httpx.Client) -> str:
    r = c.post(
        "/v1/tool_result",
        json={
            "session_id": SESSION,
            "tool_call_id": f"call-{next(_ids)}",
            "tool_name": "bash",
            "input": {"command": "make all"},
            "text": BIG_BASH + "\n\nCommand exited with code 0",
            "exit_code": 0,
        },
    )
    assert r.status_code == 200, r.text
    return str(r.json()["action"])


def _poll(
    what: str, probe: Callable[[], Any], ok: Callable[[Any], bool], timeout: float = 10
) -> Any:
    end = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < end:
        last = probe()
        if ok(last):
            return last
        time.sleep(0.1)
    raise AssertionError(f"{what}: not seen within {timeout}s (last: {last!r})")


def _health(c: httpx.Client) -> dict[str, Any]:
    return dict(c.get("/v1/health").json())


def test_reload_applies_keeps_last_good_and_reports(xdg: Xdg, tmp_path: Path) -> None:
    assert 36_000 < len(BIG_BASH) < 44_000  # ~10k tokens: over the default 500, under 100000
    with daemon_process(xdg), client(xdg) as c:
        start = _start_session(c, tmp_path)
        assert start["config"]["bash_min_tokens"] == 500
        assert _bash_action(c) == "replace"

        _write_config(xdg, "bash_min_tokens = 100000\n")
        _poll("reload to bash_min_tokens = 100000", lambda: _bash_action(c), lambda a: a == "pass")
        assert _health(c)["config_error"] is None

        # A bad value: reported, naming the key; the last good value stays in force.
        _write_config(xdg, 'bash_min_tokens = "x"\n')
        err = _poll(
            "config_error for a bad value",
            lambda: _health(c)["config_error"],
            lambda e: e is not None,
        )
        assert "bash_min_tokens" in err
        assert _bash_action(c) == "pass"

        status = ctxwrap(xdg, "status", "--json")
        assert status.returncode == 0, status.stderr
        assert "bash_min_tokens" in json.loads(status.stdout)["config_error"]
        text = ctxwrap(xdg, "status")
        assert text.returncode == 0, text.stderr
        assert "config error (last good config in force)" in text.stdout
        assert "bash_min_tokens" in text.stdout

        # Not TOML at all: reported naming the file; still the last good value.
        _write_config(xdg, "bash_min_tokens = = 5\n[broken\n")
        err = _poll(
            "config_error for invalid TOML",
            lambda: _health(c)["config_error"],
            lambda e: e is not None and "TOML" in e,
        )
        assert str(_config_file(xdg)) in err
        assert _bash_action(c) == "pass"
        status = ctxwrap(xdg, "status", "--json")
        assert str(_config_file(xdg)) in json.loads(status.stdout)["config_error"]

        # Fixing the file (same value as the last good one) clears the error.
        _write_config(xdg, "bash_min_tokens = 100000\n")
        _poll("config_error cleared", lambda: _health(c)["config_error"], lambda e: e is None)
        assert _bash_action(c) == "pass"
        text = ctxwrap(xdg, "status")
        assert "config error" not in text.stdout

        # And back down: the daemon digests again without a restart.
        _write_config(xdg, "bash_min_tokens = 2000\n")
        _poll("reload to bash_min_tokens = 2000", lambda: _bash_action(c), lambda a: a == "replace")


def test_prompt_ack_carries_reloaded_config(xdg: Xdg, tmp_path: Path) -> None:
    """The daemon side: after a reload, an Ack (here the reply to POST /v1/prompt) carries it."""
    with daemon_process(xdg), client(xdg) as c:
        _start_session(c, tmp_path)
        _write_config(xdg, "bash_min_tokens = 100000\n")
        _poll("reload", lambda: _bash_action(c), lambda a: a == "pass")
        r = c.post("/v1/prompt", json={"session_id": SESSION, "prompt": "go"})
        assert r.status_code == 200, r.text
        assert r.json()["config"]["bash_min_tokens"] == 100000


def test_turn_end_reply_carries_reloaded_config(xdg: Xdg, tmp_path: Path) -> None:
    """What a live bridge actually reads mid-session (turn_end) must bring the new config,
    else its own threshold stays at the old value: with bash_min_tokens raised to 100000 the
    bridge still sends a 10k-token output, gets `pass` and, taking `pass` for a failure,
    truncates it to a raw tail (ctxwrap-bridge.ts onBash)."""
    with daemon_process(xdg), client(xdg) as c:
        _start_session(c, tmp_path)
        _write_config(xdg, "bash_min_tokens = 100000\n")
        _poll("reload", lambda: _bash_action(c), lambda a: a == "pass")
        r = c.post("/v1/turn_end", json={"session_id": SESSION, "turn_index": 0})
        assert r.status_code == 200, r.text
        body = r.json()
        assert (body.get("config") or {}).get("bash_min_tokens") == 100000
