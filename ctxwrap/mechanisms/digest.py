"""Mechanism 1, bash digest: output over the threshold is replaced by a digest before it ever
becomes a message.

Two stages: the extractive digester (deterministic, streaming) over the complete output — pi's
spill file when pi reports one — then, when the extract is still long, an aux-model summary
that is accepted only if it is better than the extract. The raw output is stored redacted so
the model can recall parts of it.
"""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ctxwrap import protocol as P
from ctxwrap.aux import prompts
from ctxwrap.digest.redact import redact_secrets
from ctxwrap.engine.bashout import open_trusted_spill, scrub_temp_paths, split_bash_text
from ctxwrap.engine.shellread import prints_content
from ctxwrap.mechanisms.base import DigestSettings, Mechanism
from ctxwrap.state.session import PendingAux, SessionRuntime, chars_to_tokens, recall_call

if TYPE_CHECKING:
    from ctxwrap.digest import StreamingDigester
    from ctxwrap.mechanisms.ports import DigestView


async def bash_result(
    d: DigestView, rt: SessionRuntime, req: P.ToolResult, mech: BashDigest | None = None
) -> P.ToolResultReply:
    cfg = d.cfg
    mech = mech or BashDigest()
    if not mech.wants(cfg, req.text, str(req.input.get("command", ""))):
        return P.ToolResultReply()
    parsed = split_bash_text(req.text)
    exit_code = req.exit_code if req.exit_code is not None else parsed.exit_code
    if exit_code is None and not req.is_error:
        exit_code = 0
    command = str(req.input.get("command", ""))
    meta: dict[str, str | None] = {
        "session_id": rt.session_id,
        "tool_call_id": req.tool_call_id,
        "tool_name": req.tool_name,
        "command": command,
    }
    from ctxwrap.digest import StreamingDigester

    digester = StreamingDigester(
        command=command,
        exit_code=exit_code,
        max_chars=mech.max_chars(cfg),
    )
    # Only the agent's own report names a spill file, and only a checked one is read (invariant 7).
    with open_trusted_spill(
        req.full_output_path,
        parsed.full_output_path if rt.profile.spill == "temp-log" else None,
        pi_tmpdir=req.pi_tmpdir,
        call_started_ms=req.call_started_ms,
        spill=rt.profile.spill,
    ) as spill:
        if spill.refused:
            d.events.write(
                "spill_refused", session=rt.session_id, call=req.tool_call_id, reason=spill.refused
            )
        if spill.source is not None:
            stored = await asyncio.to_thread(
                _store_and_digest_file, d, spill.source, digester, meta
            )
        else:
            digester.feed(parsed.body)
            stored = d.raw.try_put_text(parsed.body, **meta)
    digest = digester.finish()
    status = digest_status(req.timed_out or parsed.timed_out, parsed.aborted, exit_code)
    # None: the state disk is full. The digest still replaces the flood; it just has no handle.
    handle = stored.handle if stored is not None else None
    header = digest_header(
        command=command,
        status=status,
        lines=digest.original_lines,
        chars=digest.original_chars,
        handle=handle,
        recall=recall_call(rt.profile, handle) if handle else None,
    )
    extract = scrub_temp_paths(digest.text)
    text = header + "\n" + extract
    if status.startswith("exit code") and exit_code not in (None, 0):
        text += f"\n\nCommand exited with code {exit_code}"
    if not mech.keeps(len(text), len(req.text)):
        # Not worth hiding the output for: the agent keeps the original (still stored).
        d.events.write(
            "bash_digest_kept_original",
            session=rt.session_id,
            call=req.tool_call_id,
            original=len(req.text),
            digest=len(text),
        )
        return P.ToolResultReply()
    d.store.insert(
        "digests",
        {
            "session_id": rt.session_id,
            "tool_call_id": req.tool_call_id,
            "original_chars": len(req.text),
            "digest_chars": len(text),
            "source": "extractive",
            "ts": time.time(),
        },
        replace=True,
    )
    if handle:
        rt.handles[req.tool_call_id] = handle
    d.events.write(
        "bash_digest",
        session=rt.session_id,
        call=req.tool_call_id,
        original=len(req.text),
        digest=len(text),
        family=digest.family,
    )
    ctx = {
        "extract": extract,
        "header": header,
        "must_keep": [scrub_temp_paths(line) for line in digest.must_keep],
        "exit_code": exit_code,
        "exit_line": f"Command exited with code {exit_code}"
        if status.startswith("exit code") and exit_code not in (None, 0)
        else None,
    }
    if not mech.wants_aux(cfg, extract):
        return P.ToolResultReply(action="replace", text=text, handle=handle)
    aux_prompt = prompts.digest_prompt(
        command=command, exit_code=exit_code, user_prompt=rt.user_prompt, extract=extract
    )
    if d.aux.delegated():
        aux = d.aux.request(
            rt,
            "digest",
            req.tool_call_id,
            prompts.DIGEST_SYSTEM,
            aux_prompt,
            cfg.bash_max_summary_tokens,
            ctx,
        )
        return P.ToolResultReply(action="replace", text=text, handle=handle, aux=aux)
    if d.aux.http_backend() is not None:
        answer = await d.aux.http_complete(
            rt, "digest", prompts.DIGEST_SYSTEM, aux_prompt, cfg.bash_max_summary_tokens
        )
        better = accept_digest(d, rt, PendingAux("digest", req.tool_call_id, ctx), answer)
        if better is not None:
            text = better
    return P.ToolResultReply(action="replace", text=text, handle=handle)


