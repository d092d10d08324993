"""When an agent's prompt cache is cold anyway, and which history masks the proxy accepts.

The proxy's side of history masking (docs/architecture.md, "History masking"): the daemon's
policy (`ctxwrap.engine.masking`) picks the results; this module says when a request may be
rewritten and checks each mask before it is frozen. No I/O and no decisions beyond those two.

Claude Code sends several conversations under one session id: the main one, sub-agents
(their own system prompt, tools and first message), and side requests without tools (the
title) or to count_tokens. A prompt-cache prefix belongs to one conversation, so the cache
state is kept per conversation, keyed by its first message: a sub-agent interleaved with the
main conversation is neither a "head change" nor an idle gap for it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Literal

orjson: ModuleType | None
try:
    import orjson
except ImportError:  # optional, as in body_encoding.py: the standard library alone
    orjson = None

ColdReason = Literal["idle", "compaction", "model", "tools"]
MaskTrigger = Literal["idle", "compaction", "model", "tools", "warm"]  # MaskRequest.reason
MAX_CONVERSATIONS = 16  # per session: the main one, its compactions and a few sub-agents


def strip_cache_control(value: Any) -> Any:
    """The value without `cache_control` keys: Claude Code moves its cache markers every
    request; they mark breakpoints and are not part of the cached content."""
    if isinstance(value, dict):
        return {k: strip_cache_control(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [strip_cache_control(v) for v in value]
    return value


def prefix_block(value: Any) -> tuple[str, int]:
    """One block of a request in the provider's cache order, as (identity, chars): the chars
    of its compact JSON (as the stats measure what is sent), the identity without the
    `cache_control` markers an agent moves, so two requests share what a cache reads of them."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":")) if value else ""
    ident = json.dumps(strip_cache_control(value), sort_keys=True, ensure_ascii=False)
    digest = hashlib.blake2b(ident.encode("utf-8", "surrogatepass"), digest_size=16)
    return digest.hexdigest(), len(text)


def request_blocks(head: Iterable[Any], items: Any) -> list[tuple[str, int]]:
    """A request's `prefix_block`s in cache order: the parts before the conversation (tools,
    system prompt or instructions), then each of its items (messages, input items)."""
    return [
        *(prefix_block(v) for v in head),
        *(prefix_block(i) for i in (items if isinstance(items, list) else ())),
    ]


def shared_prefix(
    previous: list[tuple[str, int]], current: list[tuple[str, int]]
) -> tuple[int, int]:
    """(chars, blocks) of `current`'s leading blocks identical to `previous`'s: what the cost
    model prices as read from the previous request's cache entry (`LlmCall.sent_prefix_chars`)."""
    total = count = 0
    for (a, _), (b, n) in zip(previous, current, strict=False):
        if a != b:
            break
        total += n
        count += 1
    return total, count


def shared_prefix_chars(previous: list[tuple[str, int]], current: list[tuple[str, int]]) -> int:
    return shared_prefix(previous, current)[0]


Blocks = list[tuple[str, int]]


class PrefixChain:
    """Each conversation's latest call (its index, its blocks as sent and as the agent sent
    them), so a call's prefixes are measured against the previous call of its own
    conversation — a sub-agent's calls come between two of the main one's, and the provider
    keeps both entries — or, for a conversation's first call, the session's latest call (a
    compaction's summary starts a new one). At most MAX_CONVERSATIONS are kept."""

    def __init__(self) -> None:
        self.latest: dict[str, tuple[int, Blocks, Blocks]] = {}  # oldest first
        self.last: tuple[int, Blocks, Blocks] | None = None

    def measure(
        self, conversation: str | None, index: int, sent: Blocks, plain: Blocks
    ) -> tuple[int | None, int | None, tuple[int, int] | None]:
        """(the index measured against, chars shared as sent, (chars, blocks) shared as the
        agent sent it — None where unknown: `plain` empty, or no call before), and the call
        becomes its conversation's latest."""
        ref = self.latest.get(conversation) if conversation else None
        ref = ref or self.last
        this = (index, sent, plain)
        if conversation:
            self.latest.pop(conversation, None)
            self.latest[conversation] = this
            while len(self.latest) > MAX_CONVERSATIONS:
                del self.latest[next(iter(self.latest))]
        self.last = this
        if ref is None:
            return None, None, None
        ref_index, ref_sent, ref_plain = ref
        mine = shared_prefix(ref_plain, plain) if plain and ref_plain else None
        return ref_index, shared_prefix_chars(ref_sent, sent), mine


def parsed_original(original: bytes | None) -> dict[str, Any] | None:
    """The agent's own request body (before ctxwrap's edits), or None when it does not parse:
    what the plain session sent (`LlmCall.plain_prefix_chars`)."""
    try:
        body = json.loads(original) if original is not None else None
    except ValueError:
        return None
    return body if isinstance(body, dict) else None


# Digests of values seen lately, by a fingerprint of their orjson text (an agent sends the same
# tools, system prompt and first message with every request): the standard library's text is
# what the digest is of, and costs milliseconds on a long tool list.
_DIGESTS: dict[bytes, str] = {}
_DIGESTS_MAX = 64


def _digest(value: Any) -> str:
    fingerprint: bytes | None = None
    if orjson is not None:
        try:
            fingerprint = hashlib.blake2b(orjson.dumps(value), digest_size=16).digest()
        except TypeError:
            fingerprint = None
        if fingerprint is not None and (known := _DIGESTS.get(fingerprint)) is not None:
            return known
    text = json.dumps(_strip_shallow(value), ensure_ascii=False, separators=(",", ":"))
    if '"cache_control"' in text:  # deeper, or in a text: the whole walk (same result)
        text = json.dumps(strip_cache_control(value), ensure_ascii=False, separators=(",", ":"))
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    if fingerprint is not None:
        if len(_DIGESTS) >= _DIGESTS_MAX:
            _DIGESTS.clear()
        _DIGESTS[fingerprint] = digest
    return digest


