"""Mechanism 3 end to end: skills catalog out of the prompt, find_capability, tool activation."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
from support import PI_VERSIONS, Xdg, run_ctxwrap_pi, tool_contents

from ctxwrap.testing.pi_home import tools_bin_dir

pytestmark = pytest.mark.e2e

SKILLS = {
    "pdf-tools": (
        "Extract text and tables from PDF documents, merge and split PDF files.",
        "# PDF tools\n\nRun `python scripts/extract.py FILE.pdf` to get the text.\nPDF-SKILL-BODY-MARKER\n",
    ),
    "changelog": (
        "Write a CHANGELOG entry from recent git commits in Keep a Changelog format.",
        "# Changelog\n\nRead git log, group by type.\nCHANGELOG-SKILL-BODY\n",
    ),
    "k8s-debug": (
        "Debug Kubernetes pods: logs, events, crash loops, kubectl describe.",
        "# k8s\n\nkubectl describe pod.\nK8S-SKILL-BODY\n",
    ),
}


def make_skills(home: Path) -> None:
    for name, (desc, body) in SKILLS.items():
        d = home / ".pi" / "agent" / "skills" / name
        (d / "scripts").mkdir(parents=True)
        (d / "scripts" / "extract.py").write_text("print('x')\n")
        (d / "SKILL.md").write_text(f"---\nname: {name}\ndescription: {desc}\n---\n{body}")


def system_text(body: dict[str, Any]) -> str:
    return "\n".join(
        str(m.get("content")) for m in body["messages"] if m.get("role") in ("system", "developer")
    )


def tool_names(body: dict[str, Any]) -> list[str]:
    return sorted(t["function"]["name"] for t in body.get("tools") or [])


# a scripted step: the model asks for a regex search tool (pi's grep, inactive by default)
FIND_GREP = {
    "tool_calls": [
        {
            "name": "find_capability",
            "arguments": {"query": "search file contents for a regex pattern"},
        }
    ]
}


def rg_path_env() -> dict[str, str]:
    """PATH for pi with this venv's bin first: pi's grep tool runs `rg`, which the `ripgrep`
    dev dependency installs there (pi would otherwise try to download it, which fails offline).
    `make test` puts the venv on PATH too; this keeps a bare `pytest` run the same."""
    path = os.pathsep.join(
        [str(Path(sys.executable).parent), str(tools_bin_dir() or ""), os.environ.get("PATH", "")]
    )
    assert shutil.which("rg", path=path), "rg missing: pip install -e '.[dev]' (ripgrep wheel)"
    return {"PATH": path}


@pytest.mark.parametrize("pi", PI_VERSIONS)
def test_skills_leave_the_prompt_and_load_on_demand(pi: str, tmp_path: Path, xdg: Xdg) -> None:
    home = tmp_path / "home"
    make_skills(home)
    script = [
        {
            "tool_calls": [
                {"name": "find_capability", "arguments": {"query": "extract text from PDF files"}}
            ]
        },
        {"text": "done"},
    ]
    make_skills(tmp_path / "p" / "home")
    plain = run_ctxwrap_pi(
        pi, tmp_path / "p", xdg, script[1:], plain=True, home=tmp_path / "p" / "home"
    )
    assert "pdf-tools" in system_text(plain.main_bodies()[0])  # pi lists skills by default

    run = run_ctxwrap_pi(pi, tmp_path, xdg, script, home=home)
    assert run.proc.returncode == 0, run.proc.stderr
    bodies = run.main_bodies()
    for body in bodies:
        sys_text = system_text(body)
        assert "<available_skills>" not in sys_text and "pdf-tools" not in sys_text
    assert system_text(bodies[0]) == system_text(bodies[1])  # stable: byte-identical every call
    assert "find_capability" in tool_names(bodies[0])
    (result,) = tool_contents(bodies[1])
    assert "PDF-SKILL-BODY-MARKER" in result
    assert "name: pdf-tools" not in result  # frontmatter stripped
    skill_dir = home / ".pi" / "agent" / "skills" / "pdf-tools"
    assert str(skill_dir / "scripts" / "extract.py") in result  # relative path resolved


@pytest.mark.parametrize("pi", PI_VERSIONS)
def test_without_skills_no_tool_of_ctxwraps_rides_along(pi: str, tmp_path: Path, xdg: Xdg) -> None:
    """No skill left the prompt, so find_capability has nothing to find: it leaves before the
    first request, and the requests carry plain pi's tools and system prompt, the same at the
    second prompt (one settled head, no rewrite of the cached prefix)."""
    (tmp_path / "home").mkdir()
    plain = run_ctxwrap_pi(pi, tmp_path / "p", xdg, [{"text": "one"}], plain=True)
    run = run_ctxwrap_pi(pi, tmp_path, xdg, [{"text": "one"}, {"text": "two"}], args=("and again",))
    assert run.proc.returncode == 0, run.proc.stderr
    first, second = run.main_bodies()
    assert tool_names(first) == tool_names(second) == tool_names(plain.main_bodies()[0])
    assert "find_capability" not in tool_names(first) and "ctx_recall" not in tool_names(first)
    assert system_text(first) == system_text(second)


@pytest.mark.parametrize("pi", PI_VERSIONS)
def test_user_skill_command_still_works(pi: str, tmp_path: Path, xdg: Xdg) -> None:
    home = tmp_path / "home"
    make_skills(home)
    run = run_ctxwrap_pi(
        pi, tmp_path, xdg, [{"text": "ok"}], home=home, prompt="/skill:changelog summarise"
    )
    assert run.proc.returncode == 0, run.proc.stderr
    assert "CHANGELOG-SKILL-BODY" in json.dumps(run.main_bodies()[0]["messages"])


def test_grep_becomes_callable_within_the_prompt_on_pi_1x(tmp_path: Path, xdg: Xdg) -> None:
    make_skills(tmp_path / "home")  # find_capability rides only where skills left the prompt
    script = [
        FIND_GREP,
        {"tool_calls": [{"name": "grep", "arguments": {"pattern": "needle-[0-9]+", "path": "."}}]},
        {"text": "done"},
    ]
    run = run_ctxwrap_pi(
        "pi",
        tmp_path,
        xdg,
        script,
        files={"hay.txt": "x\nneedle-42\ny\n"},
        extra_env=rg_path_env(),
    )
    assert run.proc.returncode == 0, run.proc.stderr
    bodies = run.main_bodies()
    assert "grep" not in tool_names(bodies[0])
    assert "grep" in tool_names(bodies[1])  # activated within the same user prompt
    grep_out = tool_contents(bodies[2])[-1]
    assert "needle-42" in grep_out
    # One head change for the activation at most: pi 1.x appends a tool delta, the earlier
    # messages stay byte for byte.
    first = [json.dumps(m, sort_keys=True) for m in bodies[1]["messages"]]
    second = [json.dumps(m, sort_keys=True) for m in bodies[2]["messages"]]
    assert second[: len(first)] == first or second[1 : len(first)] == first[1:]


def test_grep_becomes_callable_from_the_next_prompt_on_pi_073(tmp_path: Path, xdg: Xdg) -> None:
    """0.73 applies setActiveTools at the next prompt: one head change, paid once."""
    make_skills(tmp_path / "home")  # find_capability rides only where skills left the prompt
    script = [
        FIND_GREP,
        {"text": "grep is ready"},
        {"tool_calls": [{"name": "grep", "arguments": {"pattern": "needle-[0-9]+", "path": "."}}]},
        {"text": "done"},
    ]
    run = run_ctxwrap_pi(
        "pi-0.73",
        tmp_path,
        xdg,
        script,
        files={"hay.txt": "x\nneedle-42\ny\n"},
        args=("now use it",),
        prompt="find a grep tool",
        extra_env=rg_path_env(),
    )
    assert run.proc.returncode == 0, run.proc.stderr
    bodies = run.main_bodies()
    assert len(bodies) == 4
    names = [tool_names(b) for b in bodies]
    assert "grep" not in names[0] and "grep" not in names[1]
    assert "grep" in names[2] and "grep" in names[3]
    assert "needle-42" in tool_contents(bodies[3])[-1]
    heads = [(system_text(b), names[i]) for i, b in enumerate(bodies)]
    changes = sum(1 for a, b in itertools.pairwise(heads) if a != b)
    assert changes == 1, "activation must cost exactly one head change"


def test_no_tool_is_added_mid_conversation_on_a_model_that_binds_thinking_to_the_tools(
    tmp_path: Path, xdg: Xdg
) -> None:
    """Claude Fable 5.1 and the 5.5 models bind each thinking block to the tool list it was
    written under: once the list changes, the API refuses the conversation's earlier
    reasoning (a 400) or drops it. Under such a model id find_capability names the tool and
    how to enable it, and the tool list stays as it was (pi 1.x would otherwise add it at
    the next request, as in the test above)."""
    make_skills(tmp_path / "home")  # find_capability rides only where skills left the prompt
    script = [
        FIND_GREP,
        {"text": "done"},
    ]
    run = run_ctxwrap_pi(
        "pi", tmp_path, xdg, script, extra_env=rg_path_env(), pi_model="claude-opus-5-5"
    )
    assert run.proc.returncode == 0, run.proc.stderr
    bodies = run.main_bodies()
    assert bodies[0]["model"] == "claude-opus-5-5"
    assert tool_names(bodies[1]) == tool_names(bodies[0]) and "grep" not in tool_names(bodies[1])
    answer = tool_contents(bodies[1])[-1]
    assert "Tool grep exists" in answer and "pi --tools +grep" in answer
