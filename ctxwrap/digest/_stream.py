"""The streaming digester: bounded memory whatever the input size.

Input is cut into blocks of complete lines (about 1 MiB) and handled as raw UTF-8 bytes:
each block is cleaned with a few C-level passes, then only lines containing one of the
rules' anchors (found in one RE2 pass over the block) are decoded and matched in Python.
Kept across blocks: a short head, a tail ring, at most MAX_KEPT interesting lines, and
counters.
"""

from __future__ import annotations

import codecs
import re
from collections import deque
from dataclasses import dataclass

import re2

from ctxwrap.digest._command import family_for_command, family_for_output
from ctxwrap.digest._render import render_digest, similarity_key
from ctxwrap.digest._rules import (
    BOX_LINE,
    CONTEXT,
    FAILURE,
    GENERIC_RULES,
    IGNORE,
    LOCATION,
    LOW,
    NOTE,
    SUMMARY,
    Family,
    LineRule,
)
from ctxwrap.digest._text import (
    BINARY_SNIFF_BYTES,
    binary_kind,
    clean_block,
    cut_line,
    decode,
    display_line,
    final_line_state,
    looks_binary,
    strip_ansi,
)
from ctxwrap.digest.redact import redact_secrets

_DIGITS = re.compile(r"\d+")
BLOCK_BYTES = 1 << 20
# A line still unterminated past this size is cut; its prefix is kept, the rest counted.
PARTIAL_LINE_MAX = 1 << 16
PARTIAL_LINE_KEEP = 4096
MAX_KEPT = 3000
# Beyond this many near-identical important lines only a count is kept; failures get more
# room because each one names a different test or file.
SIMILAR_KEEP = 3
MUST_KEEP_MAX = 40  # what an aux digest is checked against; more is noise, not a contract
SIMILAR_KEEP_FAILURES = 10
MAX_SIMILAR_KEYS = 20000
SNIFF_BYTES = 1 << 16
# An output this small is shown whole (cleaned and folded): cutting it saves little and a
# reader would miss its hints and context lines.
SMALL_OUTPUT_BYTES = 2000
# A rule's pattern never needs more of a line than this to decide.
CLASSIFY_BYTES = 2000
# A line that starts a message of its own: a time, a level, a located message, a box.
_RECORD_START = re.compile(
    r"\s*(?:\d{4}-\d\d-\d\d|\[\d|\d\d:\d\d:\d\d|[A-Z][a-z]{2} [ \d]\d \d\d:|[IWEF]\d{4} \d\d:"
    r"|[{╷╵]|(?:time|level|lvl|ts)="
    r"|\W{0,2}(?i:error|warn|warning|info|debug|note|hint|help|fatal|trace|critical)\b)"
)
# Lines under an error that are not its message: another located message, a stack frame, a
# compiler's source excerpt and caret line.
_NOT_MESSAGE = re.compile(r"[\w./-]+:\d+(?::\d+)?:|\s*(?:at \S|File \"|\d*\s*\||[~^]+\s*$)")
# A message this long has likely filled a terminal's width (80 columns and up) and wrapped;
# a longer one than any terminal's was not wrapped, and says nothing of the next line.
WRAP_WIDTH = 78
WRAP_WIDTH_MAX = 200


@dataclass(frozen=True)
class Digest:
    text: str  # the digest body; the caller adds its own marker line
    family: str  # e.g. "pytest", "cargo", "generic"
    original_chars: int
    original_lines: int
    kept_lines: int
    # Lines of `text` a replacement must not lose (summary lines, failures): what an aux
    # digest is checked against before it may replace this one.
    must_keep: tuple[str, ...] = ()


@dataclass(slots=True)
class _PendingContext:
    remaining: int
    priority: int
    stops_at_blank: bool


