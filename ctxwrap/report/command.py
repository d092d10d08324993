"""`ctxwrap report`: the click command (parse and render only)."""

from __future__ import annotations

import os
from pathlib import Path

import click


@click.command("report")
@click.option(
    "--session",
    "session",
    metavar="ID",
    help="A session that ran under ctxwrap (id or prefix; default: the latest).",
)
@click.option(
    "--replay",
    "replay_path",
    type=click.Path(path_type=Path),
    metavar="PATH",
    help="Replay this session file instead.",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(path_type=Path),
    metavar="FILE.html",
    help="Where to write (default: ./ctxwrap-report-<id>.html).",
)
@click.option("--open", "open_it", is_flag=True, help="Open the file in a browser.")
def report_cmd(
    session: str | None, replay_path: Path | None, output: Path | None, open_it: bool
) -> None:
    """One self-contained HTML page of a session: per-call bars, cost, interventions."""
    from ctxwrap.report import build_report, render_html

    if session and replay_path:
        raise click.UsageError("--session and --replay exclude each other: give one of them")
    data = build_report(session=session, replay=replay_path)
    out = output or Path(f"ctxwrap-report-{data.session_id[:12]}.html")
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    tmp.write_text(render_html(data), encoding="utf-8")
    tmp.replace(out)
    click.echo(f"wrote {out} ({len(data.calls)} calls)")
    if open_it:
        import webbrowser

        webbrowser.open(out.resolve().as_uri())
