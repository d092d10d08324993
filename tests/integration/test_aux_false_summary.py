"""An aux model that answers a confident false summary does not replace the extract.

A failing MSBuild run (exit 1, `file(line,col): error CSxxxx`, a format without a family of
its own) goes through the daemon with the `http` aux backend; the scripted aux model answers
"Build succeeded. 0 errors" (issue 21: such an answer was accepted for formats the digester
did not know). The agent must see the extract, with the errors and the exit status.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from support import Xdg, client, daemon_process

from ctxwrap.testing.model_server import ScriptedModelServer

ERRORS = [
    "src/Api/Controllers/OrdersController.cs(42,17): error CS0246: The type or namespace name "
    "'OrderDto' could not be found [/src/Api/Api.csproj]",
    "src/Api/Services/Billing.cs(88,9): error CS1061: 'Invoice' does not contain a definition "
    "for 'Total' [/src/Api/Api.csproj]",
]
BUILD_LOG = "\n".join(
    [
        "MSBuild version 17.8.3+195e7f5a3 for .NET",
        "  Determining projects to restore...",
        *[f"  Restored /src/Lib{i}/Lib{i}.csproj (in {i % 90 + 10} ms)." for i in range(120)],
        *[f"  Lib{i} -> /src/Lib{i}/bin/Debug/net8.0/Lib{i}.dll" for i in range(120)],
        *ERRORS,
        "",
        "Build FAILED.",
        "",
        *ERRORS,
        "    0 Warning(s)",
        "    2 Error(s)",
        "",
        "Time Elapsed 00:00:07.41",
    ]
)
WORDS = [
    "alpha",
    "bravo",
    "charlie",
    "delta",
    "echo",
    "foxtrot",
    "golf",
    "hotel",
    "india",
    "juliet",
]
FALSE_SUMMARY = "Build succeeded. 0 errors, 0 warnings; all projects compiled."


def post(c: Any, path: str, body: dict[str, Any]) -> dict[str, Any]:
    r = c.post(path, json=body)
    assert r.status_code == 200, r.text
    return dict(r.json())


def test_a_false_success_from_the_aux_model_is_refused(tmp_path: Path, xdg: Xdg) -> None:
    rules = [{"task": "digest", "answer": FALSE_SUMMARY}]
    with ScriptedModelServer([], aux_rules=rules) as srv:
        env = {
            "PI_CTX_AUX_BACKEND": "http",
            "PI_CTX_BASH_AUX_MIN_CHARS": "0",
            "PI_CTX_AUX_BASE_URL": srv.base_url,
            "PI_CTX_AUX_MODEL": "scripted/scripted-model",
        }
        with daemon_process(xdg, env), client(xdg, 30) as c:
            sid = "s-false"
            post(c, "/v1/sessions/start", {"session_id": sid, "cwd": str(tmp_path), "pid": 1})
            post(c, "/v1/prompt", {"session_id": sid, "prompt": "fix the build"})
            reply = post(
                c,
                "/v1/tool_result",
                {
                    "session_id": sid,
                    "tool_call_id": "b1",
                    "tool_name": "bash",
                    "input": {"command": "dotnet build"},
                    "text": BUILD_LOG,
                    "exit_code": 1,
                },
            )
            # Every line different and every one a failure: a digest would keep nearly all of
            # it, so the agent gets the output itself (kept only at half the size or less).
            dense = post(
                c,
                "/v1/tool_result",
                {
                    "session_id": sid,
                    "tool_call_id": "b2",
                    "tool_name": "bash",
                    "input": {"command": "./check.sh"},
                    "text": "\n".join(
                        f"FAILED check {WORDS[i % 10]}_{WORDS[i // 10 % 10]}_{WORDS[i // 100]}: "
                        f"expected {WORDS[i * 7 % 10]} {WORDS[i * 3 % 10]}, got {WORDS[i * 9 % 10]}"
                        for i in range(150)
                    ),
                    "exit_code": 1,
                },
            )
            assert dense["action"] == "pass" and dense["text"] is None
        assert len(srv.aux_requests) == 1  # the aux model was asked, and answered
    text = reply["text"]
    assert reply["action"] == "replace" and FALSE_SUMMARY not in text
    assert text.split("\n", 1)[0].startswith("$ dotnet build → exit code 1 · ")
    for error in ERRORS:
        assert error.split(" [")[0] in text
    assert "2 Error(s)" in text and "Command exited with code 1" in text
    events = (xdg.state / "ctxwrap" / "events.jsonl").read_text()
    assert '"aux_refused"' in events and "claims success" in events
