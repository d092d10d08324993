"""The `upstream` aux backend: the session's own provider, credentials and a small model.

Claude Code has no pi provider code to delegate to, so the proxy runs the daemon's aux
requests itself against the same upstream Claude Code talks to, with the credentials Claude
Code sent last (held in memory only, never written) and `aux_model` (PI_CTX_AUX_MODEL), a
Haiku-class model by default.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

DEFAULT_AUX_MODEL = "claude-haiku-4-5"
CREDENTIAL_HEADERS = ("x-api-key", "authorization", "anthropic-version", "anthropic-beta")

JsonDict = dict[str, Any]


class UpstreamAux:
    def __init__(
        self,
        client: Any,  # httpx.Client, shared with the proxy
        upstream: str,
        credentials: Callable[[], dict[str, str]],
        model: Callable[[], str | None],
    ) -> None:
        self.client = client
        self.upstream = upstream.rstrip("/")
        self.credentials = credentials
        self.model = model

    def __call__(self, aux: JsonDict, left_s: float) -> JsonDict:
        """Fields of an AuxResult (text or error, token counts, model, elapsed_ms)."""
        start = time.perf_counter()
        creds = self.credentials()
        configured = self.model() or DEFAULT_AUX_MODEL
        model = configured.split("/", 1)[-1]
        if not any(k in creds for k in ("x-api-key", "authorization")):
            return {"error": "no credentials seen yet", "model": model}
        headers = {"content-type": "application/json", "anthropic-version": "2023-06-01"}
        headers.update({k: v for k, v in creds.items() if k != "anthropic-beta"})
        if "authorization" in creds and "anthropic-beta" in creds:
            headers["anthropic-beta"] = creds["anthropic-beta"]  # subscription logins need it
        body = {
            "model": model,
            "max_tokens": int(aux.get("max_tokens") or 256),
            "system": str(aux.get("system") or ""),
            "messages": [{"role": "user", "content": str(aux.get("prompt") or "")}],
        }
        timeout = max(0.05, min(left_s, int(aux.get("timeout_ms") or 20000) / 1000))
        try:
            r = self.client.post(
                f"{self.upstream}/v1/messages", json=body, headers=headers, timeout=timeout
            )
            elapsed = (time.perf_counter() - start) * 1000
            if r.status_code >= 400:
                return {
                    "error": f"upstream answered {r.status_code}",
                    "model": model,
                    "elapsed_ms": elapsed,
                }
            data = r.json()
            text = "".join(
                b.get("text", "")
                for b in data.get("content", [])
                if isinstance(b, dict) and b.get("type") == "text"
            )
            usage = data.get("usage") or {}
            tokens_in = (
                int(usage.get("input_tokens", 0))
                + int(usage.get("cache_read_input_tokens", 0) or 0)
                + int(usage.get("cache_creation_input_tokens", 0) or 0)
            )
            return {
                "text": text,
                "input_tokens": tokens_in,
                "output_tokens": int(usage.get("output_tokens", 0)),
                "model": model,
                "elapsed_ms": elapsed,
            }
        except Exception as exc:  # any failure is "no answer": the daemon keeps its fallback
            return {
                "error": type(exc).__name__,
                "model": model,
                "elapsed_ms": (time.perf_counter() - start) * 1000,
            }