def _strip_shallow(value: Any, depth: int = 3) -> Any:
    """`strip_cache_control` down to `depth` (where agents put the markers: a block, a tool, a
    message's block), copying only what changes; the caller checks nothing deeper remains."""
    if depth == 0:
        return value
    if isinstance(value, dict):
        if "cache_control" not in value and not any(
            isinstance(v, dict | list) for v in value.values()
        ):
            return value
        return {k: _strip_shallow(v, depth - 1) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_strip_shallow(v, depth - 1) for v in value]
    return value


def head_key(messages: list[Any]) -> str | None:
    """The conversation a request belongs to: a digest of its first message."""
    return _digest(messages[0]) if messages else None


def tools_key(tools: Any, system: Any = None) -> str:
    """What comes before the messages in the cache order: the tool list and the system prompt.
    A change of either is reported as "tools" (the protocol's reason for a changed head)."""
    return _digest([tools, system])


@dataclass(frozen=True)
class CacheState:
    at: float  # wall clock (s) of this conversation's previous main request
    model: str | None
    tools: str | None  # tools_key: the tool list and the system prompt

    def to_json(self) -> list[Any]:
        return [self.at, self.model, self.tools]

    @staticmethod
    def from_json(raw: Any) -> CacheState | None:
        if not isinstance(raw, list) or len(raw) != 3:
            return None
        at, model, tools = raw
        if not isinstance(at, int | float) or isinstance(at, bool):
            return None
        return CacheState(
            float(at),
            model if isinstance(model, str) else None,
            tools if isinstance(tools, str) else None,
        )


def variant_key(head: str, now: CacheState) -> str:
    """One cache prefix: a conversation's first message under one model, tool list and system."""
    return f"{head}:{now.tools or ''}:{_digest(now.model)[:12]}"


def cold_reason(
    states: Mapping[str, CacheState], head: str, now: CacheState, *, ttl_s: float
) -> ColdReason | None:
    """Why the provider cannot hold this request's message prefix, or None while it is warm.

    `states` holds the previous request of each cache prefix of the session (`variant_key`).
    - A prefix sent before: cold when its previous request is older than the TTL (`idle`).
    - The conversation sent before under another model or tool list / system prompt: `model` or
      `tools`. Only the first request under the new prefix is such a boundary; going back to a
      prefix used within the TTL is warm (a fork that alternates with the main conversation
      masks once, not on every switch).
    - A first message never sent before, in a session that has a history: `compaction`
      (Claude Code's compaction, or a new sub-agent whose short history has nothing to mask):
      no cached prefix covers its messages.
    - The first request of a session with no recorded state: not cold, the gap is unknown (as
      the pi bridge without timestamps).
    """
    prev = states.get(variant_key(head, now))
    if prev is not None:
        return "idle" if now.at - prev.at > ttl_s else None
    same_head = [s for k, s in states.items() if k.split(":", 1)[0] == head]
    if same_head:
        latest = max(same_head, key=lambda s: s.at)
        return "model" if latest.model != now.model else "tools"
    return "compaction" if states else None


def acceptable_masks(
    messages: Iterable[Any],
    candidates: Iterable[str],
    seen: Collection[str],
    edited: Collection[str],
) -> set[str]:
    """The masks the proxy accepts: the daemon's answer is checked, not trusted.

    On the neutral shape (`Wire.to_neutral`'s messages), for both proxies: a mask may only hide
    an existing toolResult whose toolCall came before it, that the model has seen, that is not
    an error and has no edit yet, and whose id occurs once. Twin of acceptableMasks in the pi
    bridge (ctxwrap/_bridge/masking.ts), checked against it by tests/unit/
    test_acceptable_masks_golden.py; the bridge does not ask "occurs once" (pi's messages
    carry one result per call).
    """
    wanted = set(candidates)
    if not wanted:
        return set()
    calls: set[str] = set()
    ok: set[str] = set()
    found: set[str] = set()
    twice: set[str] = set()
    for m in messages:
        if not isinstance(m, dict):
            continue
        if m.get("role") == "assistant":
            content = m.get("content")
            for b in content if isinstance(content, list) else ():
                if (
                    isinstance(b, dict)
                    and b.get("type") == "toolCall"
                    and isinstance(b.get("id"), str)
                ):
                    calls.add(b["id"])
        elif m.get("role") == "toolResult" and isinstance(m.get("toolCallId"), str):
            cid = m["toolCallId"]
            if cid in found:
                twice.add(cid)
            found.add(cid)
            if (
                cid in wanted
                and cid in calls
                and cid in seen
                and cid not in edited
                and m.get("isError") is not True
            ):
                ok.add(cid)
    return ok - twice


def load_states(raw: Any) -> dict[str, CacheState]:
    out: dict[str, CacheState] = {}
    heads = raw.get("heads") if isinstance(raw, dict) else None
    if isinstance(heads, dict):
        for key, value in heads.items():
            state = CacheState.from_json(value)
            if isinstance(key, str) and state is not None:
                out[key] = state
    return out


def dump_states(states: Mapping[str, CacheState]) -> dict[str, Any]:
    newest = sorted(states.items(), key=lambda kv: kv[1].at)[-MAX_CONVERSATIONS:]
    return {"v": 1, "heads": {k: s.to_json() for k, s in newest}}
