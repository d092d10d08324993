"""The shell prompt's savings segment, end to end: a real daemon writes it at turn end, a real
interactive bash with shell/ctxwrap.bash prints it, and it is cleared when the last live session
ends. The prompt itself never calls ctxwrap: it only reads the file the daemon leaves.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import httpx
import pytest
from support import Xdg, client, daemon_process

from ctxwrap import protocol as P
from ctxwrap.headline import pct_text
from ctxwrap.statusline import prompt_segment_text

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "shell" / "ctxwrap.bash"


def _segment_file(xdg: Xdg) -> Path:
    return xdg.state / "ctxwrap" / "prompt-segment"


def _start(c: httpx.Client, sid: str, cwd: Path) -> None:
    r = c.post("/v1/sessions/start", json={"session_id": sid, "cwd": str(cwd), "pid": os.getpid()})
    assert r.status_code == 200, r.text


def _llm_call(c: httpx.Client, sid: str, index: int, saved_bash: int) -> None:
    r = c.post(
        "/v1/llm_call",
        json={
            "session_id": sid,
            "call_index": index,
            "message_count": 4,
            "sent_chars": {"system": 4000, "messages": 8000, "tools": 2000},
            "saved_chars": {"bash": saved_bash},
        },
    )
    assert r.status_code == 200, r.text


def _turn_end(c: httpx.Client, sid: str, index: int) -> dict[str, object]:
    r = c.post(
        "/v1/turn_end",
        json={"session_id": sid, "turn_index": index, "input_tokens": 3500, "output_tokens": 80},
    )
    assert r.status_code == 200, r.text
    return dict(r.json()["totals"])


def _bash_segment(xdg: Xdg, home: Path) -> subprocess.CompletedProcess[str]:
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("no bash")
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "XDG_STATE_HOME": str(xdg.state),
        "TERM": "dumb",
    }
    # -i: the script only loads in interactive shells; --norc keeps the developer's rc out.
    return subprocess.run(
        [bash, "--norc", "-i", "-c", f'source "{SCRIPT}"; ctxwrap_prompt_segment; echo "|rc=$?"'],
        env=env,
        capture_output=True,
        text=True,
        timeout=20,
        stdin=subprocess.DEVNULL,
    )


def test_daemon_writes_segment_at_turn_end_and_bash_prints_it(xdg: Xdg, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    with daemon_process(xdg), client(xdg) as c:
        _start(c, "seg-a", tmp_path)
        assert not _segment_file(xdg).exists() or _segment_file(xdg).read_text().strip() == ""

        # 49,200 chars kept out of one request = 12,300 tokens; no aux calls, so net = saved.
        _llm_call(c, "seg-a", 0, 49_200)
        totals = _turn_end(c, "seg-a", 0)
        assert totals["net_tokens"] == 12_300
        # then the session's headline cost figure, as `ctxwrap stats` shows it
        cost = f" cost {pct_text(totals['headline_pct'])}"
        assert _segment_file(xdg).read_text(encoding="utf-8") == f"ctxwrap ↓12.3k{cost}\n"

        out = _bash_segment(xdg, home)
        assert out.stdout == f"ctxwrap ↓12.3k{cost}|rc=0\n", out

        # The next turn updates it (cumulative for the session).
        _llm_call(c, "seg-a", 1, 8_000)
        cost = f" cost {pct_text(_turn_end(c, 'seg-a', 1)['headline_pct'])}"
        assert _segment_file(xdg).read_text(encoding="utf-8") == f"ctxwrap ↓14.3k{cost}\n"

        # A second live session: the latest turn end wins; ending one session keeps the line.
        _start(c, "seg-b", tmp_path)
        _llm_call(c, "seg-b", 0, 2_000)
        cost = f" cost {pct_text(_turn_end(c, 'seg-b', 0)['headline_pct'])}"
        assert _segment_file(xdg).read_text(encoding="utf-8") == f"ctxwrap ↓500{cost}\n"
        r = c.post("/v1/sessions/shutdown", json={"session_id": "seg-b"})
        assert r.status_code == 200, r.text
        assert _segment_file(xdg).read_text(encoding="utf-8") == f"ctxwrap ↓500{cost}\n"

        # The last live session ends: the segment is cleared and the prompt prints nothing.
        r = c.post("/v1/sessions/shutdown", json={"session_id": "seg-a"})
        assert r.status_code == 200, r.text
        assert _segment_file(xdg).read_text(encoding="utf-8") == "\n"
        out = _bash_segment(xdg, home)
        assert out.stdout == "|rc=0\n", out


def test_segment_text_shows_costs_and_scales() -> None:
    def seg(net: int, calls: int = 1) -> str:
        return prompt_segment_text(P.SessionTotals(llm_calls=calls, net_tokens=net))

    assert seg(0, calls=0) == ""  # nothing sent yet: no claim either way
    assert seg(999) == "ctxwrap ↓999"
    assert seg(12_345) == "ctxwrap ↓12.3k"
    assert seg(2_500_000) == "ctxwrap ↓2.5M"
    assert seg(-1_200) == "ctxwrap ↑1.2k"  # honest numbers: a net cost shows as a cost
    priced = P.SessionTotals(llm_calls=3, net_tokens=12_345, headline_pct=-4)
    assert prompt_segment_text(priced) == "ctxwrap ↓12.3k cost +4%"
