"""The counterfactual: what ctxwrap would have kept out of each request of a recorded session.

Events from one session file (`_read.py`) are folded into the context the agent sent on each
LLM call: one call per provider response. Each message in context carries its plain size and,
per mechanism, how much ctxwrap would have kept out of it; running totals make a call O(1).

Mechanisms, as replay models them (no model call):

- bash: a result over `bash_min_tokens` → the real extractive digest of the text the agent
  received, with the daemon's header line (a placeholder recall handle of the same length);
- writes: a write body of at least `write_min_bytes` → the strip marker, plus the heuristic
  fact message ctxwrap would have added (counted against);
- masking: at a real idle gap (request time − previous response > the cache TTL) the prompt
  cache is cold anyway, so older results become tombstones: reads superseded by a later read
  of the same path, and tool results of earlier user prompts. That is all — no cost-model
  "rewrite pays" decision and no tagger;
- skills: the skills block of pi 1.x's recorded system prompt;
- tools: ctxwrap's own tool specs, which plain pi never sends (pi only; counted against);
- tagger bound (not in the totals): every read/grep/find/ls result the tagger could drop,
  as a tombstone: an upper bound, since a real tagger retains what the task needs.

The aux model's tokens are estimated from the real prompt builders (tags, facts, and digests
whose extract is long enough to be condensed) and counted against the mechanism.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Callable, Iterable
from dataclasses import astuple, dataclass, field
from typing import Any

from ctxwrap.aux import prompts
from ctxwrap.engine.bashout import BashText, scrub_temp_paths, split_bash_text
from ctxwrap.engine.edits import args_sig
from ctxwrap.engine.facts import heuristic_fact, line_count
from ctxwrap.engine.rereads import pointer_text, result_digest
from ctxwrap.replay._read import Compaction, Event, Header, Message, SystemPrompt, ToolCall

Tagger = Callable[
    [str, dict[str, Any], str, str], Any
]  # (tool, args, result, request) → TagOutcome

MECHANISMS = ("bash", "amnesia", "writes", "masking", "skills", "tools")
META_TOOLS = frozenset({"read", "grep", "find", "ls", "glob"})
# Name + description + JSON parameters of ctx_recall and find_capability as the bridge
# registers them (pi). Measured from `ctxwrap stats` (saved_tools per call); the agreement
# test against a real `ctxwrap pi` run fails if it drifts.
OWN_TOOLS_CHARS = 1006
PLACEHOLDER_HANDLE = "r00000000"
# Output tokens an aux answer typically takes (caps: tag 24, fact 60, digest 1024).
AUX_OUTPUT_ESTIMATE = {"tag": 8, "fact": 30, "digest": 200}


def tokens(chars: int) -> int:
    sign = -1 if chars < 0 else 1
    return sign * ((abs(chars) + 3) // 4)


@dataclass(frozen=True)
class Thresholds:
    bash_min_tokens: int = 2000
    bash_max_summary_tokens: int = 1024
    bash_aux_min_chars: int = 2000
    amnesia_min_tokens: int = 250
    amnesia_max_chars: int = 6000
    write_min_bytes: int = 400
    write_max_content_chars: int = 6000
    lazy_skills: bool = True
    ttl_s: float = 300.0
    dedup: bool = True

    @classmethod
    def from_settings(cls, s: Any) -> Thresholds:
        return cls(
            bash_min_tokens=s.bash_min_tokens,
            bash_max_summary_tokens=s.bash_max_summary_tokens,
            bash_aux_min_chars=s.bash_aux_min_chars,
            amnesia_min_tokens=s.amnesia_min_tokens,
            amnesia_max_chars=s.amnesia_max_chars,
            write_min_bytes=s.write_min_bytes,
            write_max_content_chars=s.write_max_content_chars,
            lazy_skills=s.lazy_skills and s.lazy,
            dedup=s.dedup,
        )


@dataclass
class Intervention:
    kind: str  # digest | strip | mask | pointer | tombstone-bound
    call_index: int  # first call that would not carry it
    tool: str
    label: str
    original_chars: int
    replacement_chars: int
    reason: str = ""
    handle: str | None = None

    @property
    def saved_chars(self) -> int:
        return self.original_chars - self.replacement_chars


@dataclass
class CallFigures:
    index: int
    ts: float
    system_chars: int
    tools_chars: int
    messages_chars: int  # plain
    saved: dict[str, int]  # chars kept out, per mechanism
    tagger_bound_chars: int
    output_tokens: int
    compaction: bool = False
    masked: bool = False  # an idle-gap masking pass ran before this call
    idle_gap_s: float = 0.0

    @property
    def plain_chars(self) -> int:
        return self.system_chars + self.tools_chars + self.messages_chars

    @property
    def saved_chars(self) -> int:
        return sum(self.saved.values())

    @property
    def sent_chars(self) -> int:
        return self.plain_chars - self.saved_chars


@dataclass
class _Item:
    entry_id: str
    role: str
    chars: int
    saved: dict[str, int]
    task: int
    tool: str | None = None
    label: str = ""
    read_key: str | None = None
    masked: bool = False
    is_error: bool = False
    pinned: bool = False  # a later pointer refers to it: never masked (its signature is hidden)


@dataclass
class SessionReplay:
    path: str
    fmt: str
    session_id: str
    cwd: str | None = None
    started_at: float | None = None
    model: str | None = None
    system_estimated: bool = False
    calls: list[CallFigures] = field(default_factory=list)
    interventions: list[Intervention] = field(default_factory=list)
    aux: dict[str, dict[str, int]] = field(default_factory=dict)  # mechanism → calls/in/out
    compactions: int = 0
    aux_real: bool = False  # --tag: the amnesia aux figures are the backend's, not estimates

    def add_aux(self, mechanism: str, task: str, prompt_chars: int) -> None:
        a = self.aux.setdefault(mechanism, {"calls": 0, "input_tokens": 0, "output_tokens": 0})
        a["calls"] += 1
        a["input_tokens"] += tokens(prompt_chars)
        a["output_tokens"] += AUX_OUTPUT_ESTIMATE[task]


def _digest_text(text: str, command: str, max_chars: int) -> tuple[str, str]:
    """The daemon's replacement for a bash result (service.py's shape), and the bare extract."""
    from ctxwrap.digest import StreamingDigester

    # pi's truncation note and status line are at the end: parse only the tail (the pattern
    # search over a whole 50 KB output costs more than the digest of it)
    cut = max(0, len(text) - 2000)
    parsed = split_bash_text(text[cut:])
    if cut:
        parsed = BashText(text[:cut] + parsed.body, *astuple(parsed)[1:])
    exit_code = parsed.exit_code if parsed.exit_code is not None else 0
    digester = StreamingDigester(command=command, exit_code=exit_code, max_chars=max_chars)
    with contextlib.suppress(Exception):
        digester.feed(parsed.body)
    digest = digester.finish()
    status = (
        "timed out"
        if parsed.timed_out
        else "aborted"
        if parsed.aborted
        else f"exit code {exit_code}"
    )
    header = (
        f"[ctxwrap digest of bash output — {digest.original_lines:,} lines, {digest.original_chars:,} chars; "
        f"{status}; the raw output is not in context. "
        f'Search it with ctx_recall(handle="{PLACEHOLDER_HANDLE}", pattern=...)]'
    )
    extract = scrub_temp_paths(digest.text)
    out = header + "\n$ " + command[:300] + "\n" + extract
    if status.startswith("exit code") and exit_code != 0:
        out += f"\n\nCommand exited with code {exit_code}"
    return out, extract


def _tombstone(label: str, chars: int) -> str:
    # daemon/service.py `_tombstone`, without a recall handle (replay stores nothing)
    return f"[ctxwrap: {label} ({chars:,} chars) was judged not needed for the current task and hidden]"


def _strip_marker(path: str, size: int, lines: int) -> str:
    # daemon/service.py `_strip_marker`
    return (
        f"[content stripped by ctxwrap: {size:,} bytes, {lines:,} lines "
        f"of {path}; the file on disk is complete]"
    )


def _json_str_len(text: str) -> int:
    import json

    return len(json.dumps(text, ensure_ascii=False)) - 2


def _label(tool: str, args: dict[str, Any]) -> str:
    for key in ("path", "file_path", "pattern", "query", "command"):
        if key in args:
            return f"{tool} {str(args[key])[:120]}"
    return tool


class SessionSimulator:
    """Fold one session's events; `finish()` returns its SessionReplay."""

    def __init__(self, path: str, th: Thresholds, tagger: Tagger | None = None) -> None:
        self.th = th
        self.tagger = tagger
        self.r = SessionReplay(path=path, fmt="?", session_id=path)
        self.items: list[_Item] = []
        self.index: dict[str, int] = {}
        self.msg_chars = 0
        self.saved = dict.fromkeys(MECHANISMS, 0)
        self.bound = 0
        self.bound_by_id: dict[str, int] = {}
        self.calls: dict[str, tuple[ToolCall, int]] = {}  # call id → (call, its message task)
        self.task = 0
        self.user_prompt = ""
        self.system = SystemPrompt(0.0, 0, 0, 0)
        self.have_system = False
        self.last_response_ts: float | None = None
        self.last_message_ts: float | None = None
        self.last_request: str | None = None
        self.pending_compaction = False
        self.pending_mask = False
        self.latest_read: dict[str, int] = {}  # read key → position of its newest result
        # Re-reads (mechanisms/dedup.py): read signature → (entry id, digest) of the latest
        # whole result, forgotten at a head change; signatures already answered by a pointer.
        self.read_seen: dict[str, tuple[str, str]] = {}
        self.pointed: set[str] = set()

    # -- context bookkeeping --------------------------------------------------------------

    def _add(self, item: _Item) -> None:
        self.index[item.entry_id] = len(self.items)
        self.items.append(item)
        self.msg_chars += item.chars
        for k, v in item.saved.items():
            self.saved[k] += v

    def _reset(self, keep_from: int) -> None:
        dropped, self.items = self.items[:keep_from], self.items[keep_from:]
        for it in dropped:
            self.msg_chars -= it.chars
            for k, v in it.saved.items():
                self.saved[k] -= v
            self.bound -= self.bound_by_id.pop(it.entry_id, 0)
        self.index = {it.entry_id: i for i, it in enumerate(self.items)}
        self.latest_read = {
            it.read_key: i for i, it in enumerate(self.items) if it.read_key is not None
        }

    def _branch(self, parent: str | None) -> None:
        """pi sessions are trees: a message whose parent is an earlier message starts a branch."""
        if (
            self.r.fmt != "pi"
            or parent is None
            or not self.items
            or self.items[-1].entry_id == parent
        ):
            # Claude Code chains parallel tool results to their own tool_use entry, not to the
            # previous entry, and forks into new files: its file order is the context order.
            return
        pos = self.index.get(parent)
        if pos is None:
            return
        tail = self.items[pos + 1 :]
        self.items = self.items[: pos + 1]
        for it in tail:
            self.msg_chars -= it.chars
            for k, v in it.saved.items():
                self.saved[k] -= v
            self.bound -= self.bound_by_id.pop(it.entry_id, 0)
            self.index.pop(it.entry_id, None)
        self.latest_read = {
            it.read_key: i for i, it in enumerate(self.items) if it.read_key is not None
        }
        self.pending_compaction = True  # the head of the cached prefix changed
        self.read_seen.clear()

    # -- events ---------------------------------------------------------------------------

    def feed(self, events: Iterable[Event]) -> None:
        for ev in events:
            if isinstance(ev, Message):
                self._message(ev)
            elif isinstance(ev, SystemPrompt):
                self.system = ev
                self.have_system = True
            elif isinstance(ev, Compaction):
                self._compaction(ev)
            elif isinstance(ev, Header):
                self.r.fmt = ev.fmt
                self.r.session_id = ev.session_id
                self.r.cwd = ev.cwd
                self.r.started_at = ev.ts

    def _compaction(self, ev: Compaction) -> None:
        keep = (
            self.index.get(ev.first_kept_id, len(self.items))
            if ev.first_kept_id
            else len(self.items)
        )
        self._reset(keep)
        self.r.compactions += 1
        self.pending_compaction = True
        self.read_seen.clear()  # as the daemon: a head change forgets what was read
        if ev.summary_chars:
            self._add(
                _Item(f"compaction-{self.r.compactions}", "custom", ev.summary_chars, {}, self.task)
            )

    def _message(self, m: Message) -> None:
        if m.role != "assistant" or m.request_key != self.last_request:
            self._branch(m.parent_id)
        if m.role == "assistant":
            if m.request_key != self.last_request:
                self._call(m)
                self.last_request = m.request_key
            self._add(self._assistant_item(m))
            self.last_response_ts = m.ts
        elif m.role == "tool_result":
            self._add(self._result_item(m))
        else:
            if m.role == "user":
                self.task += 1
                self.user_prompt = m.text  # the aux prompts quote it (≤ 2000 chars)
            self._add(_Item(m.entry_id, m.role, m.chars, {}, self.task))
        self.last_message_ts = m.ts

    def _assistant_item(self, m: Message) -> _Item:
        saved: dict[str, int] = {}
        label = ""
        for c in m.calls:
            self.calls[c.call_id] = (c, self.task)
            if c.name != "write":
                continue
            content = c.args.get("content")
            if not isinstance(content, str):
                continue
            size = len(content.encode("utf-8", "replace"))
            if size < self.th.write_min_bytes:
                continue
            path = str(c.args.get("path", c.args.get("file_path", "?")))
            lines = line_count(content)
            marker = _strip_marker(path, size, lines)
            fact = heuristic_fact(path, content[:20000], total_bytes=size, total_lines=lines)
            cut = _json_str_len(content) - _json_str_len(marker)
            saved["writes"] = saved.get("writes", 0) + cut - len(fact)
            label = f"write {path}"
            self.r.interventions.append(
                Intervention(
                    "strip",
                    len(self.r.calls),
                    "write",
                    label,
                    _json_str_len(content),
                    _json_str_len(marker) + len(fact),
                    fact,
                )
            )
            self.r.add_aux(
                "writes",
                "fact",
                len(prompts.FACT_SYSTEM)
                + len(
                    prompts.fact_prompt(
                        path=path,
                        content=content[: self.th.write_max_content_chars + 1],
                        max_chars=self.th.write_max_content_chars,
                    )
                ),
            )
        return _Item(m.entry_id, "assistant", m.chars, saved, self.task, label=label)

    def _result_item(self, m: Message) -> _Item:
        call, _task = self.calls.get(m.tool_call_id or "", (None, self.task))
        tool = m.tool_name or (call.name if call else "")
        args = call.args if call else {}
        label = _label(tool, args)
        item = _Item(
            m.entry_id, "tool_result", m.chars, {}, self.task, tool, label, is_error=m.is_error
        )
        if tool == "bash" and tokens(len(m.text)) >= self.th.bash_min_tokens:
            command = str(args.get("command", ""))
            max_chars = min(self.th.bash_max_summary_tokens * 4 * 2, 16000)
            replacement, extract = _digest_text(m.text, command, max_chars)
            item.saved["bash"] = m.chars - len(replacement)
            self.r.interventions.append(
                Intervention(
                    "digest",
                    len(self.r.calls),
                    "bash",
                    label,
                    m.chars,
                    len(replacement),
                    handle=PLACEHOLDER_HANDLE,
                )
            )
            if len(extract) >= self.th.bash_aux_min_chars:
                p = prompts.digest_prompt(
                    command=command, exit_code=None, user_prompt=self.user_prompt, extract=extract
                )
                self.r.add_aux("bash", "digest", len(prompts.DIGEST_SYSTEM) + len(p))
        elif tool in META_TOOLS and not m.is_error:
            if tool == "read":
                key = str(args.get("path", args.get("file_path", "")))
                if args.get("offset") is None and args.get("limit") is None and key:
                    item.read_key = key
            if self._reread(item, m, args, label):
                pass  # a pointer to the earlier identical result: no tag
            elif tokens(m.chars) >= self.th.amnesia_min_tokens and self.tagger is not None:
                self._tag_for_real(item, m, tool, args, label)
            elif tokens(m.chars) >= self.th.amnesia_min_tokens:
                tomb = _tombstone(label, m.chars)
                bound = m.chars - len(tomb)
                self.bound += bound
                self.bound_by_id[m.entry_id] = bound
                self.r.interventions.append(
                    Intervention(
                        "tombstone-bound",
                        len(self.r.calls),
                        tool,
                        label,
                        m.chars,
                        len(tomb),
                        "the tagger could drop it (upper bound)",
                    )
                )
                shown = m.text[: self.th.amnesia_max_chars]
                p = prompts.tag_prompt(
                    tool=tool,
                    args=args,
                    result=shown,
                    user_prompt=self.user_prompt,
                    max_chars=self.th.amnesia_max_chars,
                )
                self.r.add_aux("amnesia", "tag", len(prompts.TAG_SYSTEM) + len(p))
        if item.read_key is not None:
            self.latest_read[item.read_key] = len(self.items)
        return item

    def _reread(self, item: _Item, m: Message, args: dict[str, Any], label: str) -> bool:
        """An unchanged re-read becomes a pointer, as mechanisms/dedup.py decides it (pi only,
        results the bridge sends: at least amnesia_min_tokens; the earlier result still whole)."""
        if (
            not self.th.dedup
            or self.r.fmt != "pi"
            or m.tool_name != "read"
            or tokens(m.chars) < self.th.amnesia_min_tokens
        ):
            return False
        sig = args_sig("read", args)
        digest = result_digest(m.text)
        earlier = self.read_seen.get(sig)
        if earlier is not None and earlier[1] == digest and sig not in self.pointed:
            pos = self.index.get(earlier[0])
            if (
                pos is not None
                and not self.items[pos].saved.get("amnesia")
                and not (self.items[pos].saved.get("masking"))
            ):
                text = pointer_text(label, m.chars)
                item.saved["amnesia"] = m.chars - len(text)
                self.pointed.add(sig)
                self.items[pos].pinned = True
                self.r.interventions.append(
                    Intervention(
                        "pointer",
                        len(self.r.calls),
                        "read",
                        label,
                        m.chars,
                        len(text),
                        "the same content as an earlier read",
                    )
                )
                return True
        self.read_seen[sig] = (m.entry_id, digest)
        return False

    def _tag_for_real(
        self, item: _Item, m: Message, tool: str, args: dict[str, Any], label: str
    ) -> None:
        """--tag: the aux model decides; a DROP tombstones the result before the model sees it."""
        assert self.tagger is not None
        out = self.tagger(tool, args, m.text, self.user_prompt)
        a = self.r.aux.setdefault("amnesia", {"calls": 0, "input_tokens": 0, "output_tokens": 0})
        a["calls"] += 1
        a["input_tokens"] += out.input_tokens
        a["output_tokens"] += out.output_tokens
        self.r.aux_real = True
        if out.decision != "DROP":
            return
        tomb = _tombstone(label, m.chars)
        item.saved["amnesia"] = m.chars - len(tomb)
        self.r.interventions.append(
            Intervention(
                "tombstone", len(self.r.calls), tool, label, m.chars, len(tomb), "tagged DROP"
            )
        )

    def _mask(self, call_index: int) -> bool:
        """Idle past the TTL: the cache is cold, so rewrite older results as tombstones."""
        changed = False
        min_chars = self.th.amnesia_min_tokens * 4
        for pos, it in enumerate(self.items):
            if it.role != "tool_result" or it.masked or it.is_error or it.pinned:
                continue
            current = it.chars - sum(it.saved.values())
            if current < min_chars:
                continue
            if it.read_key is not None and self.latest_read.get(it.read_key, pos) > pos:
                reason = "superseded by a later read of the same file"
            elif it.task < self.task:
                reason = "result of an earlier prompt"
            else:
                continue
            tomb = _tombstone(it.label, it.chars)
            gain = current - len(tomb)
            if gain <= 0:
                continue
            it.saved["masking"] = it.saved.get("masking", 0) + gain
            self.saved["masking"] += gain
            it.masked = True
            changed = True
            self.r.interventions.append(
                Intervention(
                    "mask", call_index, it.tool or "", it.label, current, len(tomb), reason
                )
            )
        return changed

    def _call(self, m: Message) -> None:
        index = len(self.r.calls)
        request_ts = self.last_message_ts if self.last_message_ts is not None else m.ts
        gap = 0.0
        if self.last_response_ts is not None:
            gap = max(0.0, request_ts - self.last_response_ts)
        masked = gap > self.th.ttl_s and self._mask(index)
        if m.model:
            self.r.model = m.model
        sys_chars, tools_chars = self.system.chars, self.system.tools_chars
        if not self.have_system and m.usage_prompt_tokens:
            # pi 0.73 and Claude Code do not record the system prompt or tools: estimate them
            # once from the provider's prompt size of the first call.
            est = max(0, m.usage_prompt_tokens * 4 - self.msg_chars)
            self.system = SystemPrompt(m.ts, est, 0, 0)
            self.have_system = True
            self.r.system_estimated = True
            sys_chars = est
        saved = dict(self.saved)
        if self.th.lazy_skills:
            saved["skills"] = self.system.skills_chars
        saved["tools"] = -OWN_TOOLS_CHARS if self.r.fmt == "pi" else 0
        self.r.calls.append(
            CallFigures(
                index=index,
                ts=request_ts,
                system_chars=sys_chars,
                tools_chars=tools_chars,
                messages_chars=self.msg_chars,
                saved=saved,
                tagger_bound_chars=self.bound,
                output_tokens=m.output_tokens,
                compaction=self.pending_compaction,
                masked=masked,
                idle_gap_s=gap,
            )
        )
        self.pending_compaction = False

    def finish(self) -> SessionReplay:
        return self.r


def fingerprint(*parts: object) -> str:
    return hashlib.blake2b(repr(parts).encode(), digest_size=8).hexdigest()
