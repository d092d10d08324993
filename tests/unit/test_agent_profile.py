"""Outside the adapters ctxwrap reads an agent's traits (AgentProfile), never its name
(issue 42).

Mechanisms, the daemon, the state, the engine, the digester, the aux plumbing, replay and the
views run for every agent alike; what differs between pi, Claude Code and Codex is declared once, as a profile,
and a fourth agent adds a profile, not a branch.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

import ctxwrap
from ctxwrap import protocol as P
from ctxwrap.state.session import recall_call

ROOT = Path(ctxwrap.__file__).parent
NAMES = {"pi", "claude", "codex"}
# Where an agent's name may decide something: its adapter (agents/), and the entry point that
# dispatches the command line's words (`ctxwrap pi …`) to it.
MAY_NAME = ("agents/", "entry.py")


def _names_in(node: ast.AST) -> set[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value} & NAMES
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return {n for e in node.elts for n in _names_in(e)}
    return set()


def agent_name_branches(source: str) -> list[int]:
    """Lines that compare something with an agent's name (`== "pi"`, `in ("claude", …)`);
    `"claude" in model` (a substring of a model's name) is no such branch."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Compare):
            continue
        left_is_name = bool(_names_in(node.left)) and not isinstance(node.ops[0], ast.In)
        if left_is_name or any(_names_in(side) for side in node.comparators):
            found.append(node.lineno)
    return found


def test_nothing_outside_the_adapters_branches_on_an_agents_name() -> None:
    offenders = {
        f"{rel}:{line}"
        for path in sorted(ROOT.rglob("*.py"))
        if not (rel := path.relative_to(ROOT).as_posix()).startswith(MAY_NAME)
        for line in agent_name_branches(path.read_text(encoding="utf-8"))
    }
    assert offenders == set()


def test_the_check_sees_a_branch() -> None:
    assert agent_name_branches('if rt.agent == "pi":\n    pass\n') == [1]
    assert agent_name_branches('x = agent in ("claude", "codex")\n') == [1]
    assert agent_name_branches("if rt.profile.recall_tool:\n    pass\n") == []
    assert agent_name_branches('x = "claude" in model_name\n') == []


def test_every_agent_has_a_profile_and_an_unknown_one_gets_the_careful_defaults() -> None:
    for agent in P.PROFILES:
        assert isinstance(P.profile_of(agent.partition("@")[0]), P.AgentProfile)
    unknown = P.profile_of("aider")
    assert unknown == P.AgentProfile()
    # nothing that needs the agent's cooperation: no tool of ours, no spill file trusted, no
    # wait before a request, no pointer without head-change reports
    assert not (unknown.recall_tool or unknown.tail_waits_for_tags or unknown.reports_head_changes)
    assert unknown.spill == "none"


@pytest.mark.parametrize(
    ("agent", "version", "check"), [("pi", "0.73.1", "prompt"), ("pi", "1.6.0", "turn")]
)
def test_a_version_with_other_traits_gets_its_own(agent: str, version: str, check: str) -> None:
    assert P.profile_of(agent, version).compaction_check == check


def test_a_declared_profile_is_what_the_session_start_carries() -> None:
    req = P.SessionStart.model_validate(
        {
            "session_id": "s",
            "cwd": "/",
            "pid": 1,
            "agent": "codex",
            "profile": {"recall_tool": True},
        }
    )
    assert req.profile is not None and req.profile.recall_tool
    with pytest.raises(ValueError):
        P.SessionStart.model_validate(
            {"session_id": "s", "cwd": "/", "pid": 1, "profile": {"no_such_trait": 1}}
        )


def test_recall_wording_follows_the_trait_not_the_name() -> None:
    assert recall_call(P.AgentProfile(recall_tool=True), "r1").startswith("ctx_recall(")
    assert "`ctxwrap recall r1 PATTERN`" in recall_call(P.AgentProfile(), "r1")


def test_a_session_start_says_how_its_model_recalls(tmp_path: Path) -> None:
    """pi's bridge decides per session (bash active and `ctxwrap` on its PATH, or not): the
    daemon's notes name what the session has, whatever pi's default says."""
    from ctxwrap.config import load_config
    from ctxwrap.daemon.service import Daemon

    d = Daemon(load_config(tmp_path / "absent.toml"), socket=tmp_path / "s", state_dir=tmp_path)
    for sid, recall_tool, wording in (
        ("bash", False, "`ctxwrap recall r1 PATTERN`"),
        ("tool", True, 'ctx_recall(handle="r1"'),
        ("unsaid", None, "`ctxwrap recall r1 PATTERN`"),  # pi's default: bash is on
    ):
        d.session_start(
            P.SessionStart(session_id=sid, cwd="/", pid=os.getpid(), recall_tool=recall_tool)
        )
        rt = d.sessions[sid]
        assert wording in recall_call(rt.profile, "r1"), sid
        assert rt.profile.tail_waits_for_tags  # pi's other traits stay


def test_codexs_model_is_told_this_install_by_its_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Codex runs commands in a snapshot of the login shell, which may not find `ctxwrap` by
    name: its notes name this install's script by path (quoted), the other agents' by name."""
    from ctxwrap.paths import ctxwrap_program

    assert "`ctxwrap recall r1 PATTERN`" in recall_call(P.profile_of("claude"), "r1")
    assert "`ctxwrap recall r1 PATTERN`" in recall_call(P.profile_of("pi"), "r1")
    assert f"`{ctxwrap_program()} recall r1 PATTERN`" in recall_call(P.profile_of("codex"), "r1")
    bin_dir = tmp_path / "a b" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "ctxwrap").write_text("#!/bin/sh\n")
    monkeypatch.setattr("sys.executable", str(bin_dir / "python3"))
    said = recall_call(P.profile_of("codex"), "r1")
    assert f"`'{bin_dir}/ctxwrap' recall r1 PATTERN`" in said
    # an interpreter with no script beside it (pip --user): the one on PATH, absolute
    monkeypatch.setattr("sys.executable", str(tmp_path / "python3"))
    (bin_dir / "ctxwrap").chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    assert ctxwrap_program() == f"'{bin_dir}/ctxwrap'"
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))  # none anywhere: by name
    assert "`ctxwrap recall r1 PATTERN`" in recall_call(P.profile_of("codex"), "r1")
