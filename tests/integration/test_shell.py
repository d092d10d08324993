"""The shell integration, run in real bash, zsh and fish.

Each test writes the script `ctxwrap init <shell>` prints and drives an interactive shell
(`-i`) with a snippet; the shells run with no rc files and with XDG dirs under tmp.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import isolated_env

from ctxwrap.shell import render_init_script

SHELLS = ("bash", "zsh", "fish")
# How each shell is started bare and interactive, and how it reads a file into itself.
ARGV = {
    "bash": ["bash", "--norc", "--noprofile", "-i", "-c"],
    "zsh": ["zsh", "-f", "-i", "-c"],
    "fish": ["fish", "--no-config", "-i", "-c"],
}
STATUS = {"bash": "$?", "zsh": "$?", "fish": "$status"}


def ctxwrap_argv() -> list[str]:
    script = Path(sys.executable).parent / "ctxwrap"
    return [str(script)] if script.exists() else [sys.executable, "-m", "ctxwrap"]


@pytest.fixture
def env(tmp_path: Path) -> Iterator[dict[str, str]]:
    (tmp_path / "home").mkdir()
    with isolated_env(tmp_path, XDG_DATA_HOME=str(tmp_path / "data"), TERM="dumb") as e:
        yield e


def need(shell: str) -> None:
    if shutil.which(shell) is None:
        pytest.skip(f"{shell} is not installed (apt-get install -y {shell})")


def init_script(shell: str, env: dict[str, str], tmp_path: Path) -> Path:
    """What `ctxwrap init <shell>` prints, saved to a file (the real CLI, not a render call)."""
    out = subprocess.run(
        [*ctxwrap_argv(), "init", shell], env=env, capture_output=True, text=True, check=True
    ).stdout
    path = tmp_path / f"init.{shell}"
    path.write_text(out)
    return path


def run(shell: str, snippet: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*ARGV[shell], snippet],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        check=False,
    )


def stderr_noise(shell: str, stderr: str) -> str:
    """stderr without what an interactive shell without a terminal always says."""
    skip = ("cannot set terminal process group", "no job control", "can't change option: zle")
    return "\n".join(ln for ln in stderr.splitlines() if ln and not any(s in ln for s in skip))


@pytest.mark.parametrize("shell", SHELLS)
def test_init_prints_the_script_with_this_ctxwrap(
    shell: str, env: dict[str, str], tmp_path: Path
) -> None:
    need(shell)
    text = init_script(shell, env, tmp_path).read_text()
    assert "__ctxwrap_loaded" in text
    bin_line = next(ln for ln in text.splitlines() if "__ctxwrap_bin" in ln and "ctxwrap" in ln)
    assert "/" in bin_line, f"self path is not absolute: {bin_line}"


@pytest.mark.parametrize("shell", SHELLS)
def test_sourcing_twice_is_harmless_and_keeps_status(
    shell: str, env: dict[str, str], tmp_path: Path
) -> None:
    need(shell)
    script = init_script(shell, env, tmp_path)
    s = STATUS[shell]
    snippet = (
        f"false; source {script}; echo first={s}; "
        f"false; source {script}; echo second={s}; "
        "echo loaded=$__ctxwrap_loaded"
    )
    done = run(shell, snippet, env)
    assert "first=1" in done.stdout, done.stdout + done.stderr
    assert "second=1" in done.stdout, done.stdout + done.stderr
    assert "loaded=1" in done.stdout
    assert stderr_noise(shell, done.stderr) == ""


@pytest.mark.parametrize("shell", SHELLS)
def test_non_interactive_shell_gets_nothing(
    shell: str, env: dict[str, str], tmp_path: Path
) -> None:
    need(shell)
    script = init_script(shell, env, tmp_path)
    argv = [a for a in ARGV[shell] if a != "-i"]
    check = {
        "bash": "type -t ctxwrap_prompt_segment || echo absent",
        "zsh": "whence -w ctxwrap_prompt_segment",
        "fish": "functions -q ctxwrap_prompt_segment; or echo absent",
    }[shell]
    done = subprocess.run(
        [*argv, f"false; source {script}; echo rc={STATUS[shell]}; {check}"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert "rc=1" in done.stdout
    assert "absent" in done.stdout or "none" in done.stdout, done.stdout


def completions(shell: str, line: str, env: dict[str, str], script: Path) -> list[str]:
    """Candidates for `line` through each shell's own completion registration."""
    if shell == "bash":
        words = line.split(" ")
        snippet = (
            f"source {script}; spec=$(complete -p ctxwrap); "
            "fn=${spec#*-F }; fn=${fn%% *}; "
            f"COMP_WORDS=({' '.join(repr(w) for w in words)}); COMP_CWORD={len(words) - 1}; "
            'COMP_LINE="${COMP_WORDS[*]}"; COMP_POINT=${#COMP_LINE}; '
            '"$fn" ctxwrap "${COMP_WORDS[-1]}"; printf "%s\\n" "${COMPREPLY[@]}"'
        )
    elif shell == "zsh":
        words = line.split(" ")
        # compinit registers `_ctxwrap` in $_comps; the test calls what the widget would.
        snippet = (
            "autoload -U compinit; compinit -u -d $HOME/.zcompdump; "
            f"source {script}; print -r -- comp=$_comps[ctxwrap]; "
            f"__ctxwrap_candidates {line!r} {len(words) - 1}; "
            "print -rl -- $__ctxwrap_plain ${__ctxwrap_described%%:*}"
        )
    else:
        snippet = f"source {script}; complete -C {line!r}"
    done = run(shell, snippet, env)
    assert stderr_noise(shell, done.stderr) == "", done.stderr
    out = done.stdout.splitlines()
    if shell == "zsh":
        assert out and out[0] == "comp=_ctxwrap", done.stdout
        out = out[1:]
    return [ln.split("\t")[0] for ln in out if ln]


