"""`ctxwrap doctor` says whether Claude Code lets the model run `ctxwrap recall`.

The rule forms below that allow it were each checked against real Claude Code 2.1.197 in
`claude -p` (tests/e2e/test_claude_recall.py runs the recommended one end to end).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ctxwrap.agents.claude.doctor_check import RECALL_RULE, check_recall, recall_verdict


def allow(*rules: str, **more: Any) -> dict[str, Any]:
    return {"permissions": {"allow": list(rules), **more}}


@pytest.mark.parametrize(
    "rule",
    [
        RECALL_RULE,
        "Bash(ctxwrap recall *)",
        "Bash(ctxwrap:*)",
        "Bash(ctxwrap *)",
        "Bash(*)",
        "Bash",
        " Bash(ctxwrap recall:*) ",
        "Bash(ctxwrap * r*)",
    ],
)
def test_a_rule_that_takes_every_recall_allows_it(rule: str) -> None:
    assert recall_verdict([allow(rule)]) == ("allowed", rule)


@pytest.mark.parametrize(
    "rule",
    [
        "Bash(ctxwrap recall r1a2b3c4d:*)",  # one handle, not the next one
        "Bash(ctxwrap recall r1a2b3c4d)",  # exact: no pattern
        "Bash(ctxwrap show:*)",
        "Bash(ctxwrapper:*)",  # a word boundary after the prefix
        "Bash(ctxwrap recall)",
        "Bash(git:*)",
        "Read",
        "Bash(ctxwrap recall:*",  # unclosed: Claude Code ignores it
        "WebFetch(domain:ctxwrap recall)",
    ],
)
def test_a_rule_that_does_not_take_every_recall_leaves_it_unset(rule: str) -> None:
    assert recall_verdict([allow(rule)])[0] == "unset"


def test_deny_then_ask_then_allow_decide_in_claude_codes_order() -> None:
    user = allow(RECALL_RULE)
    assert recall_verdict([user, {"permissions": {"deny": ["Bash(ctxwrap:*)"]}}]) == (
        "denied",
        "Bash(ctxwrap:*)",
    )
    # one recall form is enough to be asked or refused
    asks = {"permissions": {"ask": ["Bash(ctxwrap recall r1a2b3c4d)"]}}
    assert recall_verdict([user, asks]) == ("asks", "Bash(ctxwrap recall r1a2b3c4d)")
    assert recall_verdict([asks, {"permissions": {"deny": ["Bash"]}}])[0] == "denied"


def test_the_mode_decides_when_no_rule_does() -> None:
    assert recall_verdict([]) == ("unset", "default")
    assert recall_verdict([{"permissions": {"defaultMode": "bypassPermissions"}}]) == (
        "mode",
        "bypassPermissions",
    )
    # a later layer's mode wins; an ask rule still asks under it
    later = [{"permissions": {"defaultMode": "bypassPermissions"}}, {"permissions": {}}]
    assert recall_verdict(later)[0] == "mode"
    accept = [{"permissions": {"defaultMode": "bypassPermissions"}}, allow(defaultMode="plan")]
    assert recall_verdict(accept) == ("unset", "plan")
    assert recall_verdict([allow(defaultMode="auto")])[0] == "mode"
    odd = [{"permissions": "all"}, {"permissions": {"allow": "Bash", "deny": [3]}}]
    assert recall_verdict(odd) == ("unset", "default")


def test_an_unreadable_settings_file_is_said_not_guessed() -> None:
    assert recall_verdict([allow(RECALL_RULE), None])[0] == "unreadable"


def test_doctor_reads_the_settings_claude_code_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("CLAUDE_CONFIG_DIR", raising=False)
    project = tmp_path / "repo"
    (project / ".git").mkdir(parents=True)
    sub = project / "src"
    sub.mkdir()
    warn = check_recall(sub)
    assert warn.level == "warn" and "claude -p" in warn.summary
    assert warn.fix is not None and f'"{RECALL_RULE}"' in warn.fix
    # what "don't ask again" writes: the project's local settings, found from a subfolder
    (project / ".claude").mkdir()
    (project / ".claude" / "settings.local.json").write_text(json.dumps(allow(RECALL_RULE)))
    ok = check_recall(sub)
    assert ok.level == "ok" and RECALL_RULE in ok.summary
    # the user's settings can deny it
    (tmp_path / "home" / ".claude").mkdir(parents=True)
    denied = allow(deny=["Bash(ctxwrap recall:*)"])
    (tmp_path / "home" / ".claude" / "settings.json").write_text(json.dumps(denied))
    assert check_recall(sub).level == "warn" and "denies" in check_recall(sub).summary
    dont_ask = {"permissions": {"defaultMode": "dontAsk"}}
    (tmp_path / "home" / ".claude" / "settings.json").write_text(json.dumps(dont_ask))
    (project / ".claude" / "settings.local.json").write_text("{}")
    assert "mode dontAsk refuses" in check_recall(sub).summary
    (tmp_path / "home" / ".claude" / "settings.json").write_text("{not json")
    assert "unreadable" in check_recall(sub).summary
