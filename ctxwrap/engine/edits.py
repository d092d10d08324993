"""Frozen, tail-only context edits (DESIGN invariants 3-5).

pi fires `context` before every LLM call with the whole message list; the bridge answers with
`apply_edits(messages, frozen)` where `frozen` is every edit ever decided in the session. An edit
is decided once, by `decide_edits`, only for messages the model has never received (the tail),
and then replayed byte for byte on every later request, so each request starts with the
previous one.

`ctxwrap/_bridge/edits.ts` is the TypeScript twin of `apply_edits`, `describe_tail` and
`args_sig`; tests/fixtures/edits/*.json pins both to the same outputs. Change them together.

Lengths are UTF-16 code units ("chars", what JavaScript's `.length` and pi's chars/4 estimate
count) and UTF-8 bytes, never Python code points, so both languages agree.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

JsonDict = dict[str, Any]

TOMBSTONE: Literal["tombstone"] = "tombstone"
REMOVE: Literal["remove"] = "remove"
STRIP_WRITE: Literal["strip_write"] = "strip_write"
STRIP_EDIT: Literal["strip_edit"] = "strip_edit"
MASK: Literal["mask"] = "mask"

# -- edits ----------------------------------------------------------------------------------
# Field names are camelCase on purpose: edits travel to the bridge and are persisted in the pi
# session as JSON, and the TypeScript side reads them as they are.


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")


class TombstoneEdit(_Frozen):
    """The toolResult's content becomes one text block holding `text`."""

    kind: Literal["tombstone"] = "tombstone"
    toolCallId: str
    text: str
    savedChars: int = 0


class RemoveEdit(_Frozen):
    """The toolResult and its toolCall block go; an assistant message left empty goes too."""

    kind: Literal["remove"] = "remove"
    toolCallId: str
    savedChars: int = 0


class StripWriteEdit(_Frozen):
    """The write toolCall's `arguments.content` becomes `text` (the other arguments stay)."""

    kind: Literal["strip_write"] = "strip_write"
    toolCallId: str
    text: str
    savedChars: int = 0


class StripEditEdit(_Frozen):
    """An applied edit call's replaced text (every `oldText` / `old_string` of at least
    `minChars`, top-level or in `edits`) becomes `text`; the new text stays. That text left the
    file with the edit: the model needs the new text to edit again, not the old."""

    kind: Literal["strip_edit"] = "strip_edit"
    toolCallId: str
    text: str
    minChars: int = Field(ge=1)
    savedChars: int = 0


class MaskEdit(_Frozen):
    """An older toolResult masked at a cold cache boundary (see masking.py); applied exactly
    like a tombstone. `reason` says why (superseded, dropped, earlier_task)."""

    kind: Literal["mask"] = "mask"
    toolCallId: str
    text: str
    savedChars: int = 0
    reason: str = ""


Edit = Annotated[
    TombstoneEdit | RemoveEdit | StripWriteEdit | StripEditEdit | MaskEdit,
    Field(discriminator="kind"),
]
CallEdit = StripWriteEdit | StripEditEdit
ResultEdit = TombstoneEdit | RemoveEdit | MaskEdit


def edit_to_json(edit: Edit) -> JsonDict:
    return edit.model_dump()


