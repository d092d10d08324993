"""Family choice from the command line and from the output, and rules without a corpus file."""

from __future__ import annotations

import pytest

from ctxwrap.digest import StreamingDigester, digest_bash_output
from ctxwrap.digest._command import family_for_command, family_for_output, program_and_args
from ctxwrap.digest.families.git import GitDiffFamily


@pytest.mark.parametrize(
    ("command", "family"),
    [
        ("pytest -x tests/", "pytest"),
        ("python -m pytest -q", "pytest"),
        ("python3.11 -m pytest", "pytest"),
        ("uv run pytest -k foo", "pytest"),
        ("cd api && PYTHONPATH=. timeout 60 pytest 2>&1 | tail -50", "pytest"),
        ("python -m unittest discover", "unittest"),
        ("cargo test --workspace", "cargo"),
        ("cargo build --release", "cargo"),
        ("go test ./...", "go"),
        ("npm run build", "npm"),
        ("pnpm install", "npm"),
        ("npx tsc --noEmit", "tsc"),
        ("npx eslint src", "eslint"),
        ("make -j8", "cc"),
        ("gcc -o app main.c", "cc"),
        ("pip install -r requirements.txt", "pip"),
        ("uv pip install requests", "pip"),
        ("git --no-pager log -n 5", "git-log"),
        ("git -C repo diff HEAD~1", "git-diff"),
        ("git status", "git-status"),
        ("git grep -n TODO", "grep"),
        ("docker build -t app .", "docker"),
        ("docker buildx build .", "docker"),
        ("find . -name '*.py'", "find"),
        ("ls -laR", "ls"),
        ("tree -L 2", "tree"),
        ("rg -n foo", "grep"),
        ("sudo grep -rn 'a|b' /etc", "grep"),
        ("npm install && npm test", "npm"),
        ("make && ./app", "cc"),
    ],
)
def test_family_from_command(command: str, family: str) -> None:
    chosen = family_for_command(command)
    assert chosen is not None and chosen.name == family


@pytest.mark.parametrize("command", ["./run.sh", "echo hi", "", "cat 'unbalanced", "python x.py"])
def test_unknown_commands_are_sniffed_later(command: str) -> None:
    assert family_for_command(command) is None


def test_program_and_args_strips_wrappers() -> None:
    assert program_and_args("FOO=1 sudo -E nice timeout -s KILL 30 pytest -q") == (
        "pytest",
        ["-q"],
    )
    assert program_and_args("poetry run python -m pytest") == ("pytest", [])


@pytest.mark.parametrize(
    ("sample", "family"),
    [
        ("============================= test session starts ====\n", "pytest"),
        ("   Compiling foo v0.1.0\nerror[E0308]: mismatched types\n", "cargo"),
        ("=== RUN   TestX\n--- FAIL: TestX (0.00s)\n", "go"),
        ("src/a.ts(1,2): error TS2322: nope\n", "tsc"),
        ("a.c:1:2: error: x\n", "cc"),
        ("npm error code E404\n", "npm"),
        ("diff --git a/x b/x\n", "git-diff"),
        ("#1 [internal] load build definition from Dockerfile\n", "docker"),
        ("hello\nworld\n", "generic"),
    ],
)
def test_family_from_output(sample: str, family: str) -> None:
    assert family_for_output(sample).name == family


# Hand-written in BuildKit's format: no docker engine was available to capture a real one.
_DOCKER_BUILD = """\
#0 building with "default" instance using docker driver
#1 [internal] load build definition from Dockerfile
#1 transferring dockerfile: 212B done
#1 DONE 0.0s
#5 [2/4] RUN apt-get update
#5 CACHED
#6 [3/4] RUN pip install -r requirements.txt
#6 1.203 Collecting flask==9.9
#6 2.110 ERROR: Could not find a version that satisfies the requirement flask==9.9
#6 2.111 ERROR: No matching distribution found for flask==9.9
#6 ERROR: process "/bin/sh -c pip install -r requirements.txt" did not complete successfully: exit code: 1
------
 > [3/4] RUN pip install -r requirements.txt:
2.111 ERROR: No matching distribution found for flask==9.9
------
Dockerfile:4
--------------------
   3 |     COPY requirements.txt .
   4 | >>> RUN pip install -r requirements.txt
   5 |     COPY . .
--------------------
ERROR: failed to solve: process "/bin/sh -c pip install -r requirements.txt" did not complete successfully: exit code: 1
"""