@pytest.mark.parametrize("shell", SHELLS)
def test_completion_of_commands(shell: str, env: dict[str, str], tmp_path: Path) -> None:
    need(shell)
    script = init_script(shell, env, tmp_path)
    got = completions(shell, "ctxwrap st", env, script)
    assert "status" in got, got
    assert all(c.startswith("st") for c in got), got
    sub = completions(shell, "ctxwrap daemon s", env, script)
    assert {"start", "status", "stop"} <= set(sub), sub
    shells = completions(shell, "ctxwrap init ", env, script)
    assert {"bash", "zsh", "fish"} <= set(shells), shells


@pytest.mark.parametrize("shell", SHELLS)
def test_completion_of_claude_hook_and_recall(
    shell: str, env: dict[str, str], tmp_path: Path
) -> None:
    need(shell)
    script = init_script(shell, env, tmp_path)
    assert completions(shell, "ctxwrap cl", env, script) == ["claude"]
    assert completions(shell, "ctxwrap rec", env, script) == ["recall"]
    top = completions(shell, "ctxwrap ", env, script)
    assert {"pi", "claude", "hook", "recall"} <= set(top), top
    hooks = completions(shell, "ctxwrap hook ", env, script)
    assert hooks == ["claude"], hooks


def test_zsh_registers_completion_when_compinit_runs_later(
    env: dict[str, str], tmp_path: Path
) -> None:
    need("zsh")
    script = init_script("zsh", env, tmp_path)
    snippet = (
        f"source {script}; autoload -U compinit; compinit -u -d $HOME/.zcompdump; "
        "for f in $precmd_functions; do $f; done; "  # what the next prompt does
        "print -r -- comp=$_comps[ctxwrap] hooks=${(j:,:)precmd_functions}"
    )
    done = run("zsh", snippet, env)
    assert "comp=_ctxwrap hooks=" in done.stdout, done.stdout + done.stderr
    assert "__ctxwrap_compdef" not in done.stdout  # the one-shot hook removed itself


# The wrapped agents, their opt-in variable and the exit status of their fake plain binary.
AGENTS = {"pi": ("CTXWRAP_WRAP_PI", 5), "claude": ("CTXWRAP_WRAP_CLAUDE", 4)}


def fake_bins(tmp_path: Path) -> tuple[Path, Path]:
    """A fake ctxwrap (status 7) and fake plain agents (pi: 5, claude: 4) that say how they
    were called; the fake ctxwrap lives outside PATH, as `ctxwrap init`'s absolute path may."""
    bindir = tmp_path / "fakebin"
    bindir.mkdir()
    selfdir = tmp_path / "fakeself"
    selfdir.mkdir()
    fake_ctxwrap = selfdir / "fake-ctxwrap"
    fake_ctxwrap.write_text('#!/bin/sh\necho "via-ctxwrap $*"\nexit 7\n')
    fakes = [fake_ctxwrap]
    for agent, (_, code) in AGENTS.items():
        fake = bindir / agent
        fake.write_text(f'#!/bin/sh\necho "plain-{agent} $*"\nexit {code}\n')
        fakes.append(fake)
    for f in fakes:
        f.chmod(0o755)
    return bindir, fake_ctxwrap


def _set(shell: str, name: str, value: str) -> str:
    return f"set {name} {value}" if shell == "fish" else f"{name}={value}"