def edit_from_json(raw: object) -> Edit | None:
    """One edit from JSON, or None when malformed.

    Mirrors `asEdit` in edits.ts exactly (not pydantic's lax coercion): a persisted frozen set
    must mean the same thing in both languages, so e.g. `"savedChars": "5"` is ignored (0), not
    coerced, and an edit without a string `text` is skipped on both sides.
    """
    if not isinstance(raw, dict):
        return None
    kind = raw.get("kind")
    cid = raw.get("toolCallId")
    if not isinstance(cid, str):
        return None
    saved = raw.get("savedChars")
    saved_chars = 0
    if isinstance(saved, int) and not isinstance(saved, bool):
        saved_chars = saved
    elif isinstance(saved, float) and saved.is_integer():
        saved_chars = int(saved)  # JSON 5.0 is the integer 5 in JavaScript
    text = raw.get("text")
    if kind == REMOVE:
        return RemoveEdit(toolCallId=cid, savedChars=saved_chars)
    if not isinstance(text, str):
        return None
    if kind == TOMBSTONE:
        return TombstoneEdit(toolCallId=cid, text=text, savedChars=saved_chars)
    if kind == STRIP_WRITE:
        return StripWriteEdit(toolCallId=cid, text=text, savedChars=saved_chars)
    if kind == STRIP_EDIT:
        min_chars = raw.get("minChars")
        if isinstance(min_chars, float) and min_chars.is_integer():
            min_chars = int(min_chars)
        if not isinstance(min_chars, int) or isinstance(min_chars, bool) or min_chars < 1:
            return None
        return StripEditEdit(toolCallId=cid, text=text, minChars=min_chars, savedChars=saved_chars)
    if kind == MASK:
        reason = raw.get("reason")
        return MaskEdit(
            toolCallId=cid,
            text=text,
            savedChars=saved_chars,
            reason=reason if isinstance(reason, str) else "",
        )
    return None


def parse_edits(raw: object) -> list[Edit]:
    """A frozen edit set from JSON; malformed entries are skipped (fail open: never raise)."""
    if not isinstance(raw, list):
        return []
    return [e for e in (edit_from_json(item) for item in raw) if e is not None]


# -- apply ----------------------------------------------------------------------------------


def _index_edits(
    edits: Iterable[Edit],
) -> tuple[dict[str, ResultEdit], dict[str, CallEdit], bool]:
    # The first edit for a key wins: it is the one the model saw first, and later duplicates
    # (which decide_edits never makes) must not rewrite what was already sent.
    results: dict[str, ResultEdit] = {}
    strips: dict[str, CallEdit] = {}
    any_remove = False
    for e in edits:
        if isinstance(e, StripWriteEdit | StripEditEdit):
            strips.setdefault(e.toolCallId, e)
        elif e.toolCallId not in results:
            results[e.toolCallId] = e
            any_remove = any_remove or isinstance(e, RemoveEdit)
    return results, strips, any_remove


def _is_blank(text: str) -> bool:
    # An explicit ASCII set: str.strip() and String.prototype.trim() disagree on Unicode.
    return text.strip(" \t\n\r") == ""


def _keeps_assistant(content: list[Any]) -> bool:
    for block in content:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "toolCall":
            return True
        if kind == "text" and isinstance(block.get("text"), str) and not _is_blank(block["text"]):
            return True
    return False


def apply_edits(messages: Sequence[Any], edits: Iterable[Edit]) -> list[Any]:
    """The message list with the frozen edits applied. Pure: input is never mutated.

    Untouched messages are returned as the same objects (no copy), edited ones are shallow
    copies. Each edit applies to the first toolResult / toolCall block with its id only: if a
    provider ever reuses an id, a later call with that id is not silently edited with a
    decision made for an earlier one.
    """
    results, strips, any_remove = _index_edits(edits)
    if not results and not strips:
        return list(messages)
    call_edits = bool(strips) or any_remove
    used_results: set[str] = set()
    used_calls: set[str] = set()
    out: list[Any] = []
    for msg in messages:
        if not isinstance(msg, dict):
            out.append(msg)
            continue
        role = msg.get("role")
        if role == "toolResult":
            cid = msg.get("toolCallId")
            edit = results.get(cid) if isinstance(cid, str) else None
            if edit is None or edit.toolCallId in used_results:
                out.append(msg)
                continue
            used_results.add(edit.toolCallId)
            if isinstance(edit, TombstoneEdit | MaskEdit):
                new = dict(msg)
                new["content"] = [{"type": "text", "text": edit.text}]
                out.append(new)
            continue  # a RemoveEdit drops the message
        content = msg.get("content")
        if role != "assistant" or not call_edits or not isinstance(content, list):
            out.append(msg)
            continue
        new_content: list[Any] | None = None
        removed = False
        for i, block in enumerate(content):
            bid = block.get("id") if isinstance(block, dict) else None
            if (
                isinstance(block, dict)
                and block.get("type") == "toolCall"
                and isinstance(bid, str)
                and bid not in used_calls
            ):
                redit = results.get(bid)
                if isinstance(redit, RemoveEdit):
                    used_calls.add(bid)
                    if new_content is None:
                        new_content = list(content[:i])
                    removed = True
                    continue
                strip = strips.get(bid)
                if strip is not None:
                    used_calls.add(bid)
                    new_args = strip_call_args(block.get("arguments"), strip)
                    if new_args is not None:
                        if new_content is None:
                            new_content = list(content[:i])
                        new_block = dict(block)
                        new_block["arguments"] = new_args
                        new_content.append(new_block)
                        continue
            if new_content is not None:
                new_content.append(block)
        if new_content is None:
            out.append(msg)
        elif removed and not _keeps_assistant(new_content):
            continue  # only a removal may empty a message; an originally empty one stays
        else:
            new_msg = dict(msg)
            new_msg["content"] = new_content
            out.append(new_msg)
    return out


