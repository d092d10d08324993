"""The `http` aux backend: the daemon itself calls an OpenAI-compatible endpoint (no pi)."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from support import Xdg, client, daemon_process

from ctxwrap.testing.model_server import ScriptedModelServer

SEQ = "\n".join(str(i) for i in range(1, 20001))
LICENSE = "".join(f"clause {i}: irrelevant legal text\n" for i in range(300))
BODY = "".join(f"x_{i} = {i}\n" for i in range(200))
RULES = [
    {"task": "digest", "answer": "20,000 numbers, nothing failed"},
    {"task": "tag", "match": "irrelevant legal text", "answer": '{"decision": "DROP"}'},
    {"task": "fact", "answer": "two hundred assignments"},
]


def post(c: Any, path: str, body: dict[str, Any]) -> dict[str, Any]:
    r = c.post(path, json=body)
    assert r.status_code == 200, r.text
    return dict(r.json())


def test_digest_tag_and_fact_through_the_http_backend(tmp_path: Path, xdg: Xdg) -> None:
    with ScriptedModelServer([], aux_rules=RULES) as srv:
        env = {
            "PI_CTX_AUX_BACKEND": "http",
            "PI_CTX_BASH_AUX_MIN_CHARS": "0",
            "PI_CTX_WRITE": "1",  # the fact of a write: off under pi by default
            "PI_CTX_TAG_WITHIN_SAVINGS": "false",  # a tag in the first round
            "PI_CTX_AUX_BASE_URL": srv.base_url,
            "PI_CTX_AUX_MODEL": "scripted/scripted-model",
        }
        with daemon_process(xdg, env), client(xdg, 30) as c:
            sid = "s-http"
            post(c, "/v1/sessions/start", {"session_id": sid, "cwd": str(tmp_path), "pid": 1})
            post(c, "/v1/prompt", {"session_id": sid, "prompt": "count things"})
            bash = post(
                c,
                "/v1/tool_result",
                {
                    "session_id": sid,
                    "tool_call_id": "b1",
                    "tool_name": "bash",
                    "input": {"command": "seq 1 20000"},
                    "text": SEQ,
                },
            )
            assert (
                bash["action"] == "replace" and bash["aux"] is None
            )  # no round trip through the bridge
            assert "20,000 numbers, nothing failed" in bash["text"]
            read = post(
                c,
                "/v1/tool_result",
                {
                    "session_id": sid,
                    "tool_call_id": "r1",
                    "tool_name": "read",
                    "input": {"path": "LICENSE"},
                    "text": LICENSE,
                },
            )
            assert read["aux"] is None and read["handle"]
            tail = {
                "start": 0,
                "messages": [
                    {
                        "role": "assistant",
                        "toolCalls": [{"id": "r1", "name": "read", "argsSig": "abc"}],
                    },
                    {
                        "role": "toolResult",
                        "toolCallId": "r1",
                        "toolName": "read",
                        "chars": len(LICENSE),
                        "isError": False,
                    },
                ],
            }
            ctx = post(
                c,
                "/v1/context",
                {"session_id": sid, "call_index": 1, "message_count": 3, "tail": tail},
            )
            assert [e["kind"] for e in ctx["edits"]] == ["tombstone"]  # the http tag said DROP
            write = post(
                c,
                "/v1/tool_result",
                {
                    "session_id": sid,
                    "tool_call_id": "w1",
                    "tool_name": "write",
                    "input": {"path": "v.py", "content": BODY},
                    "text": "ok",
                },
            )
            assert write["text"].startswith("[Wrote v.py — two hundred assignments")
        assert sorted(r.aux_task for r in srv.aux_requests) == ["digest", "fact", "tag"]
    rows = (
        sqlite3.connect(xdg.db)
        .execute("SELECT task, backend, ok, input_tokens FROM aux_calls ORDER BY task")
        .fetchall()
    )
    assert [(t, b, ok) for t, b, ok, _ in rows] == [
        ("digest", "http", 1),
        ("fact", "http", 1),
        ("tag", "http", 1),
    ]
    assert all(n > 0 for *_, n in rows)  # the endpoint's usage is what gets recorded


def test_http_backend_down_falls_back(tmp_path: Path, xdg: Xdg) -> None:
    env = {
        "PI_CTX_AUX_BACKEND": "http",
        "PI_CTX_BASH_AUX_MIN_CHARS": "0",
        "PI_CTX_WRITE": "1",  # the fact of a write: off under pi by default
        "PI_CTX_AUX_BASE_URL": "http://127.0.0.1:9/v1",
        "PI_CTX_AUX_TIMEOUT_MS": "500",
    }
    with daemon_process(xdg, env), client(xdg, 30) as c:
        sid = "s-down"
        post(c, "/v1/sessions/start", {"session_id": sid, "cwd": str(tmp_path), "pid": 1})
        bash = post(
            c,
            "/v1/tool_result",
            {
                "session_id": sid,
                "tool_call_id": "b1",
                "tool_name": "bash",
                "input": {"command": "seq 1 20000"},
                "text": SEQ,
            },
        )
        assert bash["action"] == "replace" and (
            " digested by ctxwrap · " in bash["text"].split("\n", 1)[0]
        )
        write = post(
            c,
            "/v1/tool_result",
            {
                "session_id": sid,
                "tool_call_id": "w1",
                "tool_name": "write",
                "input": {"path": "v.py", "content": BODY},
                "text": "ok",
            },
        )
        assert (
            write["text"].startswith("[Wrote v.py") and "~200 lines" in write["text"]
        )  # heuristic
    failed = (
        sqlite3.connect(xdg.db).execute("SELECT COUNT(*) FROM aux_calls WHERE ok = 0").fetchone()[0]
    )
    assert failed == 2  # failures are counted as spent, not hidden


def test_a_file_read_through_the_shell_is_never_digested_as_a_log(tmp_path: Path, xdg: Xdg) -> None:
    """`cat`, `sed -n`, PowerShell's Get-Content, a list or a loop of such reads, a `curl` of an
    API: the output is content the agent copies or writes from next, so the daemon leaves it
    whole (engine/shellread.py); so is `ctxwrap recall`'s answer, the lines the model asked
    back; the same size from `seq` is a log and is digested."""
    source = "".join(f"def f{i}(x):\n    return x + {i}\n" for i in range(1500))
    with daemon_process(xdg, {"PI_CTX_AUX_BACKEND": "http"}), client(xdg, 30) as c:
        sid = "s-reads"
        post(c, "/v1/sessions/start", {"session_id": sid, "cwd": str(tmp_path), "pid": 1})
        for i, command in enumerate(
            (
                "cat src/f.py",
                "sed -n '1,3000p' src/f.py",
                "nl -ba f.py",
                "ctxwrap recall r1a2b3c4d 'def f'",
                # two reads in one call (Codex): its next patch changed lines of both
                "sed -n '1,1500p' src/f.py && sed -n '1,80p' src/g.py",
                "cd src && sed -n '1,3000p' f.py && rg -n 'def f1' .",
                # a loop of reads, its errors dropped (Codex printed five READMEs so)
                'for d in a b; do if [ -d "$d" ]; then sed -n \'1,140p\' "$d/README.md" '
                "2>/dev/null | head -80; fi; done",
                "cat src/f.py 2>&1 | head -3000",
                # an API's answer the agent writes its report from (a research session)
                'curl -s -X POST "$BASE/search" \\\n  -H "Content-Type: application/json" '
                '\\\n  -d \'{"query": "rwa"}\'',
            )
        ):
            out = post(
                c,
                "/v1/tool_result",
                {
                    "session_id": sid,
                    "tool_call_id": f"r{i}",
                    "tool_name": "bash",
                    "input": {"command": command},
                    "text": source,
                },
            )
            assert out["action"] == "pass" and out["text"] is None, (command, out)
        log = post(
            c,
            "/v1/tool_result",
            {
                "session_id": sid,
                "tool_call_id": "b1",
                "tool_name": "bash",
                "input": {"command": "seq 1 20000"},
                "text": SEQ,
            },
        )
        assert log["action"] == "replace"
