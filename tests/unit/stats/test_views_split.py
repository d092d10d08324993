"""Views out of the hot path (issue 42 item 5): the daemon computes a session's totals with
`ctxwrap.stats.compute` and writes the status line and prompt segment with
`ctxwrap.statusline`, and none of what it reaches loads the CLI (click) or the drawing (rich).

Checked twice: at run time (a fresh interpreter imports the daemon and the compute side, and
runs the turn-end path on a real store), and on the import graph with the imports inside
functions counted (`test_import_cycles.import_graph`), so that a late import cannot hide one.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.unit.test_import_cycles import _modules, import_graph

VIEWS_ONLY = {"ctxwrap.stats.render", "ctxwrap.stats.command", "ctxwrap.cli", "ctxwrap.shell"}


def _reached(starts: list[str]) -> set[str]:
    graph = import_graph(nested=True)
    seen: set[str] = set()
    todo = list(starts)
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo.extend(graph.get(m, ()))
    return seen


def _third_party(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            out.add(node.module.split(".")[0])
    return out


def test_the_daemon_and_the_mechanisms_reach_no_view_and_no_cli() -> None:
    mods = _modules()
    starts = ["ctxwrap.daemon.service", "ctxwrap.stats.compute"] + [
        m for m in mods if m.startswith("ctxwrap.mechanisms")
    ]
    reached = _reached(starts)
    assert "ctxwrap.stats.compute" in reached  # the turn totals
    assert "ctxwrap.statusline" in reached  # the status line and the prompt segment
    assert reached & VIEWS_ONLY == set()
    # nor another view or an adapter (stats -> replay -> agents -> launch -> stats was a loop)
    above = ("ctxwrap.replay", "ctxwrap.report", "ctxwrap.launch", "ctxwrap.agents")
    assert sorted(m for m in reached if m.startswith(above)) == []
    loads = {m: _third_party(mods[m]) & {"click", "rich"} for m in reached}
    assert {m: s for m, s in loads.items() if s} == {}


def test_the_turn_end_path_imports_no_click_at_run_time(tmp_path: Path) -> None:
    code = textwrap.dedent(
        f"""
        import sys
        from pathlib import Path
        import ctxwrap.daemon.service
        import ctxwrap.stats.compute
        from ctxwrap import protocol as P
        from ctxwrap.state.store import Store
        from ctxwrap.stats.compute import session_totals
        from ctxwrap.statusline import status_text, write_prompt_segment, write_status

        store = Store(Path({str(tmp_path / "ctxwrap.db")!r}))
        totals = session_totals(store.conn, "nope", ttl_s=300.0, prices={{}})
        assert isinstance(totals, P.SessionTotals)
        write_status("s1", status_text(totals))
        write_prompt_segment("")
        # the daemon's own turn-end writers (they use nothing of the instance)
        Daemon = ctxwrap.daemon.service.Daemon
        Daemon._prompt_segment(None, totals)
        Daemon._status_line(None, "s1", totals)
        loaded = sorted(
            m for m in sys.modules
            if m.split(".")[0] in ("click", "rich")
            or m in ("ctxwrap.stats.render", "ctxwrap.stats.command", "ctxwrap.cli")
        )
        assert not loaded, loaded
        print("ok")
        """
    )
    env = {"XDG_STATE_HOME": str(tmp_path / "state"), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_the_stats_package_imports_none_of_its_modules() -> None:
    """Importing `ctxwrap.stats.compute` runs the package's `__init__` first: it must not load
    the render or command side behind the daemon's back."""
    init = _modules()["ctxwrap.stats"]
    tree = ast.parse(init.read_text(encoding="utf-8"))
    assert not [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]


def test_each_adapter_holds_its_own_doctor_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pi's checks live in `agents/pi/doctor_check.py` like Claude Code's and Codex's; the
    doctor only runs them (pi's first: the aux backend's check reads its result)."""
    import ctxwrap.doctor as doctor
    from ctxwrap.agents.pi import doctor_check as pi_check

    for agent in ("pi", "claude", "codex"):
        assert f"ctxwrap.agents.{agent}.doctor_check" in _modules()
    assert not hasattr(doctor, "check_pi_and_node") and not hasattr(doctor, "inspect_pi")
    monkeypatch.setenv("CTXWRAP_PI", "/nonexistent/pi")
    for var in ("XDG_STATE_HOME", "XDG_CONFIG_HOME", "XDG_RUNTIME_DIR"):
        monkeypatch.setenv(var, str(tmp_path / var.lower()))
    checks = doctor.run_checks()
    assert [c.name for c in checks[:2]] == ["pi", "node"]
    assert checks[0].level == "fail" and "CTXWRAP_PI=/nonexistent/pi" in checks[0].summary
    assert pi_check.node_too_old  # `ctxwrap pi` asks it after pi failed