# An edit call's replaced text: pi's `edit` (`oldText`, top-level in its legacy form, else in
# `edits`), Claude Code's Edit (`old_string`) and MultiEdit (`edits[].old_string`).
EDIT_TOOLS = frozenset({"edit", "Edit", "MultiEdit"})
OLD_TEXT_KEYS = ("oldText", "old_string")


def edit_old_texts(args: object) -> list[str]:
    """Every replaced text of an edit call's arguments, in order (top-level, then `edits`)."""
    if not isinstance(args, dict):
        return []
    out = [args[k] for k in OLD_TEXT_KEYS if isinstance(args.get(k), str)]
    edits = args.get("edits")
    if isinstance(edits, list):
        for e in edits:
            if isinstance(e, dict):
                out += [e[k] for k in OLD_TEXT_KEYS if isinstance(e.get(k), str)]
    return out


def strip_call_args(args: object, strip: CallEdit) -> JsonDict | None:
    """The call's arguments with the strip applied, or None when it does not apply (no
    `content` to strip, no replaced text that long). Other keys and their order stay."""
    if not isinstance(args, dict):
        return None
    if isinstance(strip, StripWriteEdit):
        return {**args, "content": strip.text} if "content" in args else None

    def cut(obj: JsonDict) -> JsonDict | None:
        keys = [
            k
            for k in OLD_TEXT_KEYS
            if isinstance(obj.get(k), str) and u16len(obj[k]) >= strip.minChars
        ]
        return {**obj, **dict.fromkeys(keys, strip.text)} if keys else None

    new = cut(args)
    edits = args.get("edits")
    if isinstance(edits, list):
        cut_edits = [cut(e) if isinstance(e, dict) else None for e in edits]
        if any(c is not None for c in cut_edits):
            new = dict(new if new is not None else args)
            new["edits"] = [
                c if c is not None else e for c, e in zip(cut_edits, edits, strict=True)
            ]
    return new


# -- lengths and the call signature (identical in edits.ts) -------------------------------


def u16len(text: str) -> int:
    """Length in UTF-16 code units, like JavaScript's `.length`."""
    if text.isascii():
        return len(text)
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def utf8len(text: str) -> int:
    if text.isascii():
        return len(text)
    # surrogatepass: a lone surrogate counts 3 bytes, as the TS encoder loop counts it
    return len(text.encode("utf-8", "surrogatepass"))


def line_count(text: str) -> int:
    """Lines as an editor shows them: a final line without a newline still counts."""
    return text.count("\n") + (1 if text and not text.endswith("\n") else 0)


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _js_string(text: str) -> str:
    # JSON.stringify: same escapes as json.dumps(ensure_ascii=False), plus lone surrogates
    # as lowercase \udxxx (well-formed JSON.stringify, Node >= 12).
    out = json.dumps(text, ensure_ascii=False)
    if _LONE_SURROGATE.search(out) is None:
        return out
    return _LONE_SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", out)


