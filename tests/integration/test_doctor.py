"""`ctxwrap doctor`, run as a subprocess against fake and real pi installs, real configs,
real socket directories and a real daemon.

Fake installs copy npm's layout (bin symlink → `#!/usr/bin/env node` cli.js inside a package
with package.json), with a `node` that only reports a version: the point is which node pi's
shebang picks, and what doctor says about it.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support import isolated_env

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def env(tmp_path: Path) -> Iterator[dict[str, str]]:
    with isolated_env(tmp_path, PATH="/usr/bin:/bin") as e:
        yield e


def fake_node(bindir: Path, version: str) -> None:
    bindir.mkdir(parents=True, exist_ok=True)
    node = bindir / "node"
    node.write_text(f'#!/bin/sh\n[ "$1" = --version ] && echo v{version} && exit 0\nexit 1\n')
    node.chmod(0o755)


def fake_pi(root: Path, package: str, version: str, engines: str | None) -> Path:
    """npm's global layout: <root>/bin/pi → ../lib/node_modules/<package>/dist/cli.js."""
    pkg = root / "lib" / "node_modules" / package
    (pkg / "dist").mkdir(parents=True)
    meta: dict[str, Any] = {"name": package, "version": version, "bin": {"pi": "dist/cli.js"}}
    if engines:
        meta["engines"] = {"node": engines}
    (pkg / "package.json").write_text(json.dumps(meta))
    cli = pkg / "dist" / "cli.js"
    cli.write_text("#!/usr/bin/env node\nconsole.log('pi');\n")
    cli.chmod(0o755)
    (root / "bin").mkdir(parents=True, exist_ok=True)
    link = root / "bin" / "pi"
    link.symlink_to(os.path.relpath(cli, link.parent))
    return link


