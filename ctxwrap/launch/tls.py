"""The proxy's upstream TLS context, built beside the agent's start-up, not on its first request.

A proxy's upstream client verifies the provider's certificate against a CA bundle; loading it
(`load_verify_locations`, certifi's ~150 certificates) is ~50 ms of CPU, and it used to run on
the launch's setup thread, after the proxy's imports, while the agent's first request waited
in the port's backlog. OpenSSL parses the bundle without holding the GIL, so a thread started
when the agent starts (`build_beside`, from `ProxySetup.start`) loads it in parallel with the
proxy's imports; the upstream client takes the finished context (`upstream_verify`).

The context is the one httpx builds itself for `verify=True` (httpx/_config.py,
`create_ssl_context`): `SSL_CERT_FILE`, else `SSL_CERT_DIR`, else certifi's bundle, with
`ssl.create_default_context`'s settings. Fail open: when the thread fails or is not started,
`upstream_verify` answers True and httpx builds that same context itself, as before.
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import ssl

_lock = threading.Lock()
_thread: threading.Thread | None = None
_context: ssl.SSLContext | None = None
_built_for: tuple[str, str] | None = None  # the CA variables it was built from


def _ca_env() -> tuple[str, str]:
    return os.environ.get("SSL_CERT_FILE", ""), os.environ.get("SSL_CERT_DIR", "")


def default_context() -> ssl.SSLContext:
    """httpx's `create_ssl_context()` for `verify=True, trust_env=True`, without httpx."""
    import ssl

    if os.environ.get("SSL_CERT_FILE"):
        return ssl.create_default_context(cafile=os.environ["SSL_CERT_FILE"])
    if os.environ.get("SSL_CERT_DIR"):
        return ssl.create_default_context(capath=os.environ["SSL_CERT_DIR"])
    import certifi

    return ssl.create_default_context(cafile=certifi.where())


def _build() -> None:
    global _context, _built_for
    try:
        _built_for = _ca_env()
        _context = default_context()
    except Exception:  # httpx builds its own when asked (and reports what is wrong then)
        _context = None


def build_beside() -> None:
    """Start building the context on a thread of its own (once per process)."""
    global _thread
    with _lock:
        if _thread is not None:
            return
        _thread = threading.Thread(target=_build, name="ctxwrap-upstream-tls", daemon=True)
        _thread.start()


def upstream_verify(timeout: float = 10.0) -> ssl.SSLContext | bool:
    """What the upstream client verifies with: the context `build_beside` built (waited for,
    bounded), else True: httpx builds its own default, the same context."""
    thread = _thread
    if thread is None:
        return True
    thread.join(timeout)
    if _context is None or _built_for != _ca_env():  # failed, or the CA variables changed since
        return True
    return _context