def _js_number(value: float) -> str:
    """Number.prototype.toString for a finite double (shortest round-trip digits)."""
    if value == 0:
        return "0"  # also -0, as JSON.stringify(-0) gives "0"
    sign = "-" if value < 0 else ""
    mantissa, _, exp_text = repr(abs(value)).partition("e")
    whole, _, frac = mantissa.partition(".")
    digits = (whole + frac).lstrip("0")
    # value = 0.DIGITS * 10**point
    point = len(whole) + (int(exp_text) if exp_text else 0) - (len(whole + frac) - len(digits))
    digits = digits.rstrip("0")
    k = len(digits)
    if k <= point <= 21:
        return sign + digits + "0" * (point - k)
    if 0 < point <= 21:
        return sign + digits[:point] + "." + digits[point:]
    if -6 < point <= 0:
        return sign + "0." + "0" * (-point) + digits
    exp = point - 1
    exp_str = ("+" if exp >= 0 else "-") + str(abs(exp))
    head = digits[0] + ("." + digits[1:] if k > 1 else "")
    return sign + head + "e" + exp_str


def _utf16_key(key: str) -> bytes:
    # Array.prototype.sort() orders keys by UTF-16 code units; big-endian UTF-16 bytes compare
    # the same way (code points would not, for keys beyond the BMP).
    return key.encode("utf-16-be", "surrogatepass")


