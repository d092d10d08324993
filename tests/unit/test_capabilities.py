"""Capability catalog (mechanism 3): SKILL.md helpers, BM25 search quality, watcher."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ctxwrap.capabilities import (
    SYNONYMS,
    CapabilityCatalog,
    SkillDirWatcher,
    SkillInfo,
    ToolInfo,
    parse_skill_frontmatter,
    read_skill_body,
)

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "capabilities"


# ---------------------------------------------------------------------------- frontmatter


def test_frontmatter_simple() -> None:
    text = "---\nname: pdf\ndescription: Extract text from PDFs.\n---\n\n# Body\n"
    assert parse_skill_frontmatter(text) == {
        "name": "pdf",
        "description": "Extract text from PDFs.",
    }


def test_frontmatter_quotes_flags_and_case() -> None:
    text = (
        "---\r\n"
        'Name: "deploy"\r\n'
        "description: 'It''s for prod: careful'\r\n"
        "disable-model-invocation: true  # only via /skill:deploy\r\n"
        "---\r\nbody\r\n"
    )
    fm = parse_skill_frontmatter(text)
    assert fm["name"] == "deploy"
    assert fm["description"] == "It's for prod: careful"
    assert fm["disable-model-invocation"] == "true"


def test_frontmatter_folded_literal_and_continuation() -> None:
    text = (
        "---\n"
        "name: x\n"
        "description: >\n"
        "  First line\n"
        "  second line.\n"
        "notes: |\n"
        "  keep\n"
        "  lines\n"
        "license: plain value\n"
        "  continued here\n"
        "metadata:\n"
        "  author: someone\n"
        "---\n"
    )
    fm = parse_skill_frontmatter(text)
    assert fm["description"] == "First line second line."
    assert fm["notes"] == "  keep\n  lines"
    assert fm["license"] == "plain value continued here"
    assert fm["name"] == "x"
    assert "author" not in fm  # nested keys are not top-level keys


@pytest.mark.parametrize(
    "text",
    ["no frontmatter\n", "", "---\nname: x\nno closing fence\n", "\n---\nname: x\n---\n"],
)
def test_frontmatter_absent(text: str) -> None:
    assert parse_skill_frontmatter(text) == {}


def test_frontmatter_bom() -> None:
    assert parse_skill_frontmatter("\ufeff---\nname: a\n---\n") == {"name": "a"}


# ---------------------------------------------------------------------------- body


def _make_skill(root: Path, name: str = "demo", body: str = "Body.\n", **fm: str) -> Path:
    d = root / name
    d.mkdir(parents=True, exist_ok=True)
    head = {"name": name, "description": f"{name} skill description", **fm}
    front = "".join(f"{k}: {v}\n" for k, v in head.items())
    p = d / "SKILL.md"
    p.write_text(f"---\n{front}---\n\n{body}")
    return p


def test_body_strips_frontmatter(tmp_path: Path) -> None:
    p = _make_skill(tmp_path, body="# Title\n\nDo things.\n")
    assert read_skill_body(p, 10_000) == "# Title\n\nDo things."


def test_body_resolves_relative_paths(tmp_path: Path) -> None:
    body = (
        'Run `./search.js "q"` or ./missing.sh.\n'
        "Then python scripts/extract.py in.pdf and see [forms](references/forms.md).\n"
        "Also ../shared/util.sh, recalc.py, and the scripts/ dir.\n"
        "Leave alone: scripts (a word), src/app.py (not in skill dir), /abs/scripts/extract.py,\n"
        "https://example.com/scripts/extract.py, $HOME/recalc.py, ~/recalc.py, out.pdf.\n"
    )
    p = _make_skill(tmp_path, body=body)
    d = p.parent
    (d / "scripts").mkdir()
    (d / "scripts" / "extract.py").write_text("")
    (d / "references").mkdir()
    (d / "references" / "forms.md").write_text("")
    (d / "recalc.py").write_text("")
    (d / "search.js").write_text("")
    out = read_skill_body(p, 10_000)
    base = str(d.resolve())
    assert f'`{base}/search.js "q"`' in out
    assert f"{base}/missing.sh." in out  # ./x is always relative to the skill dir
    assert f"python {base}/scripts/extract.py in.pdf" in out
    assert f"[forms]({base}/references/forms.md)" in out
    assert f"{d.parent.resolve()}/shared/util.sh" in out
    assert f"{base}/recalc.py," in out
    assert f"the {base}/scripts/ dir" in out
    assert (
        "Leave alone: scripts (a word), src/app.py (not in skill dir), /abs/scripts/extract.py,"
        in out
    )
    assert "https://example.com/scripts/extract.py, $HOME/recalc.py, ~/recalc.py, out.pdf." in out


def test_body_cap_marker(tmp_path: Path) -> None:
    body = "".join(f"line {i:04d} of the skill body\n" for i in range(400))
    p = _make_skill(tmp_path, body=body)
    out = read_skill_body(p, 1_000)
    assert len(out) <= 1_000
    assert "SKILL.md truncated" in out
    assert str(p) in out  # tells the model where the rest is
    assert out.startswith("line 0000")
    # Cut at a line boundary: the last kept line is complete.
    kept = out.split("\n\n[…")[0]
    assert kept.splitlines()[-1].endswith("of the skill body")
    assert read_skill_body(p, 1_000_000).count("\n") == 399  # under the cap: no marker


def test_body_cap_tiny(tmp_path: Path) -> None:
    p = _make_skill(tmp_path, body="x" * 500)
    assert len(read_skill_body(p, 20)) == 20


# ---------------------------------------------------------------------------- catalog


def _skill_info(p: Path, disable: bool = False) -> SkillInfo:
    fm = parse_skill_frontmatter(p.read_text())
    return SkillInfo(fm["name"], fm["description"], str(p), str(p.parent), disable)


def test_scope_isolation(tmp_path: Path) -> None:
    cat = CapabilityCatalog()
    a = _make_skill(tmp_path, "pdf", "Use pdfplumber.\n", description="Extract text from PDF files")
    b = _make_skill(tmp_path, "docker", "docker build\n", description="Build Docker images")
    cat.replace(
        "s1",
        [ToolInfo("grep", "Search file contents for a pattern", ["pattern"])],
        [_skill_info(a)],
    )
    cat.replace("s2", [], [_skill_info(b)])
    assert [m.name for m in cat.search("s1", "pdf text")] == ["pdf"]
    assert cat.search("s2", "pdf text") == []
    assert [m.name for m in cat.search("s2", "docker image")] == ["docker"]
    assert cat.search("s1", "docker image") == []
    m = cat.search("s1", "search contents for pattern")[0]
    assert (m.kind, m.name, m.file_path) == ("tool", "grep", None)
    s = cat.search("s1", "pdf")[0]
    assert (s.kind, s.file_path) == ("skill", str(a))
    # replace() is a full replacement, not a merge.
    cat.replace("s1", [], [_skill_info(b)])
    assert cat.search("s1", "pdf text") == []
    cat.drop("s1")
    assert cat.search("s1", "docker") == []
    assert [m.name for m in cat.search("s2", "docker")] == ["docker"]


def test_search_edge_cases(tmp_path: Path) -> None:
    cat = CapabilityCatalog(tmp_path / "caps.db")
    cat.replace("s", [ToolInfo("ls", "List directory contents", ["path", "limit"])], [])
    assert cat.search("s", "") == []
    assert cat.search("s", "the of a") == []  # only stopwords
    assert cat.search("s", 'list "dir" AND OR NEAR( * ^') != []  # FTS5 syntax is literal
    assert cat.search("s", "list", limit=0) == []
    assert cat.search("unknown-scope", "list") == []
    cat.close()
    # Persistent file: a new catalog on the same db sees the rows.
    again = CapabilityCatalog(tmp_path / "caps.db")
    assert [m.name for m in again.search("s", "list directory")] == ["ls"]


def test_scores_sorted_and_param_names_searchable() -> None:
    cat = CapabilityCatalog()
    cat.replace(
        "s",
        [
            ToolInfo("grep", "Search file contents for a pattern.", ["pattern", "ignoreCase"]),
            ToolInfo("find", "Search for files by glob pattern.", ["pattern", "path"]),
        ],
        [],
    )
    ms = cat.search("s", "search pattern")
    assert [m.score for m in ms] == sorted((m.score for m in ms), reverse=True)
    assert cat.search("s", "ignore case")[0].name == "grep"  # camelCase parameter split


def test_disabled_skills_excluded(tmp_path: Path) -> None:
    p = _make_skill(tmp_path, "deploy", description="Deploy to production")
    cat = CapabilityCatalog()
    cat.replace("s", [], [_skill_info(p, disable=True)])
    assert cat.search("s", "deploy production") == []


def test_unreadable_skill_still_indexed_by_description(tmp_path: Path) -> None:
    cat = CapabilityCatalog()
    info = SkillInfo("ghost", "Haunt the build", str(tmp_path / "nope" / "SKILL.md"), str(tmp_path))
    cat.replace("s", [], [info])
    assert [m.name for m in cat.search("s", "haunt")] == ["ghost"]


def test_refresh_skill(tmp_path: Path) -> None:
    p = _make_skill(tmp_path, "notes", "Plain body.\n", description="Take notes")
    other = _make_skill(tmp_path, "other", "x\n", description="Something else")
    cat = CapabilityCatalog()
    cat.replace("s1", [], [_skill_info(p), _skill_info(other)])
    cat.replace("s2", [], [_skill_info(p)])
    assert cat.search("s1", "zeppelin") == []

    p.write_text(
        "---\nname: notes\ndescription: Take notes about airships\n---\nZeppelin checklist.\n"
    )
    cat.refresh_skill(str(p))
    for scope in ("s1", "s2"):
        hits = cat.search(scope, "zeppelin")
        assert [m.name for m in hits] == ["notes"]
        assert hits[0].description == "Take notes about airships"

    # Turning on disable-model-invocation hides it; turning it off shows it again.
    p.write_text(
        "---\nname: notes\ndescription: d\ndisable-model-invocation: true\n---\nZeppelin\n"
    )
    cat.refresh_skill(str(p))
    assert cat.search("s1", "zeppelin") == []
    p.write_text("---\nname: notes\ndescription: d\n---\nZeppelin\n")
    cat.refresh_skill(str(p))
    assert [m.name for m in cat.search("s1", "zeppelin")] == ["notes"]

    # Deleted → gone everywhere; other skills untouched; unknown paths are a no-op.
    p.unlink()
    cat.refresh_skill(str(p))
    assert cat.search("s1", "zeppelin notes") == []
    assert cat.search("s2", "zeppelin notes") == []
    assert [m.name for m in cat.search("s1", "something else")] == ["other"]
    cat.refresh_skill(str(tmp_path / "never" / "SKILL.md"))


def test_refresh_skill_without_description_drops_it(tmp_path: Path) -> None:
    p = _make_skill(tmp_path, "n", "body\n", description="Has one")
    cat = CapabilityCatalog()
    cat.replace("s", [], [_skill_info(p)])
    p.write_text("---\nname: n\n---\nbody\n")  # pi would not load it either
    cat.refresh_skill(str(p))
    assert cat.search("s", "has one n") == []


def test_concurrent_access(tmp_path: Path) -> None:
    p = _make_skill(tmp_path, "pdf", "body\n", description="PDF text")
    cat = CapabilityCatalog()
    cat.replace("s", [], [_skill_info(p)])
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            for _ in range(50):
                cat.refresh_skill(str(p))
                assert cat.search("s", "pdf")[0].name == "pdf"
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


# ---------------------------------------------------------------------------- quality fixture


def _fixture_catalog() -> tuple[list[ToolInfo], list[SkillInfo]]:
    data = json.loads((FIXTURES / "catalog.json").read_text())
    tools = [ToolInfo(t["name"], t["description"], t["parameters"]) for t in data["tools"]]
    skills = []
    for s in data["skills"]:
        p = FIXTURES / s["path"]
        fm = parse_skill_frontmatter(p.read_text())
        assert fm["name"] == s["name"]
        skills.append(
            SkillInfo(
                fm["name"],
                fm["description"],
                str(p),
                str(p.parent),
                fm.get("disable-model-invocation") == "true",
            )
        )
    return tools, skills


def _accuracy(
    cat: CapabilityCatalog, queries: list[dict[str, Any]]
) -> tuple[float, float, list[str]]:
    top1 = top3 = 0
    misses = []
    for q in queries:
        ok = {q["expect"], *q.get("also", [])}
        names = [m.name for m in cat.search("s", q["q"], limit=3)]
        assert "deploy-prod" not in names  # disable-model-invocation
        top1 += bool(names) and names[0] in ok
        top3 += bool(ok & set(names))
        if not names or names[0] not in ok:
            misses.append(f"{q['q']!r}: want {q['expect']}, got {names}")
    return top1 / len(queries), top3 / len(queries), misses


def test_fixture_is_big_enough() -> None:
    tools, skills = _fixture_catalog()
    assert len(tools) + len(skills) >= 40
    assert {"read", "bash", "edit", "write", "grep", "find", "ls"} <= {t.name for t in tools}
    queries = json.loads((FIXTURES / "queries.json").read_text())["queries"]
    names = {t.name for t in tools} | {s.name for s in skills}
    assert len(queries) >= 60
    for q in queries:
        assert {q["expect"], *q.get("also", [])} <= names, q


def test_search_quality(summary_report: Callable[[str, str], None]) -> None:
    tools, skills = _fixture_catalog()
    main = json.loads((FIXTURES / "queries.json").read_text())["queries"]
    held = json.loads((FIXTURES / "queries_heldout.json").read_text())["queries"]
    assert len(held) >= 20
    report = []
    results: dict[tuple[str, bool], tuple[float, float]] = {}
    for expand in (False, True):
        cat = CapabilityCatalog(expand_synonyms=expand)
        cat.replace("s", tools, skills)
        for label, qs in (("main", main), ("held-out", held)):
            t1, t3, misses = _accuracy(cat, qs)
            results[(label, expand)] = (t1, t3)
            tag = f"synonyms={'on ' if expand else 'off'}"
            report.append(f"{label:8} n={len(qs):3} {tag} top1={t1:.3f} top3={t3:.3f}")
            if expand:
                report.extend(f"    miss@1 {m}" for m in misses)
    summary_report(
        f"capability search quality ({len(SYNONYMS)} synonym keys)",
        "\n".join("  " + r for r in report),
    )
    assert results[("main", True)][1] >= 0.90
    assert results[("main", False)][1] >= 0.90  # the table must not be what makes it pass
    assert results[("held-out", True)][1] >= 0.85  # small set: a looser bound, still a guard


# ---------------------------------------------------------------------------- watcher


class _Recorder:
    def __init__(self) -> None:
        self.paths: list[str] = []
        self.event = threading.Event()
        self.lock = threading.Lock()

    def __call__(self, path: str) -> None:
        with self.lock:
            self.paths.append(path)
        self.event.set()

    def wait_for(self, path: Path, timeout: float = 3.0) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if any(Path(p).resolve() == path.resolve() for p in self.paths):
                    return True
            self.event.wait(0.05)
            self.event.clear()
        return False


def test_watcher_create_modify_delete(tmp_path: Path) -> None:
    root = tmp_path / "skills"
    root.mkdir()
    rec = _Recorder()
    with SkillDirWatcher([root, tmp_path / "does-not-exist"], rec, debounce=0.1):
        p = _make_skill(root, "fresh")
        assert rec.wait_for(p), "create not reported"

        rec.paths.clear()
        (root / "fresh" / "notes.txt").write_text("not a skill file")
        p.write_text(p.read_text() + "More.\n")
        assert rec.wait_for(p), "modify not reported"
        time.sleep(0.3)
        assert all(Path(x).name == "SKILL.md" for x in rec.paths)

        rec.paths.clear()
        p.unlink()
        assert rec.wait_for(p), "delete not reported"


def test_watcher_debounces_and_handles_atomic_save(tmp_path: Path) -> None:
    p = _make_skill(tmp_path, "s")
    rec = _Recorder()
    with SkillDirWatcher([tmp_path], rec, debounce=0.3):
        for i in range(10):  # a burst of writes → one callback
            p.write_text(f"---\nname: s\ndescription: v{i}\n---\n")
        assert rec.wait_for(p)
        time.sleep(0.5)
        assert len(rec.paths) == 1

        rec.paths.clear()
        tmp = p.parent / ".SKILL.md.swp"  # editor-style save: write temp, rename over
        tmp.write_text("---\nname: s\ndescription: renamed\n---\n")
        tmp.replace(p)
        assert rec.wait_for(p), "rename-over not reported"


def test_watcher_survives_callback_error_and_stop_is_idempotent(tmp_path: Path) -> None:
    calls: list[str] = []

    def boom(path: str) -> None:
        calls.append(path)
        raise RuntimeError("callback failed")

    w = SkillDirWatcher([tmp_path], boom, debounce=0.05)
    w.start()
    try:
        a = _make_skill(tmp_path, "a")
        deadline = time.monotonic() + 3
        while not calls and time.monotonic() < deadline:
            time.sleep(0.05)
        b = _make_skill(tmp_path, "b")
        while len({Path(c).parent.name for c in calls}) < 2 and time.monotonic() < deadline + 3:
            time.sleep(0.05)
        assert {Path(c).parent.name for c in calls} >= {a.parent.name, b.parent.name}
    finally:
        w.stop()
    w.stop()


def test_watcher_feeds_catalog(tmp_path: Path) -> None:
    p = _make_skill(tmp_path, "notes", "Plain.\n", description="Take notes")
    cat = CapabilityCatalog()
    cat.replace("s", [], [_skill_info(p)])
    done = threading.Event()

    def on_change(path: str) -> None:
        cat.refresh_skill(path)
        done.set()

    with SkillDirWatcher([tmp_path], on_change, debounce=0.1):
        p.write_text("---\nname: notes\ndescription: Take notes\n---\nZeppelin.\n")
        assert done.wait(3)
    assert [m.name for m in cat.search("s", "zeppelin")] == ["notes"]


# ---------------------------------------------------------------------------- not ready


def test_a_session_without_its_catalog_is_not_ready_rather_than_empty(tmp_path: Path) -> None:
    """Issue 20: a search that overtakes the catalog must say "not ready", never "no match"."""
    from ctxwrap import protocol as P
    from ctxwrap.mechanisms.lazy import Capabilities

    skill = tmp_path / "pdf-tools" / "SKILL.md"
    skill.parent.mkdir()
    skill.write_text("---\nname: pdf-tools\ndescription: Extract text from PDF files.\n---\nBODY\n")
    caps = Capabilities()
    query = P.CapabilitySearch(session_id="s1", query="extract text from pdf")
    assert caps.search(query, 8000) == P.CapabilityReply(matches=[], catalog_ready=False)
    caps.update(
        P.CatalogUpdate(
            session_id="s1",
            tools=[],
            skills=[
                P.SkillSpec(
                    name="pdf-tools",
                    description="Extract text from PDF files.",
                    file_path=str(skill),
                    base_dir=str(skill.parent),
                )
            ],
        )
    )
    found = caps.search(query, 8000)
    assert found.catalog_ready and found.matches[0].name == "pdf-tools"
    assert "BODY" in (found.skill_body or "")
    # another session's catalog is not this one's
    other = caps.search(P.CapabilitySearch(session_id="s2", query="pdf"), 8000)
    assert not other.catalog_ready
    caps.forget("s1")
    assert not caps.search(query, 8000).catalog_ready
    caps.stop()


def test_skill_paths_from_the_adapter_never_widen_the_watch(tmp_path: Path) -> None:
    """A skill path is the adapter's data: a skill at `/x/SKILL.md` once made the daemon watch
    `/` recursively (a walk of the whole filesystem, a core busy for minutes). Only each skill
    file's own directory is watched, not below it, and at most MAX_WATCHED_SKILL_DIRS of them;
    an edit of a known skill still reaches the catalog."""
    from ctxwrap import protocol as P
    from ctxwrap.mechanisms.lazy import MAX_WATCHED_SKILL_DIRS, Capabilities

    real = _make_skill(tmp_path / "skills", "fresh")
    (tmp_path / "skills" / "fresh" / "deep" / "deeper").mkdir(parents=True)
    hostile = [
        P.SkillSpec(name=f"h{i}", description="d", file_path=f"/{i}/SKILL.md") for i in range(3)
    ] + [P.SkillSpec(name="root", description="d", file_path="/SKILL.md")]
    caps = Capabilities()
    try:
        caps.update(
            P.CatalogUpdate(
                session_id="s",
                skills=[
                    P.SkillSpec(name="fresh", description="fresh skill", file_path=str(real)),
                    *hostile,
                ],
            )
        )
        assert str(real.parent) in caps._watched_dirs
        assert "/" in caps._watched_dirs  # the parent of /SKILL.md: watched, but not below it
        watches = list(caps._watcher._observer.emitters)
        assert watches and all(not w.watch.is_recursive for w in watches)
        # far more skill directories than the cap: the set stops growing
        many = [
            P.SkillSpec(
                name=f"m{i}", description="d", file_path=str(tmp_path / f"m{i}" / "SKILL.md")
            )
            for i in range(MAX_WATCHED_SKILL_DIRS + 50)
        ]
        caps.update(P.CatalogUpdate(session_id="t", skills=many))
        assert len(caps._watched_dirs) <= MAX_WATCHED_SKILL_DIRS
        # a known skill edited on disk is re-read (the watch still does its job)
        real.write_text("---\nname: fresh\ndescription: renamed by an edit\n---\n\nBody.\n")
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            found = caps.search(P.CapabilitySearch(session_id="s", query="renamed edit"), 1000)
            if found.matches and "renamed" in found.matches[0].description:
                break
            time.sleep(0.1)
        else:
            raise AssertionError("the edit of a watched skill was not picked up")
    finally:
        caps.stop()