class _RuleTable:
    """A family's rules plus the generic ones, indexed by anchor for the block scan."""

    def __init__(self, family: Family) -> None:
        rules = family.rules + (GENERIC_RULES if family.uses_generic_rules else ())
        self.rules: tuple[LineRule, ...] = rules
        masks: dict[bytes, int] = {}
        for index, line_rule in enumerate(rules):
            for anchor in line_rule.anchors:
                # Anchors are searched in an upper-cased copy of the block: one pass finds
                # error, Error and ERROR, and bytes.upper() keeps every offset in place.
                key = anchor.encode().upper()
                masks[key] = masks.get(key, 0) | (1 << index)
        # An anchor containing another is found by the shorter one's pass: one pass fewer.
        for longer in sorted(masks, key=len):
            for shorter in masks:
                if shorter != longer and shorter in longer and not shorter.startswith(b"\n"):
                    masks[shorter] |= masks.pop(longer)
                    break
        self.anchors: tuple[tuple[bytes, int], ...] = tuple(masks.items())
        self.line_start_anchors = tuple((a[1:], b) for a, b in self.anchors if a[:1] == b"\n")
        self.bits_of = {a: bits for a, bits in self.anchors if a[:1] != b"\n"}
        # One linear pass finds every line holding any anchor (one bytes.find pass per anchor
        # was 9x slower: a 1 GiB log took 30 s); the line's mask is then worked out on the line.
        options = re2.Options()
        options.encoding = re2.Options.Encoding.LATIN1  # bytes as bytes: offsets stay in place
        self.any_anchor = re2.compile(
            b"(?m)"
            + b"|".join(
                b"^" + re2.escape(a[1:]) if a[:1] == b"\n" else re2.escape(a)
                for a, _ in self.anchors
            ),
            options,
        )
        # The anchors found anywhere in a line, for line_mask (no anchor here contains
        # another, so two never start at one offset).
        self.any_inner = (
            re2.compile(b"|".join(re2.escape(a) for a in self.bits_of), options)
            if self.bits_of
            else None
        )

    def anchored_lines(self, folded: bytes) -> dict[int, int]:
        """Each line of an upper-cased block that holds an anchor: its start offset → the
        rules worth trying on it."""
        hits: dict[int, int] = {}
        search, find, rfind = self.any_anchor.search, folded.find, folded.rfind
        position = 0
        while (found := search(folded, position)) is not None:
            line_start = rfind(b"\n", 0, found.start()) + 1
            line_end = find(b"\n", found.start())
            if line_end < 0:
                line_end = len(folded)
            # Rules only ever see a line's first CLASSIFY_BYTES, so only those can give one.
            hits[line_start] = self.line_mask(
                folded[line_start : min(line_end, line_start + CLASSIFY_BYTES)]
            )
            position = line_end + 1
            if position > len(folded):
                break
        return hits

    def line_mask(self, line: bytes) -> int:
        """The rules worth trying on a line (upper-cased) that holds an anchor.

        One RE2 search per anchor occurrence, each from the byte after the last one's start
        (so overlapping anchors are all found; two never start at one offset, as none
        contains another), instead of one `in` test per anchor (64 of them with the generic
        rules): the realdata logs digest ~10 % faster."""
        mask = 0
        for anchor, bits in self.line_start_anchors:
            if line.startswith(anchor):
                mask |= bits
        if self.any_inner is None:
            return mask
        search, bits_of = self.any_inner.search, self.bits_of
        position = 0
        while (found := search(line, position)) is not None:
            mask |= bits_of[found.group()]
            position = found.start() + 1
        return mask

    def classify(self, line: str, mask: int) -> LineRule | None:
        index = 0
        while mask:
            if mask & 1 and self.rules[index].pattern.search(line):
                return self.rules[index]
            mask >>= 1
            index += 1
        return None


_TABLES: dict[tuple[type[Family], bool], _RuleTable] = {}


def _table_for(family: Family) -> _RuleTable:
    """A family's rule table; rules are class attributes, so one table serves every digest."""
    key = (type(family), family.uses_generic_rules)
    table = _TABLES.get(key)
    if table is None:
        table = _TABLES[key] = _RuleTable(family)
    return table


