"""Small pure pieces: XDG paths, pi's bash text, heuristic facts, tag parsing, recall bounds."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ctxwrap import paths
from ctxwrap.aux.prompts import clean_fact, parse_tag
from ctxwrap.engine.bashout import scrub_temp_paths, split_bash_text
from ctxwrap.engine.facts import heuristic_fact
from ctxwrap.errors import SocketSecurityError
from ctxwrap.state.rawstore import RawStore
from ctxwrap.state.store import Store


def test_relative_or_empty_xdg_counts_as_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", "relative/dir")
    fallback = paths.runtime_dir()
    assert fallback.parent == Path("/tmp")
    assert fallback.name.startswith(f"ctxwrap-{os.getuid()}-")
    monkeypatch.setenv("XDG_RUNTIME_DIR", "")
    assert paths.runtime_dir() == fallback
    monkeypatch.setenv("XDG_STATE_HOME", "")
    assert paths.state_dir() == Path.home() / ".local/state/ctxwrap"
    monkeypatch.setenv("XDG_RUNTIME_DIR", "/run/user/7")
    assert paths.socket_path() == Path("/run/user/7/ctxwrap/daemon.sock")


def test_private_dir_refuses_symlinks_and_fixes_mode(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.mkdir()
    link = tmp_path / "link"
    link.symlink_to(target)
    with pytest.raises(SocketSecurityError):
        paths.ensure_private_dir(link)
    loose = tmp_path / "loose"
    loose.mkdir(mode=0o755)
    os.chmod(loose, 0o755)
    paths.ensure_private_dir(loose)
    assert loose.stat().st_mode & 0o777 == 0o700


def test_split_bash_text_both_pi_shapes() -> None:
    # pi 0.73, non-zero exit: path only inside the text
    t = split_bash_text(
        "1002\n3000\n\n\n[Showing lines 1002-3001 of 3001. Full output: /tmp/pi-bash-b2b870a71bd40def.log]\n\nCommand exited with code 3"
    )
    assert (t.body, t.full_output_path, t.exit_code) == (
        "1002\n3000",
        "/tmp/pi-bash-b2b870a71bd40def.log",
        3,
    )
    # pi 1.6, byte limit
    t = split_bash_text(
        "x\n\n[Showing lines 18001-20000 of 20000 (50.0KB limit). Full output: /tmp/pi-bash-0123456789abcdef.log]"
    )
    assert (t.body, t.exit_code) == ("x", None)
    assert t.full_output_path == "/tmp/pi-bash-0123456789abcdef.log"
    t = split_bash_text("partial\n\nCommand timed out after 5 seconds")
    assert t.timed_out and t.body == "partial"
    assert "pi-bash-" not in scrub_temp_paths("see /tmp/x/pi-bash-0123456789abcdef.log now")


def test_scrub_temp_paths_is_fast_on_long_unbroken_text() -> None:
    """A 100 KB aux answer without a space took the daemon 30 s of CPU in the regex (its
    `\\S*` backtracked over the whole run, from every position of it)."""
    import time

    for text in ("x" * 100_000, "pi-bash-" + "x" * 100_000):  # the second names one
        start = time.perf_counter()
        assert scrub_temp_paths(text) == text
        assert time.perf_counter() - start < 1.0
    # still every temp path, glued to whatever precedes it in its token
    glued = "a=/t/pi-bash-0123456789.log,b=/t/pi-bash-abcdef0123.log end"
    assert scrub_temp_paths(glued) == "[pi temp file] end"


def test_heuristic_fact_says_what_the_file_is() -> None:
    src = '"""Train a small CNN on CIFAR-10."""\nimport torch\n\nclass Net:\n    pass\n\ndef train():\n    pass\n'
    fact = heuristic_fact("src/model.py", src)
    assert fact.startswith("[Wrote src/model.py") and fact.endswith("]")
    assert "Train a small CNN" in fact and "Net" in fact and "train" in fact and "~8 lines" in fact
    assert "empty file" in heuristic_fact("e.txt", "")
    assert "binary" in heuristic_fact("b.bin", "\x00\x01\x02")
    assert len(heuristic_fact("x.py", "# " + "y" * 5000)) <= 240
    # a first comment that starts with the file's own name does not say it twice
    c_src = "/* parser.c — recursive-descent parser for the config language */\nint x;\n"
    assert heuristic_fact("src/parser.c", c_src).startswith(
        "[Wrote src/parser.c — recursive-descent parser for the config language — "
    )
    assert "— parser.c" in heuristic_fact("src/parser.c", "# parser.c\n")  # nothing else: kept


@pytest.mark.parametrize(
    ("answer", "tag"),
    [
        ('{"decision": "DROP"}', "DROP"),
        ('  {"decision":"DROP"}\n', "DROP"),
        ('{"decision": "RETAIN"}', "RETAIN"),
        ("DROP", "RETAIN"),
        ('{"decision": "drop"}', "RETAIN"),
        ('{"decision": "DROP", "why": 1}', "RETAIN"),
        ("", "RETAIN"),
        (None, "RETAIN"),
        ('Sure! {"decision": "DROP"}', "RETAIN"),
    ],
)
def test_only_an_exact_drop_drops(answer: str | None, tag: str) -> None:
    assert parse_tag(answer) == tag


def test_clean_fact_rejects_empty_or_long() -> None:
    assert clean_fact("CNN model, 3 layers\n", max_chars=100) == "CNN model, 3 layers"
    # A second line is commentary or prose, not the one line asked for (issue 12, finding 6).
    assert clean_fact("CNN model, 3 layers\nextra", max_chars=100) is None
    assert clean_fact("", max_chars=100) is None
    assert clean_fact("x" * 500, max_chars=100) is None


def test_recall_is_bounded_and_redacted(tmp_path: Path) -> None:
    store = Store(tmp_path / "db.sqlite")
    raw = RawStore(tmp_path / "raw", store, max_bytes=1 << 20, retention_days=7)
    lines = [f"line {i}" for i in range(1, 5001)] + [
        "token ghp_abcdefghijklmnopqrstuvwxyz0123456789"
    ]
    stored = raw.put_lines(
        iter(lines), session_id="s", tool_call_id="c", tool_name="bash", command="x"
    )
    assert stored.lines == 5001
    assert stored.handle and (raw.root / f"{stored.handle}.txt").stat().st_mode & 0o777 == 0o600
    hit = raw.recall(
        stored.handle,
        pattern=r"^line 42$",
        start_line=None,
        end_line=None,
        context_lines=1,
        max_chars=1000,
    )
    assert hit and hit.text == "41: line 41\n42: line 42\n43: line 43" and hit.matched_lines == 1
    every = raw.recall(
        stored.handle,
        pattern="line",
        start_line=None,
        end_line=None,
        context_lines=0,
        max_chars=2000,
    )
    assert every and every.truncated and len(every.text) <= 2000
    rng = raw.recall(
        stored.handle, pattern=None, start_line=10, end_line=12, context_lines=0, max_chars=2000
    )
    assert rng and rng.text == "10: line 10\n11: line 11\n12: line 12"
    secret = raw.path_of(stored.handle).read_text()  # type: ignore[union-attr]
    assert "ghp_abcdefghij" not in secret
    assert (
        raw.recall(
            "rnothere", pattern="x", start_line=None, end_line=None, context_lines=0, max_chars=10
        )
        is None
    )


def test_store_cap_evicts_oldest(tmp_path: Path) -> None:
    store = Store(tmp_path / "db.sqlite")
    raw = RawStore(tmp_path / "raw", store, max_bytes=30_000, retention_days=0)
    handles = [
        raw.put_text(
            "x" * 9000, session_id="s", tool_call_id=str(i), tool_name="bash", command=None
        ).handle
        for i in range(5)
    ]
    kept = [h for h in handles if raw.path_of(h) is not None]
    assert handles[-1] in kept and handles[0] not in kept
    assert sum((raw.root / f"{h}.txt").stat().st_size for h in kept) <= 30_000


def test_fallback_runtime_dir_names_the_state_dir(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 44 item 5; tests/node/socket.test.ts checks the bridge's copy against these."""
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    monkeypatch.setenv("HOME", "/home/x")
    assert paths.runtime_dir() == Path(f"/tmp/ctxwrap-{os.getuid()}-cceabc75fc")
    monkeypatch.setenv("XDG_STATE_HOME", "/s")
    assert paths.socket_path() == Path(f"/tmp/ctxwrap-{os.getuid()}-afb6669a3f/daemon.sock")


def test_doctor_names_an_older_daemon_on_the_shared_fallback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After the upgrade to a per-state-dir fallback, an older daemon at /tmp/ctxwrap-<uid>
    (locked pidfile: it runs) is talked to by nothing; doctor says so and how to stop it."""
    import fcntl

    from ctxwrap import doctor

    old = tmp_path / "ctxwrap-old"
    old.mkdir(mode=0o700)
    monkeypatch.setattr(doctor, "legacy_runtime_dir", lambda: old)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))
    assert doctor.check_legacy_daemon() is None  # no pidfile
    pidfile = old / "daemon.pid"
    pidfile.write_text("4242 0.9.0\n")
    assert doctor.check_legacy_daemon() is None  # not locked: no daemon behind it
    with open(pidfile) as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        check = doctor.check_legacy_daemon()
    assert check is not None and check.level == "warn"
    assert "pid 4242 (ctxwrap 0.9.0)" in check.summary and str(old) in check.summary
    assert check.fix is not None and check.fix.endswith("\n$ kill 4242")
    assert doctor.check_legacy_daemon() is None  # released
