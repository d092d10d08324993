"""The `upstream` aux backend for Codex: the thread's own provider, credentials, a small model.

The proxy runs the daemon's aux requests against the same Responses endpoint Codex talks to,
with the credential headers Codex sent last (memory only, never written) and `aux_model`
(PI_CTX_AUX_MODEL; ``provider/`` prefixes are dropped). Streaming, as the ChatGPT backend
requires; ``store: false``.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from typing import Any

from ctxwrap.agents._proxy.sse import stream_events

DEFAULT_AUX_MODEL = "gpt-5-mini"
_REASONING_MODEL_RE = re.compile(r"^(gpt-5|gpt-6|o\d)")  # they take `reasoning.effort`
CREDENTIAL_HEADERS = (
    "authorization",
    "chatgpt-account-id",
    "openai-organization",
    "openai-project",
    "api-key",  # Azure
)

JsonDict = dict[str, Any]


class ResponsesAux:
    def __init__(
        self,
        client: Any,  # httpx.Client, shared with the proxy
        responses_url: Callable[[], str | None],
        credentials: Callable[[], dict[str, str]],
        model: Callable[[], str | None],
    ) -> None:
        self.client = client
        self.responses_url = responses_url
        self.credentials = credentials
        self.model = model

    def __call__(self, aux: JsonDict, left_s: float) -> JsonDict:
        """Fields of an AuxResult (text or error, token counts, model, elapsed_ms)."""
        start = time.perf_counter()
        creds = self.credentials()
        model = (self.model() or DEFAULT_AUX_MODEL).split("/", 1)[-1]
        url = self.responses_url()
        if url is None or not creds:
            return {"error": "no request seen yet", "model": model}
        headers = {"content-type": "application/json", "accept": "text/event-stream", **creds}
        body = {
            "model": model,
            "instructions": str(aux.get("system") or ""),
            "input": [
                {
                    "type": "message",
                    "role": "user",
                    "content": [{"type": "input_text", "text": str(aux.get("prompt") or "")}],
                }
            ],
            "stream": True,
            "store": False,
            # a reasoning model spends output tokens on reasoning first: room for both
            "max_output_tokens": max(1024, int(aux.get("max_tokens") or 256)),
        }
        if _REASONING_MODEL_RE.match(model):
            body["reasoning"] = {"effort": "low"}
        timeout = max(0.05, min(left_s, int(aux.get("timeout_ms") or 20000) / 1000))
        try:
            with self.client.stream("POST", url, json=body, headers=headers, timeout=timeout) as r:
                if r.status_code >= 400:
                    return {
                        "error": f"upstream answered {r.status_code}",
                        "model": model,
                        "elapsed_ms": (time.perf_counter() - start) * 1000,
                    }
                raw = b"".join(r.iter_bytes())
            text, usage = _read_completed(raw)
            return {
                "text": text,
                "input_tokens": int(usage.get("input_tokens", 0) or 0),
                "output_tokens": int(usage.get("output_tokens", 0) or 0),
                "model": model,
                "elapsed_ms": (time.perf_counter() - start) * 1000,
            }
        except Exception as exc:  # any failure is "no answer": the daemon keeps its fallback
            return {
                "error": type(exc).__name__,
                "model": model,
                "elapsed_ms": (time.perf_counter() - start) * 1000,
            }


def _read_completed(raw: bytes) -> tuple[str, JsonDict]:
    """The output text and usage of a Responses SSE stream (or of a plain JSON response)."""
    response: Any = None
    deltas: list[str] = []
    stripped = raw.lstrip()
    if stripped.startswith(b"{"):
        response = json.loads(stripped)
    else:
        for data in stream_events(raw):
            if data.get("type") == "response.output_text.delta":
                deltas.append(str(data.get("delta") or ""))
            elif data.get("type") == "response.completed":
                response = data.get("response")
    text = ""
    usage: JsonDict = {}
    if isinstance(response, dict):
        raw_usage = response.get("usage")
        usage = raw_usage if isinstance(raw_usage, dict) else {}
        for item in response.get("output") or []:
            if isinstance(item, dict) and item.get("type") == "message":
                text += "".join(
                    str(c.get("text", ""))
                    for c in item.get("content") or []
                    if isinstance(c, dict) and c.get("type") == "output_text"
                )
    return text or "".join(deltas), usage