def doctor(env: dict[str, str]) -> tuple[int, dict[str, dict[str, Any]], str]:
    done = subprocess.run(
        [sys.executable, "-m", "ctxwrap", "doctor", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    checks = {c["name"]: c for c in json.loads(done.stdout)["checks"]}
    return done.returncode, checks, done.stderr


def with_path(env: dict[str, str], *dirs: Path) -> dict[str, str]:
    return {**env, "PATH": os.pathsep.join([*map(str, dirs), env["PATH"]])}


def test_pi_1x_on_node_20_fails_and_says_which_node(env: dict[str, str], tmp_path: Path) -> None:
    fake_node(tmp_path / "node20", "20.20.2")
    fake_pi(tmp_path / "npm", "@earendil-works/pi-coding-agent", "1.6.0", ">=22.19.0")
    code, checks, stderr = doctor(with_path(env, tmp_path / "npm/bin", tmp_path / "node20"))
    assert code == 1
    assert checks["pi"]["level"] == "ok"
    node = checks["node"]
    assert node["level"] == "fail"
    assert str(tmp_path / "node20" / "node") in node["summary"]
    assert "22.19" in node["summary"] and "SyntaxError" in node["summary"]
    assert "Node >= 22.19" in node["fix"]
    assert "ctxwrap: error:" in stderr and "node" in stderr
    # The aux check points at the check that failed (node), not at the pi check that passed.
    aux = checks["aux backend"]
    assert aux["level"] == "fail" and aux["fix"] == "fix the node check above", aux


def test_pi_1x_on_node_22_passes(env: dict[str, str], tmp_path: Path) -> None:
    fake_node(tmp_path / "node22", "22.23.5")
    fake_pi(tmp_path / "npm", "@earendil-works/pi-coding-agent", "1.6.0", ">=22.19.0")
    code, checks, stderr = doctor(with_path(env, tmp_path / "npm/bin", tmp_path / "node22"))
    assert checks["pi"]["level"] == "ok" and "1.6.0" in checks["pi"]["summary"]
    assert checks["node"]["level"] == "ok"
    assert checks["aux backend"]["level"] == "ok"
    assert code == 0, (checks, stderr)


def test_pi_073_needs_only_node_20_6(env: dict[str, str], tmp_path: Path) -> None:
    fake_node(tmp_path / "node20", "20.6.0")
    fake_pi(tmp_path / "npm", "@mariozechner/pi-coding-agent", "0.73.1", None)
    code, checks, _ = doctor(with_path(env, tmp_path / "npm/bin", tmp_path / "node20"))
    assert checks["node"]["level"] == "ok", checks["node"]
    assert "20.6.0" in checks["node"]["summary"]
    assert code == 0


def test_node_of_the_shebang_not_the_first_on_path(env: dict[str, str], tmp_path: Path) -> None:
    """A pi whose shebang names an absolute old node fails even with Node 22 first on PATH."""
    fake_node(tmp_path / "node22", "22.23.5")
    fake_node(tmp_path / "old", "20.1.0")
    exe = fake_pi(tmp_path / "npm", "@earendil-works/pi-coding-agent", "1.6.0", ">=22.19.0")
    exe.resolve().write_text(f"#!{tmp_path / 'old' / 'node'}\n")
    code, checks, _ = doctor(with_path(env, tmp_path / "npm/bin", tmp_path / "node22"))
    assert checks["node"]["level"] == "fail"
    assert str(tmp_path / "old" / "node") in checks["node"]["summary"]
    assert code == 1


def test_ctxwrap_pi_override_and_missing_pi(env: dict[str, str], tmp_path: Path) -> None:
    code, checks, _ = doctor({**env, "CTXWRAP_PI": str(tmp_path / "nope")})
    assert code == 1
    assert checks["pi"]["level"] == "fail" and "CTXWRAP_PI=" in checks["pi"]["summary"]
    assert "npm install" in checks["pi"]["fix"]
    assert checks["aux backend"]["level"] == "fail"  # the default backend runs through pi

    fake_node(tmp_path / "node22", "22.23.5")
    exe = fake_pi(tmp_path / "npm", "@earendil-works/pi-coding-agent", "1.6.0", ">=22.19.0")
    code, checks, _ = doctor(with_path({**env, "CTXWRAP_PI": str(exe)}, tmp_path / "node22"))
    assert checks["pi"]["level"] == "ok" and "CTXWRAP_PI" in checks["pi"]["summary"]


def test_real_pi_from_tools(env: dict[str, str]) -> None:
    """The pinned pi 1.6 from scripts/install-tools.sh: ok with its Node 22, not with Node 20."""
    tools = REPO / ".tools"
    npm_bin = tools / "pi1" / "node_modules" / ".bin"
    if not (npm_bin / "pi").exists():
        pytest.skip("scripts/install-tools.sh has not been run")
    code, checks, _ = doctor(with_path(env, tools / "bin"))
    assert checks["pi"]["level"] == "ok" and checks["node"]["level"] == "ok", checks
    system_node = shutil.which("node", path="/usr/bin:/bin")
    if system_node:
        v = subprocess.run([system_node, "--version"], capture_output=True, text=True).stdout
        if v.startswith("v2") and int(v[1:].split(".")[0]) < 22:
            # `#!/usr/bin/env node` with only the system Node 20 on PATH
            code, checks, _ = doctor(with_path(env, npm_bin))
            assert checks["node"]["level"] == "fail" and code == 1


def test_broken_config_fails(env: dict[str, str], tmp_path: Path) -> None:
    cfg = Path(env["XDG_CONFIG_HOME"]) / "ctxwrap" / "config.toml"
    cfg.parent.mkdir(parents=True)
    cfg.write_text("bash_min_tokenz = 5\n")
    code, checks, _ = doctor(env)
    assert code == 1
    assert checks["config"]["level"] == "fail"
    assert "bash_min_tokenz" in checks["config"]["summary"]
    assert checks["aux backend"]["level"] == "warn"  # cannot judge without a config

    cfg.unlink()
    code, checks, _ = doctor({**env, "PI_CTX_BASH_MIN_TOKENS": "lots"})
    assert checks["config"]["level"] == "fail" and code == 1
    assert "PI_CTX_BASH_MIN_TOKENS" in checks["config"]["summary"]


def test_socket_dir_permissions(env: dict[str, str]) -> None:
    runtime = Path(env["XDG_RUNTIME_DIR"]) / "ctxwrap"
    _, checks, _ = doctor(env)
    assert checks["socket dir"]["level"] == "ok"
    runtime.mkdir(mode=0o755)
    runtime.chmod(0o755)
    code, checks, _ = doctor(env)
    assert checks["socket dir"]["level"] == "fail"
    assert "0755" in checks["socket dir"]["summary"] and "chmod 700" in checks["socket dir"]["fix"]
    assert code == 1


def test_aux_http_backend(env: dict[str, str]) -> None:
    _, checks, _ = doctor({**env, "PI_CTX_AUX_BACKEND": "http"})
    assert (
        checks["aux backend"]["level"] == "fail"
        and "aux_base_url" in checks["aux backend"]["summary"]
    )

    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen(1)
        port = listening.getsockname()[1]
        http = {
            **env,
            "PI_CTX_AUX_BACKEND": "http",
            "PI_CTX_AUX_BASE_URL": f"http://127.0.0.1:{port}/v1",
        }
        _, checks, _ = doctor(http)
        assert checks["aux backend"]["level"] == "ok", checks["aux backend"]
        _, checks, _ = doctor({**http, "PI_CTX_AUX_API_KEY_ENV": "CTXWRAP_TEST_UNSET_KEY"})
        assert checks["aux backend"]["level"] == "fail"
        assert "CTXWRAP_TEST_UNSET_KEY" in checks["aux backend"]["summary"]
    # nothing listens there any more
    _, checks, _ = doctor(http)
    assert (
        checks["aux backend"]["level"] == "fail"
        and "unreachable" in checks["aux backend"]["summary"]
    )

    _, checks, _ = doctor({**env, "PI_CTX_AUX_BACKEND": "none"})
    assert checks["aux backend"]["level"] == "warn"


def test_daemon_down_is_not_broken_and_a_running_one_is_reported(env: dict[str, str]) -> None:
    _, checks, _ = doctor(env)
    assert checks["daemon"]["level"] == "ok" and "not running" in checks["daemon"]["summary"]

    daemon = subprocess.Popen(
        [sys.executable, "-m", "ctxwrap", "daemon", "run"],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        sock = Path(env["XDG_RUNTIME_DIR"]) / "ctxwrap" / "daemon.sock"
        deadline = time.monotonic() + 30
        while not sock.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        _, checks, _ = doctor(env)
        assert checks["daemon"]["level"] == "ok", checks["daemon"]
        assert f"pid {daemon.pid}" in checks["daemon"]["summary"]
        assert (
            checks["socket dir"]["level"] == "ok"
            and "socket 0600" in checks["socket dir"]["summary"]
        )
    finally:
        daemon.kill()
        daemon.wait(timeout=10)


def test_human_output_names_the_fix(env: dict[str, str], tmp_path: Path) -> None:
    fake_node(tmp_path / "node20", "20.20.2")
    fake_pi(tmp_path / "npm", "@earendil-works/pi-coding-agent", "1.6.0", ">=22.19.0")
    done = subprocess.run(
        [sys.executable, "-m", "ctxwrap", "doctor"],
        env=with_path(env, tmp_path / "npm/bin", tmp_path / "node20"),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1
    lines = done.stdout.splitlines()
    assert any(ln.startswith("FAIL  node") for ln in lines), done.stdout
    assert any("fix: install Node >= 22.19" in ln for ln in lines), done.stdout
    assert "hint: fix the FAIL lines, then run" in done.stderr


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        (("daemon", "start"), "started by `ctxwrap daemon start`"),
        (("daemon", "restart"), "started by `ctxwrap daemon restart`"),
    ],
)
def test_an_explicitly_started_daemon_is_not_called_auto_started(
    env: dict[str, str], command: tuple[str, ...], expected: str
) -> None:
    env = {**env, "CTXWRAP_NO_SYSTEMD": "1"}
    started = subprocess.run(
        [sys.executable, "-m", "ctxwrap", *command],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert started.returncode == 0, started.stderr
    try:
        _, checks, _ = doctor(env)
        summary = checks["daemon"]["summary"]
        assert expected in summary and "auto-started" not in summary, summary
    finally:
        subprocess.run(
            [sys.executable, "-m", "ctxwrap", "daemon", "stop"], env=env, timeout=30, check=False
        )


def test_a_foreground_daemon_is_reported_as_such(env: dict[str, str]) -> None:
    daemon = subprocess.Popen(
        [sys.executable, "-m", "ctxwrap", "daemon", "run"],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        sock = Path(env["XDG_RUNTIME_DIR"]) / "ctxwrap" / "daemon.sock"
        deadline = time.monotonic() + 30
        while not sock.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        _, checks, _ = doctor(env)
        assert "started by `ctxwrap daemon run`" in checks["daemon"]["summary"], checks["daemon"]
    finally:
        daemon.kill()
        daemon.wait(timeout=10)
