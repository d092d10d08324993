"""`ctxwrap service install|uninstall|status`: the systemd user units for the daemon.

The units come from `systemd/` with this interpreter's absolute path filled in, so the
service runs exactly the ctxwrap that installed it (a venv or a pipx install included).
Once `ctxwrap.socket` exists, the client stops auto-starting the daemon and leaves it to
socket activation (`client.systemd_unit_enabled`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import click

from ctxwrap import paths
from ctxwrap._data_files import read_data_text
from ctxwrap.errors import CtxwrapError

UNITS = ("ctxwrap.socket", "ctxwrap.service")
SYSTEMCTL_TIMEOUT_S = 15.0


def unit_dir() -> Path:
    """`$XDG_CONFIG_HOME/systemd/user` (same XDG rule as the rest of ctxwrap)."""
    return paths.config_dir().parent / "systemd" / "user"


def _exec_quote(arg: str) -> str:
    # systemd expands %-specifiers and splits on whitespace: escape the one, quote the other
    arg = arg.replace("%", "%%")
    if any(c in arg for c in ' \t"\\'):
        return '"' + arg.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return arg


def render_unit(name: str, python: str | None = None) -> str:
    """The text of unit `name` with @PYTHON@ replaced by this interpreter's absolute path."""
    # sys.executable as is, not resolved: a venv's python is a symlink whose path selects the venv
    exe = python or os.path.abspath(sys.executable)
    return read_data_text("systemd", name).replace("@PYTHON@", _exec_quote(exe))


@dataclass(frozen=True)
class Systemctl:
    """`systemctl --user`, if it can talk to a user manager here."""

    exe: str | None

    @classmethod
    def detect(cls) -> Systemctl:
        exe = shutil.which("systemctl")
        if exe is None:
            return cls(None)
        try:
            probe = subprocess.run(
                [exe, "--user", "show-environment"],
                capture_output=True,
                timeout=SYSTEMCTL_TIMEOUT_S,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired):
            return cls(None)
        return cls(exe if probe.returncode == 0 else None)

    @property
    def works(self) -> bool:
        return self.exe is not None

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        assert self.exe is not None
        return subprocess.run(
            [self.exe, "--user", *args],
            capture_output=True,
            text=True,
            timeout=SYSTEMCTL_TIMEOUT_S,
            check=False,
        )

    def must(self, *args: str) -> None:
        done = self.run(*args)
        if done.returncode != 0:
            raise CtxwrapError(
                f"`systemctl --user {' '.join(args)}` failed: {(done.stderr or done.stdout).strip()}",
                hint="see `journalctl --user -u ctxwrap` and `ctxwrap service status`",
            )


def install(python: str | None = None, *, enable: bool = True) -> list[str]:
    """Write both units; enable the socket when systemctl works. Returns lines to show."""
    target = unit_dir()
    target.mkdir(parents=True, exist_ok=True)
    out: list[str] = []
    for name in UNITS:
        path = target / name
        text = render_unit(name, python)
        state = "unchanged" if path.exists() and path.read_text() == text else "wrote"
        if state == "wrote":
            path.write_text(text)
        out.append(f"{state} {path}")
    manual = ["systemctl --user daemon-reload", "systemctl --user enable --now ctxwrap.socket"]
    ctl = Systemctl.detect() if enable else Systemctl(None)
    if not ctl.works:
        out.append(
            "systemctl --user is not available here; to start it, run:"
            if enable
            else "to start it, run:"
        )
        out.extend(f"  {cmd}" for cmd in manual)
        return out
    # An auto-started daemon holds the socket path; stop it so systemd can listen there.
    from ctxwrap.client import stop_daemon

    if stop_daemon():
        out.append("stopped the auto-started daemon (socket activation takes over)")
    ctl.must("daemon-reload")
    ctl.must("enable", "--now", "ctxwrap.socket")
    out.append("enabled and started ctxwrap.socket; the daemon starts on first use")
    return out


def uninstall() -> list[str]:
    """Disable and remove both units; the client goes back to auto-starting the daemon."""
    target = unit_dir()
    out: list[str] = []
    ctl = Systemctl.detect()
    present = [name for name in UNITS if (target / name).exists()]
    if not present:
        return [f"no ctxwrap units in {target}"]
    if ctl.works:
        # not must(): disabling a unit systemd never loaded is not a reason to keep the files
        done = ctl.run("disable", "--now", *UNITS)
        if done.returncode == 0:
            out.append("stopped and disabled ctxwrap.socket and ctxwrap.service")
        else:
            out.append(f"systemctl disable said: {(done.stderr or done.stdout).strip()}")
    for name in present:
        (target / name).unlink()
        out.append(f"removed {target / name}")
    if ctl.works:
        ctl.run("daemon-reload")
    else:
        out.append("systemctl --user is not available here; if a user manager runs, run:")
        out.append("  systemctl --user disable --now ctxwrap.socket ctxwrap.service")
        out.append("  systemctl --user daemon-reload")
    return out


def status() -> tuple[bool, list[str]]:
    """(healthy, lines): installed, pointing at this ctxwrap, and (if systemctl works) active."""
    target = unit_dir()
    out: list[str] = []
    healthy = True
    for name in UNITS:
        path = target / name
        if not path.exists():
            out.append(f"{name}: not installed ({path})")
            healthy = False
        elif path.read_text() != render_unit(name):
            out.append(
                f"{name}: {path} differs from this ctxwrap's unit; `ctxwrap service install` updates it"
            )
            healthy = False
        else:
            out.append(f"{name}: installed ({path})")
    ctl = Systemctl.detect()
    if not ctl.works:
        out.append("systemctl --user: not available here (no user manager)")
        return healthy, out
    for name in UNITS:
        enabled = ctl.run("is-enabled", name).stdout.strip() or "unknown"
        active = ctl.run("is-active", name).stdout.strip() or "unknown"
        out.append(f"{name}: {enabled}, {active}")
        if name == "ctxwrap.socket" and active != "active":
            healthy = False
    return healthy, out


@click.group("service")
def service_group() -> None:
    """Install or remove the systemd user units (socket-activated daemon)."""


@service_group.command("install")
@click.option("--no-enable", is_flag=True, help="Only write the unit files; do not run systemctl.")
def install_cmd(no_enable: bool) -> None:
    """Write ctxwrap.service and ctxwrap.socket to ~/.config/systemd/user and enable the socket."""
    for line in install(enable=not no_enable):
        click.echo(line)


@service_group.command("uninstall")
def uninstall_cmd() -> None:
    """Disable and remove the units; ctxwrap goes back to auto-starting its daemon."""
    for line in uninstall():
        click.echo(line)


@service_group.command("status")
def status_cmd() -> None:
    """Are the units installed, current and active? Exit 3 when not."""
    healthy, lines = status()
    for line in lines:
        click.echo(line)
    if not healthy:
        from ctxwrap.errors import ExitCode

        raise ExitCode(3)  # like `systemctl status`: not running / not installed
