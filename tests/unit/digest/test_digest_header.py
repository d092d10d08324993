"""The digest's first line reads well in an agent's collapsed view; a digest replaces an
output only when it is clearly smaller."""

from __future__ import annotations

import pytest

from ctxwrap.mechanisms.digest import DIGEST_MAX_SHARE, clearly_smaller, digest_header
from ctxwrap.paths import ctxwrap_program
from ctxwrap.protocol import AgentProfile, profile_of
from ctxwrap.state.session import recall_call

WITH_TOOL = AgentProfile(recall_tool=True)  # pi without bash: ctx_recall


def header(
    command: str = "sh ./build.sh",
    handle: str | None = "r50db904d",
    profile: AgentProfile = WITH_TOOL,
):
    return digest_header(
        command=command,
        status="exit code 1",
        lines=20006,
        chars=667198,
        handle=handle,
        recall=recall_call(profile, handle) if handle else None,
    ).split("\n")


def test_first_line_says_what_happened_and_how_a_person_sees_it_all() -> None:
    first, second = header()
    assert first == (
        "$ sh ./build.sh → exit code 1 · 20,006 lines (667,198 chars) digested by ctxwrap"
        " · full output: ctxwrap show r50db904d"
    )
    # The model learns the output is out of context and how to search it.
    assert second == (
        '[ctxwrap: the raw output is not in context. Search it with ctx_recall(handle="r50db904d",'
        " pattern=...)]"
    )


@pytest.mark.parametrize("agent", ["pi", "claude", "codex"])
def test_a_model_with_a_shell_is_pointed_at_the_recall_command(agent: str) -> None:
    # Codex's shell may not find `ctxwrap` by name: this install by its path
    program = ctxwrap_program() if agent == "codex" else "ctxwrap"
    assert f"`{program} recall r50db904d PATTERN`" in header(profile=profile_of(agent))[1]


def test_a_long_or_multi_line_command_is_cut_in_the_first_line_and_given_whole_below() -> None:
    command = "pytest -q " + " ".join(f"tests/test_module_{i}.py" for i in range(20))
    first, full, _ = header(command)
    assert first.startswith("$ pytest -q tests/test_module_0.py") and "…" in first
    assert len(first.split(" → ")[0]) <= 82 and full == "$ " + command[:300]
    first, *rest = header("cat <<EOF > x\nhello\nEOF")
    assert first.startswith("$ cat <<EOF > x → exit code 1")
    assert "\n".join(rest).startswith("$ cat <<EOF > x\nhello\nEOF\n[ctxwrap: the raw")


def test_without_a_handle_nobody_is_told_to_recall() -> None:
    first, second = header(handle=None)
    assert first.endswith("· full output not kept (disk full)")
    assert "no recall" in second and "ctx_recall" not in second


@pytest.mark.parametrize(
    ("digest", "original", "kept"),
    [(900, 2000, True), (1000, 2000, True), (1001, 2000, False), (7000, 8000, False)],
)
def test_a_digest_replaces_only_what_it_clearly_shrinks(
    digest: int, original: int, kept: bool
) -> None:
    assert DIGEST_MAX_SHARE == 0.5
    assert clearly_smaller(digest, original) is kept