# A digest replaces the output only when it is at most this share of it. Measured on windows
# (head, middle, tail) of the 36 real CI logs, header included: a 2,000-char output digests
# to a median 110 % of itself (small outputs are shown whole, plus the header), 4,000 chars
# to 50 % (p10 23 %, p90 91 %), 8,000 to 29 % (p90 76 %), 16,000 to 18 % (all under 50 %).
# Past one half the agent loses the hidden lines (and may pay a recall round trip) to save
# less than it keeps; at or under it the saving is at least the size of what stays.
DIGEST_MAX_SHARE = 0.5
_HEADER_COMMAND_CHARS = 80


def clearly_smaller(digest_chars: int, original_chars: int) -> bool:
    """Whether a digest of `digest_chars` is worth replacing `original_chars` with."""
    return digest_chars <= DIGEST_MAX_SHARE * original_chars


def digest_status(timed_out: bool, aborted: bool, exit_code: int | None) -> str:
    """How the command ended, as the digest's first line says it."""
    if timed_out:
        return "timed out"
    if aborted:
        return "aborted"
    return f"exit code {exit_code}" if exit_code is not None else "exit status unknown"


def digest_header(
    *,
    command: str,
    status: str,
    lines: int,
    chars: int,
    handle: str | None,
    recall: str | None,
) -> str:
    """The first lines of a digest. The first is what an agent's collapsed view shows a
    person: the command, how it ended, how much output, and how to see all of it; the next
    tells the model the raw output is out of context and how to search it."""
    first_line = command.strip().split("\n", 1)[0]
    shown = first_line
    if len(shown) > _HEADER_COMMAND_CHARS:
        shown = shown[: _HEADER_COMMAND_CHARS - 1] + "…"
    size = f"{lines:,} line{'s' if lines != 1 else ''} ({chars:,} chars)"
    where = f"full output: ctxwrap show {handle}" if handle else "full output not kept (disk full)"
    out = [f"$ {shown} → {status} · {size} digested by ctxwrap · {where}"]
    if shown != command.strip():
        out.append("$ " + command.strip()[:300])
    if handle and recall:
        out.append(f"[ctxwrap: the raw output is not in context. Search it with {recall}]")
    else:
        out.append(
            "[ctxwrap: the raw output could not be kept (its state disk is full): no recall]"
        )
    return "\n".join(out)


