"""`ctxwrap init bash` with the real Claude Code: plain `claude` typed in an interactive bash
(CTXWRAP_WRAP_CLAUDE=1) runs through ctxwrap, and the prompt segment shows that session's
savings while it is live, then nothing once it ended.

The model (the scripted Anthropic server) makes Claude Code run a big command, then runs the
prompt segment in a second interactive bash, as a prompt in another terminal would.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from support import CTXWRAP, Xdg

from ctxwrap.testing.claude_home import claude_env, claude_print_args, find_claude
from ctxwrap.testing.model_server import ScriptedModelServer

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        find_claude() is None, reason="claude not installed (scripts/install-tools.sh)"
    ),
]

GEN_LOG = r"""
for i in range(20000):
    print(f"2026-11-30T10:00:{i % 60:02d} INFO request {i} served in {i % 97}ms status=200")
print("server shutdown complete: 20000 requests")
"""
SEGMENT = re.compile(r"ctxwrap ↓[0-9.]+[kM]? cost [−+±][0-9]+%")  # issue 22: + headline


def _tool_results(body: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for m in body.get("messages", []):
        for b in m.get("content") if isinstance(m.get("content"), list) else []:
            if isinstance(b, dict) and b.get("type") == "tool_result":
                out[b["tool_use_id"]] = b.get("content")
    return out


def test_wrapped_claude_fills_the_prompt_segment(tmp_path: Path, xdg: Xdg) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "gen_log.py").write_text(GEN_LOG)
    init = subprocess.run(
        [*CTXWRAP, "init", "bash"], env=xdg.env(), capture_output=True, text=True, check=True
    ).stdout
    script = tmp_path / "init.bash"
    script.write_text(init)
    seen = work / "segment.txt"
    # What a prompt in another terminal prints while the session runs (a no-rc interactive bash).
    prompt = f"bash --norc --noprofile -i -c 'source {script}; ctxwrap_prompt_segment' >{seen}"
    steps = [
        {"tool_calls": [{"name": "Bash", "arguments": {"command": "python3 gen_log.py"}}]},
        # the turn that carried the digest ends before the next tool runs
        {"tool_calls": [{"name": "Bash", "arguments": {"command": "true"}}]},
        {"tool_calls": [{"name": "Bash", "arguments": {"command": f"{prompt} 2>/dev/null"}}]},
        {"text": "done"},
    ]
    with ScriptedModelServer(steps) as srv:
        env = claude_env(xdg.env(), home=tmp_path / "home", base_url=srv.root_url)
        env.update(CTXWRAP_WRAP_CLAUDE="1", TERM="dumb", LANG="C.UTF-8", LC_ALL="C.UTF-8")
        argv = " ".join(f"'{a}'" for a in claude_print_args("go"))
        outer = subprocess.run(
            [
                "bash",
                "--norc",
                "--noprofile",
                "-i",
                "-c",
                f"source {script}; type -t claude; claude {argv}; echo rc=$?; "
                "ctxwrap_prompt_segment; echo '|after'",
            ],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
            stdin=subprocess.DEVNULL,
            check=False,
        )
        lines = outer.stdout.splitlines()
        assert lines[0] == "function", outer.stdout  # plain `claude` is the wrapper
        assert "rc=0" in lines, outer.stdout + outer.stderr[-3000:]
        result = json.loads(next(ln for ln in lines if ln.startswith("{")))
        assert result.get("result") == "done", result
        # it really went through ctxwrap: the big output reached the model as a digest
        reqs = srv.main_requests
        assert len(reqs) == 4
        digest = _tool_results(reqs[1].body)["toolu_0_0"]
        assert isinstance(digest, str) and " digested by ctxwrap · " in digest.split("\n", 1)[0]

    # while the session was live, the prompt showed its savings
    shown = seen.read_text(encoding="utf-8")
    assert SEGMENT.fullmatch(shown), repr(shown)
    # once it ended (its last session), the segment is cleared and the prompt shows nothing
    assert (xdg.state / "ctxwrap" / "prompt-segment").read_text(encoding="utf-8") == "\n"
    assert lines[-1] == "|after", outer.stdout
