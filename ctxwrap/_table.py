"""Terminal tables that fit the width they are given (`COLUMNS`): a column too wide for the
terminal is first abbreviated (its narrower header and cells), then dropped, lowest priority
first — a line is never wider than the terminal, so the terminal never wraps inside a number.

Drawn by hand: rich's Table costs ~3 ms a row, which a 50-session table can't afford inside the
300 ms budget of `ctxwrap stats`. Styles are applied after padding so escape codes never skew
the columns.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

_SGR = {"bold": "1", "dim": "2", "red": "31", "green": "32", "yellow": "33"}

# (text, style); a cell may offer narrower variants: ((wide, narrow, …), style)
Cell = tuple[str, str]


def paint(text: str, style: str, color: bool) -> str:
    if not (color and style and text):
        return text
    return f"\x1b[{';'.join(_SGR[s] for s in style.split())}m{text}\x1b[0m"


@dataclass
class Column:
    """One column: its header and cells in one or more forms, widest first.

    `forms[k]` = (header, cells of every row incl. the total row); every form has the same
    number of cells. `drop`: 0 = always kept; higher numbers are dropped first when the table
    does not fit. `left`: left-aligned (labels) rather than right-aligned (numbers).
    """

    forms: list[tuple[str, list[str]]]
    styles: list[str] = field(default_factory=list)
    left: bool = False
    drop: int = 0
    bar: bool = False  # a bar chart column: drawn without a header, dropped first

    def width(self, form: int) -> int:
        header, cells = self.forms[form]
        return max([len(header), *(len(c) for c in cells)], default=0)


def column(
    header: str | Sequence[str],
    cells: Sequence[str | Sequence[str]],
    *,
    styles: Sequence[str] = (),
    left: bool = False,
    drop: int = 0,
    bar: bool = False,
) -> Column:
    """A column from a header (or its forms, widest first) and cells (each a string, or its
    forms widest first; a cell with fewer forms keeps its narrowest)."""
    headers = [header] if isinstance(header, str) else list(header)
    cell_forms = [[c] if isinstance(c, str) else list(c) for c in cells]
    n = max([len(headers), *(len(c) for c in cell_forms)], default=1)
    forms = []
    for k in range(n):
        h = headers[min(k, len(headers) - 1)]
        forms.append((h, [c[min(k, len(c) - 1)] for c in cell_forms]))
    return Column(forms, list(styles) or [""] * len(cell_forms), left, drop, bar)


GAP = 2


def fit(columns: list[Column], width: int) -> list[tuple[Column, int]]:
    """The columns kept and the form each is drawn in, so the table is at most `width` wide."""
    chosen = [(c, 0) for c in columns]

    def total(cols: list[tuple[Column, int]]) -> int:
        return sum(c.width(f) for c, f in cols) + GAP * max(0, len(cols) - 1)

    def narrow(left: bool) -> bool:
        """Switch the column (labels or numbers) that gains most to its next narrower form."""
        gains = [
            (c.width(f) - c.width(f + 1), i)
            for i, (c, f) in enumerate(chosen)
            if c.left == left and f + 1 < len(c.forms) and c.width(f + 1) < c.width(f)
        ]
        if not gains:
            return False
        _, i = max(gains)
        c, f = chosen[i]
        chosen[i] = (c, f + 1)
        return True

    def drop(at_least: int) -> bool:
        """Drop the most droppable column whose priority is at least `at_least` (bars first)."""
        cands = [
            (c.bar, c.drop, i)
            for i, (c, _) in enumerate(chosen)
            if c.bar or (c.drop and c.drop >= at_least)
        ]
        if not cands:
            return False
        _, _, i = max(cands)
        del chosen[i]
        return True

    # Cheapest first: no bar, the least useful columns, shorter number headers, less useful
    # columns, shorter labels, then whatever else may go.
    steps: tuple[Callable[[], bool], ...] = (
        lambda: drop(99),  # only bars have no lower bound
        lambda: drop(7),
        lambda: narrow(False),
        lambda: drop(5),
        lambda: narrow(True),
        lambda: drop(1),
    )
    for step in steps:
        while total(chosen) > width and step():
            pass
    return chosen


def render(
    columns: list[Column], *, width: int, color: bool, total_rows: int = 0, header: bool = True
) -> list[str]:
    """Lines of the table: header, rule, rows, and (the last `total_rows` rows) after a rule."""
    chosen = fit(columns, width)
    if not chosen:
        return []
    widths = [c.width(f) for c, f in chosen]
    nrows = len(chosen[0][0].forms[0][1])

    def line(cells: list[tuple[str, str]]) -> str:
        out = []
        for k, ((text, style), (c, _), w) in enumerate(zip(cells, chosen, widths, strict=True)):
            pad = w - len(text)
            painted = paint(text, style, color)
            on_left = c.left or c.bar
            if k == len(cells) - 1 and on_left:
                out.append(painted)  # no trailing blanks in a pipe
            else:
                out.append(painted + " " * pad if on_left else " " * pad + painted)
        return (" " * GAP).join(out).rstrip()

    rule = paint((" " * GAP).join("-" * w for w in widths), "dim", color)
    lines = []
    if header:
        lines += [line([(c.forms[f][0], "bold") for c, f in chosen]), rule]
    for r in range(nrows):
        if total_rows and r == nrows - total_rows:
            lines.append(rule)
        lines.append(line([(c.forms[f][1][r], c.styles[r]) for c, f in chosen]))
    return lines


def short_ids(ids: Sequence[str], *, at_least: int = 8) -> list[str]:
    """Each id cut to the shortest prefix (of `at_least` characters or more) that no other id
    shares, with "…" when cut: pi's ids are UUIDv7, whose first 8 characters are a timestamp
    that sessions started within a minute share. The full id is in `--json` and `sessions`;
    a unique prefix is what `--session` takes."""

    def common(a: str, b: str) -> int:
        n = 0
        while n < min(len(a), len(b)) and a[n] == b[n]:
            n += 1
        return n

    # in sorted order, an id shares its longest prefix with a neighbour: O(n log n), so a
    # store of thousands of sessions lists at once
    order = sorted(set(ids))
    need: dict[str, int] = {}
    for k, i in enumerate(order):
        near = [order[j] for j in (k - 1, k + 1) if 0 <= j < len(order)]
        shared = max((common(i, o) for o in near), default=0)
        need[i] = max(at_least, shared + 1)
    return [i if need[i] >= len(i) else i[: need[i]] + "…" for i in ids]


def hint(label: str, command: str, width: int) -> list[str]:
    """`label command` on one line when it fits, else the command on a line of its own
    (indented), so it is never broken where a person copies it."""
    if len(label) + 1 + len(command) <= width:
        return [f"{label} {command}"]
    import textwrap

    return [*textwrap.wrap(label, width=max(20, width), break_long_words=False), f"  {command}"]
