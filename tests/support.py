"""Shared test harness: isolated XDG dirs, a real daemon process, `ctxwrap pi` against the
scripted model server. Everything here runs real processes; nothing is mocked.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from ctxwrap.testing.model_server import ScriptedModelServer

if TYPE_CHECKING:
    from ctxwrap.agents.codex.session import CodexSession
from ctxwrap.testing.pi_home import MODEL, find_pi, make_pi_agent_dir, pi_command, pi_env

CTXWRAP = [sys.executable, "-m", "ctxwrap"]
PI_VERSIONS = ("pi", "pi-0.73")


@dataclass
class Xdg:
    """Per-test runtime/state/config dirs. The runtime dir is short: socket paths max 107 bytes."""

    root: Path
    runtime: Path
    state: Path
    config: Path

    @property
    def socket(self) -> Path:
        return self.runtime / "ctxwrap" / "daemon.sock"

    @property
    def pidfile(self) -> Path:
        return self.runtime / "ctxwrap" / "daemon.pid"

    @property
    def db(self) -> Path:
        return self.state / "ctxwrap" / "ctxwrap.db"

    def env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        env = dict(os.environ if base is None else base)
        env.update(
            XDG_RUNTIME_DIR=str(self.runtime),
            XDG_STATE_HOME=str(self.state),
            XDG_CONFIG_HOME=str(self.config),
            CTXWRAP_NO_SYSTEMD="1",
        )
        for k in [k for k in env if k.startswith("PI_CTX_")]:
            if base is None:
                del env[k]  # the developer's own settings must not leak into tests
        # A daemon revived by a proxy (detached, as for users) can come up after the test's
        # teardown killed the one it knew of: it leaves on its own, not with the suite.
        env.setdefault("PI_CTX_IDLE_EXIT_S", "300")
        return env

    def daemon_pid(self) -> int | None:
        try:
            return int(self.pidfile.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def kill_daemon(self) -> None:
        pid = self.daemon_pid()
        if pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
                os.kill(pid, signal.SIGKILL)


# The tagger from a session's first round: for tests of its answers, batches, tombstones and
# what they cost. By default it waits until the session has saved what a tag call costs
# (`tag_within_savings`), which a scripted session of a few small rounds may never reach;
# tests/e2e/test_tag_budget_e2e.py runs that default with the real agents.
ROUND_ONE_TAGS = {"PI_CTX_TAG_WITHIN_SAVINGS": "false"}


def make_xdg(tmp_path: Path) -> Xdg:
    runtime = Path(tempfile.mkdtemp(prefix="cwt", dir="/tmp"))
    return Xdg(tmp_path, runtime, tmp_path / "state", tmp_path / "config")


@contextlib.contextmanager
def isolated_env(tmp_path: Path, **extra: str) -> Iterator[dict[str, str]]:
    """This process's environment minus ctxwrap/XDG/systemd variables, with private XDG dirs.

    The runtime dir is short (AF_UNIX paths max 108 bytes) and removed afterwards.
    """
    runtime = Path(tempfile.mkdtemp(prefix="cw-rt-"))
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PI_CTX_", "CTXWRAP_", "XDG_", "LISTEN_", "NOTIFY_"))
    }
    env.update(
        HOME=str(tmp_path / "home"),
        XDG_RUNTIME_DIR=str(runtime),
        XDG_STATE_HOME=str(tmp_path / "state"),
        XDG_CONFIG_HOME=str(tmp_path / "config"),
        **extra,
    )
    try:
        yield env
    finally:
        import shutil

        shutil.rmtree(runtime, ignore_errors=True)


def client(xdg: Xdg, timeout: float = 5.0) -> httpx.Client:
    return httpx.Client(
        transport=httpx.HTTPTransport(uds=str(xdg.socket)),
        base_url="http://ctxwrap",
        timeout=timeout,
    )


def wait_ready(xdg: Xdg, timeout: float = 15.0) -> dict[str, Any]:
    end = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < end:
        try:
            with client(xdg, 1.0) as c:
                return dict(c.get("/v1/health").json())
        except (httpx.HTTPError, OSError, ValueError) as exc:
            last = exc
            time.sleep(0.05)
    raise TimeoutError(f"daemon not ready: {last}")


@contextlib.contextmanager
def daemon_process(
    xdg: Xdg, extra_env: Mapping[str, str] | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    env = xdg.env()
    env.update(extra_env or {})
    proc = subprocess.Popen(
        [*CTXWRAP, "daemon", "run"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        wait_ready(xdg)
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGCONT)
            proc.kill()
        proc.wait(10)
        if proc.stderr:
            proc.stderr.close()


def ctxwrap(
    xdg: Xdg, *args: str, env: Mapping[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CTXWRAP, *args],
        env=dict(env) if env is not None else xdg.env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def pi_path(name: str) -> Path:
    import pytest

    found = find_pi(name)
    if found is None:
        pytest.skip(f"{name} is not installed (run scripts/install-tools.sh)")
    return found


@dataclass
class PiRun:
    proc: subprocess.CompletedProcess[str]
    server: ScriptedModelServer
    home: Path
    work: Path
    agent_dir: Path
    elapsed: float
    env: dict[str, str] = field(default_factory=dict)
    ended_at: float = 0.0  # time.time() when the process had exited

    def session_files(self) -> list[Path]:
        return sorted((self.agent_dir / "sessions").rglob("*.jsonl"))

    def session_text(self) -> str:
        return "".join(p.read_text(errors="replace") for p in self.session_files())

    def main_bodies(self) -> list[dict[str, Any]]:
        return [r.body for r in self.server.main_requests]


def tool_contents(body: Mapping[str, Any]) -> list[str]:
    return [str(m.get("content")) for m in body["messages"] if m.get("role") == "tool"]


def request_messages_json(body: Mapping[str, Any]) -> list[str]:
    """Each message of a request as canonical JSON, to compare prefixes byte for byte."""
    return [json.dumps(m, sort_keys=True, ensure_ascii=False) for m in body["messages"]]


# A model that checks its thinking blocks' prefix (Opus 5.5: ctxwrap must edit nothing a later
# block follows), and one the real API does not check (Opus 4.8: ctxwrap masks, and the scripted
# server's check, run anyway, refuses the request — what the guard prevents).
CHECKED_AND_NOT = pytest.mark.parametrize(
    ("model", "guarded"), [("claude-opus-5-5", True), ("claude-opus-4-8", False)]
)


def run_ctxwrap_claude(
    args: Sequence[str], *, cwd: Path, env: Mapping[str, str], timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """`ctxwrap claude ARGS` run to its end; the test fails with the tail of its stderr when it
    fails."""
    proc = subprocess.run(
        [*CTXWRAP, "claude", *args],
        cwd=cwd,
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def run_ctxwrap_pi(
    name: str,
    tmp_path: Path,
    xdg: Xdg,
    script: Sequence[object] | None = None,
    *,
    prompt: str = "go",
    args: Sequence[str] = (),
    aux_rules: Sequence[object] = (),
    extra_env: Mapping[str, str] | None = None,
    server: ScriptedModelServer | None = None,
    home: Path | None = None,
    plain: bool = False,
    timeout: float = 120,
    files: Mapping[str, str] | None = None,
    pi_settings: Mapping[str, Any] | None = None,
    pi_model: str = MODEL,
    pi_api: str = "openai-completions",
    **server_kw: Any,
) -> PiRun:
    """Run `ctxwrap pi … -p PROMPT` (or plain pi with plain=True) against a scripted model."""
    pi = pi_path(name)
    home = home or tmp_path / "home"
    work = home / "work"
    work.mkdir(parents=True, exist_ok=True)
    for rel, text in (files or {}).items():
        (work / rel).parent.mkdir(parents=True, exist_ok=True)
        (work / rel).write_text(text)
    own = server is None
    srv = server or ScriptedModelServer(script or [], aux_rules=aux_rules, **server_kw)
    if own:
        srv.start()
    try:
        # pi's Anthropic client adds /v1/messages to its base URL itself
        url = srv.root_url if pi_api == "anthropic-messages" else srv.base_url
        agent_dir = make_pi_agent_dir(home, url, settings=pi_settings, model=pi_model, api=pi_api)
        env = xdg.env(pi_env(agent_dir, home))
        env["CTXWRAP_PI"] = str(pi)
        env.update(extra_env or {})
        cmd = pi_command(pi, prompt, *args, wrapped=not plain, model=pi_model)
        start = time.monotonic()
        proc = subprocess.run(
            cmd,
            env=env,
            cwd=work,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        elapsed = time.monotonic() - start
        ended_at = time.time()
    finally:
        if own:
            srv.close()
    return PiRun(proc, srv, home, work, agent_dir, elapsed, env, ended_at)


def task_step(prompt: str, description: str = "count lines") -> dict[str, Any]:
    """A scripted model step that has Claude Code run a general-purpose sub-agent (Task)."""
    return {
        "tool_calls": [
            {
                "name": "Task",
                "arguments": {
                    "description": description,
                    "prompt": prompt,
                    "subagent_type": "general-purpose",
                },
            }
        ]
    }


def count_compactions(session_text: str) -> int:
    """The `compaction` entries of pi session files' text."""
    n = 0
    for line in session_text.splitlines():
        try:
            n += json.loads(line).get("type") == "compaction"
        except ValueError:
            continue
    return n