class StreamingDigester:
    """Feed output in chunks of any size, then call finish() once for the Digest."""

    def __init__(self, *, command: str, exit_code: int | None, max_chars: int = 8000) -> None:
        self._exit_code = exit_code
        self._max_chars = max(0, max_chars)
        self._family: Family | None = family_for_command(command)
        self._table: _RuleTable | None = None
        self._char_counter = codecs.getincrementaldecoder("utf-8")("replace")
        self._binary: bool | None = None
        self._undecided: list[bytes] = []  # raw bytes held until the binary sniff is done
        self._undecided_size = 0
        self._binary_kind = ""
        self._binary_bytes = 0
        self._pending: list[bytes] = []
        self._pending_size = 0
        self._carry = b""  # the current unterminated line
        self._overflow_size = -1  # length so far of an over-long line being skipped; -1: none
        self._original_chars = 0
        self._lines_done = 0
        self._head: list[tuple[int, bytes]] = []
        self._whole: list[bytes] | None = None  # every line, while the output is small
        self._tail: deque[tuple[int, bytes]] = deque()
        self._tail_size = 10
        self._kept: dict[int, tuple[int, str]] = {}
        self._similar_counts: dict[str, int] = {}
        self._similar_last: dict[str, int] = {}
        self._similar_after: dict[int, int] = {}
        self._after: _PendingContext | None = None
        self._result: Digest | None = None

    # -- input ---------------------------------------------------------------------------

    def feed(self, chunk: bytes | str) -> None:
        if self._result is not None:
            raise RuntimeError("StreamingDigester.feed() after finish()")
        if not chunk:
            return
        data = chunk.encode("utf-8", "replace") if isinstance(chunk, str) else bytes(chunk)
        if self._binary is None:
            self._undecided.append(data)
            self._undecided_size += len(data)
            if self._undecided_size >= BINARY_SNIFF_BYTES:
                self._decide_binary()
            return
        if self._binary:
            self._binary_bytes += len(data)
            return
        self._feed_text(data)

    def _decide_binary(self) -> None:
        data = b"".join(self._undecided)
        self._undecided = []
        self._undecided_size = 0
        self._binary = looks_binary(data[:BINARY_SNIFF_BYTES])
        if self._binary:
            self._binary_kind = binary_kind(data)
            self._binary_bytes += len(data)
        else:
            self._feed_text(data)

    def _feed_text(self, data: bytes) -> None:
        # ASCII is one character per byte; anything else is decoded just to be counted.
        if data.isascii() and not self._char_counter.getstate()[0]:
            self._original_chars += len(data)
        else:
            self._original_chars += len(self._char_counter.decode(data))
        self._pending.append(data)
        self._pending_size += len(data)
        if self._pending_size >= BLOCK_BYTES:
            self._flush(final=False)

    # -- blocks --------------------------------------------------------------------------

    def _flush(self, *, final: bool) -> None:
        data = b"".join(self._pending)
        self._pending = []
        self._pending_size = 0
        if self._overflow_size >= 0:
            resumed = self._continue_overflow(data)
            if resumed is None:
                if final:
                    self._process_block(self._overflow_stub())
                return
            data = resumed
        data = self._carry + data
        self._carry = b""
        if final:
            if data:
                self._process_block(data[:-1] if data.endswith(b"\n") else data)
            return
        newline = data.rfind(b"\n")
        if newline < 0:
            self._hold_partial(data)
            return
        self._hold_partial(data[newline + 1 :])
        self._process_block(data[:newline])

    def _hold_partial(self, partial: bytes) -> None:
        if b"\r" in partial:
            # The segment after a trailing \r is still to come and will replace this one.
            pending_rewrite = partial.endswith(b"\r")
            partial = final_line_state(partial) + (b"\r" if pending_rewrite else b"")
        if len(partial) > PARTIAL_LINE_MAX:
            self._overflow_size = len(partial)
            partial = partial[:PARTIAL_LINE_KEEP]
        self._carry = partial

    def _overflow_stub(self) -> bytes:
        text = decode(strip_ansi(self._carry))
        stub = cut_line(text, len(text) + self._overflow_size - len(self._carry))
        self._carry = b""
        self._overflow_size = -1
        return stub.encode()

    def _continue_overflow(self, data: bytes) -> bytes | None:
        """Skip the rest of an over-long line; None while it has not ended yet."""
        newline = data.find(b"\n")
        segment = data if newline < 0 else data[:newline]
        rewrite = segment.rfind(b"\r")
        if 0 <= rewrite < len(segment) - 1:
            # A carriage return restarts the line: its final state begins after it.
            self._carry = b""
            self._overflow_size = -1
            return data[rewrite + 1 :]
        self._overflow_size += len(segment)
        if newline < 0:
            return None
        return self._overflow_stub() + data[newline:]

    def _ensure_family(self, block: bytes) -> Family:
        if self._family is None:
            self._family = family_for_output(decode(block[:SNIFF_BYTES]))
        if self._table is None:
            self._table = _table_for(self._family)
            self._tail_size = self._family.tail_lines * (2 if self._failing else 1)
            self._tail = deque(maxlen=self._tail_size)
        return self._family

    @property
    def _failing(self) -> bool:
        return self._exit_code not in (0, None)

    def _fall_back_to_generic(self) -> Family:
        self._family = Family()
        self._table = _table_for(self._family)
        return self._family

    def _process_block(self, block: bytes) -> None:
        block = clean_block(block)
        family = self._ensure_family(block)
        base = self._lines_done
        self._whole = block.split(b"\n") if base == 0 and len(block) <= SMALL_OUTPUT_BYTES else None
        self._take_head(block, base, family.head_lines)
        self._continue_context(block, base)
        if type(family).scan is not Family.scan:
            try:
                family.scan(decode(block))
            except Exception:
                # A family's counters are a bonus; on a bug keep going with generic rules.
                self._fall_back_to_generic()
        count = self._scan_anchors(block, base)
        self._lines_done += count
        self._take_tail(block, base, count)

    def _take_head(self, block: bytes, base: int, head_lines: int) -> None:
        need = head_lines - len(self._head)
        if need <= 0:
            return
        parts = block.split(b"\n", need)
        for offset, line in enumerate(parts[:need]):
            self._head.append((base + offset, line))

    def _take_tail(self, block: bytes, base: int, count: int) -> None:
        if self._tail_size <= 0:
            return
        parts = block.rsplit(b"\n", self._tail_size)
        if len(parts) > self._tail_size:
            parts = parts[1:]
        first = base + count - len(parts)
        self._tail.extend((first + offset, line) for offset, line in enumerate(parts))

    def _continue_context(self, block: bytes, base: int) -> None:
        """Keep context lines owed by a rule that matched at the end of the last block."""
        pending = self._after
        self._after = None
        position = 0
        lineno = base
        while pending is not None and pending.remaining > 0:
            end = block.find(b"\n", position)
            end = len(block) if end < 0 else end
            line = block[position:end]
            if pending.stops_at_blank and not line.strip():
                break
            self._keep(lineno, pending.priority, decode(line[:PARTIAL_LINE_KEEP]))
            pending.remaining -= 1
            lineno += 1
            position = end + 1
            if end == len(block):
                self._after = pending if pending.remaining > 0 else None
                break

    def _scan_anchors(self, block: bytes, base: int) -> int:
        """Keep the block's interesting lines; return its line count (counted on the way)."""
        table = self._table
        assert table is not None
        folded = block.upper()
        find = folded.find
        hits = table.anchored_lines(folded)
        lineno = base
        previous = 0
        for line_start in sorted(hits):
            lineno += block.count(b"\n", previous, line_start)
            previous = line_start
            line_end = find(b"\n", line_start)
            if line_end < 0:
                line_end = len(block)
            line = decode(block[line_start : min(line_end, line_start + CLASSIFY_BYTES)])
            matched = table.classify(line, hits[line_start])
            if matched is None or matched.priority <= IGNORE:
                continue
            if line_end - line_start > CLASSIFY_BYTES:
                line = decode(block[line_start : min(line_end, line_start + PARTIAL_LINE_KEEP)])
            kept = self._keep(
                lineno, matched.priority, line, dedupe=True, paths=matched.repeats_keep_paths
            )
            if kept and (matched.before or matched.after):
                self._keep_context(block, line_start, line_end, lineno, matched)
            if kept and matched.continues:
                self._keep_continuation(block, line_end, lineno, matched, line)
        return lineno - base + block.count(b"\n", previous) + 1

    def _keep_context(
        self, block: bytes, line_start: int, line_end: int, lineno: int, matched: LineRule
    ) -> None:
        priority = matched.effective_context_priority
        start = line_start
        for back in range(1, matched.before + 1):
            if start == 0:
                break
            previous_start = block.rfind(b"\n", 0, start - 1) + 1
            self._keep(lineno - back, priority, decode(block[previous_start : start - 1]))
            start = previous_start
        end = line_end
        for ahead in range(1, matched.after + 1):
            if end >= len(block):
                remaining = matched.after - ahead + 1
                self._after = _PendingContext(remaining, priority, matched.after_stops_at_blank)
                break
            next_end = block.find(b"\n", end + 1)
            next_end = len(block) if next_end < 0 else next_end
            line = block[end + 1 : next_end]
            if matched.after_stops_at_blank and not line.strip():
                break
            self._keep(lineno + ahead, priority, decode(line[:PARTIAL_LINE_KEEP]))
            end = next_end

    def _keep_continuation(
        self, block: bytes, line_end: int, lineno: int, matched: LineRule, line: str
    ) -> None:
        """Keep, at the rule's priority, the lines that continue a matched line's message.

        With `continues_with`, those that match it (a box's `│`, any line of a log record)
        and, unless in a box, start no message of their own. Otherwise a line continues an
        error message when it starts no message of its own and is indented under it, or the
        message ended with `:` or filled a terminal's width (the terminal wrapped it)."""
        pattern = re.compile(matched.continues_with) if matched.continues_with else None
        boxed = matched.continues_with == BOX_LINE
        previous = line.rstrip()
        end = line_end
        for ahead in range(1, matched.continues + 1):
            if end >= len(block):
                break
            next_end = block.find(b"\n", end + 1)
            next_end = len(block) if next_end < 0 else next_end
            text = decode(block[end + 1 : min(next_end, end + 1 + PARTIAL_LINE_KEEP)])
            if not text.strip() and not boxed:
                break
            if pattern is not None:
                if not pattern.match(text) or (not boxed and _RECORD_START.match(text)):
                    break
            elif (
                _RECORD_START.match(text)
                or _NOT_MESSAGE.match(text)
                or not (
                    text[:1].isspace()
                    or previous.endswith(":")
                    or WRAP_WIDTH <= len(previous) <= WRAP_WIDTH_MAX
                )
            ):
                break
            self._keep(lineno + ahead, matched.priority, text)
            # A terminal wraps at column 0: an indented line says nothing of the next one.
            previous = "" if text[:1].isspace() else text.rstrip()
            end = next_end

    def _keep(
        self, lineno: int, priority: int, line: str, *, dedupe: bool = False, paths: bool = False
    ) -> bool:
        """Keep a line at a priority; False when it was only counted as a repeat."""
        if dedupe and priority >= NOTE and self._is_repeat(lineno, priority, line, paths):
            return False
        previous = self._kept.get(lineno)
        if previous is not None:
            if previous[0] < priority:
                self._kept[lineno] = (priority, previous[1])
            return True
        self._kept[lineno] = (priority, line[:PARTIAL_LINE_KEEP])
        if len(self._kept) > MAX_KEPT:
            self._prune()
        return True

    def _is_repeat(self, lineno: int, priority: int, line: str, paths: bool = False) -> bool:
        """Count a near-identical line; True once enough like it are kept already."""
        key = _DIGITS.sub("#", line.strip()) if paths else similarity_key(line)
        seen = self._similar_counts.get(key, 0) + 1
        self._similar_counts[key] = seen
        limit = SIMILAR_KEEP_FAILURES if priority >= FAILURE else SIMILAR_KEEP
        last = self._similar_last.get(key)
        if seen > limit and last is not None and last in self._kept:
            self._similar_after[last] = self._similar_after.get(last, 0) + 1
            return True
        if len(self._similar_counts) >= MAX_SIMILAR_KEYS:
            self._similar_counts.clear()
            self._similar_last.clear()
        self._similar_last[key] = lineno
        return False

    def _prune(self) -> None:
        ranked = sorted(self._kept.items(), key=lambda item: (-item[1][0], item[0]))
        self._kept = dict(ranked[: MAX_KEPT * 2 // 3])
        self._similar_after = {k: v for k, v in self._similar_after.items() if k in self._kept}

    # -- output --------------------------------------------------------------------------

    def finish(self) -> Digest:
        if self._result is not None:
            return self._result
        try:
            self._result = self._finish()
        except Exception:
            # The digester must never break a tool call: fall back to the plain tail.
            self._result = self._emergency_digest()
        return self._result

    def _finish(self) -> Digest:
        if self._binary is None and self._undecided:
            self._decide_binary()
        if self._binary:
            return self._binary_digest()
        self._original_chars += len(self._char_counter.decode(b"", final=True))
        self._flush(final=True)
        if self._lines_done == 0:
            name = self._family.name if self._family else "generic"
            return Digest("[no output]", name, 0, 0, 0)
        family = self._family if self._family is not None else Family()
        kept = dict(self._kept)
        self._merge(kept, self._head, first_priority=NOTE, other_priority=LOW, firsts=2)
        tail = list(self._tail)
        tail.reverse()
        # The last lines of an output are its verdict (a summary, the error that stopped it):
        # one line, two when the command failed, rank with the summaries.
        last = [item for item in tail if item[1].strip()][: 2 if self._failing else 1]
        self._merge(kept, last, first_priority=SUMMARY, other_priority=SUMMARY, firsts=0)
        self._merge(kept, tail, first_priority=LOCATION, other_priority=CONTEXT, firsts=3)
        if self._whole is not None and len(self._whole) == self._lines_done:
            whole = list(enumerate(self._whole))
            self._merge(
                kept, whole, first_priority=CONTEXT, other_priority=CONTEXT, firsts=0, blanks=True
            )
        try:
            summary = family.summary_lines()
        except Exception:
            summary = []
            family = self._fall_back_to_generic()
        text, kept_units = render_digest(
            kept,
            self._similar_after,
            summary,
            self._lines_done,
            self._max_chars,
            failing=self._failing,
        )
        must_keep = [s for s in summary if s.strip()] + [
            shown
            for lineno in sorted(kept)
            if kept[lineno][0] >= FAILURE
            and (shown := display_line(kept[lineno][1])) in text
            # a box's `│` or a closing `]` is no line an answer could lose
            and any(c.isalnum() for c in shown)
        ]
        return Digest(
            text,
            family.name,
            self._original_chars,
            self._lines_done,
            kept_units,
            tuple(must_keep[:MUST_KEEP_MAX]),
        )

    @staticmethod
    def _merge(
        kept: dict[int, tuple[int, str]],
        lines: list[tuple[int, bytes]],
        *,
        first_priority: int,
        other_priority: int,
        firsts: int,
        blanks: bool = False,
    ) -> None:
        for rank, (lineno, line) in enumerate(lines):
            if not blanks and not line.strip():
                continue
            priority = first_priority if rank < firsts else other_priority
            previous = kept.get(lineno)
            if previous is None:
                kept[lineno] = (priority, decode(line[:PARTIAL_LINE_KEEP]))
            elif previous[0] < priority:
                kept[lineno] = (priority, previous[1])

    def _binary_digest(self) -> Digest:
        text = f"[binary output: {self._binary_bytes:,} bytes of {self._binary_kind}; not shown]"
        return Digest(text[: self._max_chars], "binary", self._binary_bytes, 0, 0)

    def _emergency_digest(self) -> Digest:
        lines = [decode(line) for _, line in self._tail]
        text = redact_secrets("\n".join(lines))[-self._max_chars :] if self._max_chars else ""
        name = self._family.name if self._family is not None else "generic"
        return Digest(text, name, self._original_chars, self._lines_done, len(lines))
