"""The upstream TLS context is built beside the agent's start-up (launch/tls.py), and it is the
context httpx would have built itself: the same CA certificates and settings."""

from __future__ import annotations

import ssl
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import certifi
import httpx
import pytest

from ctxwrap.agents._proxy.server import LoopbackProxy
from ctxwrap.launch import tls
from ctxwrap.launch.listener import Listener, ProxySetup


@pytest.fixture(autouse=True)
def fresh_tls(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test its own build (the module keeps one per process, as a launcher has one)."""
    monkeypatch.setattr(tls, "_thread", None)
    monkeypatch.setattr(tls, "_context", None)
    monkeypatch.setattr(tls, "_built_for", None)
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    yield


def _same(a: ssl.SSLContext, b: ssl.SSLContext) -> None:
    assert a.get_ca_certs() == b.get_ca_certs()
    assert a.cert_store_stats() == b.cert_store_stats()
    for attr in ("verify_mode", "check_hostname", "options", "minimum_version", "protocol"):
        assert getattr(a, attr) == getattr(b, attr), attr
    assert a.verify_flags == b.verify_flags


def test_the_context_is_the_one_httpx_builds_itself() -> None:
    _same(tls.default_context(), httpx.create_ssl_context())
    assert tls.default_context().cert_store_stats()["x509_ca"] > 50  # certifi's bundle


def test_ssl_cert_file_is_honoured_as_httpx_honours_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bundle = Path(certifi.where()).read_text()
    one = bundle[: bundle.index("-----END CERTIFICATE-----") + 26]  # the first CA only
    (tmp_path / "ca.pem").write_text(one)
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "ca.pem"))
    ours = tls.default_context()
    assert ours.cert_store_stats()["x509_ca"] == 1
    _same(ours, httpx.create_ssl_context())


def _proxy() -> LoopbackProxy:
    class Nothing:
        def __getattr__(self, name: str) -> Any:
            return lambda *a, **k: None

    listener = Listener()
    return LoopbackProxy(Nothing(), name="test", listener=listener.sock, secret=listener.secret)  # type: ignore[arg-type]


def _upstream_context(proxy: LoopbackProxy) -> ssl.SSLContext:
    return proxy.client._transport._pool._ssl_context  # type: ignore[attr-defined,no-any-return]


def test_the_proxys_upstream_client_takes_the_context_built_beside() -> None:
    tls.build_beside()
    proxy = _proxy()
    try:
        assert tls._context is not None
        assert _upstream_context(proxy) is tls._context
    finally:
        proxy.httpd.server_close()


def test_without_a_launcher_httpx_builds_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    assert tls.upstream_verify() is True
    proxy = _proxy()
    try:
        _same(_upstream_context(proxy), httpx.create_ssl_context())
    finally:
        proxy.httpd.server_close()


def test_a_failed_build_fails_open(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken() -> ssl.SSLContext:
        raise ssl.SSLError("no CA bundle")

    monkeypatch.setattr(tls, "default_context", broken)
    tls.build_beside()
    assert tls.upstream_verify() is True  # httpx builds it (and says what is wrong) itself


def test_ca_variables_changed_after_the_build_are_not_ignored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tls.build_beside()
    assert isinstance(tls.upstream_verify(), ssl.SSLContext)
    monkeypatch.setenv("SSL_CERT_DIR", str(tmp_path))
    assert tls.upstream_verify() is True


def test_the_proxy_setup_starts_the_build_when_the_agent_starts() -> None:
    """`ProxySetup.start` is the launchers' `on_started`: the CA bundle loads beside the
    proxy's imports (it releases the GIL), not after them on the setup thread."""
    release = threading.Event()
    setup = ProxySetup(lambda: release.wait(5), "test", fallback=lambda: None)  # type: ignore[arg-type,return-value]
    assert tls._thread is None
    setup.start()
    try:
        assert tls._thread is not None
        tls._thread.join(10)
        assert tls._thread.name == "ctxwrap-upstream-tls"
        assert isinstance(tls.upstream_verify(), ssl.SSLContext)
    finally:
        release.set()
