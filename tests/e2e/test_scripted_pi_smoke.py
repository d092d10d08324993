"""Real pi (1.6 and 0.73) in ``-p`` mode against the scripted model server on loopback."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ctxwrap.testing.model_server import EXHAUSTED_TEXT, ScriptedModelServer
from ctxwrap.testing.pi_home import (
    OFFLINE_ENV,
    find_pi,
    make_pi_agent_dir,
    pi_command,
    pi_env,
    tools_bin_dir,
)

PI_VERSIONS = [
    pytest.param("pi", id="pi-1.6"),
    pytest.param("pi-0.73", id="pi-0.73"),
]


@dataclass
class PiRun:
    proc: subprocess.CompletedProcess[str]
    server: ScriptedModelServer
    home: Path
    work: Path


def pi_binary(name: str) -> Path:
    found = find_pi(name)
    if found is None:
        pytest.skip(f"{name} not installed: set CTXWRAP_TOOLS_BIN or run the tool installer")
    return found


def run_pi(
    name: str,
    tmp_path: Path,
    script: Sequence[object],
    prompt: str = "go",
    wrapper: Sequence[str] = (),
) -> PiRun:
    pi = pi_binary(name)
    home = tmp_path / "home"
    work = tmp_path / "work"
    work.mkdir(parents=True)
    (work / "a.txt").write_text("alpha-content\n")
    (work / "b.txt").write_text("beta-content\n")
    with ScriptedModelServer(script, requests_log=tmp_path / "requests.jsonl") as srv:
        agent_dir = make_pi_agent_dir(home, srv.base_url)
        proc = subprocess.run(
            [*wrapper, *pi_command(pi, prompt)],
            env=pi_env(agent_dir, home),
            cwd=work,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=120,
        )
    return PiRun(proc, srv, home, work)


def tool_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in body["messages"] if m.get("role") == "tool"]


@pytest.mark.parametrize("name", PI_VERSIONS)
@pytest.mark.e2e
@pytest.mark.timeout(180)
def test_bash_tool_call_then_final_text(name: str, tmp_path: Path) -> None:
    script = [
        {"tool_calls": [{"name": "bash", "arguments": {"command": "echo hello-from-bash"}}]},
        {"text": "FINAL: the bash call said hello"},
    ]
    run = run_pi(name, tmp_path, script, prompt="say hello via bash")
    assert run.proc.returncode == 0, run.proc.stderr
    assert run.proc.stdout.strip() == "FINAL: the bash call said hello"
    assert run.server.exhausted

    mains = run.server.main_requests
    assert len(mains) == 2 and not run.server.aux_requests
    first, second = mains[0].body, mains[1].body
    assert first["model"] == "scripted-model"
    assert first["stream"] is True
    assert first["stream_options"] == {"include_usage": True}
    assert first["messages"][0]["role"] == "system"
    assert first["messages"][-1]["role"] == "user"
    assert {"read", "bash", "edit", "write"} <= {t["function"]["name"] for t in first["tools"]}

    # the second request replays the first one's messages, then the call and its result
    assert second["messages"][: len(first["messages"])] == first["messages"]
    assistant = second["messages"][len(first["messages"])]
    assert assistant["role"] == "assistant"
    assert assistant["tool_calls"][0]["id"] == "call_0_0"
    assert json.loads(assistant["tool_calls"][0]["function"]["arguments"]) == {
        "command": "echo hello-from-bash"
    }
    tools = tool_messages(second)
    assert len(tools) == 1
    assert tools[0]["tool_call_id"] == "call_0_0"
    assert "hello-from-bash" in json.dumps(tools[0]["content"])

    # pi stayed inside the temp home: nothing under the real ~/.pi was needed
    assert (run.home / ".pi" / "agent" / "models.json").is_file()
    logged = (tmp_path / "requests.jsonl").read_text().splitlines()
    assert [json.loads(line)["kind"] for line in logged] == ["main", "main"]


@pytest.mark.parametrize("name", PI_VERSIONS)
@pytest.mark.e2e
@pytest.mark.timeout(180)
def test_parallel_read_calls_in_one_step(name: str, tmp_path: Path) -> None:
    script = [
        {
            "text": "Reading both files.",
            "tool_calls": [
                {"name": "read", "arguments": {"path": "a.txt"}},
                {"name": "read", "arguments": {"path": "b.txt"}},
            ],
        },
        {"text": "Both files read."},
    ]
    run = run_pi(name, tmp_path, script, prompt="read a.txt and b.txt")
    assert run.proc.returncode == 0, run.proc.stderr
    assert run.proc.stdout.strip() == "Both files read."

    second = run.server.main_requests[1].body
    assistant = next(m for m in second["messages"] if m.get("tool_calls"))
    assert [c["id"] for c in assistant["tool_calls"]] == ["call_0_0", "call_0_1"]
    assert "Reading both files." in json.dumps(assistant.get("content"))
    tools = tool_messages(second)
    assert [t["tool_call_id"] for t in tools] == ["call_0_0", "call_0_1"]
    assert "alpha-content" in json.dumps(tools[0]["content"])
    assert "beta-content" in json.dumps(tools[1]["content"])


@pytest.mark.parametrize("name", PI_VERSIONS)
@pytest.mark.e2e
@pytest.mark.timeout(180)
def test_exhausted_script_ends_pi_cleanly(name: str, tmp_path: Path) -> None:
    run = run_pi(name, tmp_path, [])
    assert run.proc.returncode == 0, run.proc.stderr
    assert run.proc.stdout.strip() == EXHAUSTED_TEXT
    assert len(run.server.main_requests) == 1


@pytest.mark.parametrize("name", PI_VERSIONS)
@pytest.mark.e2e
@pytest.mark.timeout(180)
def test_pi_connects_only_to_loopback(name: str, tmp_path: Path) -> None:
    strace = shutil.which("strace")
    if strace is None:
        pytest.skip("strace not installed; cannot observe pi's connect() calls")
    trace = tmp_path / "connect.trace"
    wrapper = [strace, "-f", "-qq", "-e", "trace=connect", "-o", str(trace)]
    run = run_pi(name, tmp_path, [{"text": "offline ok"}], wrapper=wrapper)
    if run.proc.returncode != 0 and "ptrace" in run.proc.stderr:
        pytest.skip(f"strace cannot trace here: {run.proc.stderr.strip()[:200]}")
    assert run.proc.returncode == 0, run.proc.stderr
    assert run.proc.stdout.strip() == "offline ok"
    inet = [line for line in trace.read_text().splitlines() if "AF_INET" in line]
    assert inet, "pi never connected to the scripted server"
    for line in inet:
        addrs = re.findall(r'inet_(?:addr|pton)\((?:AF_INET6, )?"([^"]+)"', line)
        assert addrs and all(a in ("127.0.0.1", "::1") for a in addrs), line
        assert f"htons({run.server.port})" in line, line


def test_pi_env_is_isolated_and_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-real-key-must-not-leak")
    monkeypatch.setenv("PI_CODING_AGENT_DIR", "/somewhere/else")
    monkeypatch.setenv("CTXWRAP_TOOLS_BIN", str(tmp_path / "bin"))
    agent_dir = make_pi_agent_dir(tmp_path, "http://127.0.0.1:9/v1", context_window=30000)
    env = pi_env(agent_dir, tmp_path, extra={"PI_CTX_X": "1"})
    assert agent_dir == tmp_path / ".pi" / "agent"
    assert env["HOME"] == str(tmp_path)
    assert env["PI_CODING_AGENT_DIR"] == str(agent_dir)
    assert env["PATH"].split(os.pathsep)[0] == str(tmp_path / "bin")
    assert env["PI_CTX_X"] == "1"
    assert "OPENAI_API_KEY" not in env
    assert OFFLINE_ENV.items() <= env.items()
    models = json.loads((agent_dir / "models.json").read_text())
    provider = models["providers"]["scripted"]
    assert provider["baseUrl"] == "http://127.0.0.1:9/v1"
    assert provider["api"] == "openai-completions"
    assert provider["models"][0]["id"] == "scripted-model"
    assert provider["models"][0]["contextWindow"] == 30000
    settings = json.loads((agent_dir / "settings.json").read_text())
    assert settings["enableInstallTelemetry"] is False


def test_tools_bin_default_and_missing_pi_skips(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CTXWRAP_TOOLS_BIN", raising=False)
    repo_bin = Path(__file__).resolve().parents[2] / ".tools" / "bin"
    assert tools_bin_dir() == (repo_bin if repo_bin.is_dir() else None)
    monkeypatch.setenv("CTXWRAP_TOOLS_BIN", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path))
    assert find_pi("pi") is None
    with pytest.raises(pytest.skip.Exception, match="pi not installed"):
        pi_binary("pi")
