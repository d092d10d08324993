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
    help="A session that ran under ctxwrap (id or prefix; default: the latest); with"
    " --replay, which of the sessions in PATH.",
)
@click.option(
    "--replay",
    "replay_path",
    type=click.Path(path_type=Path),
    metavar="PATH",
    help="Replay this session file (or one session of this folder) instead.",
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
    """One self-contained HTML page of a session: per-call bars, cost, interventions.

    `--replay FOLDER` with several sessions in it lists them; pick one with `--session ID`.
    """
    import shutil

    from ctxwrap.report import build_report, render_html
    from ctxwrap.vocabulary import plural

    width = shutil.get_terminal_size((100, 24)).columns
    data = build_report(session=session, replay=replay_path, width=width)
    out = output or Path(f"ctxwrap-report-{data.session_id[:12]}.html")
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    tmp.write_text(render_html(data), encoding="utf-8")
    tmp.replace(out)
    line = f"wrote {out} ({plural(len(data.calls), 'call')})"
    if len(line) > width:  # the path on a line of its own, whole, for copying
        line = f"wrote ({plural(len(data.calls), 'call')}):\n  {out}"
    click.echo(line)
    if open_it:
        import webbrowser

        webbrowser.open(out.resolve().as_uri())