def canonical_json(value: object) -> str:
    """JSON with sorted keys, formatted exactly as edits.ts `canon` formats it."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        # JavaScript parsed the same JSON into a double
        return _js_number(float(value)) if abs(value) >= 2**53 else str(value)
    if isinstance(value, float):
        return _js_number(value) if value == value and abs(value) != float("inf") else "null"
    if isinstance(value, str):
        return _js_string(value)
    if isinstance(value, list | tuple):
        return "[" + ",".join(canonical_json(v) for v in value) + "]"
    if isinstance(value, dict):
        keys = sorted((k for k in value if isinstance(k, str)), key=_utf16_key)
        return "{" + ",".join(_js_string(k) + ":" + canonical_json(value[k]) for k in keys) + "}"
    return "null"


_FNV_OFFSET = 0xCBF29CE484222325
_FNV_PRIME = 0x100000001B3
_MASK64 = 0xFFFFFFFFFFFFFFFF


def fnv1a64(data: bytes) -> str:
    h = _FNV_OFFSET
    for b in data:
        h = ((h ^ b) * _FNV_PRIME) & _MASK64
    return f"{h:016x}"


def args_sig(name: str, arguments: object) -> str:
    """Stable signature of a call: FNV-1a 64 (hex) of canonical JSON `[name, arguments]`."""
    text = "[" + _js_string(name) + "," + canonical_json(arguments) + "]"
    return fnv1a64(text.encode("utf-8", "surrogatepass"))


# -- the tail descriptor --------------------------------------------------------------------
# Compact: what decide_edits needs, never message bodies. Same JSON as describeTail in TS.


# Sizes arrive from the bridge: bounded like every protocol integer (a JavaScript-exact,
# SQLite-storable count), so a forged 2**64 is a 422 at the door, not an overflow later.
_Size = Annotated[int, Field(ge=0, le=2**53 - 1)]


class TailToolCall(_Frozen):
    id: str
    name: str
    argsSig: str
    argsChars: _Size = 0  # canonical JSON length of the arguments
    writePath: str | None = None
    writeContentChars: _Size | None = None
    writeContentBytes: _Size | None = None
    writeContentLines: _Size | None = None
    # an edit call (EDIT_TOOLS): the length of each replaced text, in order
    editOldChars: list[_Size] | None = None


class TailMessage(_Frozen):
    role: str
    # assistant
    toolCalls: list[TailToolCall] | None = None
    hasText: bool | None = None  # a text block with a non-blank text
    # toolResult (absent when the message has no string toolCallId)
    toolCallId: str | None = None
    toolName: str | None = None
    chars: _Size | None = None  # text length of the content
    isError: bool | None = None


class Tail(_Frozen):
    start: _Size  # index in the message list where the unseen suffix starts
    messages: list[TailMessage]

    def to_json(self) -> JsonDict:
        return self.model_dump(exclude_none=True)


def _references(msg: object, seen: Collection[str]) -> bool:
    if not isinstance(msg, dict):
        return False
    role = msg.get("role")
    if role == "toolResult":
        return msg.get("toolCallId") in seen
    if role == "assistant" and isinstance(msg.get("content"), list):
        for block in msg["content"]:
            if (
                isinstance(block, dict)
                and block.get("type") == "toolCall"
                and block.get("id") in seen
            ):
                return True
    return False


def _describe_call(block: JsonDict) -> TailToolCall | None:
    cid = block.get("id")
    if not isinstance(cid, str):
        return None
    raw_name = block.get("name")
    name = raw_name if isinstance(raw_name, str) else ""
    args = block.get("arguments")
    canon = canonical_json(args)
    sig = fnv1a64(("[" + _js_string(name) + "," + canon + "]").encode("utf-8", "surrogatepass"))
    fields: dict[str, Any] = {"id": cid, "name": name, "argsSig": sig, "argsChars": u16len(canon)}
    if name == "write" and isinstance(args, dict):
        if isinstance(args.get("path"), str):
            fields["writePath"] = args["path"]
        content = args.get("content")
        if isinstance(content, str):
            fields["writeContentChars"] = u16len(content)
            fields["writeContentBytes"] = utf8len(content)
            fields["writeContentLines"] = line_count(content)
    if name in EDIT_TOOLS:
        olds = edit_old_texts(args)
        if olds:
            fields["editOldChars"] = [u16len(t) for t in olds]
    return TailToolCall(**fields)


def describe_message(msg: object) -> TailMessage:
    if not isinstance(msg, dict):
        return TailMessage(role="")
    role = msg.get("role")
    role = role if isinstance(role, str) else ""
    content = msg.get("content")
    if role == "assistant":
        calls: list[TailToolCall] = []
        has_text = False
        if isinstance(content, list):
            for block in content:
                if not isinstance(block, dict):
                    continue
                if block.get("type") == "toolCall":
                    call = _describe_call(block)
                    if call is not None:
                        calls.append(call)
                elif block.get("type") == "text":
                    text = block.get("text")
                    has_text = has_text or (isinstance(text, str) and not _is_blank(text))
        return TailMessage(role=role, toolCalls=calls, hasText=has_text)
    if role == "toolResult" and isinstance(msg.get("toolCallId"), str):
        chars = 0
        if isinstance(content, list):
            for block in content:
                if isinstance(block, dict) and block.get("type") == "text":
                    text = block.get("text")
                    if isinstance(text, str):
                        chars += u16len(text)
        tool_name = msg.get("toolName")
        return TailMessage(
            role=role,
            toolCallId=msg["toolCallId"],
            toolName=tool_name if isinstance(tool_name, str) else "",
            chars=chars,
            isError=msg.get("isError") is True,
        )
    return TailMessage(role=role)


def describe_tail(messages: Sequence[Any], seen: Collection[str]) -> Tail:
    """The messages after the last one that references a seen toolCallId (call or result).

    Mirror of describeTail in edits.ts (the daemon receives the TS output; this one serves
    tests and offline replay).
    """
    start = 0
    for i in range(len(messages) - 1, -1, -1):
        if _references(messages[i], seen):
            start = i + 1
            break
    return Tail(start=start, messages=[describe_message(m) for m in messages[start:]])


def tail_ids(tail: Tail) -> set[str]:
    """Every id the tail mentions; the bridge marks them seen once the request is sent.

    Call ids count too: an assistant message whose calls never got results (an aborted turn)
    must still leave the tail once the model has been sent it, or a write strip could be
    decided for it later — after it was sent unstripped.
    """
    ids: set[str] = set()
    for m in tail.messages:
        if m.toolCallId is not None:
            ids.add(m.toolCallId)
        for c in m.toolCalls or ():
            ids.add(c.id)
    return ids


def dropped_signatures(tail: Tail, edits: Iterable[Edit]) -> set[str]:
    """argsSig of every call whose result these edits hide; the caller keeps the union."""
    hidden = {e.toolCallId for e in edits if not isinstance(e, StripWriteEdit | StripEditEdit)}
    return {c.argsSig for m in tail.messages for c in m.toolCalls or () if c.id in hidden}


# -- decide ---------------------------------------------------------------------------------

TombstoneFor = Callable[[TailMessage, TailToolCall], str]
StripMarkerFor = Callable[[TailToolCall], str]


def default_tombstone(result: TailMessage, call: TailToolCall) -> str:
    return (
        f"[ctxwrap: {result.toolName or call.name} result hidden as not needed "
        f"({result.chars or 0:,} chars); repeat the call to see it again]"
    )


def default_strip_marker(call: TailToolCall) -> str:
    size = call.writeContentBytes if call.writeContentBytes is not None else call.writeContentChars
    return (
        f"[content stripped by ctxwrap: {size or 0:,} bytes, "
        f"{call.writeContentLines or 0:,} lines; file written to disk]"
    )


# What an applied edit's replaced text becomes in the model's own call (mechanisms/writes.py).
EDIT_STRIP_MARKER = (
    "[ctxwrap: the replaced text is left out here; this edit was applied, so that text is no "
    "longer in the file]"
)


def edit_strip_floor(edit_min_chars: int) -> int:
    """The shortest replaced text the edit strip takes: the setting, but never one the marker
    would not shorten (decide_edits and replay share it)."""
    return max(edit_min_chars, u16len(EDIT_STRIP_MARKER) + 1)


def _one_line(text: str) -> str:
    return " ".join(text.split("\n")).replace("\r", " ")


def decide_edits(
    tail: Tail,
    tags: Mapping[str, object],
    *,
    mode: Literal["tombstone", "silent"] = "tombstone",
    dropped_sigs: Collection[str] = frozenset(),
    write_min_bytes: int = 400,
    tombstone_for: TombstoneFor = default_tombstone,
    strip_marker_for: StripMarkerFor = default_strip_marker,
    edit_min_chars: int = 0,
) -> list[Edit]:
    """New edits for the tail (the caller appends them to the session's frozen set).

    Only tail messages are touched: the model has never received them, so the first request
    that carries them carries them already edited, and replaying the frozen edit afterwards
    keeps every later request an extension of this one. `edit_min_chars` > 0: an edit call
    whose result in the tail is no error loses each replaced text of at least that length.
    """
    items = tail.messages
    applied = {
        m.toolCallId
        for m in items
        if m.role == "toolResult" and m.toolCallId is not None and m.isError is False
    }
    owner: dict[str, tuple[int, TailToolCall]] = {}
    for i, m in enumerate(items):
        for c in m.toolCalls or ():
            owner.setdefault(c.id, (i, c))

    def droppable(m: TailMessage) -> bool:
        # Invariant 4: only an explicit DROP hides anything; errors are always kept. A result
        # whose call is not in the tail has no known signature, so it is kept too.
        if m.role != "toolResult" or m.toolCallId is None or m.isError is not False:
            return False
        if tags.get(m.toolCallId) != "DROP":
            return False
        found = owner.get(m.toolCallId)
        # Invariant 5: the model asked again for something we hid → it wants it; keep it.
        return found is not None and found[1].argsSig not in dropped_sigs

    def tombstone(m: TailMessage) -> TombstoneEdit:
        assert m.toolCallId is not None
        text = _one_line(tombstone_for(m, owner[m.toolCallId][1]))
        return TombstoneEdit(
            toolCallId=m.toolCallId, text=text, savedChars=(m.chars or 0) - u16len(text)
        )

    hide: dict[int, Edit] = {}  # tail index of a toolResult → its edit
    removed_calls: set[str] = set()
    if mode == "silent":
        # Note: with both guards in _silent_may_remove, a removal never happens for tails pi
        # produces. The suffix always holds the last assistant message (one per LLM call) and
        # all after it, so removing it repeats the previous request unless that message keeps
        # text, which would end the request on an assistant turn. Silent mode therefore acts as
        # "tombstone the DROP suffix only". The removal path stays for the spec's rule and for
        # apply_edits' RemoveEdit, which frozen sets from elsewhere may hold.
        results, emptied, kept_owner = _silent_plan(items, droppable, owner)
        if _silent_may_remove(items, results, emptied, kept_owner):
            for i in results:
                cid = items[i].toolCallId
                assert cid is not None
                saved = (items[i].chars or 0) + owner[cid][1].argsChars
                hide[i] = RemoveEdit(toolCallId=cid, savedChars=saved)
                removed_calls.add(cid)
        else:
            for i in results:
                hide[i] = tombstone(items[i])
    else:
        # Tombstones keep every message and block where it is: nothing after a tombstone
        # shifts, and the tombstone is what the model receives the first time it sees this
        # result, so no mid-array rule is needed — any DROP in the tail can be tombstoned.
        for i, m in enumerate(items):
            if droppable(m):
                hide[i] = tombstone(m)

    edits: list[Edit] = []
    marker_len = u16len(EDIT_STRIP_MARKER)
    least = edit_strip_floor(edit_min_chars)
    for i, m in enumerate(items):
        for c in m.toolCalls or ():
            if (
                edit_min_chars > 0
                and c.editOldChars
                and c.id in applied
                and c.id not in removed_calls
                and max(c.editOldChars) >= least
            ):
                edits.append(
                    StripEditEdit(
                        toolCallId=c.id,
                        text=EDIT_STRIP_MARKER,
                        minChars=least,
                        savedChars=sum(n - marker_len for n in c.editOldChars if n >= least),
                    )
                )
            if c.name != "write" or c.id in removed_calls or c.writeContentChars is None:
                continue
            size = c.writeContentBytes if c.writeContentBytes is not None else c.writeContentChars
            if size >= write_min_bytes:
                text = _one_line(strip_marker_for(c))
                edits.append(
                    StripWriteEdit(
                        toolCallId=c.id, text=text, savedChars=c.writeContentChars - u16len(text)
                    )
                )
        if i in hide:
            edits.append(hide[i])
    return edits


def _silent_plan(
    items: Sequence[TailMessage],
    droppable: Callable[[TailMessage], bool],
    owner: Mapping[str, tuple[int, TailToolCall]],
) -> tuple[list[int], set[int], int | None]:
    """The spec's maximal contiguous suffix: (result indices, emptied assistants, kept owner).

    Walks back from the end over DROP results and assistant messages whose every call is
    dropped. A round with any kept result ends the walk and is kept wholesale; so is a DROP
    result followed by any kept message.
    """
    dropped: set[str] = set()
    results: list[int] = []
    emptied: set[int] = set()
    complete: set[int] = set()
    kept_owner: int | None = None
    i = len(items) - 1
    while i >= 0:
        m = items[i]
        if droppable(m):
            assert m.toolCallId is not None
            dropped.add(m.toolCallId)
            results.append(i)
        elif m.role == "assistant" and m.toolCalls and all(c.id in dropped for c in m.toolCalls):
            complete.add(i)
            if m.hasText:
                kept_owner = i  # keeps its text, loses its calls; nothing before it goes
                break
            emptied.add(i)
        else:
            break
        i -= 1
    # A result whose round was not wholly walked (mixed round, or owner before the suffix)
    # is kept. Those results are the earliest of the walk, so the rest stays a suffix.
    results = sorted(r for r in results if owner[items[r].toolCallId or ""][0] in complete)
    region = set(results) | emptied | ({kept_owner} if kept_owner is not None else set())
    if region and set(range(min(region), len(items))) != region:
        return [], set(), None  # not contiguous after all: keep everything
    return results, emptied, kept_owner


def _silent_may_remove(
    items: Sequence[TailMessage], results: Sequence[int], emptied: set[int], kept_owner: int | None
) -> bool:
    """Whether the silent suffix may really be removed, or must be tombstoned instead."""
    if not results:
        return False
    # A request may not end with an assistant message: Anthropic reads it as a prefill
    # (rejected with extended thinking and by newer models), others continue it oddly.
    if kept_owner is not None:
        return False
    # Each LLM call appends exactly one assistant message; everything from the last one on is
    # new since the previous request. If all of it vanished, this request would equal the
    # previous one and the model would answer the same again (invariant 5).
    last_assistant = max((i for i, m in enumerate(items) if m.role == "assistant"), default=0)
    gone = set(results) | emptied
    return not all(i in gone for i in range(last_assistant, len(items)))
