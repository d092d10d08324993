"""The `http` aux backend: an OpenAI-compatible chat-completions or Anthropic Messages endpoint.

For a cheap or local model (Ollama, vLLM, llama.cpp) where pi is not the one to run the call.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import httpx


@dataclass(frozen=True)
class AuxAnswer:
    text: str | None
    input_tokens: int
    output_tokens: int
    elapsed_ms: float
    error: str | None = None


class HttpAuxBackend:
    def __init__(
        self, *, base_url: str, api: str, model: str | None, api_key_env: str | None
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.api = api
        self.model = model or "default"
        key = os.environ.get(api_key_env, "") if api_key_env else ""
        self._headers = {"content-type": "application/json"}
        if key and api == "anthropic":
            self._headers |= {"x-api-key": key, "anthropic-version": "2023-06-01"}
        elif key:
            self._headers["authorization"] = f"Bearer {key}"
        self._client = httpx.AsyncClient(headers=self._headers)

    async def complete(
        self, *, system: str, prompt: str, max_tokens: int, timeout_ms: int
    ) -> AuxAnswer:
        start = time.perf_counter()
        model = self.model.split("/", 1)[-1]
        try:
            if self.api == "anthropic":
                body = {
                    "model": model,
                    "max_tokens": max_tokens,
                    "system": system,
                    "messages": [{"role": "user", "content": prompt}],
                }
                r = await self._client.post(
                    f"{self.base_url}/messages", json=body, timeout=timeout_ms / 1000
                )
                r.raise_for_status()
                data = r.json()
                text = "".join(
                    b.get("text", "") for b in data.get("content", []) if b.get("type") == "text"
                )
                usage = data.get("usage", {})
                tin, tout = int(usage.get("input_tokens", 0)), int(usage.get("output_tokens", 0))
            else:
                body = {
                    "model": model,
                    "max_tokens": max_tokens,
                    "messages": [
                        {"role": "system", "content": system},
                        {"role": "user", "content": prompt},
                    ],
                }
                r = await self._client.post(
                    f"{self.base_url}/chat/completions", json=body, timeout=timeout_ms / 1000
                )
                r.raise_for_status()
                data = r.json()
                text = data["choices"][0]["message"].get("content") or ""
                usage = data.get("usage", {})
                tin, tout = (
                    int(usage.get("prompt_tokens", 0)),
                    int(usage.get("completion_tokens", 0)),
                )
        except (httpx.HTTPError, KeyError, IndexError, ValueError, TypeError) as exc:
            elapsed = (time.perf_counter() - start) * 1000
            # Usage unknown on failure: estimate the prompt we sent so the cost still shows.
            return AuxAnswer(
                None,
                (len(system) + len(prompt)) // 4,
                0,
                elapsed,
                f"{type(exc).__name__}: {exc}"[:300],
            )
        return AuxAnswer(text, tin, tout, (time.perf_counter() - start) * 1000)

    async def aclose(self) -> None:
        await self._client.aclose()