def test_docker_build_keeps_the_failing_step() -> None:
    noise = "".join(f"#6 {n}.0 downloading layer {n}\n" for n in range(500))
    output = _DOCKER_BUILD.replace("#6 1.203", noise + "#6 1.203")
    digest = digest_bash_output(output, command="docker build -t app .", exit_code=1)
    assert digest.family == "docker"
    for line in (
        "#6 [3/4] RUN pip install -r requirements.txt",
        "No matching distribution found for flask==9.9",
        ">>> RUN pip install -r requirements.txt",
        "Dockerfile:4",
        "ERROR: failed to solve: process",
    ):
        assert line in digest.text
    assert len(digest.text) < len(output) / 5


def test_a_family_bug_falls_back_to_generic(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken_scan(self: GitDiffFamily, block: str) -> None:
        raise ValueError("bug")

    monkeypatch.setattr(GitDiffFamily, "scan", broken_scan)
    output = "diff --git a/x b/x\n" + "+added\n" * 100 + "error: something\n"
    digest = digest_bash_output(output, command="git diff", exit_code=0)
    assert digest.family == "generic"
    assert "error: something" in digest.text


def test_a_summary_bug_falls_back_to_generic(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken_summary(self: GitDiffFamily) -> list[str]:
        raise KeyError("bug")

    monkeypatch.setattr(GitDiffFamily, "summary_lines", broken_summary)
    digest = digest_bash_output("diff --git a/x b/x\n+y\n", command="git diff", exit_code=0)
    assert digest.family == "generic"
    assert "+y" in digest.text


def test_a_command_matcher_bug_falls_back_to_sniffing(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken_claims(cls: type, program: str, args: object) -> bool:
        raise IndexError("bug")

    monkeypatch.setattr(GitDiffFamily, "claims_command", classmethod(broken_claims))
    digest = digest_bash_output("diff --git a/x b/x\n+y\n", command="git diff", exit_code=0)
    assert digest.family == "git-diff"  # sniffed from the output instead
    assert "+y" in digest.text


def test_an_engine_bug_still_returns_the_tail(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken_render(*args: object, **kwargs: object) -> tuple[str, int]:
        raise RuntimeError("bug")

    monkeypatch.setattr("ctxwrap.digest._stream.render_digest", broken_render)
    digester = StreamingDigester(command="x", exit_code=1)
    digester.feed("".join(f"line {n}\n" for n in range(100)))
    digest = digester.finish()
    assert digest.text.endswith("line 99")


def test_repeated_lines_fold_with_a_count() -> None:
    output = "start\n" + "retrying connection\n" * 37 + "gave up\n"
    digest = digest_bash_output(output, command="./x", exit_code=1)
    assert digest.text == "start\nretrying connection  … ×37\ngave up"


def test_a_small_output_is_shown_whole() -> None:
    output = "On branch main\n\nnothing to commit, working tree clean\n"
    digest = digest_bash_output(output, command="git status", exit_code=0)
    assert digest.text == output.rstrip("\n")


def test_near_identical_errors_are_counted_not_repeated() -> None:
    output = "".join(f"ERROR request {n} failed: upstream timeout\n" for n in range(5000))
    digest = digest_bash_output(output, command="./server", exit_code=1)
    assert "more like this later" in digest.text
    assert len(digest.text) < 2000


def test_listing_counts_by_directory() -> None:
    paths = [f"src/pkg{p}/mod{m}.py" for p in range(5) for m in range(200)]
    digest = digest_bash_output("\n".join(paths), command="find src", exit_code=0)
    assert "1,000 paths in 5 directories" in digest.text
    assert "src/pkg0/" in digest.text
    assert len(digest.text) < 2000
