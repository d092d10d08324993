"""`ctxwrap stats`: the click command and its watch loop (parse, compute, render, print)."""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import Callable
from typing import Any

import click

from ctxwrap.stats.compute import GroupBy, empty_report, load_report, parse_since
from ctxwrap.stats.render import render_json, render_text


def _wants_color(stream: Any) -> bool:
    # https://no-color.org: any non-empty NO_COLOR disables colour.
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    return bool(getattr(stream, "isatty", lambda: False)())


def _since_param(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        return parse_since(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="'--since'") from None


@click.command("stats")
@click.option("--session", "session", metavar="ID", help="One session (an id or unique prefix).")
@click.option(
    "--since", "since", metavar="WHEN", help="Only calls since 2h, 3d, 2026-11-30 or an ISO time."
)
@click.option(
    "--by",
    type=click.Choice(["mechanism", "session", "day", "agent"]),
    default="mechanism",
    show_default=True,
    help="Rows of the table.",
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (schema 1).")
@click.option(
    "-v",
    "--verbose",
    is_flag=True,
    help="After the table, the accounting behind the figures (tokens, cache, provider counts).",
)
@click.option(
    "--watch",
    type=float,
    is_flag=False,
    flag_value=2.0,
    default=None,
    metavar="[SECONDS]",
    help="Redraw every SECONDS (default 2) until Ctrl+C.",
)
def stats_command(
    session: str | None,
    since: str | None,
    by: GroupBy,
    as_json: bool,
    verbose: bool,
    watch: float | None,
) -> None:
    """What ctxwrap saved: the cost with and without it, and what each mechanism kept out.

    The first figure is the cost reduction as pi's footer and /ctx-stats show it (cache-priced,
    net of ctxwrap's own aux-model calls, compactions included). Token sizes are estimates
    (chars/4), shown beside what the provider counted. --by day reads like a daily usage
    report: $ without ctxwrap, $ with, saved.
    """
    since_ts = _since_param(since)
    if watch is not None and watch <= 0:
        raise click.BadParameter("must be more than 0 seconds", param_hint="'--watch'")

    def once() -> str:
        report = load_report(session=session, since=since_ts, by=by)
        if as_json:
            return (
                render_json(report or empty_report(session=session, since=since_ts, by=by)) + "\n"
            )
        if report is None:
            return "no statistics recorded yet\n"
        color = _wants_color(sys.stdout)
        width = shutil.get_terminal_size((100, 24)).columns
        text = render_text(
            report, color=color, width=width, charts=sys.stdout.isatty(), verbose=verbose
        )
        if report.session and sys.stdout.isatty():  # one-line per-call chart (replay package)
            from ctxwrap.stats.chart import stats_chart

            text += stats_chart(report.session, width=width, color=color)
        return text

    if watch is None:
        click.echo(once(), nl=False)
        return
    try:
        if sys.stdout.isatty() and not as_json:
            _watch_live(once, watch)
        else:
            while True:
                click.echo(once())  # the blank line separates frames
                sys.stdout.flush()
                time.sleep(watch)
    except KeyboardInterrupt:
        return  # Ctrl+C is how a watch ends, not a failure


def _watch_live(frame: Callable[[], str], interval: float) -> None:
    from rich.console import Console
    from rich.live import Live
    from rich.text import Text

    console = Console()
    with Live(Text.from_ansi(frame()), console=console, auto_refresh=False) as live:
        while True:
            time.sleep(interval)
            live.update(Text.from_ansi(frame()), refresh=True)