def accept_digest(
    d: DigestView, rt: SessionRuntime, pending: PendingAux, answer: str | None
) -> str | None:
    """The aux digest replaces the extract only when it is better; None keeps the extract."""
    extract: str = pending.context["extract"]
    if not answer or not answer.strip():
        return None
    answer = redact_secrets(scrub_temp_paths(answer.strip()))
    cap = d.cfg.bash_max_summary_tokens * 4
    # An answer longer than what it condenses (or than the cap) is worse than the extract.
    if len(answer) >= len(extract) or len(answer) > cap:
        return None
    refused = digest_refusal(
        answer, pending.context.get("must_keep", []), exit_code=pending.context.get("exit_code")
    )
    if refused:
        d.events.write("aux_refused", session=rt.session_id, call=pending.tool_call_id, why=refused)
        return None
    text: str = pending.context["header"] + "\n" + answer
    exit_line = pending.context.get("exit_line")
    if exit_line and exit_line not in answer:
        text += f"\n\n{exit_line}"  # the exit status is ours to state, not the aux model's
    d.store.conn.execute(
        "UPDATE digests SET digest_chars=?, source='aux' WHERE session_id=? AND tool_call_id=?",
        (len(text), rt.session_id, pending.tool_call_id),
    )
    return text


# What makes a must-keep line itself: a file:line location, a test id, a count with its noun.
_LOCATION = re.compile(r"[\w./\\-]+\.\w+(?::\d+|\(\d+,\d+\))")
_ERROR_CODE = re.compile(r"\b(?:[A-Z]{1,4}\d{3,5}|E\d{4})\b")
_TEST_ID = re.compile(r"[\w./-]+::[\w\[\]./:-]+|\btest_\w+|\bTest\w+")
_COUNT = re.compile(
    r"\b(\d+)\s+(?:failed|passed|errors?|warnings?|skipped|tests?|failures?|xfailed|deselected)\b",
    re.I,
)
_WORD = re.compile(r"[A-Za-z_][\w-]{3,}")


def must_keep_tokens(line: str) -> list[str]:
    """What an answer must repeat for `line` to count as kept (lower case)."""
    tokens = [m.group(0) for m in _LOCATION.finditer(line)]
    tokens += [m.group(0).split("[")[0] for m in _TEST_ID.finditer(line)]
    tokens += [m.group(1) for m in _COUNT.finditer(line)]
    tokens += [m.group(0) for m in _ERROR_CODE.finditer(line)]
    return [t.lower() for t in dict.fromkeys(tokens)]


# What a summary says when it claims success: "build ok", "0 errors", "all tests passed".
_SUCCESS_CLAIM = re.compile(
    r"\ball (?:\d+ )?(?:tests?|specs?|checks?|steps?)(?: have| were)? (?:pass(?:ed)?|succeeded|ok)\b"
    r"|\b(?:build|compilation|compile|tests?|test suite|suite|run|command|everything|it)"
    r"(?: (?:is|was|were|are|has|have|ran|went|completed))? (?:ok|okay|succeeded|successful(?:ly)?"
    r"|passed|green|clean|fine)\b"
    r"|\b(?:0|no|zero) (?:errors?|failures?|failed|failing|problems?)\b"
    r"|\bnothing (?:failed|to fix)\b|^\W*(?:build )?success\b",
    re.I | re.M,
)
# "most of the tests passed", "the other tests passed": not a claim that all did.
_PARTIAL = re.compile(r"\b(?:most|some|other|others|remaining|rest|\d+ of)\b[^.\n]{0,12}$", re.I)
# What says a run had failures: "2 failed", "FAILED", "3 failing", "Failures: 1".
_FAILURES_SHOWN = re.compile(
    r"\b[1-9]\d* (?:failed|failing|failures?|errors?)\b|\bFAILED\b|\bFAIL\b"
    r"|\b(?:Failures|Errors): [1-9]|\berror\b",
)
_NEGATED = re.compile(r"\b(?:not|n't|never|no longer)\b[^.\n]{0,20}$", re.I)