@pytest.mark.parametrize("agent", sorted(AGENTS))
@pytest.mark.parametrize("shell", SHELLS)
def test_agent_is_wrapped_only_when_opted_in(
    shell: str, agent: str, env: dict[str, str], tmp_path: Path
) -> None:
    need(shell)
    var, plain_rc = AGENTS[agent]
    bindir, fake_ctxwrap = fake_bins(tmp_path)
    script = tmp_path / f"init.{shell}"
    script.write_text(render_init_script(shell, str(fake_ctxwrap)))
    env = {**env, "PATH": f"{bindir}{os.pathsep}{env['PATH']}"}
    s = STATUS[shell]
    snippet = f"source {script}; {agent} --model 'a b'; echo rc={s}"

    plain = run(shell, snippet, env)
    assert f"plain-{agent} --model a b" in plain.stdout, plain.stdout + plain.stderr
    assert f"rc={plain_rc}" in plain.stdout, plain.stdout

    wrapped = run(shell, snippet, {**env, var: "1"})
    assert f"via-ctxwrap {agent} --model a b" in wrapped.stdout, wrapped.stdout + wrapped.stderr
    assert "rc=7" in wrapped.stdout  # ctxwrap's (the agent's) exit status comes through
    assert stderr_noise(shell, wrapped.stderr) == ""

    # `command <agent>` skips the wrapper
    direct = run(shell, f"source {script}; command {agent} x; echo rc={s}", {**env, var: "1"})
    assert f"plain-{agent} x" in direct.stdout and f"rc={plain_rc}" in direct.stdout, direct.stdout

    # switched off later in the session: the plain agent again, without re-sourcing
    later = run(
        shell, f"source {script}; {_set(shell, var, '0')}; {agent}; echo rc={s}", {**env, var: "1"}
    )
    assert f"plain-{agent}" in later.stdout and f"rc={plain_rc}" in later.stdout, later.stdout

    # the ctxwrap that printed the script is gone: the plain agent, no error
    fake_ctxwrap.unlink()
    gone = run(shell, snippet, {**env, var: "1"})
    assert f"plain-{agent} --model a b" in gone.stdout, gone.stdout + gone.stderr
    assert f"rc={plain_rc}" in gone.stdout
    assert stderr_noise(shell, gone.stderr) == ""


