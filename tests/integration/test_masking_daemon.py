"""History masking through a real daemon: a late DROP becomes a mask at the next cold boundary,
a warm request masks nothing, and a repeat of the masked call is kept whole and not tagged."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from support import Xdg, client, daemon_process

from ctxwrap.engine.edits import describe_tail
from ctxwrap.engine.masking import call_paths
from ctxwrap.mechanisms import needed_again

LICENSE = "".join(f"clause {i}: irrelevant legal text\n" for i in range(300))
NOTES = "".join(f"note {i}\n" for i in range(40))


def post(c: Any, path: str, body: dict[str, Any]) -> dict[str, Any]:
    r = c.post(path, json=body)
    assert r.status_code == 200, r.text
    return dict(r.json())


def call(cid: str, path: str) -> dict[str, Any]:
    return {"role": "assistant", "content": [
        {"type": "toolCall", "id": cid, "name": "read", "arguments": {"path": path}}]}  # fmt: skip


def result(cid: str, text: str) -> dict[str, Any]:
    return {"role": "toolResult", "toolCallId": cid, "toolName": "read",
            "content": [{"type": "text", "text": text}], "isError": False}  # fmt: skip


REWRITTEN = "".join(f"section {i}: the new licence, rewritten since\n" for i in range(300))


@pytest.mark.parametrize("again_text", [LICENSE, REWRITTEN], ids=["same", "rewritten"])
def test_late_drop_is_masked_at_the_next_cold_boundary(
    tmp_path: Path, xdg: Xdg, again_text: str
) -> None:
    # a late DROP from the first round: the tagger's budget apart (test_tag_budget.py)
    env = {"PI_CTX_MASK_KEEP_ROUNDS": "1", "PI_CTX_TAG_WITHIN_SAVINGS": "false"}
    with daemon_process(xdg, env), client(xdg, 30) as c:
        sid = "s-mask"
        post(c, "/v1/sessions/start", {"session_id": sid, "cwd": str(tmp_path), "pid": 1})
        post(c, "/v1/prompt", {"session_id": sid, "prompt": "fix the parser"})
        messages: list[dict[str, Any]] = [
            {"role": "user", "content": [{"type": "text", "text": "fix the parser"}]}
        ]

        def tool(cid: str, path: str, text: str) -> dict[str, Any]:
            messages.extend([call(cid, path), result(cid, text)])
            return post(c, "/v1/tool_result", {
                "session_id": sid, "tool_call_id": cid, "tool_name": "read",
                "input": {"path": path}, "text": text})  # fmt: skip

        def context(seen: set[str], k: int, mask: str | None = None) -> list[dict[str, Any]]:
            body: dict[str, Any] = {
                "session_id": sid, "call_index": k, "message_count": len(messages),
                "tail": describe_tail(messages, seen).to_json()}  # fmt: skip
            if mask:
                body["mask"] = {"reason": mask, "gap_s": 400.0, "calls": k,
                                "history": describe_tail(messages, set()).to_json(),
                                "paths": call_paths(messages), "edited": []}  # fmt: skip
            return list(post(c, "/v1/context", body)["edits"])

        r1 = tool("r1", "LICENSE", LICENSE)
        assert r1["aux"]["task"] == "tag"
        # The next LLM call starts before the tag answers: RETAIN, the model sees it whole ...
        assert context(set(), 1) == []
        # ... and then the tagger says DROP: too late for the tail.
        late = post(c, "/v1/aux/result", {"session_id": sid, "aux_id": r1["aux"]["aux_id"],
                                          "text": '{"decision": "DROP"}', "input_tokens": 10,
                                          "output_tokens": 3, "elapsed_ms": 5})  # fmt: skip
        assert late["accepted"] is False
        tool("r2", "notes.md", NOTES)
        # Warm (mask_warm is off): nothing older changes.
        assert context({"r1"}, 2, mask="warm") == []
        tool("r3", "notes2.md", NOTES)
        # Cold: the late DROP, outside the current task's last round, becomes a mask.
        edits = context({"r1", "r2"}, 3, mask="idle")
        assert [(e["kind"], e["toolCallId"], e["reason"]) for e in edits] == [
            ("mask", "r1", "dropped")
        ]
        text = edits[0]["text"]
        assert "read LICENSE" in text and "judged not needed" in text and r1["handle"] in text
        assert edits[0]["savedChars"] == len(LICENSE) - len(text)
        # The model reads LICENSE again: kept whole, and not even tagged (it could not drop).
        again = tool("r4", "LICENSE", again_text)
        assert again["aux"] is None and again["handle"]
        assert context({"r1", "r2", "r3"}, 4, mask="idle") == []
        # ... and the masked result was needed again; so is one recalled through its handle.
        post(c, "/v1/recall", {"handle": r1["handle"], "pattern": "clause 7:"})

    conn = sqlite3.connect(xdg.db)
    rows = conn.execute("SELECT tool_call_id, kind FROM edits").fetchall()
    assert rows == [("r1", "mask")]
    # Needed again (invariant 8): re-read and recalled, shown by `ctxwrap stats`.
    # A re-read counts only when it returned what was hidden: a file rewritten since is a new
    # question (mechanisms/needed_again.asks_again, the rule replay applies too).
    reread = again_text == LICENSE
    need = conn.execute("SELECT tool_call_id, how FROM needed_again ORDER BY how").fetchall()
    assert need == [("r1", "recalled")] + ([("r1", "reread")] if reread else [])
    summary = needed_again.summary(conn, session=sid)
    assert summary["mechanisms"]["masking"] == {
        "interventions": 1, "needed_again": 1, "recalled": 1, "reread": int(reread),
        "share_pct": 100.0}  # fmt: skip
    assert "needed again: 1 of " in str(needed_again.text_line(summary))
    events = [json.loads(line) for line in (xdg.state / "ctxwrap" / "events.jsonl").open()]
    (mask,) = [e for e in events if e["event"] == "mask"]
    assert mask["trigger"] == "idle" and mask["gap_s"] == 400.0
    assert mask["masks"] == [["r1", "dropped", edits[0]["savedChars"]]]
    assert mask["removed_tokens"] == (edits[0]["savedChars"] + 3) // 4 and mask["cost_tokens"] == 0


def test_a_result_the_adapter_keeps_is_never_masked(tmp_path: Path, xdg: Xdg) -> None:
    """`keep`: results a later thinking block has in its prefix on a model that checks
    it. The same cold request masks the late DROP without it, and nothing with it — nothing
    planned, returned or recorded (a mask recorded but never sent would count a saving)."""
    env = {"PI_CTX_MASK_KEEP_ROUNDS": "1", "PI_CTX_TAG_WITHIN_SAVINGS": "false"}  # tags at once
    with daemon_process(xdg, env), client(xdg, 30) as c:
        sid = "s-keep"
        post(c, "/v1/sessions/start", {"session_id": sid, "cwd": str(tmp_path), "pid": 1})
        post(c, "/v1/prompt", {"session_id": sid, "prompt": "fix the parser"})
        messages: list[dict[str, Any]] = [{"role": "user", "content": "fix the parser"}]
        for cid, path, text in (("r1", "LICENSE", LICENSE), ("r2", "a.md", NOTES)):
            messages.extend([call(cid, path), result(cid, text)])
            r = post(c, "/v1/tool_result", {"session_id": sid, "tool_call_id": cid,
                                            "tool_name": "read", "input": {"path": path},
                                            "text": text})  # fmt: skip
            if cid == "r1":  # the tagger's DROP comes after the model saw it whole
                tail = describe_tail(messages, set()).to_json()
                post(c, "/v1/context", {"session_id": sid, "call_index": 1,
                                        "message_count": len(messages), "tail": tail})  # fmt: skip
                post(c, "/v1/aux/result", {"session_id": sid, "aux_id": r["aux"]["aux_id"],
                                           "text": '{"decision": "DROP"}', "input_tokens": 10,
                                           "output_tokens": 3, "elapsed_ms": 5})  # fmt: skip
        messages.extend([call("r3", "b.md"), result("r3", NOTES)])

        def cold(keep: list[str]) -> list[dict[str, Any]]:
            mask = {"reason": "idle", "gap_s": 400.0, "calls": 3, "edited": [],
                    "history": describe_tail(messages, set()).to_json(),
                    "paths": call_paths(messages)}  # fmt: skip
            body = {"session_id": sid, "call_index": 3, "message_count": len(messages),
                    "tail": describe_tail(messages, {"r1", "r2"}).to_json(), "mask": mask,
                    "keep": keep}  # fmt: skip
            return list(post(c, "/v1/context", body)["edits"])

        assert cold(["r1"]) == []
        assert [e["toolCallId"] for e in cold([])] == ["r1"]
    conn = sqlite3.connect(xdg.db)
    assert conn.execute("SELECT tool_call_id, kind FROM edits").fetchall() == [("r1", "mask")]


def test_a_write_the_adapter_keeps_is_not_stripped(tmp_path: Path, xdg: Xdg) -> None:
    """`keep` holds the tail's own calls too: a write a thinking block of its own message
    follows (Opus 5.5 returns the text between two calls as thinking) keeps its body, and no
    strip is recorded; the same tail without `keep` gets the strip (on: off by default)."""
    with daemon_process(xdg, {"PI_CTX_WRITE": "1"}), client(xdg, 30) as c:
        sid = "s-keep-write"
        post(c, "/v1/sessions/start", {"session_id": sid, "cwd": str(tmp_path), "pid": 1,
                                       "agent": "claude"})  # fmt: skip
        body = "".join(f"line {i} of the new module\n" for i in range(100))
        write = {"type": "toolCall", "id": "w1", "name": "write",
                 "arguments": {"path": "a.py", "content": body}}  # fmt: skip
        messages = [
            {"role": "user", "content": "write a.py"},
            {"role": "assistant", "content": [write]},
            {
                "role": "toolResult",
                "toolCallId": "w1",
                "toolName": "write",
                "content": [{"type": "text", "text": "Wrote a.py"}],
                "isError": False,
            },
        ]

        def context(keep: list[str]) -> list[dict[str, Any]]:
            req = {"session_id": sid, "call_index": 1, "message_count": len(messages),
                   "tail": describe_tail(messages, set()).to_json(), "keep": keep}  # fmt: skip
            return list(post(c, "/v1/context", req)["edits"])

        assert context(["w1"]) == []
        assert [(e["kind"], e["toolCallId"]) for e in context([])] == [("strip_write", "w1")]
    conn = sqlite3.connect(xdg.db)
    assert conn.execute("SELECT tool_call_id, kind FROM edits").fetchall() == [
        ("w1", "strip_write")
    ]


@pytest.mark.parametrize(
    ("agent", "setting", "strips"),
    [
        ("claude", None, False),
        ("pi", None, False),
        ("codex", None, False),
        ("pi", "1", True),
        ("codex", "true", True),
        ("claude", "1", True),
        ("claude", "0", False),
    ],
)
def test_the_write_strip_is_off_by_default_and_on_when_asked(
    tmp_path: Path, xdg: Xdg, agent: str, setting: str | None, strips: bool
) -> None:
    """`write = "auto"` (the default) strips under no agent today: on real sessions the body
    is needed again in more than one write of two (Claude Code 42 of 72; docs/accounting.md,
    issue 41's 10 % rule). An explicit setting wins on every agent, and the bridge's view of
    the config says what applies to its session."""
    env = {} if setting is None else {"PI_CTX_WRITE": setting}
    body = "".join(f"line {i} of the new module\n" for i in range(100))
    with daemon_process(xdg, env), client(xdg, 30) as c:
        sid = f"s-{agent}"
        start = post(c, "/v1/sessions/start", {"session_id": sid, "cwd": str(tmp_path),
                                                "pid": 1, "agent": agent})  # fmt: skip
        assert start["config"]["write"] is strips
        fact = post(c, "/v1/tool_result", {"session_id": sid, "tool_call_id": "w1",
                                           "tool_name": "write", "text": "Wrote a.py",
                                           "input": {"path": "a.py", "content": body}})  # fmt: skip
        assert bool(fact.get("text")) is strips
        write = {"type": "toolCall", "id": "w1", "name": "write",
                 "arguments": {"path": "a.py", "content": body}}  # fmt: skip
        messages = [
            {"role": "user", "content": "write a.py"},
            {"role": "assistant", "content": [write]},
            {"role": "toolResult", "toolCallId": "w1", "toolName": "write",
             "content": [{"type": "text", "text": "Wrote a.py"}], "isError": False},
        ]  # fmt: skip
        req = {"session_id": sid, "call_index": 1, "message_count": len(messages),
               "tail": describe_tail(messages, set()).to_json()}  # fmt: skip
        edits = post(c, "/v1/context", req)["edits"]
        assert [e["kind"] for e in edits] == (["strip_write"] if strips else [])


def test_a_reread_of_a_read_still_in_view_is_not_the_masked_one_needed_again(
    tmp_path: Path, xdg: Xdg
) -> None:
    """A read masked as superseded by the same read later: that later read still shows its
    lines, so reading the file a third time is not the masked result needed again (replay
    counts it so too: only hidden lines missing from the context)."""
    env = {"PI_CTX_MASK_KEEP_ROUNDS": "1", "PI_CTX_TAG_WITHIN_SAVINGS": "false"}  # tags at once
    with daemon_process(xdg, env), client(xdg, 30) as c:
        sid = "s-superseded"
        post(c, "/v1/sessions/start", {"session_id": sid, "cwd": str(tmp_path), "pid": 1,
                                       "agent": "claude"})  # fmt: skip
        post(c, "/v1/prompt", {"session_id": sid, "prompt": "fix the parser"})
        messages: list[dict[str, Any]] = [{"role": "user", "content": "fix the parser"}]

        def tool(cid: str, path: str, text: str) -> None:
            messages.extend([call(cid, path), result(cid, text)])
            post(c, "/v1/tool_result", {"session_id": sid, "tool_call_id": cid,
                                        "tool_name": "read", "input": {"path": path},
                                        "text": text})  # fmt: skip

        for cid, path, text in (("r1", "LICENSE", LICENSE), ("r2", "LICENSE", LICENSE),
                                ("r3", "notes.md", NOTES)):  # fmt: skip
            tool(cid, path, text)
        body = {"session_id": sid, "call_index": 3, "message_count": len(messages),
                "tail": describe_tail(messages, {"r1", "r2", "r3"}).to_json(),
                "mask": {"reason": "idle", "gap_s": 400.0, "calls": 3,
                         "history": describe_tail(messages, set()).to_json(),
                         "paths": call_paths(messages), "edited": []}}  # fmt: skip
        edits = post(c, "/v1/context", body)["edits"]
        assert [(e["toolCallId"], e["reason"]) for e in edits] == [("r1", "superseded")]
        tool("r4", "LICENSE", LICENSE)  # the third read: r2 holds these lines in view
    conn = sqlite3.connect(xdg.db)
    assert conn.execute("SELECT tool_call_id, how FROM needed_again").fetchall() == []


@pytest.mark.parametrize(("reference", "masked_parts"), [(None, 0), ("0", 5)])
def test_a_file_read_five_times_is_not_masked_for_being_idle(
    tmp_path: Path, xdg: Xdg, reference: str | None, masked_parts: int
) -> None:
    """The daemon's masking keeps the reads of a file the agent keeps coming back to (read five
    times: `mask_reference_reads`' default) until superseded; a file read once and left alone
    as long is masked. `PI_CTX_MASK_REFERENCE_READS=0` turns the rule off."""
    env = {"PI_CTX_MASK_KEEP_ROUNDS": "1", "PI_CTX_MASK_READ_IDLE_ROUNDS": "2",
           "PI_CTX_TAG_WITHIN_SAVINGS": "false"}  # fmt: skip
    if reference is not None:
        env["PI_CTX_MASK_REFERENCE_READS"] = reference
    with daemon_process(xdg, env), client(xdg, 30) as c:
        sid = "s-reference"
        post(c, "/v1/sessions/start", {"session_id": sid, "cwd": str(tmp_path), "pid": 1})
        post(c, "/v1/prompt", {"session_id": sid, "prompt": "port the renderer"})
        messages: list[dict[str, Any]] = [{"role": "user", "content": "port the renderer"}]
        reads = [(f"p{i}", "render.ts", {"offset": 80 * i}) for i in range(5)]
        reads += [
            ("n1", "notes.md", {}),
            ("q1", "a.md", {}),
            ("q2", "b.md", {}),
            ("q3", "c.md", {}),
        ]
        for cid, path, extra in reads:
            args = {"path": path, **extra}
            text = "".join(f"{path} {extra} line {i}\n" for i in range(60))
            messages.append({"role": "assistant", "content": [
                {"type": "toolCall", "id": cid, "name": "read", "arguments": args}]})  # fmt: skip
            messages.append(result(cid, text))
            post(c, "/v1/tool_result", {"session_id": sid, "tool_call_id": cid,
                                        "tool_name": "read", "input": args, "text": text})  # fmt: skip
        ids = {cid for cid, _, _ in reads}
        body = {"session_id": sid, "call_index": len(reads), "message_count": len(messages),
                "tail": describe_tail(messages, ids).to_json(),
                "mask": {"reason": "idle", "gap_s": 400.0, "calls": len(reads),
                         "history": describe_tail(messages, set()).to_json(),
                         "paths": call_paths(messages), "edited": []}}  # fmt: skip
        edits = post(c, "/v1/context", body)["edits"]
    got = [(e["toolCallId"], e["reason"]) for e in edits]
    # notes.md, read once and left alone three rounds: masked either way
    assert ("n1", "untouched") in got
    assert sum(1 for cid, _ in got if cid.startswith("p")) == masked_parts


def test_a_command_output_too_short_to_digest_is_kept_for_recall_and_masked_once_old(
    tmp_path: Path, xdg: Xdg
) -> None:
    """A command's output under the digest threshold but over `mask_min_chars` stays whole and
    is stored behind a recall handle, so masking takes it once old (a result other than a read,
    seen a round ago); the digests' needed-again count does not take it for a digest. A
    failing command's output is not stored; a listing or a search's hits are; a file read
    through the shell is stored but masked by the read rules, not a round after it was seen."""
    # a key the command printed (tool output is hostile): stored redacted, as every output is
    key = "sk-ant-api03-" + "Q7vX2mPz9" * 6
    listing = "".join(f"drwxr-xr-x  module_{i:03d}\n" for i in range(58)) + f"KEY={key}\n"
    with daemon_process(xdg), client(xdg, 30) as c:
        sid = "s-short-bash"
        post(c, "/v1/sessions/start", {"session_id": sid, "cwd": str(tmp_path), "pid": 1,
                                       "agent": "claude"})  # fmt: skip
        post(c, "/v1/prompt", {"session_id": sid, "prompt": "tidy the modules"})
        messages: list[dict[str, Any]] = [{"role": "user", "content": "tidy the modules"}]

        def bash(cid: str, command: str, text: str, *, error: bool = False) -> dict[str, Any]:
            messages.extend([
                {"role": "assistant", "content": [{"type": "toolCall", "id": cid,
                                                   "name": "bash",
                                                   "arguments": {"command": command}}]},
                {"role": "toolResult", "toolCallId": cid, "toolName": "bash",
                 "content": [{"type": "text", "text": text}], "isError": error},
            ])  # fmt: skip
            return post(c, "/v1/tool_result", {"session_id": sid, "tool_call_id": cid,
                                               "tool_name": "bash", "text": text,
                                               "input": {"command": command},
                                               "is_error": error})  # fmt: skip

        assert bash("b1", "make modules", listing).get("text") is None  # kept whole
        bash("b2", "make lint", listing, error=True)
        bash("b3", "cat modules/README", listing)
        bash("b6", "ls -la modules", listing)  # a listing is an output like any other
        bash("b4", "true", "ok")
        bash("b5", "true", "ok")
        body = {"session_id": sid, "call_index": 6, "message_count": len(messages),
                "tail": describe_tail(messages, {"b1", "b2", "b3", "b6", "b4", "b5"}).to_json(),
                "mask": {"reason": "idle", "gap_s": 400.0, "calls": 6,
                         "history": describe_tail(messages, set()).to_json(),
                         "paths": call_paths(messages), "edited": []}}  # fmt: skip
        edits = post(c, "/v1/context", body)["edits"]
        assert [(e["toolCallId"], e["reason"]) for e in edits] == [
            ("b1", "older"),
            ("b6", "older"),
        ]
        assert (
            f"make modules ({len(listing):,} chars)" in edits[0]["text"]
            and "ctxwrap recall r" in edits[0]["text"]
        )
    conn = sqlite3.connect(xdg.db)
    rows = conn.execute("SELECT tool_call_id, path FROM raw_outputs ORDER BY rowid").fetchall()
    assert [cid for cid, _ in rows] == ["b1", "b3", "b6"]
    stored = rows[0][1]
    text = Path(stored).read_text()
    assert "module_057" in text and key not in text and "[REDACTED" in text
    assert conn.execute("SELECT COUNT(*) FROM digests").fetchone() == (0,)
    summary = needed_again.summary(conn, session=sid)
    assert (
        "bash" not in summary["mechanisms"]
        and summary["mechanisms"]["masking"]["interventions"] == 2
    )


def test_a_file_read_through_the_shell_is_masked_by_the_read_rules(
    tmp_path: Path, xdg: Xdg
) -> None:
    """`cat f` / `sed -n …p f` in pi's or Claude Code's bash prints a file: it is stored for
    recall and masked as a read of f would be — untouched once no call has named f for
    `mask_read_idle_rounds` rounds, a several-file print by its own age — never "older" a
    round after it was seen as a log is. Reading f again afterwards is the masked read needed
    again. Before, such an output was never stored, so it stayed whole for good (a find that
    printed pi's skill files, 14k chars, was carried to the end of a real session)."""
    env = {"PI_CTX_MASK_KEEP_ROUNDS": "1", "PI_CTX_MASK_READ_IDLE_ROUNDS": "3",
           "PI_CTX_TAG_WITHIN_SAVINGS": "false"}  # fmt: skip
    app = "".join(f"export const handler{i} = () => {i};  // app.ts\n" for i in range(40))
    skills = "".join(
        f"=== skills/s{i}/SKILL.md ===\nname: s{i}\nuse it for {i}\n" for i in range(40)
    )
    with daemon_process(xdg, env), client(xdg, 30) as c:
        sid = "s-shell-reads"
        post(c, "/v1/sessions/start", {"session_id": sid, "cwd": str(tmp_path), "pid": 1})
        post(c, "/v1/prompt", {"session_id": sid, "prompt": "wire the handlers"})
        messages: list[dict[str, Any]] = [{"role": "user", "content": "wire the handlers"}]

        def bash(cid: str, command: str, text: str) -> None:
            messages.extend([
                {"role": "assistant", "content": [{"type": "toolCall", "id": cid,
                                                   "name": "bash",
                                                   "arguments": {"command": command}}]},
                {"role": "toolResult", "toolCallId": cid, "toolName": "bash",
                 "content": [{"type": "text", "text": text}], "isError": False},
            ])  # fmt: skip
            post(c, "/v1/tool_result", {"session_id": sid, "tool_call_id": cid,
                                        "tool_name": "bash", "text": text,
                                        "input": {"command": command}})  # fmt: skip

        def mask(n: int) -> list[tuple[str, str]]:
            ids = {m["toolCallId"] for m in messages if m["role"] == "toolResult"}
            body = {"session_id": sid, "call_index": n, "message_count": len(messages),
                    "tail": describe_tail(messages, ids).to_json(),
                    "mask": {"reason": "idle", "gap_s": 400.0, "calls": n,
                             "history": describe_tail(messages, set()).to_json(),
                             "paths": call_paths(messages), "edited": []}}  # fmt: skip
            return [(e["toolCallId"], e["reason"]) for e in post(c, "/v1/context", body)["edits"]]

        bash("a1", "cat src/app.ts", app)
        bash(
            "k1", 'find skills -name SKILL.md -exec echo "=== {} ===" \\; -exec cat {} \\;', skills
        )
        bash("t1", "sed -n '1,40p' src/app.ts | head -20", app[:1200])  # f named again
        assert mask(3) == []  # a round old: a log would go now, a read stays
        for i in range(3):
            bash(f"x{i}", f"echo step {i}", "ok")
        # k1 is four rounds old; app.ts was last named three rounds ago
        assert mask(6) == [("a1", "untouched"), ("k1", "untouched"), ("t1", "untouched")]
        bash("a2", "cat src/app.ts", app)  # the agent reads it again: it needed it
    conn = sqlite3.connect(xdg.db)
    assert conn.execute(
        "SELECT tool_call_id, how FROM needed_again ORDER BY tool_call_id"
    ).fetchall() == [
        ("a1", "reread"),
        ("t1", "reread"),
    ]


def test_a_result_of_a_tool_no_mechanism_takes_is_kept_and_masked_once_old(
    tmp_path: Path, xdg: Xdg
) -> None:
    """An Edit's snippet of the file, a sub-agent's report: before, the daemon was never given
    such a result, so masking, which takes only what the model can get back, left it in every
    later request. Now it is stored behind a recall handle and masked as any result a round
    after it was seen; a short one, an error, ctxwrap's own recall and the user's answers are
    not stored."""
    env = {"PI_CTX_MASK_KEEP_ROUNDS": "1", "PI_CTX_TAG_WITHIN_SAVINGS": "false"}
    report = "".join(
        f"- finding {i}: the handler at src/app.ts:{i} returns early\n" for i in range(40)
    )
    key = "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc" * 3  # a secret in a sub-agent's report
    report += f"deploy with STRIPE_KEY={key}\n"
    with daemon_process(xdg, env), client(xdg, 30) as c:
        sid = "s-other-tools"
        post(c, "/v1/sessions/start", {"session_id": sid, "cwd": str(tmp_path), "pid": 1})
        post(c, "/v1/prompt", {"session_id": sid, "prompt": "review the handlers"})
        messages: list[dict[str, Any]] = [{"role": "user", "content": "review the handlers"}]

        def run(cid: str, tool: str, text: str, *, is_error: bool = False) -> None:
            messages.extend([
                {"role": "assistant", "content": [{"type": "toolCall", "id": cid, "name": tool,
                                                   "arguments": {"x": cid}}]},
                {"role": "toolResult", "toolCallId": cid, "toolName": tool,
                 "content": [{"type": "text", "text": text}], "isError": is_error},
            ])  # fmt: skip
            post(c, "/v1/tool_result", {"session_id": sid, "tool_call_id": cid, "tool_name": tool,
                                        "text": text, "input": {}, "is_error": is_error})  # fmt: skip

        run("t1", "Task", report)
        run("e1", "Edit", report[:1200])
        run("e2", "Edit", "The file src/app.ts has been updated.")  # too short to be worth it
        run("e3", "Edit", report, is_error=True)
        run("r1", "ctx_recall", report)
        run("q1", "AskUserQuestion", report)  # the user's own words: never taken by age
        for i in range(2):
            run(f"x{i}", "TodoWrite", "ok")
        ids = {m["toolCallId"] for m in messages if m["role"] == "toolResult"}
        body = {"session_id": sid, "call_index": 7, "message_count": len(messages),
                "tail": describe_tail(messages, ids).to_json(),
                "mask": {"reason": "idle", "gap_s": 400.0, "calls": 7,
                         "history": describe_tail(messages, set()).to_json(),
                         "paths": call_paths(messages), "edited": []}}  # fmt: skip
        edits = post(c, "/v1/context", body)["edits"]
    assert sorted((e["toolCallId"], e["reason"]) for e in edits) == [
        ("e1", "older"),
        ("t1", "older"),
    ]
    assert all("ctxwrap recall" in e["text"] or "ctx_recall" in e["text"] for e in edits)
    stored = (
        sqlite3.connect(xdg.db).execute("SELECT tool_call_id, path FROM raw_outputs").fetchall()
    )
    assert sorted(r[0] for r in stored) == ["e1", "t1"]
    kept = next(Path(path).read_text() for cid, path in stored if cid == "t1")
    assert "finding 39" in kept and "sk_live_" not in kept  # through the redactor
