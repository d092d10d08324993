"""The wheel, installed into a brand-new venv, works on its own: no checkout, no dev venv.

Builds the wheel from this repository, installs it with pip into `python -m venv` (no system
site-packages), then runs the installed `ctxwrap` from outside the repository: --version,
doctor, help --man, init bash and the full demo against the real pi. Everything the commands
read (man page, shell script, bridge .ts files) must come out of the installed package.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from ctxwrap import __version__
from ctxwrap.testing.pi_home import find_pi

pytestmark = pytest.mark.slow  # one xdist worker runs it all (tests/conftest.py)

REPO = Path(__file__).resolve().parents[2]


@dataclass
class Installed:
    venv: Path
    package: Path  # the installed ctxwrap package directory
    root: Path  # scratch dir outside the repository, used as cwd

    @property
    def ctxwrap(self) -> str:
        return str(self.venv / "bin" / "ctxwrap")

    def env(self, tag: str, **extra: str) -> dict[str, str]:
        """A clean environment: the venv first on PATH, isolated XDG dirs, no dev leakage."""
        base = self.root / f"xdg-{tag}"
        runtime = self.root / f"run-{tag}"  # under a short /tmp root: socket path limit
        runtime.mkdir(mode=0o700, exist_ok=True)
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("PI_CTX_", "CTXWRAP_", "PYTHON", "VIRTUAL_ENV", "XDG_"))
        }
        env.update(
            PATH=f"{self.venv / 'bin'}{os.pathsep}{env.get('PATH', '/usr/bin:/bin')}",
            HOME=str(base / "home"),
            XDG_RUNTIME_DIR=str(runtime),
            XDG_STATE_HOME=str(base / "state"),
            XDG_CONFIG_HOME=str(base / "config"),
            CTXWRAP_NO_SYSTEMD="1",
            PYTHONNOUSERSITE="1",
            **extra,
        )
        (base / "home").mkdir(parents=True, exist_ok=True)
        return env

    def run(
        self, *args: str, env: dict[str, str], timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [self.ctxwrap, *args],
            env=env,
            cwd=self.root,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )


def _pip_reaches_an_index(scratch: Path) -> str | None:
    """None when pip can fetch a tiny package, else why not (the test then skips)."""
    try:
        probe = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(scratch), "six"],
            capture_output=True,
            text=True,
            timeout=90,
        )
    except subprocess.TimeoutExpired:
        return "pip download timed out"
    if probe.returncode != 0:
        return (probe.stderr or probe.stdout).strip()[-300:]
    return None


def _must(proc: subprocess.CompletedProcess[str], what: str) -> subprocess.CompletedProcess[str]:
    assert proc.returncode == 0, f"{what} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return proc


@pytest.fixture(scope="module")
def installed() -> Iterator[Installed]:
    root = Path(tempfile.mkdtemp(prefix="cwfresh-", dir="/tmp"))
    try:
        why = _pip_reaches_an_index(root / "probe")
        if why is not None:
            pytest.skip(f"pip cannot reach a package index here: {why}")
        dist = root / "dist"
        _must(
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "wheel",
                    str(REPO),
                    "--no-deps",
                    "--no-build-isolation",  # hatchling from the dev venv: no network for the build
                    "-w",
                    str(dist),
                ],
                capture_output=True,
                text=True,
                timeout=180,
            ),
            "pip wheel",
        )
        wheels = list(dist.glob("ctxwrap-*.whl"))
        assert len(wheels) == 1, wheels
        venv = root / "venv"
        # The base interpreter, not the dev venv's: a fresh venv must see nothing of it.
        base_python = getattr(sys, "_base_executable", sys.executable)
        _must(
            subprocess.run(
                [base_python, "-m", "venv", str(venv)], capture_output=True, text=True, timeout=120
            ),
            "python -m venv",
        )
        _must(
            subprocess.run(
                [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(wheels[0])],
                capture_output=True,
                text=True,
                timeout=300,
                env={k: v for k, v in os.environ.items() if not k.startswith("PYTHON")},
            ),
            "pip install <wheel>",
        )
        where = _must(
            subprocess.run(
                [
                    str(venv / "bin" / "python"),
                    "-c",
                    "import ctxwrap, sys; print(ctxwrap.__file__); print(sys.prefix != sys.base_prefix)",
                ],
                capture_output=True,
                text=True,
                cwd=root,
                timeout=60,
                env={k: v for k, v in os.environ.items() if not k.startswith("PYTHON")},
            ),
            "import ctxwrap",
        ).stdout.split()
        package = Path(where[0]).parent
        yield Installed(venv, package, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_installed_from_the_wheel_not_the_checkout(installed: Installed) -> None:
    assert installed.package.is_relative_to(installed.venv), installed.package
    cfg = (installed.venv / "pyvenv.cfg").read_text()
    assert re.search(r"include-system-site-packages\s*=\s*false", cfg), cfg
    # The bridge pi loads, and the files `init`, `help --man` and `service` read.
    for rel in (
        "_bridge/ctxwrap-bridge.ts",
        "_bridge/edits.ts",
        "_bridge/masking.ts",
        "_data/shell/ctxwrap.bash",
        "_data/shell/ctxwrap.zsh",
        "_data/shell/ctxwrap.fish",
        "_data/man/ctxwrap.1",
        "_data/systemd/ctxwrap.service",
    ):
        f = installed.package / rel
        assert f.is_file() and f.stat().st_size > 0, f"{rel} missing from the installed package"
    bridge = (installed.package / "_bridge/ctxwrap-bridge.ts").read_text()
    assert bridge == (REPO / "ctxwrap/_bridge/ctxwrap-bridge.ts").read_text()


def test_version(installed: Installed) -> None:
    out = _must(installed.run("--version", env=installed.env("version")), "ctxwrap --version")
    assert __version__ in out.stdout


def test_doctor_with_real_pi(installed: Installed) -> None:
    pi = find_pi("pi")
    if pi is None:
        pytest.skip("pi is not installed (run scripts/install-tools.sh)")
    out = installed.run("doctor", env=installed.env("doctor", CTXWRAP_PI=str(pi)))
    report = out.stdout + out.stderr
    if out.returncode != 0:  # a warning elsewhere (e.g. the machine) is fine; pi and node are not
        assert re.search(r"^ok\s+pi\s.*1\.6\.0", report, re.M), report
        assert re.search(r"^ok\s+node\s.*\b22\.\d+\.\d+", report, re.M), report
    else:
        assert "1.6.0" in report and re.search(r"\b22\.\d+\.\d+", report), report


def test_man_page_comes_from_the_wheel(installed: Installed) -> None:
    env = installed.env("man", MANPAGER="cat", PAGER="cat", TERM="dumb")
    out = _must(installed.run("help", "--man", env=env), "ctxwrap help --man")
    assert "ctxwrap" in out.stdout and "SYNOPSIS" in out.stdout.upper(), out.stdout[:2000]


def test_init_bash_comes_from_the_wheel(installed: Installed) -> None:
    out = _must(installed.run("init", "bash", env=installed.env("init")), "ctxwrap init bash")
    shipped = (installed.package / "_data/shell/ctxwrap.bash").read_text()
    # The shipped script with only the self-path line filled in, pointing into the venv.
    assert f"__ctxwrap_bin={installed.ctxwrap}\n" in out.stdout
    assert out.stdout == shipped.replace(
        "__ctxwrap_bin=ctxwrap\n", f"__ctxwrap_bin={installed.ctxwrap}\n", 1
    )
    assert "ctxwrap_prompt_segment()" in out.stdout


def test_demo_end_to_end(installed: Installed) -> None:
    pi = find_pi("pi")
    if pi is None:
        pytest.skip("pi is not installed (run scripts/install-tools.sh)")
    out = installed.run(
        "demo", "--no-color", env=installed.env("demo", CTXWRAP_PI=str(pi)), timeout=240
    )
    _must(out, "ctxwrap demo")
    line = next((ln for ln in out.stdout.splitlines() if "whole request" in ln), "")
    assert re.search(r"−\d+%\s*$", line), out.stdout
    assert "Both runs ended with the same answer" in out.stdout
    # The README shows this output as a sample: each of its lines must be what the demo prints.
    # Per-item rows are exact; the whole-request totals also count pi's own prompt, which
    # varies by a few tokens between runs, so their figures may differ by at most 1 %.
    readme = (REPO / "README.md").read_text()
    sample = readme.split("`make demo` prints", 1)[1].split("```\n", 2)[1]
    assert sample.strip()
    printed = out.stdout.splitlines()
    for sample_line in filter(None, sample.splitlines()):
        if sample_line in printed:
            continue
        shape = re.sub(r"[\d,]+", "#", sample_line)
        twin = next((ln for ln in printed if re.sub(r"[\d,]+", "#", ln) == shape), None)
        assert twin is not None and shape.lstrip().startswith(_TOTALS), (
            f"README sample line not printed by the demo: {sample_line!r}\n{out.stdout}"
        )
        for want, got in zip(_figures(sample_line), _figures(twin), strict=True):
            assert abs(want - got) <= want // 100, (sample_line, twin)  # counts: exact


_TOTALS = ("whole request", "Across all", "ctxwrap's own aux-model calls", "Net saved")


def _figures(line: str) -> list[int]:
    return [int(n.replace(",", "")) for n in re.findall(r"\d[\d,]*", line)]