def session_cost(xdg: Xdg) -> dict[str, Any]:
    """`ctxwrap stats --json` cost totals of the only session recorded."""
    sessions = json.loads(ctxwrap(xdg, "sessions", "--all", "--json").stdout)["sessions"]
    assert len(sessions) == 1
    out = ctxwrap(xdg, "stats", "--session", sessions[0]["session_id"], "--json")
    assert out.returncode == 0, out.stderr
    return dict(json.loads(out.stdout)["totals"]["cost"])


class RecordingDaemon:
    """A proxy session's daemon link that records what the session posts and answers as a
    daemon with default settings does (the unit tests of the proxies' sessions)."""

    def __init__(self) -> None:
        self.posts: list[tuple[str, dict[str, Any]]] = []
        self.on_unknown_session: Any = None

    def call(self, path: str, body: dict[str, Any], timeout: float = 1.0) -> dict[str, Any]:
        self.posts.append((path, body))
        return {"config": {}}


def codex_session(
    start_info: Mapping[str, Any] | None = None, **kw: Any
) -> tuple[CodexSession, RecordingDaemon]:
    """A Codex proxy session on a `RecordingDaemon`, no state file and no aux backend; `kw` goes
    to `CodexSession` (`provider`, `compact_config`)."""
    from ctxwrap.agents.codex.session import CodexSession

    daemon = RecordingDaemon()
    sess = CodexSession(
        "thread-1",
        daemon=daemon,  # type: ignore[arg-type]
        state_file=None,
        aux=None,
        start_info={"cwd": "/w", "agent": "codex", **(start_info or {})},
        **kw,
    )
    return sess, daemon
