"""`ctxwrap replay --tag`: decide the tagger's RETAIN/DROP for real through the http aux backend.

Only an exact `{"decision": "DROP"}` drops (prompts.parse_tag); a failed or slow call retains
and its tokens are still counted. The result and the user's request are redacted before they
are sent, as the daemon does.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from ctxwrap.aux import prompts
from ctxwrap.digest.redact import redact_secrets
from ctxwrap.errors import ConfigError


@dataclass(frozen=True)
class TagOutcome:
    decision: str  # "DROP" | "RETAIN"
    input_tokens: int
    output_tokens: int
    ok: bool


class HttpTagger:
    """Synchronous wrapper over HttpAuxBackend for the (synchronous) replay loop."""

    def __init__(self, settings: Any) -> None:
        if settings.aux_backend != "http" or not settings.aux_base_url:
            raise ConfigError(
                "--tag needs the http aux backend",
                hint='set aux_backend = "http" and aux_base_url (PI_CTX_AUX_BACKEND=http, PI_CTX_AUX_BASE_URL=…)',
            )
        from ctxwrap.aux.http import HttpAuxBackend

        self.settings = settings
        self.loop = asyncio.new_event_loop()
        self.backend = HttpAuxBackend(
            base_url=settings.aux_base_url,
            api=settings.aux_api,
            model=settings.aux_model,
            api_key_env=settings.aux_api_key_env,
        )

    def __call__(
        self, tool: str, args: dict[str, Any], result: str, user_prompt: str
    ) -> TagOutcome:
        s = self.settings
        prompt = prompts.tag_prompt(
            tool=tool,
            args=args,
            result=redact_secrets(result[: s.amnesia_max_chars + 1]),
            user_prompt=redact_secrets(user_prompt),
            max_chars=s.amnesia_max_chars,
        )
        answer = self.loop.run_until_complete(
            self.backend.complete(
                system=prompts.TAG_SYSTEM,
                prompt=prompt,
                max_tokens=s.tag_max_tokens,
                timeout_ms=s.aux_timeout_ms,
            )
        )
        decision = prompts.parse_tag(answer.text) if answer.error is None else "RETAIN"
        return TagOutcome(decision, answer.input_tokens, answer.output_tokens, answer.error is None)

    def close(self) -> None:
        self.loop.run_until_complete(self.backend.aclose())
        self.loop.close()
