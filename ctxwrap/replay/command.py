"""`ctxwrap replay`: the click command (parse and render only)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from ctxwrap.errors import NotFoundError


def _thresholds() -> Any:
    from ctxwrap.replay._sim import Thresholds

    try:
        from ctxwrap.config import load_config

        return Thresholds.from_settings(load_config().settings)
    except Exception:  # a broken config must not stop a read-only report; defaults apply
        return Thresholds()


@click.command("replay", short_help="What ctxwrap would have saved on sessions you already ran.")
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option(
    "--since", "since", metavar="WHEN", help="Only calls since 2h, 3d, 2026-11-30 or an ISO time."
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--per-call", is_flag=True, help="With --json: every call and intervention too.")
@click.option("--model", metavar="ID", help="Price as this model (default: the session's own).")
@click.option(
    "--tag",
    is_flag=True,
    help="Ask the http aux backend to tag reads RETAIN/DROP (its tokens are counted).",
)
def replay_cmd(
    paths: tuple[Path, ...],
    since: str | None,
    as_json: bool,
    per_call: bool,
    model: str | None,
    tag: bool,
) -> None:
    """What ctxwrap would have saved on sessions you already ran.

    One row per session: date, project, agent, calls, $ plain → $ with ctxwrap (cost units
    when the model has no known price), %. PATHS are session files or directories (default:
    ~/.pi/agent/sessions, ~/.claude/projects and ~/.codex/sessions); they are only read. Without --tag no model is
    called, and the reads the aux model might have hidden are shown as a range.
    """
    from ctxwrap.replay._run import default_roots
    from ctxwrap.stats.compute import parse_since

    since_ts = None
    if since is not None:
        try:
            since_ts = parse_since(since)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="'--since'") from None
    roots = list(paths) or default_roots()
    th = _thresholds()
    tagger = None
    if tag:
        from ctxwrap.config import load_config
        from ctxwrap.replay._tag import HttpTagger

        tagger = HttpTagger(load_config().settings)
    try:
        doc = _run(roots, th, since_ts, per_call, model, tagger)
    finally:
        if tagger is not None:
            tagger.close()
    from ctxwrap.replay._view import headline_of

    if as_json:
        # the text's headline, so that a script reproduces it (it also marks each group's
        # `under_ctxwrap`)
        doc["headline"] = headline_of(doc, model=model)
        click.echo(json.dumps(doc, indent=2, sort_keys=True))
    else:
        import shutil

        from ctxwrap.replay._view import render_text

        width = shutil.get_terminal_size((100, 24)).columns
        click.echo(
            render_text(doc, width=width, model=model, tagged=tagger is not None),
            nl=False,
        )
    if not doc["sessions"]:
        raise NotFoundError(_nothing_read(doc, roots), hint=_nothing_hint(roots))


def _nothing_read(doc: dict[str, Any], roots: list[Path]) -> str:
    reasons = sorted(doc["skipped_files"].items(), key=lambda kv: -kv[1])
    why = "; ".join(f"{n} × {r}" if n > 1 else r for r, n in reasons[:3])
    where = ", ".join(str(r) for r in roots[:3]) + ("…" if len(roots) > 3 else "")
    if not doc["files"]:
        return f"no session file found under {where}"
    return f"no session could be read from {where}" + (f" ({why})" if why else "")


def _nothing_hint(roots: list[Path]) -> str:
    """Where each agent keeps its sessions, in lines that fit 60 columns after `hint: `."""
    return (
        "give session files, or directories holding them:\n"
        "pi: ~/.pi/agent/sessions\n"
        "Claude Code: ~/.claude/projects/*/*.jsonl\n"
        "Codex: ~/.codex/sessions/**/*.jsonl"
    )


def _run(
    roots: list[Path],
    th: Any,
    since_ts: float | None,
    per_call: bool,
    model: str | None,
    tagger: Any,
) -> dict[str, Any]:
    from ctxwrap.replay._run import replay_paths, run_json

    if sys.stderr.isatty():
        from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn

        with Progress(
            "replaying",
            BarColumn(),
            DownloadColumn(),
            TimeRemainingColumn(),
            transient=True,
            console=_stderr_console(),
        ) as bar:
            task = bar.add_task("replay", total=None)

            def progress(done: int, total: int) -> None:
                bar.update(task, completed=done, total=total)

            run = replay_paths(
                roots,
                thresholds=th,
                since=since_ts,
                per_call=per_call,
                progress=progress,
                model=model,
                tagger=tagger,
            )
    else:
        run = replay_paths(
            roots, thresholds=th, since=since_ts, per_call=per_call, model=model, tagger=tagger
        )
    return run_json(run)


def _stderr_console() -> Any:
    from rich.console import Console

    return Console(stderr=True)
