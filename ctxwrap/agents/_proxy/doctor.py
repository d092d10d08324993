"""The doctor's check of a loopback proxy, the same for both proxies: it serves on 127.0.0.1
and refuses a request without the per-launch secret."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ctxwrap.check import Check


def check_door(name: str, make: Callable[[], Any], path: str) -> Check:
    """`make()` builds the proxy (upstream nowhere); a GET of `path` without the secret must
    get 404."""
    import httpx

    label = f"{name} proxy"
    try:
        proxy = make()
        proxy.start()
        try:
            url = f"http://127.0.0.1:{proxy.server.port}{path}"
            denied = httpx.get(url, timeout=3).status_code
        finally:
            proxy.close()
    except (OSError, httpx.HTTPError) as exc:
        return Check(
            label, "fail", f"cannot serve on 127.0.0.1: {exc}", "check loopback networking"
        )
    if denied != 404:
        return Check(label, "fail", f"a request without the secret got {denied}, not 404")
    return Check(label, "ok", "serves on 127.0.0.1, refuses requests without the per-launch secret")
