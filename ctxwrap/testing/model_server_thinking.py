"""The provider's rules for thinking sent back, for the scripted server
(`ScriptedModelServer(thinking_rules=True)`; docs/accounting.md, "Old thinking").

What a real Anthropic API does with the thinking blocks of a request, so that a policy that
leaves old thinking out can be tested against it (issue 41, item 3):

- without a `clear_thinking_20251015` edit, the model's default: every earlier turn's thinking
  stays in the context on Opus 4.5+, Sonnet 4.6+, Haiku 5.5+, Fable and Mythos; on older models
  only the turn in progress keeps its thinking (`engine.thinking.keeps_earlier_thinking`);
- with the edit (under the beta header `context-management-2025-06-27`, on the models that
  take context editing), the thinking of all but the last `keep` turns that thought is left
  out; "all" keeps it all (what Claude Code 2.1.x sends);
- a malformed edit, an edit without its beta header, or on a model that does not take it: 400;
- the clearing is server-side: the prefix check of preserved thinking compares the request as
  sent, while the cache and the usage see it as the model does (a clearing rewrites the cache
  from its first cleared block on), and the response says what was cleared in
  `context_management.applied_edits`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ctxwrap.engine.thinking import (
    CLEAR_THINKING,
    CONTEXT_MANAGEMENT_BETA,
    accepts_context_editing,
    clear_thinking_keep,
    cleared_by_keep,
)

JsonObj = dict[str, Any]


def thinking_rules_error(body: Mapping[str, Any], headers: Mapping[str, str]) -> str | None:
    """Why the API refuses the request's context management (400), or None."""
    if body.get("context_management") is None:
        return None
    betas = {b.strip() for b in headers.get("anthropic-beta", "").split(",")}
    if CONTEXT_MANAGEMENT_BETA not in betas:
        return f"context_management: requires the beta header {CONTEXT_MANAGEMENT_BETA}"
    if not accepts_context_editing(body.get("model")):
        return f"context_management: not supported on {body.get('model')}"
    try:
        clear_thinking_keep(body)
    except ValueError as exc:
        return str(exc)
    return None


@dataclass(frozen=True)
class ModelView:
    body: JsonObj  # the request as the model reads it: cleared thinking blocks left out
    cleared: tuple[tuple[int, int], ...]  # (message, block) of each block left out
    response: JsonObj | None  # the response's `context_management`; None: none was asked


def model_view(body: JsonObj, count_tokens: Callable[[Mapping[str, Any]], int]) -> ModelView:
    """The request after the provider's thinking rules (`thinking_rules_error` passed)."""
    messages = body.get("messages")
    messages = messages if isinstance(messages, list) else []
    keep = clear_thinking_keep(body)
    gone = cleared_by_keep(messages, keep, body.get("model"))
    view = body
    if gone:
        drop = {(b.message, b.block) for b in gone}
        out = []
        for i, m in enumerate(messages):
            content = m.get("content") if isinstance(m, dict) else None
            if isinstance(content, list) and any((i, j) in drop for j in range(len(content))):
                m = {**m, "content": [b for j, b in enumerate(content) if (i, j) not in drop]}
            out.append(m)
        view = {**body, "messages": out}
    response: JsonObj | None = None
    if body.get("context_management") is not None:
        edits: list[JsonObj] = []
        if keep is not None and gone:
            edits.append(
                {
                    "type": CLEAR_THINKING,
                    "cleared_thinking_turns": len({b.turn for b in gone}),
                    "cleared_input_tokens": count_tokens(body) - count_tokens(view),
                }
            )
        response = {"applied_edits": edits}
    return ModelView(view, tuple((b.message, b.block) for b in gone), response)
