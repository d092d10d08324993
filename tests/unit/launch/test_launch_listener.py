"""The launch opens the proxy's door before the proxy exists (launch/listener.py), Claude Code's
HTTP hooks have a door of their own (agents/claude/hook.py), and the launchers share their
daemon and PATH helpers (launch/daemon.py). Real sockets, real threads, real processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from ctxwrap.agents._proxy.plain import plain_forwarding
from ctxwrap.agents.claude.hook import SECRET_HEADER, HookServer
from ctxwrap.launch.daemon import path_with_ctxwrap
from ctxwrap.launch.listener import Listener, ProxySetup

ROOT = Path(__file__).resolve().parents[3]


class _Upstream(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        out = json.dumps({"path": self.path, "got": body.decode()}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, format: str, *args: Any) -> None:
        return


@pytest.fixture
def upstream() -> Any:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Upstream)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def test_a_request_sent_before_the_proxy_exists_is_served_once_it_does(upstream: str) -> None:
    """The agent starts with the address first: its request waits in the port's backlog (never
    refused) until the proxy, built on a thread, serves it."""
    listener = Listener()
    release = threading.Event()

    def build() -> Any:
        release.wait(5)
        return plain_forwarding(listener, upstream, "test")

    setup = ProxySetup(build, "test", fallback=lambda: None)  # type: ignore[arg-type,return-value]
    setup.start()
    got: list[httpx.Response] = []
    url = f"http://127.0.0.1:{listener.port}/{listener.secret}/messages"
    client = threading.Thread(target=lambda: got.append(httpx.post(url, content=b"hi")))
    client.start()
    time.sleep(0.3)
    assert not got and not setup.done  # connected, waiting: not refused
    release.set()
    client.join(10)
    assert got[0].status_code == 200
    assert got[0].json() == {"path": "/v1/messages", "got": "hi"}
    assert setup.finish() is not None


def test_a_proxy_that_cannot_be_built_forwards_plainly(
    upstream: str, capsys: pytest.CaptureFixture[str]
) -> None:
    listener = Listener()

    def build() -> Any:
        raise ImportError("no module named broken")

    setup = ProxySetup(build, "Claude Code", lambda: plain_forwarding(listener, upstream, "test"))
    setup.start()
    assert setup.get(5) is None
    assert "cannot set up the Claude Code proxy (ImportError" in capsys.readouterr().err
    url = f"http://127.0.0.1:{listener.port}/{listener.secret}/messages"
    assert httpx.post(url, content=b"x").json() == {"path": "/v1/messages", "got": "x"}
    assert httpx.post(f"http://127.0.0.1:{listener.port}/wrong/messages").status_code == 404
    assert setup.finish() is None


def test_an_agent_gone_before_the_proxy_is_up_is_not_waited_for() -> None:
    setup = ProxySetup(lambda: time.sleep(30), "test", fallback=lambda: None)  # type: ignore[arg-type,return-value]
    setup.start()
    t0 = time.monotonic()
    assert setup.finish() is None
    assert time.monotonic() - t0 < 0.5


class _Proxy:
    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.events: list[dict[str, Any]] = []

    def handle_hook(self, raw: bytes) -> Any:
        self.events.append(json.loads(raw))
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def _post(hooks: HookServer, body: dict[str, Any], secret: str | None = None) -> httpx.Response:
    entry = hooks.hook_entry()
    headers = dict(entry["headers"]) if secret is None else {SECRET_HEADER: secret}
    return httpx.post(entry["url"], json=body, headers=headers, timeout=10)


def test_the_hook_door_has_no_secret_in_its_url_and_always_answers() -> None:
    digest = {"hookSpecificOutput": {"hookEventName": "PostToolUse", "updatedToolOutput": "d"}}
    proxy = _Proxy(digest)
    hooks = HookServer()
    hooks.serve(lambda timeout: proxy)
    try:
        entry = hooks.hook_entry()
        assert hooks.listener.secret not in entry["url"]
        assert entry["url"] == f"http://127.0.0.1:{hooks.listener.port}/hook"
        got = _post(hooks, {"session_id": "s", "tool_name": "Bash"})
        assert (got.status_code, got.json()) == (200, digest)
        assert proxy.events == [{"session_id": "s", "tool_name": "Bash"}]
        assert _post(hooks, {}, secret="not-it").status_code == 404
        assert len(proxy.events) == 1  # a request without the secret reaches nothing
        # nothing to say, or our failure: 200 and an empty body (no "hook error", no record)
        for answer in ({}, RuntimeError("daemon gone")):
            proxy.answer = answer
            got = _post(hooks, {"session_id": "s"})
            assert (got.status_code, got.content) == (200, b"")
    finally:
        hooks.close()


def test_a_hook_before_the_proxy_is_built_waits_for_it_then_fails_open() -> None:
    hooks = HookServer()
    waited: list[float] = []
    hooks.serve(lambda timeout: waited.append(timeout))  # never built: None
    try:
        got = _post(hooks, {"session_id": "s"})
        assert (got.status_code, got.content) == (200, b"") and waited and waited[0] > 1
    finally:
        hooks.close()


def test_the_launchers_share_one_daemon_and_path_helper() -> None:
    """Issue 42 item 4: one copy, in launch/daemon.py."""
    for agent in ("pi", "claude", "codex"):
        text = (ROOT / "ctxwrap" / "agents" / agent / "launcher.py").read_text()
        assert "def _ensure_daemon(" not in text and "def _path_with_ctxwrap(" not in text
        assert "from ctxwrap.launch.daemon import" in text, agent
    here = str(Path(sys.executable).parent)
    assert path_with_ctxwrap("/usr/bin") == f"/usr/bin{os.pathsep}{here}"
    assert path_with_ctxwrap(f"/usr/bin{os.pathsep}{here}") == f"/usr/bin{os.pathsep}{here}"
    assert path_with_ctxwrap("") == here


def _launch_in_a_child(tmp_path: Path, code: str, extra: dict[str, str]) -> Any:
    """Run a launcher `code` in a fresh Python with its own home and XDG dirs, no exit line and
    no status-line setting; what it printed last, as JSON."""
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    env = {
        **os.environ,
        "HOME": str(tmp_path),
        "XDG_RUNTIME_DIR": str(runtime),
        "XDG_STATE_HOME": str(tmp_path / "state"),
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "ANTHROPIC_BASE_URL": "http://127.0.0.1:9",
        "CTXWRAP_NO_SYSTEMD": "1",
        "PI_CTX_EXIT_LINE": "0",
        **extra,
    }
    env.pop("PI_CTX_STATS_WIDGET", None)
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.splitlines()[-1])


@pytest.mark.parametrize("agent", ["claude", "codex"])
def test_the_agent_starts_before_the_proxy_is_imported(agent: str, tmp_path: Path) -> None:
    """What the agent waits for at launch is the standard library: the proxy's imports (httpx,
    the edit engine, pydantic) come after its start, beside it."""
    code = (
        "import sys, json\n"
        f"from ctxwrap.agents.{agent} import launcher\n"
        "def fake(argv, env, on_started=None):\n"
        "    seen = sorted(m for m in ('httpx', 'pydantic', 'ctxwrap.engine.edits',\n"
        f"                             'ctxwrap.agents.{agent}.proxy') if m in sys.modules)\n"
        "    print(json.dumps(seen)); return 0\n"
        "launcher.run_child = fake\n"
        f"sys.exit(launcher.run_{agent}(['exec', 'hi'] if '{agent}' == 'codex' else ['-p', 'hi']))\n"
    )
    env = {"CTXWRAP_CLAUDE": "/bin/true", "CTXWRAP_CODEX": "/bin/true"}
    env["OPENAI_BASE_URL"] = "http://127.0.0.1:9/v1"
    assert _launch_in_a_child(tmp_path, code, env) == []


def test_claude_without_a_config_file_starts_without_tomllib(tmp_path: Path) -> None:
    """The status line setting is read from config.toml only when there is one: tomllib's
    import (~20 ms) was paid before Claude Code started, for a file that is not there."""
    code = (
        "import sys, json\n"
        "from ctxwrap.agents.claude import launcher\n"
        "def fake(argv, env, on_started=None):\n"
        "    print(json.dumps(['tomllib' in sys.modules, 'dataclasses' in sys.modules])); return 0\n"
        "launcher.run_child = fake\n"
        "launcher.find_claude = lambda: launcher.ClaudeInstall(['/bin/true'])\n"
        "sys.exit(launcher.run_claude(['-p', 'hi']))\n"
    )
    assert _launch_in_a_child(tmp_path, code, {})[0] is False


def test_the_proxies_do_not_import_the_digesters() -> None:
    """The proxies use engine/facts.py for `line_count` only: the digest package (~40 ms of
    CPU beside the agent's start-up) is imported where a heuristic fact is made, not by them."""
    code = (
        "import sys\n"
        "import ctxwrap.agents.claude.proxy, ctxwrap.agents.codex.proxy\n"
        "from ctxwrap.engine.facts import heuristic_fact\n"
        "print('ctxwrap.digest' in sys.modules)\n"
        "assert heuristic_fact('a.py', '# sk-ant-api03-' + 'x' * 40 + '\\n')\n"
        "print('ctxwrap.digest' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "True"]


def test_codexs_version_is_read_beside_it_without_running_it() -> None:
    from ctxwrap.agents.codex.launcher import CodexInstall, codex_version, version_beside
    from ctxwrap.testing.codex_home import find_codex

    codex = find_codex()
    if codex is None:
        pytest.skip("codex not installed (scripts/install-tools.sh)")
    assert version_beside(str(codex)) == codex_version(CodexInstall([str(codex)]))
    assert version_beside("/bin/true") is None  # no package beside it: `codex --version` then


PRELOAD_THEN_EXIT_LINE = """
import sys, threading, time
from ctxwrap.launch.listener import preload_exit_line
preload_exit_line(0)
for t in threading.enumerate():
    if t is not threading.current_thread():
        t.join(10)
before = set(sys.modules)
from ctxwrap.launch.exit_line import render, session_savings
found = session_savings(sys.argv[1])
render("codex", sys.argv[1], None, found, columns=80)
print(" ".join(sorted(m for m in set(sys.modules) - before if m.startswith("ctxwrap"))))
"""


def test_the_exit_line_preload_loads_what_the_exit_line_runs(tmp_path: Path) -> None:
    """preload_exit_line imports the exit line's figures while the agent runs: after it, the
    exit line imports no module of ours when the user waits (it imported `ctxwrap.stats`,
    a package that loads none of its modules, and the first figures took ~50 ms of imports
    after the agent had exited)."""
    from ctxwrap.state.store import Store

    state = tmp_path / "state"
    (state / "ctxwrap").mkdir(parents=True)
    store = Store(state / "ctxwrap" / "ctxwrap.db")
    store.upsert_session(
        {
            "session_id": "s1",
            "session_file": None,
            "cwd": "/w",
            "pid": 1,
            "pi_version": None,
            "pi_package": None,
            "model": None,
            "agent": "codex",
            "started_at": 1.0,
        }
    )
    store.conn.commit()
    store.close()
    env = {**os.environ, "XDG_STATE_HOME": str(state), "XDG_CONFIG_HOME": str(tmp_path / "c")}
    out = subprocess.run(
        [sys.executable, "-c", PRELOAD_THEN_EXIT_LINE, "s1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [], out.stdout