@pytest.mark.parametrize("shell", SHELLS)
def test_wrappers_are_independent_and_register_once(
    shell: str, env: dict[str, str], tmp_path: Path
) -> None:
    """Only the opted-in agent is wrapped; a second `source` (here with the other variable
    set) is a no-op and keeps `$?`; a non-interactive shell gets no wrapper at all."""
    need(shell)
    bindir, fake_ctxwrap = fake_bins(tmp_path)
    script = tmp_path / f"init.{shell}"
    script.write_text(render_init_script(shell, str(fake_ctxwrap)))
    env = {**env, "PATH": f"{bindir}{os.pathsep}{env['PATH']}", "CTXWRAP_WRAP_CLAUDE": "1"}
    s = STATUS[shell]
    snippet = (
        f"source {script}; {_set(shell, 'CTXWRAP_WRAP_PI', '1')}; "
        f"false; source {script}; echo again={s}; "
        f"claude; echo rc={s}; pi; echo rc={s}"
    )
    done = run(shell, snippet, env)
    out = done.stdout.splitlines()
    assert out == ["again=1", "via-ctxwrap claude", "rc=7", "plain-pi ", "rc=5"], done.stdout
    assert stderr_noise(shell, done.stderr) == ""

    argv = [a for a in ARGV[shell] if a != "-i"]
    bare = subprocess.run(
        [*argv, f"source {script}; claude; echo rc={s}"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert bare.stdout.splitlines() == ["plain-claude ", "rc=4"], bare.stdout + bare.stderr


@pytest.mark.parametrize("shell", SHELLS)
def test_prompt_segment_reads_the_cache_file_only(
    shell: str, env: dict[str, str], tmp_path: Path
) -> None:
    need(shell)
    script = init_script(shell, env, tmp_path)
    s = STATUS[shell]
    # No daemon is running and PATH is empty: only builtins can work, which is the point.
    snippet = f"source {script}; PATH=/nonexistent; false; ctxwrap_prompt_segment; echo '|'rc={s}"
    if shell == "fish":
        snippet = snippet.replace("PATH=/nonexistent", "set PATH /nonexistent")
    empty = run(shell, snippet, env)
    assert empty.stdout.strip().endswith("|rc=1"), empty.stdout + empty.stderr
    assert empty.stdout.strip() == "|rc=1"
    assert stderr_noise(shell, empty.stderr) == ""

    seg = Path(env["XDG_STATE_HOME"]) / "ctxwrap" / "prompt-segment"
    seg.parent.mkdir(parents=True)
    seg.write_text("ctx -41% \x1b[31m12.3k saved\n" + "second line\n")
    shown = run(shell, snippet, env)
    assert "ctx -41% [31m12.3k saved|rc=1" in shown.stdout, repr(shown.stdout)
    assert "\x1b" not in shown.stdout and "second line" not in shown.stdout


@pytest.mark.parametrize("shell", SHELLS)
def test_prompt_segment_respects_relative_xdg_state_home(
    shell: str, env: dict[str, str], tmp_path: Path
) -> None:
    need(shell)
    script = init_script(shell, env, tmp_path)
    home_seg = Path(env["HOME"]) / ".local/state/ctxwrap/prompt-segment"
    home_seg.parent.mkdir(parents=True)
    home_seg.write_text("from-home\n")
    done = run(shell, f"source {script}; ctxwrap_prompt_segment", {**env, "XDG_STATE_HOME": "rel"})
    assert done.stdout == "from-home", done.stdout


def test_write_prompt_segment_is_what_the_shell_reads(
    env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ctxwrap.statusline import prompt_segment_path, write_prompt_segment

    monkeypatch.setenv("XDG_STATE_HOME", env["XDG_STATE_HOME"])
    write_prompt_segment("ctx -12%\nignored")
    assert prompt_segment_path() == Path(env["XDG_STATE_HOME"]) / "ctxwrap" / "prompt-segment"
    assert prompt_segment_path().read_text() == "ctx -12%\n"
    need("bash")
    script = init_script("bash", env, tmp_path)
    done = run("bash", f"source {script}; ctxwrap_prompt_segment", env)
    assert done.stdout == "ctx -12%"


@pytest.mark.parametrize("shell", ["bash", "zsh"])
def test_tab_completes_in_a_terminal(shell: str, env: dict[str, str], tmp_path: Path) -> None:
    """Real keypresses on a PTY: `ctxwrap statu<TAB>` completes, `ctxwrap st<TAB>` stops at `stat`."""
    need(shell)
    pexpect = pytest.importorskip("pexpect")
    script = init_script(shell, env, tmp_path)
    if shell == "zsh":
        rc = tmp_path / ".zshrc"
        rc.write_text(
            f"autoload -U compinit; compinit -u -d $HOME/.zcompdump\nsource {script}\nPS1='READY> '\n"
        )
        env = {**env, "ZDOTDIR": str(tmp_path)}
        argv = ["zsh", "-i"]
    else:
        rc = tmp_path / ".bashrc"
        rc.write_text(f"source {script}\nPS1='READY> '\n")
        argv = ["bash", "--noprofile", "--rcfile", str(rc), "-i"]
    child = pexpect.spawn(
        argv[0], argv[1:], env=env, encoding="utf-8", timeout=20, dimensions=(24, 200)
    )
    try:
        child.expect("READY> ")
        child.send("ctxwrap statu\t")
        child.expect("s ")  # the line editor completed `status` and added a space
        child.send("\x15ctxwrap st\t")
        child.expect("at")  # only the common part of stats/status: both were offered
        if shell == "zsh":
            child.send("\t")  # zsh lists the candidates, with their help, on the next TAB
            child.expect("status")
        child.send("\x15")  # Ctrl+U: drop the line, run nothing
    finally:
        child.close(force=True)


@pytest.mark.parametrize("shell", SHELLS)
def test_an_alias_named_like_the_agent_does_not_break_the_script(
    shell: str, env: dict[str, str], tmp_path: Path
) -> None:
    """Claude Code's local install puts `alias claude=~/.claude/local/claude` in the rc file,
    often above our line: the script still loads whole and keeps `$?`; once the alias is gone
    the wrapper is there (fish's `alias` is a function, which the wrapper replaces)."""
    need(shell)
    bindir, fake_ctxwrap = fake_bins(tmp_path)
    script = tmp_path / f"init.{shell}"
    script.write_text(render_init_script(shell, str(fake_ctxwrap)))
    env = {
        **env,
        "PATH": f"{bindir}{os.pathsep}{env['PATH']}",
        "CTXWRAP_WRAP_CLAUDE": "1",
        "CTXWRAP_WRAP_PI": "1",
    }
    s = STATUS[shell]
    unalias = "" if shell == "fish" else "unalias claude pi\n"
    snippet = (
        "alias claude=/bin/echo\nalias pi=/bin/echo\n"
        f"false; source {script}; echo rc={s}\n"
        f"{unalias}claude x; pi y; ctxwrap_prompt_segment; echo segment={s}\n"
    )
    done = run(shell, snippet, env)
    out = done.stdout.splitlines()
    assert out == ["rc=1", "via-ctxwrap claude x", "via-ctxwrap pi y", "segment=7"], (
        done.stdout + done.stderr
    )
    assert stderr_noise(shell, done.stderr) == ""