def contradicts_outcome(answer: str, must_keep: list[str], exit_code: int | None) -> str | None:
    """Why `answer` contradicts how the command ended, or None.

    A command that exited non-zero, or whose must-keep lines show failures, did not succeed:
    an answer that says it did ("build ok, 0 errors", "all tests passed") is false.
    """
    failed = exit_code not in (None, 0)
    shown = any(_FAILURES_SHOWN.search(line) for line in must_keep)
    if (not failed and not shown) or _FAILURES_SHOWN.search(answer):
        return None  # nothing failed, or the answer says what did ("0 failures, 1 errors")
    for match in _SUCCESS_CLAIM.finditer(answer):
        before = answer[max(0, match.start() - 40) : match.start()]
        if _NEGATED.search(before) or _PARTIAL.search(before):
            continue  # "the build did not succeed", "most of the tests passed"
        why = f"exit code {exit_code}" if failed else "failures in the output"
        return f"claims success ({match.group(0)!r}) against {why}"
    return None


def digest_refusal(
    answer: str, must_keep: list[str], *, exit_code: int | None = None
) -> str | None:
    """Why an aux digest may not replace the extract, or None when it may.

    The extract's must-keep lines (summary lines, failures and errors with their locations, as
    the extractive digester ranked them, generic ones for formats without a family) must
    survive: each line's locations, test ids and counts appear in the answer, or, for a line
    with none, at least half its words. An answer that contradicts the exit status or the
    failures shown ("build ok, 0 errors" for exit 1) is refused. Garbage and tag-shaped
    answers are out.
    """
    if prompts.has_control_chars(answer):
        return "control characters"
    if prompts.is_tag_shaped(answer):
        return "tag-shaped"
    if prompts.wordlike_share(answer) < 0.5:
        return "not text"
    contradiction = contradicts_outcome(answer, must_keep, exit_code)
    if contradiction:
        return contradiction
    low = answer.lower()
    answer_numbers = set(re.findall(r"\d+", low))
    for line in must_keep:
        tokens = must_keep_tokens(line)
        if tokens:
            lost = [t for t in tokens if (t not in answer_numbers if t.isdigit() else t not in low)]
            if lost:
                return f"lost {lost[0]!r}"
            continue
        words = {w.lower() for w in _WORD.findall(line)}
        if words and sum(w in low for w in words) * 2 < len(words):
            return f"lost line {line[:60]!r}"
    return None


def _store_and_digest_file(
    d: DigestView, source: Path, digester: StreamingDigester, meta: dict[str, str | None]
) -> Any:
    # One pass over the spill file feeds both the digester and the redacted store, in blocks.
    def lines() -> Any:
        from ctxwrap.state.rawstore import line_blocks_of_file

        for block in line_blocks_of_file(source, 1 << 40):
            digester.feed(block + "\n")
            yield block

    return d.raw.try_put_lines(lines(), **meta)  # type: ignore[arg-type]


class BashDigest(Mechanism):
    """bash-kind output over the threshold → the extractive digest, + an aux summary when the
    extract is still long; the raw output stored for recall."""

    name = "bash"
    switch = "bash"
    settings = ("bash", "bash_min_tokens", "bash_max_summary_tokens", "bash_aux_min_chars")

    def wants(self, s: DigestSettings, text: str, command: str) -> bool:
        """Whether an output is digested at all: long enough, and not a file's content, a
        search's hits or a download (a `cat`, a `sed -n`, PowerShell's Get-Content, a `curl`
        of an API: the agent copies or writes from it next, so it is never digested as a
        log; `engine.shellread.prints_content`)."""
        return chars_to_tokens(len(text)) >= s.bash_min_tokens and not prints_content(command)

    def max_chars(self, s: DigestSettings) -> int:
        return min(s.bash_max_summary_tokens * 4 * 2, 16000)

    def keeps(self, digest_chars: int, original_chars: int) -> bool:
        """Whether the digest replaces the output (else the agent keeps the original)."""
        return clearly_smaller(digest_chars, original_chars)

    def wants_aux(self, s: DigestSettings, extract: str) -> bool:
        return len(extract) >= s.bash_aux_min_chars

    async def tool_result(
        self, d: DigestView, rt: SessionRuntime, req: P.ToolResult
    ) -> P.ToolResultReply:
        return await bash_result(d, rt, req, self)

    def aux_result(
        self, d: DigestView, rt: SessionRuntime, pending: PendingAux, answer: str | None
    ) -> str | None:
        return accept_digest(d, rt, pending, answer)
